// pipeline-stages on a two-layer loss, cut by hand before the second matmul, two micro-batches,
// 1F1B: the stage axis declared, the stage in every type, one collective_permute per crossing,
// the micro-steps and the schedule attribute.
// RUN: lamina-opt %s -p 'derive-backward{data=x},pipeline-stages{stages=2 micro-batches=2 schedule=1f1b split=ops}' | filecheck %s

// CHECK: lamina.mesh @pp [stage = 2]
// CHECK-LABEL: func.func @f_grad
// CHECK-SAME: stage = stage[0]
// CHECK-SAME: attributes {{.*}}lamina.pipeline = {axis = "stage", stages = 2 : i64, micro_batches = 2 : i64, schedule = "1f1b"}
// CHECK: lamina.matmul {{.*}}lamina.micro_step = "F0"{{.*}}stage = stage[0]
// CHECK: lamina.collective_permute {{.*}}{axes = ["stage"]} : {{.*}}stage = stage[0]>> -> {{.*}}stage = stage[1]>>
// CHECK: lamina.matmul {{.*}}lamina.micro_step = "F0"{{.*}}stage = stage[1]
// CHECK: lamina.micro_step = "B0"
// CHECK: lamina.micro_step = "F1"
// CHECK: lamina.micro_step = "B1"
// CHECK: func.return
func.func @f(%x: tensor<4x2xf32>, %w0: tensor<2x3xf32>, %w1: tensor<3x2xf32>) -> tensor<f32> {
  %m0 = lamina.matmul %x, %w0 : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  %h0 = lamina.tanh %m0 : tensor<4x3xf32>
  %m1 = lamina.matmul %h0, %w1 {lamina.stage_boundary} : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %l = lamina.reduce_sum %m1 {axes = array<i64: 0, 1>} : (tensor<4x2xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
