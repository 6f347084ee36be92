// The same MLP with the first matmul's contracting dimension split on `model` (x columns, W1
// rows), the case where GSPMD all-reduces the whole f32[2048,4096] hidden (48 MiB sent per
// device) and every device computes the full gelu. Here the pending sum is reduce-scattered into
// column shards of the hidden (24 MiB sent per device), so each device applies gelu to a quarter
// of it, and the Megatron path follows: W2 rows on `model`, one all_reduce of the 8 MiB output
// (12 MiB sent): 36 MiB per device in all.
// Run:
//   lamina-opt samples/mlp_contracting.mlir -p 'propagate-sharding,insert-collectives{target=h100-node}' --explain
//   lamina-run samples/mlp_contracting.mlir -p 'propagate-sharding,insert-collectives{target=h100-node}' --stats-json -
lamina.mesh @m [data = 2, model = 4]
func.func @mlp_contracting(%x: tensor<2048x1024xf32, #lamina.place<@m, [[], [model]]>>, %w1: tensor<1024x4096xf32, #lamina.place<@m, [[model], []]>>, %b1: tensor<4096xf32>, %w2: tensor<4096x1024xf32>, %b2: tensor<1024xf32>) -> tensor<2048x1024xf32, #lamina.place<@m, [[], []]>> {
  %h = lamina.matmul %x, %w1 : (tensor<2048x1024xf32, #lamina.place<@m, [[], [model]]>>, tensor<1024x4096xf32, #lamina.place<@m, [[model], []]>>) -> tensor<2048x4096xf32>
  %hb = lamina.add %h, %b1 : (tensor<2048x4096xf32>, tensor<4096xf32>) -> tensor<2048x4096xf32>
  %g = lamina.gelu %hb : tensor<2048x4096xf32>
  %y = lamina.matmul %g, %w2 : (tensor<2048x4096xf32>, tensor<4096x1024xf32>) -> tensor<2048x1024xf32>
  %yb = lamina.add %y, %b2 : (tensor<2048x1024xf32>, tensor<1024xf32>) -> tensor<2048x1024xf32, #lamina.place<@m, [[], []]>>
  func.return %yb : tensor<2048x1024xf32, #lamina.place<@m, [[], []]>>
}
