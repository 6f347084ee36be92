// Order rule (issue 27): mixed-precision after propagate-sharding: the casts it inserts would be unplaced; refused at the first op with a pending sum placed.
// One located error naming the pass and the order it runs in; lamina-opt exits 1.
// RUN: lamina-opt %s --verify-diagnostics -p 'derive-backward{data=x},append-optimizer,propagate-sharding,mixed-precision'

lamina.mesh @m [data = 2]
func.func @f(%x: tensor<8x4xf32, #lamina.place<@m, [[data], []]>>, %w: tensor<4x4xf32, #lamina.place<@m, [[], []]>>) -> tensor<f32> {
  // expected-error @+1 {{mixed-precision: @f_step has a pending sum placed (lamina.matmul): propagate-sharding ran already; run mixed-precision after append-optimizer, before shard-optimizer, propagate-sharding, insert-collectives, fuse-elementwise and annotate-lifetimes}}
  %h = lamina.matmul %x, %w : (tensor<8x4xf32, #lamina.place<@m, [[data], []]>>, tensor<4x4xf32, #lamina.place<@m, [[], []]>>) -> tensor<8x4xf32>
  %t = lamina.tanh %h : tensor<8x4xf32>
  %l = lamina.reduce_mean %t {axes = array<i64: 0, 1>} : (tensor<8x4xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
