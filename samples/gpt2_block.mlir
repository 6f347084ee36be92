// A whole pre-LN GPT-2 transformer block, training mode (dropout on):
//   a   = layernorm(x) * ln1_g + ln1_b                 (scale/bias as layernorm operands)
//   qkv = a @ W_attn + b_attn  -> slice into q, k, v   (one fused [D, 3D] projection, like GPT-2)
//   per head: probs = dropout(softmax(causal_mask(q @ k^T / sqrt(Dh))))   (attention dropout)
//   h   = x + dropout(merge_heads(probs @ v) @ W_proj + b_proj)            (residual dropout)
//   m   = layernorm(h) * ln2_g + ln2_b
//   y   = h + dropout(gelu_tanh(m @ W_fc + b_fc) @ W_out + b_out)          (residual dropout)
// Shapes: T = 16 tokens, D = 64, H = 4 heads (Dh = 16), MLP width 4D = 256.
// The causal mask is a constant i1 lower-triangular built by lamina.ge on index constants.
// Each dropout has its own seed attribute, rate 0.1.
// Run:
//   lamina-opt samples/gpt2_block.mlir
//   lamina-run samples/gpt2_block.mlir --entry gpt2_block --print-outputs
//   lamina-run samples/gpt2_block.mlir --entry gpt2_block --check -p cse,canonicalize

func.func @gpt2_block(%x: tensor<16x64xf32>,
                      %ln1_g: tensor<64xf32>, %ln1_b: tensor<64xf32>,
                      %w_attn: tensor<64x192xf32>, %b_attn: tensor<192xf32>,
                      %w_proj: tensor<64x64xf32>, %b_proj: tensor<64xf32>,
                      %ln2_g: tensor<64xf32>, %ln2_b: tensor<64xf32>,
                      %w_fc: tensor<64x256xf32>, %b_fc: tensor<256xf32>,
                      %w_out: tensor<256x64xf32>, %b_out: tensor<64xf32>) -> tensor<16x64xf32> {
  // ---- attention sub-block ----
  %a = lamina.layernorm %x scale %ln1_g bias %ln1_b {axis = -1 : i64, eps = 1.000000e-05 : f64} : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %qkv0 = lamina.matmul %a, %w_attn : (tensor<16x64xf32>, tensor<64x192xf32>) -> tensor<16x192xf32>
  %qkv = lamina.add %qkv0, %b_attn : (tensor<16x192xf32>, tensor<192xf32>) -> tensor<16x192xf32>
  %q = lamina.slice %qkv {start = array<i64: 0, 0>, limit = array<i64: 16, 64>} : (tensor<16x192xf32>) -> tensor<16x64xf32>
  %k = lamina.slice %qkv {start = array<i64: 0, 64>, limit = array<i64: 16, 128>} : (tensor<16x192xf32>) -> tensor<16x64xf32>
  %v = lamina.slice %qkv {start = array<i64: 0, 128>, limit = array<i64: 16, 192>} : (tensor<16x192xf32>) -> tensor<16x64xf32>
  %q3 = lamina.reshape %q : (tensor<16x64xf32>) -> tensor<16x4x16xf32>
  %k3 = lamina.reshape %k : (tensor<16x64xf32>) -> tensor<16x4x16xf32>
  %v3 = lamina.reshape %v : (tensor<16x64xf32>) -> tensor<16x4x16xf32>
  %qh = lamina.transpose %q3 {permutation = array<i64: 1, 0, 2>} : (tensor<16x4x16xf32>) -> tensor<4x16x16xf32>
  %kt = lamina.transpose %k3 {permutation = array<i64: 1, 2, 0>} : (tensor<16x4x16xf32>) -> tensor<4x16x16xf32>
  %vh = lamina.transpose %v3 {permutation = array<i64: 1, 0, 2>} : (tensor<16x4x16xf32>) -> tensor<4x16x16xf32>
  %scores = lamina.matmul %qh, %kt : tensor<4x16x16xf32>
  %inv_sqrt_dh = lamina.constant dense<2.500000e-01> : tensor<f32>
  %scaled = lamina.mul %scores, %inv_sqrt_dh : (tensor<4x16x16xf32>, tensor<f32>) -> tensor<4x16x16xf32>
  %rows = lamina.constant dense<[[0], [1], [2], [3], [4], [5], [6], [7], [8], [9], [10], [11], [12], [13], [14], [15]]> : tensor<16x1xi32>
  %cols = lamina.constant dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]> : tensor<16xi32>
  %causal = lamina.ge %rows, %cols : (tensor<16x1xi32>, tensor<16xi32>) -> tensor<16x16xi1>
  %neg_big = lamina.constant dense<-1.000000e+09> : tensor<f32>
  %masked = lamina.select %causal, %scaled, %neg_big : (tensor<16x16xi1>, tensor<4x16x16xf32>, tensor<f32>) -> tensor<4x16x16xf32>
  %probs = lamina.softmax %masked {axis = -1 : i64} : tensor<4x16x16xf32>
  %probs_d = lamina.dropout %probs {rate = 1.000000e-01 : f64, seed = 1 : i64} : tensor<4x16x16xf32>
  %ctx = lamina.matmul %probs_d, %vh : tensor<4x16x16xf32>
  %ctx_t = lamina.transpose %ctx {permutation = array<i64: 1, 0, 2>} : (tensor<4x16x16xf32>) -> tensor<16x4x16xf32>
  %merged = lamina.reshape %ctx_t : (tensor<16x4x16xf32>) -> tensor<16x64xf32>
  %proj0 = lamina.matmul %merged, %w_proj : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32>
  %proj = lamina.add %proj0, %b_proj : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %proj_d = lamina.dropout %proj {rate = 1.000000e-01 : f64, seed = 2 : i64} : tensor<16x64xf32>
  %h = lamina.add %x, %proj_d : tensor<16x64xf32>
  // ---- MLP sub-block ----
  %m = lamina.layernorm %h scale %ln2_g bias %ln2_b {axis = -1 : i64, eps = 1.000000e-05 : f64} : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %fc0 = lamina.matmul %m, %w_fc : (tensor<16x64xf32>, tensor<64x256xf32>) -> tensor<16x256xf32>
  %fc = lamina.add %fc0, %b_fc : (tensor<16x256xf32>, tensor<256xf32>) -> tensor<16x256xf32>
  %act = lamina.gelu %fc {approximate = "tanh"} : tensor<16x256xf32>
  %out0 = lamina.matmul %act, %w_out : (tensor<16x256xf32>, tensor<256x64xf32>) -> tensor<16x64xf32>
  %out = lamina.add %out0, %b_out : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %out_d = lamina.dropout %out {rate = 1.000000e-01 : f64, seed = 3 : i64} : tensor<16x64xf32>
  %y = lamina.add %h, %out_d : tensor<16x64xf32>
  func.return %y : tensor<16x64xf32>
}
