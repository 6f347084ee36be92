// A small MLP block with a layernorm between its matmuls and the residual added back:
//   y = x + (gelu_tanh(layernorm(x @ W1 + b1)) @ W2 + b2)
// Small shapes: x f32[16,64], W1 and W2 f32[64,64]: a program whose kernels are tiny, so a call's
// fixed cost is most of its time (tests/test_executable.py calls it compiled once, many times;
// benchmarks/bench_overhead.py times it as its `mlp7` row).
// Shows: `fuse-elementwise` making two matmul-rooted groups: the bias add, the layernorm row and
// the gelu follow the first matmul; the bias add and the residual add of x follow the second.
// Run:
//   lamina-opt samples/mlp_layernorm_block.mlir -p fuse-elementwise
//   lamina-run samples/mlp_layernorm_block.mlir --entry mlp --check -p fuse-elementwise

func.func @mlp(%x: tensor<16x64xf32>, %w1: tensor<64x64xf32>, %b1: tensor<64xf32>,
               %w2: tensor<64x64xf32>, %b2: tensor<64xf32>) -> tensor<16x64xf32> {
  %h = lamina.matmul %x, %w1 : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32>
  %hb = lamina.add %h, %b1 : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %n = lamina.layernorm %hb {axis = -1 : i64, eps = 1.0e-05 : f64} : tensor<16x64xf32>
  %g = lamina.gelu %n {approximate = "tanh"} : tensor<16x64xf32>
  %o = lamina.matmul %g, %w2 : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32>
  %ob = lamina.add %o, %b2 : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %y = lamina.add %ob, %x : tensor<16x64xf32>
  func.return %y : tensor<16x64xf32>
}
