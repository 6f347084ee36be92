// Element types and conversions. Lamina accepts f16, bf16, f32, f64, i1, i32, i64.
//   @half      f16 and bf16 arithmetic (computed in f32, rounded once per op), a bf16 layernorm
//              and softmax, and a bf16 constant (shape [1]: rank-0 bf16 values currently hit a
//              NumPy-runner bug, round_bf16 turns shape () into (1,)).
//   @double    f64 math (gelu erf form, exp, matmul) and an f64 dense constant.
//   @casts     f32 -> f16 -> f32, f32 -> bf16, f32 -> f64, f32 -> i32 (truncates toward zero),
//              i32 -> f32, f32 -> i1 (x != 0), i1 -> f32 (0/1), i64 -> i32.
//   @compare_select  every compare op on f32, i32 and i64 operands producing i1, combined with
//              select (which broadcasts its condition) into a clamp and a sign function.
// Run:
//   lamina-opt samples/dtypes.mlir
//   lamina-run samples/dtypes.mlir --entry half --check -p cse,canonicalize --print-outputs
//   lamina-run samples/dtypes.mlir --entry double --check -p cse,canonicalize --print-outputs
//   lamina-run samples/dtypes.mlir --entry casts --check -p cse,canonicalize --print-outputs
//   lamina-run samples/dtypes.mlir --entry compare_select --check -p cse,canonicalize --print-outputs

func.func @half(%a: tensor<8x16xf16>, %b: tensor<8x16xf16>, %c: tensor<8x16xbf16>) -> (tensor<8x16xf16>, tensor<8x16xbf16>) {
  %s = lamina.add %a, %b : tensor<8x16xf16>
  %m = lamina.mul %s, %a : tensor<8x16xf16>
  %t = lamina.tanh %m : tensor<8x16xf16>
  %two = lamina.constant dense<2.000000e+00> : tensor<1xbf16>
  %c2 = lamina.mul %c, %two : (tensor<8x16xbf16>, tensor<1xbf16>) -> tensor<8x16xbf16>
  %ln = lamina.layernorm %c2 {axis = -1 : i64, eps = 1.000000e-05 : f64} : tensor<8x16xbf16>
  %sm = lamina.softmax %ln {axis = -1 : i64} : tensor<8x16xbf16>
  func.return %t, %sm : tensor<8x16xf16>, tensor<8x16xbf16>
}

func.func @double(%x: tensor<4x8xf64>, %w: tensor<8x4xf64>) -> tensor<4x4xf64> {
  %g = lamina.gelu %x : tensor<4x8xf64>
  %k = lamina.constant dense<[1.000000e-01, 2.000000e-01, 3.000000e-01, 4.000000e-01, 5.000000e-01, 6.000000e-01, 7.000000e-01, 8.000000e-01]> : tensor<8xf64>
  %gk = lamina.mul %g, %k : (tensor<4x8xf64>, tensor<8xf64>) -> tensor<4x8xf64>
  %e = lamina.exp %gk : tensor<4x8xf64>
  %y = lamina.matmul %e, %w : (tensor<4x8xf64>, tensor<8x4xf64>) -> tensor<4x4xf64>
  func.return %y : tensor<4x4xf64>
}

func.func @casts(%x: tensor<16xf32>, %n: tensor<16xi64>) -> (tensor<16xf32>, tensor<16xbf16>, tensor<16xf64>, tensor<16xf32>, tensor<16xf32>, tensor<16xi32>) {
  %h = lamina.cast %x : (tensor<16xf32>) -> tensor<16xf16>
  %back = lamina.cast %h : (tensor<16xf16>) -> tensor<16xf32>
  %bf = lamina.cast %x : (tensor<16xf32>) -> tensor<16xbf16>
  %d = lamina.cast %x : (tensor<16xf32>) -> tensor<16xf64>
  %ten = lamina.constant dense<1.000000e+01> : tensor<f32>
  %x10 = lamina.mul %x, %ten : (tensor<16xf32>, tensor<f32>) -> tensor<16xf32>
  %i = lamina.cast %x10 : (tensor<16xf32>) -> tensor<16xi32>
  %fi = lamina.cast %i : (tensor<16xi32>) -> tensor<16xf32>
  %nz = lamina.cast %fi : (tensor<16xf32>) -> tensor<16xi1>
  %nzf = lamina.cast %nz : (tensor<16xi1>) -> tensor<16xf32>
  %n32 = lamina.cast %n : (tensor<16xi64>) -> tensor<16xi32>
  func.return %back, %bf, %d, %fi, %nzf, %n32 : tensor<16xf32>, tensor<16xbf16>, tensor<16xf64>, tensor<16xf32>, tensor<16xf32>, tensor<16xi32>
}

func.func @compare_select(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>, %i: tensor<4x8xi32>, %j: tensor<8xi64>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %lo = lamina.constant dense<-5.000000e-01> : tensor<f32>
  %hi = lamina.constant dense<5.000000e-01> : tensor<f32>
  %zero = lamina.constant dense<0.000000e+00> : tensor<f32>
  %one = lamina.constant dense<1.000000e+00> : tensor<f32>
  %m_one = lamina.constant dense<-1.000000e+00> : tensor<f32>
  // clamp(x, -0.5, 0.5) with lt / gt and select against rank-0 values
  %below = lamina.lt %x, %lo : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xi1>
  %x1 = lamina.select %below, %lo, %x : (tensor<4x8xi1>, tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %above = lamina.gt %x1, %hi : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xi1>
  %clamped = lamina.select %above, %hi, %x1 : (tensor<4x8xi1>, tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // sign(y) with ge / le / eq
  %nonneg = lamina.ge %y, %zero : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xi1>
  %nonpos = lamina.le %y, %zero : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xi1>
  %is_zero = lamina.eq %y, %zero : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xi1>
  %s1 = lamina.select %nonneg, %one, %m_one : (tensor<4x8xi1>, tensor<f32>, tensor<f32>) -> tensor<4x8xf32>
  %s2 = lamina.select %nonpos, %m_one, %s1 : (tensor<4x8xi1>, tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %sign = lamina.select %is_zero, %zero, %s2 : (tensor<4x8xi1>, tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // integer compares: i32 ne, i64 lt with a broadcast row; select keeps x where both hold
  %three = lamina.constant dense<3> : tensor<i32>
  %rem = lamina.ne %i, %three : (tensor<4x8xi32>, tensor<i32>) -> tensor<4x8xi1>
  %limit = lamina.constant dense<500> : tensor<i64>
  %small = lamina.lt %j, %limit : (tensor<8xi64>, tensor<i64>) -> tensor<8xi1>
  %picked = lamina.select %small, %x, %zero : (tensor<8xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %both = lamina.select %rem, %picked, %y : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %clamped, %sign, %both : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
