// One causal multi-head self-attention layer (GPT-2 style, no biases):
//   q, k, v = x @ Wq, x @ Wk, x @ Wv                        [T, D]
//   split heads: reshape [T, H, Dh] -> transpose to [H, T, Dh]
//   scores = (q @ k^T) * 1/sqrt(Dh)                         [H, T, T]  (batched matmul)
//   causal mask: col <= row, built with lamina.le from two index constants (broadcast [T,1] vs [T])
//   masked = select(mask, scores, -1e9); probs = softmax(masked, axis -1)
//   out = probs @ v -> transpose to [T, H, Dh] -> reshape [T, D] -> @ Wo
// Shapes: T = 16 tokens, D = 64, H = 4 heads of Dh = 16.
// Run:
//   lamina-opt samples/attention.mlir
//   lamina-run samples/attention.mlir --entry causal_attention --print-outputs
//   lamina-run samples/attention.mlir --entry causal_attention --check -p cse,canonicalize
//   lamina-run samples/attention.mlir --entry causal_attention --check -p fuse-attention --explain
//     (q k^T through probs @ v as one flash-style kernel: the scores are never stored)

func.func @causal_attention(%x: tensor<16x64xf32>, %wq: tensor<64x64xf32>, %wk: tensor<64x64xf32>, %wv: tensor<64x64xf32>, %wo: tensor<64x64xf32>) -> tensor<16x64xf32> {
  %q = lamina.matmul %x, %wq : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32>
  %k = lamina.matmul %x, %wk : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32>
  %v = lamina.matmul %x, %wv : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32>
  %q3 = lamina.reshape %q : (tensor<16x64xf32>) -> tensor<16x4x16xf32>
  %k3 = lamina.reshape %k : (tensor<16x64xf32>) -> tensor<16x4x16xf32>
  %v3 = lamina.reshape %v : (tensor<16x64xf32>) -> tensor<16x4x16xf32>
  %qh = lamina.transpose %q3 {permutation = array<i64: 1, 0, 2>} : (tensor<16x4x16xf32>) -> tensor<4x16x16xf32>
  %kh_t = lamina.transpose %k3 {permutation = array<i64: 1, 2, 0>} : (tensor<16x4x16xf32>) -> tensor<4x16x16xf32>
  %vh = lamina.transpose %v3 {permutation = array<i64: 1, 0, 2>} : (tensor<16x4x16xf32>) -> tensor<4x16x16xf32>
  %scores = lamina.matmul %qh, %kh_t : tensor<4x16x16xf32>
  %scale = lamina.constant dense<2.500000e-01> : tensor<f32>
  %scaled = lamina.mul %scores, %scale : (tensor<4x16x16xf32>, tensor<f32>) -> tensor<4x16x16xf32>
  %rows = lamina.constant dense<[[0], [1], [2], [3], [4], [5], [6], [7], [8], [9], [10], [11], [12], [13], [14], [15]]> : tensor<16x1xi64>
  %cols = lamina.constant dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]> : tensor<16xi64>
  %mask = lamina.le %cols, %rows : (tensor<16xi64>, tensor<16x1xi64>) -> tensor<16x16xi1>
  %neg = lamina.constant dense<-1.000000e+09> : tensor<f32>
  %masked = lamina.select %mask, %scaled, %neg : (tensor<16x16xi1>, tensor<4x16x16xf32>, tensor<f32>) -> tensor<4x16x16xf32>
  %probs = lamina.softmax %masked {axis = -1 : i64} : tensor<4x16x16xf32>
  %ctx = lamina.matmul %probs, %vh : tensor<4x16x16xf32>
  %ctx_t = lamina.transpose %ctx {permutation = array<i64: 1, 0, 2>} : (tensor<4x16x16xf32>) -> tensor<16x4x16xf32>
  %merged = lamina.reshape %ctx_t : (tensor<16x4x16xf32>) -> tensor<16x64xf32>
  %out = lamina.matmul %merged, %wo : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32>
  func.return %out : tensor<16x64xf32>
}
