// An attention block split by heads on a 1 x 4 mesh: q, k, v are f32[8 heads, 64 tokens, 32]
// with the heads on `model`; scores, softmax and the weighted sum stay local to each device's two
// heads. The output projection multiplies the concatenated heads [64, 256] (columns on model) by
// Wo [256, 64]: its contracting dimension is split, so the result is a pending sum, and one
// all_reduce of f32[64,64] produces the replicated output. Only q, k, v are placed by hand (k is
// written already transposed); Wo and the scale constant are placed by propagate-sharding.
// Run:
//   lamina-opt samples/attention_heads.mlir -p 'propagate-sharding,insert-collectives{target=h100-node}' --explain
//   lamina-run samples/attention_heads.mlir -p 'propagate-sharding,insert-collectives{target=h100-node}' --stats-json -
lamina.mesh @m [data = 1, model = 4]
func.func @attention_heads(%q: tensor<8x64x32xf32, #lamina.place<@m, [[model], [], []]>>, %kt: tensor<8x32x64xf32, #lamina.place<@m, [[model], [], []]>>, %v: tensor<8x64x32xf32, #lamina.place<@m, [[model], [], []]>>, %wo: tensor<256x64xf32>) -> tensor<64x64xf32, #lamina.place<@m, [[], []]>> {
  %s = lamina.matmul %q, %kt : (tensor<8x64x32xf32, #lamina.place<@m, [[model], [], []]>>, tensor<8x32x64xf32, #lamina.place<@m, [[model], [], []]>>) -> tensor<8x64x64xf32>
  %c = lamina.constant dense<0.17677669> : tensor<f32>
  %ss = lamina.mul %s, %c : (tensor<8x64x64xf32>, tensor<f32>) -> tensor<8x64x64xf32>
  %p = lamina.softmax %ss {axis = -1 : i64} : tensor<8x64x64xf32>
  %o = lamina.matmul %p, %v : (tensor<8x64x64xf32>, tensor<8x64x32xf32, #lamina.place<@m, [[model], [], []]>>) -> tensor<8x64x32xf32>
  %ot = lamina.transpose %o {permutation = array<i64: 1, 0, 2>} : (tensor<8x64x32xf32>) -> tensor<64x8x32xf32>
  %of = lamina.reshape %ot : (tensor<64x8x32xf32>) -> tensor<64x256xf32>
  %y = lamina.matmul %of, %wo : (tensor<64x256xf32>, tensor<256x64xf32>) -> tensor<64x64xf32, #lamina.place<@m, [[], []]>>
  func.return %y : tensor<64x64xf32, #lamina.place<@m, [[], []]>>
}
