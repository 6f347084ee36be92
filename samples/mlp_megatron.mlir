// The MLP h = gelu(x @ W1 + b1) @ W2 + b2 (f32, x 2048x1024, W1 1024x4096, W2 4096x1024) on a
// 2 x 4 mesh, Megatron-style: x rows split on `data`, W1 columns on `model`. Only x and W1 are
// placed (and the result, rows on data); propagate-sharding places everything else: b1 follows
// W1's columns, W2 gets its rows on `model` (the contracting split), and the second matmul's
// pending sum is reduced once, by one all_reduce of f32[1024,1024] per model group (4 MiB payload,
// 6 MiB sent per device on a ring), the same as XLA's GSPMD.
// Run:
//   lamina-opt samples/mlp_megatron.mlir -p 'propagate-sharding,insert-collectives{target=h100-node}' --explain
//   lamina-run samples/mlp_megatron.mlir -p 'propagate-sharding,insert-collectives{target=h100-node}' --stats-json -
lamina.mesh @m [data = 2, model = 4]
func.func @mlp_megatron(%x: tensor<2048x1024xf32, #lamina.place<@m, [[data], []]>>, %w1: tensor<1024x4096xf32, #lamina.place<@m, [[], [model]]>>, %b1: tensor<4096xf32>, %w2: tensor<4096x1024xf32>, %b2: tensor<1024xf32>) -> tensor<2048x1024xf32, #lamina.place<@m, [[data], []]>> {
  %h = lamina.matmul %x, %w1 : (tensor<2048x1024xf32, #lamina.place<@m, [[data], []]>>, tensor<1024x4096xf32, #lamina.place<@m, [[], [model]]>>) -> tensor<2048x4096xf32>
  %hb = lamina.add %h, %b1 : (tensor<2048x4096xf32>, tensor<4096xf32>) -> tensor<2048x4096xf32>
  %g = lamina.gelu %hb : tensor<2048x4096xf32>
  %y = lamina.matmul %g, %w2 : (tensor<2048x4096xf32>, tensor<4096x1024xf32>) -> tensor<2048x1024xf32>
  %yb = lamina.add %y, %b2 : (tensor<2048x1024xf32>, tensor<1024xf32>) -> tensor<2048x1024xf32, #lamina.place<@m, [[data], []]>>
  func.return %yb : tensor<2048x1024xf32, #lamina.place<@m, [[data], []]>>
}
