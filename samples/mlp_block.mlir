// The GPT-2 MLP sub-block with its residual connection:
//   h = gelu_tanh(x @ W1 + b1);  y = x + (h @ W2 + b2)
// Small shapes: x f32[64,128] (64 tokens, d_model 128), W1 f32[128,512], W2 f32[512,128].
// Shows: matmul (opaque) feeding broadcast bias adds (rank-1 bias broadcast over rows), the tanh
// gelu, and a residual add of two equal-shaped tensors (single-type syntax).
// Run:
//   lamina-opt samples/mlp_block.mlir
//   lamina-run samples/mlp_block.mlir --entry mlp_block --print-outputs
//   lamina-run samples/mlp_block.mlir --entry mlp_block --check -p cse,canonicalize

func.func @mlp_block(%x: tensor<64x128xf32>, %w1: tensor<128x512xf32>, %b1: tensor<512xf32>, %w2: tensor<512x128xf32>, %b2: tensor<128xf32>) -> tensor<64x128xf32> {
  %fc = lamina.matmul %x, %w1 : (tensor<64x128xf32>, tensor<128x512xf32>) -> tensor<64x512xf32>
  %fc_b = lamina.add %fc, %b1 : (tensor<64x512xf32>, tensor<512xf32>) -> tensor<64x512xf32>
  %h = lamina.gelu %fc_b {approximate = "tanh"} : tensor<64x512xf32>
  %proj = lamina.matmul %h, %w2 : (tensor<64x512xf32>, tensor<512x128xf32>) -> tensor<64x128xf32>
  %proj_b = lamina.add %proj, %b2 : (tensor<64x128xf32>, tensor<128xf32>) -> tensor<64x128xf32>
  %y = lamina.add %x, %proj_b : tensor<64x128xf32>
  func.return %y : tensor<64x128xf32>
}
