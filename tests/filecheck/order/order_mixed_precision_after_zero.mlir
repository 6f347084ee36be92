// Order rule (issue 27): mixed-precision after shard-optimizer: the reshards ZeRO placed on a gradient would read an unplaced cast (the verifier refused that as a lamina.reshard error before).
// One located error naming the pass and the order it runs in; lamina-opt exits 1.
// RUN: lamina-opt %s --verify-diagnostics -p 'derive-backward{data=x},append-optimizer,shard-optimizer{stage=1},mixed-precision'

lamina.mesh @m [data = 2]
// expected-error @+1:1 {{mixed-precision: @f_step reshards %d_w (shard-optimizer ran already); run mixed-precision after append-optimizer, before shard-optimizer, propagate-sharding, insert-collectives, fuse-elementwise and annotate-lifetimes}}
func.func @f(%x: tensor<8x4xf32, #lamina.place<@m, [[data], []]>>, %w: tensor<4x4xf32, #lamina.place<@m, [[], []]>>) -> tensor<f32> {
  %h = lamina.matmul %x, %w : (tensor<8x4xf32, #lamina.place<@m, [[data], []]>>, tensor<4x4xf32, #lamina.place<@m, [[], []]>>) -> tensor<8x4xf32>
  %t = lamina.tanh %h : tensor<8x4xf32>
  %l = lamina.reduce_mean %t {axes = array<i64: 0, 1>} : (tensor<8x4xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
