// pipeline-stages refuses, with one located error: more stages than forward ops to cut, a
// micro-batch count that does not divide the batch (accumulate-gradients' own refusal), and
// micro-batches on a forward.
// RUN: lamina-opt %s --split-input-file --verify-diagnostics -p 'derive-backward{data=x},pipeline-stages{stages=4 micro-batches=1}'

// expected-error @+1 {{pipeline-stages: stages=4, but the forward of a micro-batch has only 2 ops to cut}}
func.func @short(%x: tensor<4x2xf32>, %w: tensor<2x2xf32>) -> tensor<f32> {
  %m = lamina.matmul %x, %w : (tensor<4x2xf32>, tensor<2x2xf32>) -> tensor<4x2xf32>
  %l = lamina.reduce_sum %m {axes = array<i64: 0, 1>} : (tensor<4x2xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
