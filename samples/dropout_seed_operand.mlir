// Dropout whose seed is a runtime value: `lamina.dropout %x seed %s` with %s a rank-0 i64 (or i32)
// tensor, as a training loop passes a fresh seed each step. The same seed value gives the same
// mask as the attribute form `{seed = N : i64}`.
//   @seed_arg       the seed is a function argument (random inputs draw an integer in [0, 1000))
//   @seed_constant  the seed comes from an i64 constant and an i32 constant, next to the
//                   equivalent attribute form; a rate-0 dropout is the identity.
// Run:
//   lamina-opt samples/dropout_seed_operand.mlir
//   lamina-run samples/dropout_seed_operand.mlir --entry seed_arg --check -p cse,canonicalize --print-outputs
//   lamina-run samples/dropout_seed_operand.mlir --entry seed_constant --check -p cse,canonicalize --print-outputs

func.func @seed_arg(%x: tensor<32x64xf32>, %seed: tensor<i64>) -> tensor<32x64xf32> {
  %g = lamina.gelu %x {approximate = "tanh"} : tensor<32x64xf32>
  %y = lamina.dropout %g seed %seed {rate = 1.000000e-01 : f64} : (tensor<32x64xf32>, tensor<i64>) -> tensor<32x64xf32>
  func.return %y : tensor<32x64xf32>
}

func.func @seed_constant(%x: tensor<32x64xf32>) -> (tensor<32x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>) {
  %s64 = lamina.constant dense<7> : tensor<i64>
  %s32 = lamina.constant dense<7> : tensor<i32>
  %a = lamina.dropout %x seed %s64 {rate = 2.500000e-01 : f64} : (tensor<32x64xf32>, tensor<i64>) -> tensor<32x64xf32>
  %b = lamina.dropout %x seed %s32 {rate = 2.500000e-01 : f64} : (tensor<32x64xf32>, tensor<i32>) -> tensor<32x64xf32>
  %c = lamina.dropout %x {rate = 2.500000e-01 : f64, seed = 7 : i64} : tensor<32x64xf32>
  %id = lamina.dropout %x seed %s64 {rate = 0.000000e+00 : f64} : (tensor<32x64xf32>, tensor<i64>) -> tensor<32x64xf32>
  func.return %a, %b, %c, %id : tensor<32x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>
}
