// pipeline-stages{schedule=interleaved}: a four-layer loss cut by hand into V*P = 4 chunks (before
// each later matmul), two stages, two model chunks per stage, two micro-batches. Chunk c runs on
// stage c % 2, so chunk 1's activation goes to stage 1 and chunk 1's back to stage 0 (the wrap);
// each op's micro-step names its micro-batch and its chunk on the stage (F0.1 = micro-batch 0,
// chunk 1); lamina.pipeline says virtual = 2.
// RUN: lamina-opt %s -p 'derive-backward{data=x},pipeline-stages{stages=2 micro-batches=2 schedule=interleaved virtual=2 split=ops}' | filecheck %s

// CHECK: lamina.mesh @pp [stage = 2]
// CHECK-LABEL: func.func @f_grad
// CHECK-SAME: lamina.pipeline = {axis = "stage", stages = 2 : i64, micro_batches = 2 : i64, schedule = "interleaved", virtual = 2 : i64}
// chunk 0 (layer 0) on stage 0, chunk 1 (layer 1) on stage 1
// CHECK: lamina.matmul {{.*}}lamina.micro_step = "F0.0"{{.*}}-> tensor<2x3xf32, {{.*}}stage = stage[0]>>
// CHECK: lamina.collective_permute {{.*}}stage = stage[0]>> -> {{.*}}stage = stage[1]>>
// CHECK: lamina.matmul {{.*}}lamina.micro_step = "F0.0"{{.*}}-> tensor<2x3xf32, {{.*}}stage = stage[1]>>
// the wrap: chunk 1 (stage 1) sends to chunk 2 (stage 0, its chunk 1)
// CHECK: lamina.collective_permute %h1_mb0 {{.*}}stage = stage[1]>> -> {{.*}}stage = stage[0]>>
// CHECK-NEXT: lamina.matmul {{.*}}lamina.micro_step = "F0.1"{{.*}}-> tensor<2x3xf32, {{.*}}stage = stage[0]>>
// CHECK: lamina.collective_permute %h2_mb0 {{.*}}stage = stage[0]>> -> {{.*}}stage = stage[1]>>
// CHECK-NEXT: lamina.matmul {{.*}}lamina.micro_step = "F0.1"{{.*}}-> tensor<2x2xf32, {{.*}}stage = stage[1]>>
// stage 1 runs B0.1 (chunk 3) before stage 0's warm-up is over; the chunks' backwards in reverse
// CHECK: lamina.micro_step = "B0.1"{{.*}}stage = stage[1]
// CHECK: lamina.micro_step = "B0.1"{{.*}}stage = stage[0]
// CHECK: lamina.micro_step = "B0.0"{{.*}}stage = stage[1]
// CHECK: lamina.micro_step = "B0.0"{{.*}}stage = stage[0]
// CHECK: func.return
func.func @f(%x: tensor<4x2xf32>, %w0: tensor<2x3xf32>, %w1: tensor<3x3xf32>, %w2: tensor<3x3xf32>,
             %w3: tensor<3x2xf32>) -> tensor<f32> {
  %m0 = lamina.matmul %x, %w0 : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  %h0 = lamina.tanh %m0 : tensor<4x3xf32>
  %m1 = lamina.matmul %h0, %w1 {lamina.stage_boundary} : (tensor<4x3xf32>, tensor<3x3xf32>) -> tensor<4x3xf32>
  %h1 = lamina.tanh %m1 : tensor<4x3xf32>
  %m2 = lamina.matmul %h1, %w2 {lamina.stage_boundary} : (tensor<4x3xf32>, tensor<3x3xf32>) -> tensor<4x3xf32>
  %h2 = lamina.tanh %m2 : tensor<4x3xf32>
  %m3 = lamina.matmul %h2, %w3 {lamina.stage_boundary} : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %l = lamina.reduce_sum %m3 {axes = array<i64: 0, 1>} : (tensor<4x2xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
