// M not dividing the batch: accumulate-gradients' refusal, at the data argument's function.
// RUN: lamina-opt %s --verify-diagnostics -p 'derive-backward{data=x},pipeline-stages{stages=2 micro-batches=3}'
// An unknown schedule is refused when the pipeline is read; interleaved needs M to be a multiple
// of P (Megatron's order runs the micro-batches in groups of P), and more than one model chunk
// per stage needs interleaved.
// RUN: not lamina-opt %s -p 'derive-backward{data=x},pipeline-stages{stages=2 schedule=zigzag}' 2>&1 | filecheck %s --check-prefix=NAME
// NAME: error: option 'schedule' for pipeline-stages must be gpipe, 1f1b or interleaved, got 'zigzag'
// RUN: not lamina-opt %s -p 'derive-backward{data=x},pipeline-stages{stages=2 schedule=interleaved}' 2>&1 | filecheck %s --check-prefix=GROUPS
// GROUPS: :[[# @LINE + 5]]:1: error: pipeline-stages: schedule=interleaved needs the micro-batches to be a multiple of the stages (Megatron's interleaved order runs them in groups of P): micro-batches=1, stages=2
// RUN: not lamina-opt %s -p 'derive-backward{data=x},pipeline-stages{stages=2 schedule=gpipe virtual=2}' 2>&1 | filecheck %s --check-prefix=VIRT
// VIRT: :[[# @LINE + 3]]:1: error: pipeline-stages: virtual=2 (model chunks per stage) needs schedule=interleaved; gpipe runs one chunk per stage

// expected-error @+1 {{accumulate-gradients: micro-batches=3 does not divide the batch of %x (dimension 0 of tensor<4x2xf32>: 4 rows)}}
func.func @odd(%x: tensor<4x2xf32>, %w: tensor<2x2xf32>) -> tensor<f32> {
  %m = lamina.matmul %x, %w : (tensor<4x2xf32>, tensor<2x2xf32>) -> tensor<4x2xf32>
  %t = lamina.tanh %m : tensor<4x2xf32>
  %l = lamina.reduce_sum %t {axes = array<i64: 0, 1>} : (tensor<4x2xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
