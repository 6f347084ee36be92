// accumulate-gradients turns @f_grad (from derive-backward) into two micro-batch passes: each
// takes its half of %x's rows, runs the forward and a backward derived at the micro-batch shape
// (reduce_mean's 1/N is the micro-batch's 1/4); each loss and gradient is added into its running
// sum right where it is made (the last one halved there: a mean loss), so a micro-batch's
// gradient dies at once. On a placed batch (data=2) micro-batch k is the k-th chunk of each
// device's block (reshape, slice, reshape: no communication), and insert-collectives still
// reduces the gradient once per step.
// RUN: lamina-opt %s -p 'derive-backward{data=x},accumulate-gradients{micro-batches=2}' | filecheck %s
// RUN: lamina-opt %s -p 'derive-backward{data=x},accumulate-gradients{micro-batches=2 loss=sum}' | filecheck %s --check-prefix=SUM
// RUN: lamina-opt %s -p 'place-batch{data=x axis=data size=2},derive-backward{data=x},accumulate-gradients{micro-batches=2},propagate-sharding,insert-collectives' | filecheck %s --check-prefix=DP

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>) -> tensor<f32> {
  %h = lamina.matmul %x, %w : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %l = lamina.reduce_mean %h {axes = array<i64: 0, 1>} : (tensor<4x2xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}

// CHECK-LABEL: func.func @f_grad(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>) -> ({{.*}}) attributes {lamina.gradients = array<i64: 1>} {
// CHECK-NEXT:    %[[X0:.*]] = lamina.slice %x {start = array<i64: 0, 0>, limit = array<i64: 2, 8>} : (tensor<4x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:    %h_mb0 = lamina.matmul %[[X0]], %w : (tensor<2x8xf32>, tensor<8x2xf32>) -> tensor<2x2xf32>
// CHECK-NEXT:    %l_mb0 = lamina.reduce_mean %h_mb0
// CHECK:         lamina.constant dense<2.500000e-01> : tensor<f32>
// CHECK:         %d_w_mb0 = lamina.matmul
// CHECK-NEXT:    %[[X1:.*]] = lamina.slice %x {start = array<i64: 2, 0>, limit = array<i64: 4, 8>} : (tensor<4x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:    %h_mb1 = lamina.matmul %[[X1]], %w
// CHECK-NEXT:    %l_mb1 = lamina.reduce_mean %h_mb1
// CHECK-NEXT:    %[[L:.*]] = lamina.add %l_mb0, %l_mb1 : tensor<f32>
// CHECK-NEXT:    %[[HALF:.*]] = lamina.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT:    %l = lamina.mul %[[L]], %[[HALF]] : tensor<f32>
// CHECK-NEXT:    lamina.constant {lamina.loss_seed}
// CHECK:         %d_w_mb1 = lamina.matmul
// CHECK-NEXT:    %[[G:.*]] = lamina.add %d_w_mb0, %d_w_mb1 : tensor<8x2xf32>
// CHECK-NEXT:    %d_w = lamina.mul %[[G]], %[[HALF]]
// CHECK-NEXT:    func.return %l, %d_w : tensor<f32>, tensor<8x2xf32>

// SUM-LABEL: func.func @f_grad(
// SUM:         %l = lamina.add %l_mb0, %l_mb1 : tensor<f32>
// SUM:         %d_w_mb1 = lamina.matmul
// SUM-NEXT:    %d_w = lamina.add %d_w_mb0, %d_w_mb1 : tensor<8x2xf32>
// SUM-NEXT:    func.return %l, %d_w

// DP-LABEL: func.func @f_grad(
// DP-NEXT:    %{{.*}} = lamina.reshape %x : ({{.*}}) -> tensor<2x2x1x8xf32, {{.*}}>
// DP-NEXT:    %{{.*}} = lamina.slice {{.*}} -> tensor<2x1x1x8xf32, {{.*}}>
// DP-NEXT:    %{{.*}} = lamina.reshape {{.*}} -> tensor<2x8xf32, {{.*}}>
// DP-NOT:     lamina.all_reduce
// DP:         lamina.add %d_w_mb0, %d_w_mb1 : tensor<8x2xf32, #lamina.place<@dp, {{.*}}, partial = sum{{.*}}>>
// DP:         lamina.all_reduce
// DP-NOT:     lamina.all_reduce
// DP:         func.return
