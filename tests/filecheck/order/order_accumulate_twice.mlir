// Order rule (issue 27): accumulate-gradients twice: the second run would split each micro-batch again (it was refused at a slice, naming no pass order).
// One located error naming the pass and the order it runs in; lamina-opt exits 1.
// RUN: lamina-opt %s --verify-diagnostics -p 'derive-backward{data=x},accumulate-gradients{micro-batches=2},accumulate-gradients{micro-batches=2}'

lamina.mesh @m [data = 2]
// expected-error @+1:1 {{accumulate-gradients: @f_grad already reads %x as micro-batches (2 slices of parts of dimension 0): accumulate-gradients ran already; run it once, with micro-batches= the product of the counts}}
func.func @f(%x: tensor<8x4xf32, #lamina.place<@m, [[data], []]>>, %w: tensor<4x4xf32, #lamina.place<@m, [[], []]>>) -> tensor<f32> {
  %h = lamina.matmul %x, %w : (tensor<8x4xf32, #lamina.place<@m, [[data], []]>>, tensor<4x4xf32, #lamina.place<@m, [[], []]>>) -> tensor<8x4xf32>
  %t = lamina.tanh %h : tensor<8x4xf32>
  %l = lamina.reduce_mean %t {axes = array<i64: 0, 1>} : (tensor<8x4xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
