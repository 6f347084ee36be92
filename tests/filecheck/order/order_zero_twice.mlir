// Order rule (issue 27): shard-optimizer twice: the second run would reshard the shards the first placed (it was accepted silently, adding a reshard back and forth per parameter).
// One located error naming the pass and the order it runs in; lamina-opt exits 1.
// RUN: lamina-opt %s --verify-diagnostics -p 'derive-backward{data=x},append-optimizer,shard-optimizer{stage=1},shard-optimizer{stage=2}'
// RUN: not lamina-opt %s -p 'derive-backward{data=x},append-optimizer,shard-optimizer{stage=3},shard-optimizer{stage=3}' 2>&1 | filecheck %s --check-prefix=S3
// S3: order_zero_twice.mlir:9:1: error: shard-optimizer: @f_step reshards %w (shard-optimizer ran already); run shard-optimizer once,

lamina.mesh @m [data = 2]
// expected-error @+1:1 {{shard-optimizer: @f_step reshards %d_w (shard-optimizer ran already); run shard-optimizer once, after append-optimizer and mixed-precision, before propagate-sharding, insert-collectives, fuse-elementwise and annotate-lifetimes}}
func.func @f(%x: tensor<8x4xf32, #lamina.place<@m, [[data], []]>>, %w: tensor<4x4xf32, #lamina.place<@m, [[], []]>>) -> tensor<f32> {
  %h = lamina.matmul %x, %w : (tensor<8x4xf32, #lamina.place<@m, [[data], []]>>, tensor<4x4xf32, #lamina.place<@m, [[], []]>>) -> tensor<8x4xf32>
  %t = lamina.tanh %h : tensor<8x4xf32>
  %l = lamina.reduce_mean %t {axes = array<i64: 0, 1>} : (tensor<8x4xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
