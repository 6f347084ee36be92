// The seed example: y = dropout(gelu(layernorm(x) * gamma + beta)), the GPT-2 pattern that follows
// every pre-LN layer norm.
//   - layernorm is written WITHOUT its optional scale/bias operands; the affine part is explicit
//     lamina.mul / lamina.add with gamma / beta, which is the chain a fusion pass targets.
//   - gelu uses GPT-2's tanh approximation (approximate = "tanh").
//   - dropout uses rate 0.1 and a fixed seed attribute (deterministic mask).
// Two functions, identical except for shapes:
//   @ln_gelu_dropout        x f32[8192,4096], gamma/beta f32[4096]  (~1 GB working set, slow)
//   @ln_gelu_dropout_small  x f32[16,64],     gamma/beta f32[64]
// Run:
//   lamina-opt samples/layernorm_gelu_dropout.mlir
//   lamina-run samples/layernorm_gelu_dropout.mlir --entry ln_gelu_dropout_small --print-outputs
//   lamina-run samples/layernorm_gelu_dropout.mlir --entry ln_gelu_dropout_small --check -p cse,canonicalize
//   lamina-run samples/layernorm_gelu_dropout.mlir --entry ln_gelu_dropout --stats-json /dev/stdout
// (`make demo` runs both functions.)

func.func @ln_gelu_dropout(%x: tensor<8192x4096xf32>, %gamma: tensor<4096xf32>, %beta: tensor<4096xf32>) -> tensor<8192x4096xf32> {
  %ln = lamina.layernorm %x {axis = -1 : i64, eps = 1.000000e-05 : f64} : tensor<8192x4096xf32>
  %scaled = lamina.mul %ln, %gamma : (tensor<8192x4096xf32>, tensor<4096xf32>) -> tensor<8192x4096xf32>
  %shifted = lamina.add %scaled, %beta : (tensor<8192x4096xf32>, tensor<4096xf32>) -> tensor<8192x4096xf32>
  %act = lamina.gelu %shifted {approximate = "tanh"} : tensor<8192x4096xf32>
  %y = lamina.dropout %act {rate = 1.000000e-01 : f64, seed = 42 : i64} : tensor<8192x4096xf32>
  func.return %y : tensor<8192x4096xf32>
}

func.func @ln_gelu_dropout_small(%x: tensor<16x64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>) -> tensor<16x64xf32> {
  %ln = lamina.layernorm %x {axis = -1 : i64, eps = 1.000000e-05 : f64} : tensor<16x64xf32>
  %scaled = lamina.mul %ln, %gamma : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %shifted = lamina.add %scaled, %beta : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %act = lamina.gelu %shifted {approximate = "tanh"} : tensor<16x64xf32>
  %y = lamina.dropout %act {rate = 1.000000e-01 : f64, seed = 42 : i64} : tensor<16x64xf32>
  func.return %y : tensor<16x64xf32>
}
