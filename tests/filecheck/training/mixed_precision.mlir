// mixed-precision on a derived SGD step: the matmuls and tanh compute in f16 (their rows' amp
// class is low), the loss's reduce_mean in f32; the parameter stays an f32 argument cast where
// the matmul reads it; with loss-scale=dynamic the scale replaces the backward's seed, the
// gradient is unscaled in f32, tested finite, and the update is selected with the old value.
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{kind=sgd lr=0.5},mixed-precision{compute=f16 loss-scale=dynamic interval=3}' | filecheck %s
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{kind=sgd lr=0.5},mixed-precision' --explain 2>&1 | filecheck %s --check-prefix=EXPLAIN

func.func @mlp(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>) -> tensor<f32> {
  %h = lamina.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %t = lamina.tanh %h : tensor<4x3xf32>
  %l = lamina.reduce_mean %t {axes = array<i64: 0, 1>} : (tensor<4x3xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}

// CHECK-LABEL: func.func @mlp_step(%x: tensor<4x8xf32>, %w: tensor<8x3xf32> {lamina.role = "parameter"}, %loss_scale: tensor<f32> {lamina.role = "loss_scale", lamina.init = 6.553600e+04 : f64}, %good_steps: tensor<f32> {lamina.role = "good_steps"}) -> (tensor<8x3xf32>, tensor<f32>, tensor<f32>, tensor<f32>) attributes {lamina.updates = array<i64: 1, 2, 3, -1>} {
// CHECK-NEXT:    %[[X:.*]] = lamina.cast %x : (tensor<4x8xf32>) -> tensor<4x8xf16>
// CHECK-NEXT:    %[[W:.*]] = lamina.cast %w : (tensor<8x3xf32>) -> tensor<8x3xf16>
// CHECK-NEXT:    %h = lamina.matmul %[[X]], %[[W]] : (tensor<4x8xf16>, tensor<8x3xf16>) -> tensor<4x3xf16>
// CHECK-NEXT:    %t = lamina.tanh %h : tensor<4x3xf16>
// CHECK-NEXT:    %[[T:.*]] = lamina.cast %t : (tensor<4x3xf16>) -> tensor<4x3xf32>
// CHECK-NEXT:    %l = lamina.reduce_mean %[[T]] {axes = array<i64: 0, 1>} : (tensor<4x3xf32>) -> tensor<f32>
// CHECK-NOT:     lamina.loss_seed
// CHECK:         lamina.mul %loss_scale, %{{.*}} : tensor<f32>
// CHECK:         %d_w = lamina.matmul %{{.*}}, %{{.*}} {lamina.gradient} : (tensor<8x4xf16>, tensor<4x3xf16>) -> tensor<8x3xf16>
// CHECK:         %[[G:.*]] = lamina.cast %d_w : (tensor<8x3xf16>) -> tensor<8x3xf32>
// CHECK:         %[[INV:.*]] = lamina.div %{{.*}}, %loss_scale : tensor<f32>
// CHECK-NEXT:    %[[U:.*]] = lamina.mul %[[G]], %[[INV]] : (tensor<8x3xf32>, tensor<f32>) -> tensor<8x3xf32>
// CHECK:         %new_w = lamina.sub %w, %{{.*}} : tensor<8x3xf32>
// CHECK:         %grads_finite = lamina.eq
// CHECK-NEXT:    %[[NW:.*]] = lamina.select %grads_finite, %new_w, %w
// CHECK:         %next_loss_scale = lamina.select %grads_finite
// CHECK:         %next_good_steps = lamina.select %grads_finite
// CHECK-NEXT:    func.return %[[NW]], %next_loss_scale, %next_good_steps, %l

// EXPLAIN: [mixed-precision] {{.*}}: @mlp_step: {{[0-9]+}} training op(s): {{.*}} in bf16, {{.*}} in f32; {{[0-9]+}} cast(s) inserted; training values {{[0-9]+}} bytes in f32, {{[0-9]+}} bytes mixed; optimizer ops left in f32
// EXPLAIN: [mixed-precision] {{.*}}: @mlp_step: no loss scaling
