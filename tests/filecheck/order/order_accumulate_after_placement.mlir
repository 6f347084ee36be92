// Order rule (issue 27): accumulate-gradients after propagate-sharding: it was an internal error (a reshard still in use when the old body was erased).
// One located error naming the pass and the order it runs in; lamina-opt exits 1.
// RUN: lamina-opt %s --verify-diagnostics -p 'derive-backward{data=x},propagate-sharding,accumulate-gradients{micro-batches=2}'

lamina.mesh @m [data = 2]
func.func @f(%x: tensor<8x4xf32, #lamina.place<@m, [[data], []]>>, %w: tensor<4x4xf32, #lamina.place<@m, [[], []]>>) -> tensor<f32> {
  // expected-error @+1 {{accumulate-gradients: @f_grad has a pending sum placed (lamina.matmul): propagate-sharding ran already; run accumulate-gradients after derive-backward, before append-optimizer, propagate-sharding, insert-collectives, fuse-elementwise and annotate-lifetimes}}
  %h = lamina.matmul %x, %w : (tensor<8x4xf32, #lamina.place<@m, [[data], []]>>, tensor<4x4xf32, #lamina.place<@m, [[], []]>>) -> tensor<8x4xf32>
  %t = lamina.tanh %h : tensor<8x4xf32>
  %l = lamina.reduce_mean %t {axes = array<i64: 0, 1>} : (tensor<8x4xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
