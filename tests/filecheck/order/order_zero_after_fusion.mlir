// Order rule (issue 27): shard-optimizer after fuse-elementwise: its reshards would land between ops fused into one kernel.
// One located error naming the pass and the order it runs in; lamina-opt exits 1.
// RUN: lamina-opt %s --verify-diagnostics -p 'derive-backward{data=x},append-optimizer,fuse-elementwise,shard-optimizer'

lamina.mesh @m [data = 2]
func.func @f(%x: tensor<8x4xf32, #lamina.place<@m, [[data], []]>>, %w: tensor<4x4xf32, #lamina.place<@m, [[], []]>>) -> tensor<f32> {
  %h = lamina.matmul %x, %w : (tensor<8x4xf32, #lamina.place<@m, [[data], []]>>, tensor<4x4xf32, #lamina.place<@m, [[], []]>>) -> tensor<8x4xf32>
  // expected-error @+1:3 {{shard-optimizer: @f_step holds a lamina.fused kernel: fuse-elementwise ran already; run shard-optimizer after append-optimizer and mixed-precision, before propagate-sharding, insert-collectives, fuse-elementwise and annotate-lifetimes}}
  %t = lamina.tanh %h : tensor<8x4xf32>
  %l = lamina.reduce_mean %t {axes = array<i64: 0, 1>} : (tensor<8x4xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
