// The forward pass of samples/mlp_dp_training_step.mlir alone, y = gelu(x @ W1 + b1) @ W2 + b2 on
// 8 devices (`data` = 8): x and y split by rows (the batch), parameters replicated. Its backward is
// derived instead of written: derive-backward adds @dp_forward_grad(x, W1, b1, W2, b2, d_y) with
// the exact gelu derivative and returns y and the four gradients placed like their parameters;
// propagate-sharding places the backward (every parameter gradient is a pending sum over `data`)
// and insert-collectives reduces the four with all_reduces, latency-bound at these sizes, so
// merged into one bucket (`bucket-bytes` caps it). Placing W1 [[data], []] instead (ZeRO-style)
// makes its gradient a reduce_scatter.
// Run:
//   lamina-opt samples/mlp_dp_forward.mlir -p 'derive-backward{data=x},propagate-sharding,insert-collectives{target=h100-cluster}' --explain
//   lamina-opt samples/mlp_dp_forward.mlir -p 'derive-backward{data=x}' -o grad.mlir
//   lamina-run grad.mlir --entry dp_forward_grad -p 'propagate-sharding,insert-collectives{target=h100-cluster}' --check --stats-json -
lamina.mesh @m [data = 8]
func.func @dp_forward(%x: tensor<64x32xf32, #lamina.place<@m, [[data], []]>>, %w1: tensor<32x128xf32, #lamina.place<@m, [[], []]>>, %b1: tensor<128xf32, #lamina.place<@m, [[]]>>, %w2: tensor<128x32xf32, #lamina.place<@m, [[], []]>>, %b2: tensor<32xf32, #lamina.place<@m, [[]]>>) -> tensor<64x32xf32, #lamina.place<@m, [[data], []]>> {
  %h0 = lamina.matmul %x, %w1 : (tensor<64x32xf32, #lamina.place<@m, [[data], []]>>, tensor<32x128xf32, #lamina.place<@m, [[], []]>>) -> tensor<64x128xf32, #lamina.place<@m, [[data], []]>>
  %h = lamina.add %h0, %b1 : (tensor<64x128xf32, #lamina.place<@m, [[data], []]>>, tensor<128xf32, #lamina.place<@m, [[]]>>) -> tensor<64x128xf32, #lamina.place<@m, [[data], []]>>
  %g = lamina.gelu %h : tensor<64x128xf32, #lamina.place<@m, [[data], []]>>
  %o = lamina.matmul %g, %w2 : (tensor<64x128xf32, #lamina.place<@m, [[data], []]>>, tensor<128x32xf32, #lamina.place<@m, [[], []]>>) -> tensor<64x32xf32, #lamina.place<@m, [[data], []]>>
  %y = lamina.add %o, %b2 : (tensor<64x32xf32, #lamina.place<@m, [[data], []]>>, tensor<32xf32, #lamina.place<@m, [[]]>>) -> tensor<64x32xf32, #lamina.place<@m, [[data], []]>>
  func.return %y : tensor<64x32xf32, #lamina.place<@m, [[data], []]>>
}
