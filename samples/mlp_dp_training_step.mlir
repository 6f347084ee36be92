// A data-parallel training step of the MLP y = gelu(x @ W1 + b1) @ W2 + b2 on 8 devices
// (`data` = 8): x and the upstream gradient dy are split by rows (the batch), parameters are
// replicated. The backward pass is written by hand (with the "quick gelu" derivative
// dh = dg * sigmoid(1.702 h) standing in for gelu', to keep it short); every parameter gradient is
// a pending sum over `data`, reduced by one hand-written all_reduce each. insert-collectives picks
// an algorithm for each and, since at these sizes all four are latency-bound, merges them into one
// bucketed all_reduce. Fully placed: it needs no propagation.
// Run:
//   lamina-opt samples/mlp_dp_training_step.mlir -p 'insert-collectives{target=h100-cluster}' --explain
//   lamina-run samples/mlp_dp_training_step.mlir -p 'insert-collectives{target=h100-node}' --stats-json -
lamina.mesh @m [data = 8]
func.func @dp_step(%x: tensor<64x32xf32, #lamina.place<@m, [[data], []]>>, %w1: tensor<32x128xf32, #lamina.place<@m, [[], []]>>, %b1: tensor<128xf32, #lamina.place<@m, [[]]>>, %w2: tensor<128x32xf32, #lamina.place<@m, [[], []]>>, %b2: tensor<32xf32, #lamina.place<@m, [[]]>>, %dy: tensor<64x32xf32, #lamina.place<@m, [[data], []]>>) -> (tensor<32x128xf32, #lamina.place<@m, [[], []]>>, tensor<128xf32, #lamina.place<@m, [[]]>>, tensor<128x32xf32, #lamina.place<@m, [[], []]>>, tensor<32xf32, #lamina.place<@m, [[]]>>) {
  %h0 = lamina.matmul %x, %w1 : (tensor<64x32xf32, #lamina.place<@m, [[data], []]>>, tensor<32x128xf32, #lamina.place<@m, [[], []]>>) -> tensor<64x128xf32, #lamina.place<@m, [[data], []]>>
  %h = lamina.add %h0, %b1 : (tensor<64x128xf32, #lamina.place<@m, [[data], []]>>, tensor<128xf32, #lamina.place<@m, [[]]>>) -> tensor<64x128xf32, #lamina.place<@m, [[data], []]>>
  %g = lamina.gelu %h : tensor<64x128xf32, #lamina.place<@m, [[data], []]>>
  // backward: dW2 = g^T dy, db2 = sum(dy), dg = dy W2^T, dh = dg * sigmoid(1.702 h)
  %gt = lamina.transpose %g {permutation = array<i64: 1, 0>} : (tensor<64x128xf32, #lamina.place<@m, [[data], []]>>) -> tensor<128x64xf32, #lamina.place<@m, [[], [data]]>>
  %dw2p = lamina.matmul %gt, %dy : (tensor<128x64xf32, #lamina.place<@m, [[], [data]]>>, tensor<64x32xf32, #lamina.place<@m, [[data], []]>>) -> tensor<128x32xf32, #lamina.place<@m, [[], []], partial = sum[data]>>
  %db2p = lamina.reduce_sum %dy {axes = array<i64: 0>} : (tensor<64x32xf32, #lamina.place<@m, [[data], []]>>) -> tensor<32xf32, #lamina.place<@m, [[]], partial = sum[data]>>
  %w2t = lamina.transpose %w2 {permutation = array<i64: 1, 0>} : (tensor<128x32xf32, #lamina.place<@m, [[], []]>>) -> tensor<32x128xf32, #lamina.place<@m, [[], []]>>
  %dg = lamina.matmul %dy, %w2t : (tensor<64x32xf32, #lamina.place<@m, [[data], []]>>, tensor<32x128xf32, #lamina.place<@m, [[], []]>>) -> tensor<64x128xf32, #lamina.place<@m, [[data], []]>>
  %k = lamina.constant dense<1.702> : tensor<f32, #lamina.place<@m, []>>
  %hk = lamina.mul %h, %k : (tensor<64x128xf32, #lamina.place<@m, [[data], []]>>, tensor<f32, #lamina.place<@m, []>>) -> tensor<64x128xf32, #lamina.place<@m, [[data], []]>>
  %sg = lamina.sigmoid %hk : tensor<64x128xf32, #lamina.place<@m, [[data], []]>>
  %dh = lamina.mul %dg, %sg : tensor<64x128xf32, #lamina.place<@m, [[data], []]>>
  %xt = lamina.transpose %x {permutation = array<i64: 1, 0>} : (tensor<64x32xf32, #lamina.place<@m, [[data], []]>>) -> tensor<32x64xf32, #lamina.place<@m, [[], [data]]>>
  %dw1p = lamina.matmul %xt, %dh : (tensor<32x64xf32, #lamina.place<@m, [[], [data]]>>, tensor<64x128xf32, #lamina.place<@m, [[data], []]>>) -> tensor<32x128xf32, #lamina.place<@m, [[], []], partial = sum[data]>>
  %db1p = lamina.reduce_sum %dh {axes = array<i64: 0>} : (tensor<64x128xf32, #lamina.place<@m, [[data], []]>>) -> tensor<128xf32, #lamina.place<@m, [[]], partial = sum[data]>>
  %dw1 = lamina.all_reduce %dw1p {axes = ["data"]} : tensor<32x128xf32, #lamina.place<@m, [[], []], partial = sum[data]>> -> tensor<32x128xf32, #lamina.place<@m, [[], []]>>
  %db1 = lamina.all_reduce %db1p {axes = ["data"]} : tensor<128xf32, #lamina.place<@m, [[]], partial = sum[data]>> -> tensor<128xf32, #lamina.place<@m, [[]]>>
  %dw2 = lamina.all_reduce %dw2p {axes = ["data"]} : tensor<128x32xf32, #lamina.place<@m, [[], []], partial = sum[data]>> -> tensor<128x32xf32, #lamina.place<@m, [[], []]>>
  %db2 = lamina.all_reduce %db2p {axes = ["data"]} : tensor<32xf32, #lamina.place<@m, [[]], partial = sum[data]>> -> tensor<32xf32, #lamina.place<@m, [[]]>>
  func.return %dw1, %db1, %dw2, %db2 : tensor<32x128xf32, #lamina.place<@m, [[], []]>>, tensor<128xf32, #lamina.place<@m, [[]]>>, tensor<128x32xf32, #lamina.place<@m, [[], []]>>, tensor<32xf32, #lamina.place<@m, [[]]>>
}
