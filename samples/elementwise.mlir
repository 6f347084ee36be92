// Every elementwise op: the 12 unary ops, the 7 binary ops, broadcasting and rank-0 scalars.
//   @unary   chains neg abs exp log tanh sigmoid relu gelu (erf and tanh forms) erf sqrt rsqrt
//            reciprocal; ops with a restricted domain (log, sqrt, rsqrt, reciprocal) are fed
//            abs(x) + 1 so random normal inputs give finite outputs.
//   @binary  add sub mul div max min pow with equal shapes, a [N] row broadcast over [M,N], a
//            [M,1] column broadcast and a rank-0 constant scalar; pow uses a positive base.
// Run:
//   lamina-opt samples/elementwise.mlir
//   lamina-run samples/elementwise.mlir --entry unary --check -p cse,canonicalize --print-outputs
//   lamina-run samples/elementwise.mlir --entry binary --check -p cse,canonicalize --print-outputs

func.func @unary(%x: tensor<8x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
  %one = lamina.constant dense<1.000000e+00> : tensor<f32>
  %n = lamina.neg %x : tensor<8x32xf32>
  %a = lamina.abs %n : tensor<8x32xf32>
  %pos = lamina.add %a, %one : (tensor<8x32xf32>, tensor<f32>) -> tensor<8x32xf32>
  %l = lamina.log %pos : tensor<8x32xf32>
  %s = lamina.sqrt %pos : tensor<8x32xf32>
  %rs = lamina.rsqrt %pos : tensor<8x32xf32>
  %rc = lamina.reciprocal %pos : tensor<8x32xf32>
  %e = lamina.exp %x : tensor<8x32xf32>
  %t = lamina.tanh %x : tensor<8x32xf32>
  %sg = lamina.sigmoid %x : tensor<8x32xf32>
  %r = lamina.relu %x : tensor<8x32xf32>
  %g = lamina.gelu %x : tensor<8x32xf32>
  %gt = lamina.gelu %x {approximate = "tanh"} : tensor<8x32xf32>
  %ef = lamina.erf %x : tensor<8x32xf32>
  %s1 = lamina.add %l, %s : tensor<8x32xf32>
  %s2 = lamina.add %s1, %rs : tensor<8x32xf32>
  %s3 = lamina.add %s2, %rc : tensor<8x32xf32>
  %s4 = lamina.add %s3, %t : tensor<8x32xf32>
  %s5 = lamina.add %s4, %sg : tensor<8x32xf32>
  %s6 = lamina.add %s5, %r : tensor<8x32xf32>
  %s7 = lamina.add %s6, %ef : tensor<8x32xf32>
  %gd = lamina.sub %g, %gt : tensor<8x32xf32>
  %y1 = lamina.add %s7, %gd : tensor<8x32xf32>
  func.return %y1, %e : tensor<8x32xf32>, tensor<8x32xf32>
}

func.func @binary(%x: tensor<8x32xf32>, %y: tensor<8x32xf32>, %row: tensor<32xf32>, %col: tensor<8x1xf32>) -> tensor<8x32xf32> {
  %one = lamina.constant dense<1.000000e+00> : tensor<f32>
  %half = lamina.constant dense<5.000000e-01> : tensor<f32>
  %sum = lamina.add %x, %y : tensor<8x32xf32>
  %diff = lamina.sub %sum, %row : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %prod = lamina.mul %diff, %col : (tensor<8x32xf32>, tensor<8x1xf32>) -> tensor<8x32xf32>
  %ay = lamina.abs %y : tensor<8x32xf32>
  %den = lamina.add %ay, %one : (tensor<8x32xf32>, tensor<f32>) -> tensor<8x32xf32>
  %quot = lamina.div %prod, %den : tensor<8x32xf32>
  %hi = lamina.max %quot, %x : tensor<8x32xf32>
  %lo = lamina.min %hi, %row : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %ax = lamina.abs %lo : tensor<8x32xf32>
  %base = lamina.add %ax, %one : (tensor<8x32xf32>, tensor<f32>) -> tensor<8x32xf32>
  %p = lamina.pow %base, %half : (tensor<8x32xf32>, tensor<f32>) -> tensor<8x32xf32>
  %q = lamina.pow %base, %col : (tensor<8x32xf32>, tensor<8x1xf32>) -> tensor<8x32xf32>
  %out = lamina.add %p, %q : tensor<8x32xf32>
  func.return %out : tensor<8x32xf32>
}
