// Reductions and the row-reduction composites.
//   @reduce      reduce_sum / reduce_mean / reduce_max over one axis, several axes, a negative
//                axis, with and without keepdims; a keepdims result broadcasts back (x - max).
//   @norms       layernorm over the last dim and over the last two dims (axis = 1 of a rank-3
//                tensor) with and without scale/bias operands; rmsnorm with and without scale.
//   @softmaxes   softmax along the default last axis and along axis 0.
// Run:
//   lamina-opt samples/reductions.mlir
//   lamina-run samples/reductions.mlir --entry reduce --check -p cse,canonicalize --print-outputs
//   lamina-run samples/reductions.mlir --entry norms --check -p cse,canonicalize --print-outputs
//   lamina-run samples/reductions.mlir --entry softmaxes --check -p cse,canonicalize --print-outputs

func.func @reduce(%x: tensor<4x8x16xf32>) -> (tensor<4x8x16xf32>, tensor<4xf32>, tensor<1x8x1xf32>, tensor<4x8xf32>) {
  %rowmax = lamina.reduce_max %x {axes = array<i64: -1>, keepdims = true} : (tensor<4x8x16xf32>) -> tensor<4x8x1xf32>
  %centered = lamina.sub %x, %rowmax : (tensor<4x8x16xf32>, tensor<4x8x1xf32>) -> tensor<4x8x16xf32>
  %total = lamina.reduce_sum %x {axes = array<i64: 1, 2>} : (tensor<4x8x16xf32>) -> tensor<4xf32>
  %mean02 = lamina.reduce_mean %x {axes = array<i64: 0, 2>, keepdims = true} : (tensor<4x8x16xf32>) -> tensor<1x8x1xf32>
  %m = lamina.reduce_mean %x {axes = array<i64: 2>, keepdims = false} : (tensor<4x8x16xf32>) -> tensor<4x8xf32>
  func.return %centered, %total, %mean02, %m : tensor<4x8x16xf32>, tensor<4xf32>, tensor<1x8x1xf32>, tensor<4x8xf32>
}

func.func @norms(%x: tensor<4x8x16xf32>, %g: tensor<16xf32>, %b: tensor<16xf32>, %g2: tensor<8x16xf32>) -> (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) {
  %ln = lamina.layernorm %x {axis = -1 : i64, eps = 1.000000e-05 : f64} : tensor<4x8x16xf32>
  %ln_affine = lamina.layernorm %x scale %g bias %b {axis = -1 : i64, eps = 1.000000e-05 : f64} : (tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<4x8x16xf32>
  %ln_2d = lamina.layernorm %x scale %g2 {axis = 1 : i64, eps = 1.000000e-06 : f64} : (tensor<4x8x16xf32>, tensor<8x16xf32>) -> tensor<4x8x16xf32>
  %rms = lamina.rmsnorm %x {axis = -1 : i64, eps = 1.000000e-06 : f64} : tensor<4x8x16xf32>
  %rms_s = lamina.rmsnorm %x scale %g {axis = -1 : i64, eps = 1.000000e-06 : f64} : (tensor<4x8x16xf32>, tensor<16xf32>) -> tensor<4x8x16xf32>
  %sum = lamina.add %rms, %rms_s : tensor<4x8x16xf32>
  func.return %ln, %ln_affine, %ln_2d, %sum : tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>
}

func.func @softmaxes(%x: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  %last = lamina.softmax %x {axis = -1 : i64} : tensor<8x16xf32>
  %first = lamina.softmax %x {axis = 0 : i64} : tensor<8x16xf32>
  func.return %last, %first : tensor<8x16xf32>, tensor<8x16xf32>
}
