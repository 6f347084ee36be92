// An argument with role `frozen` (model state that is read, never trained: the torch importer's
// buffers, such as a rotary table's inv_freq) is left out of derive-backward's default wrt:
// @f_grad returns no gradient for it and keeps its role; @f_step gives it no moments, no result
// replaces it (lamina.updates) and it keeps its role. Named in wrt=, it is differentiated all the
// same (the user's request). The role reads back through the generic form.
// RUN: lamina-opt %s -p 'derive-backward{data=x}' | filecheck %s --check-prefix=GRAD
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer' | filecheck %s
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer' --print-op-generic | lamina-opt | filecheck %s
// RUN: lamina-opt %s -p 'derive-backward{data=x wrt=w,s}' | filecheck %s --check-prefix=WRT

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>, %s: tensor<2xf32> {lamina.role = "frozen"}) -> tensor<f32> {
  %h = lamina.matmul %x, %w : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %sb = lamina.broadcast_in_dim %s {broadcast_dimensions = array<i64: 1>} : (tensor<2xf32>) -> tensor<4x2xf32>
  %p = lamina.mul %h, %sb : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>
  %l = lamina.reduce_mean %p {axes = array<i64: 0, 1>} : (tensor<4x2xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}

// GRAD-LABEL: func.func @f_grad(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>, %s: tensor<2xf32> {lamina.role = "frozen"}) -> (tensor<f32>, tensor<8x2xf32>) attributes {lamina.gradients = array<i64: 1>} {

// CHECK-LABEL: func.func @f_step(%x: tensor<4x8xf32>, %w: tensor<8x2xf32> {lamina.role = "parameter"}, %s: tensor<2xf32> {lamina.role = "frozen"}, %m_w: tensor<8x2xf32> {lamina.role = "first_moment"}, %v_w: tensor<8x2xf32> {lamina.role = "second_moment"}, %step: tensor<f32> {lamina.role = "step_count"}) -> (tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2xf32>, tensor<f32>, tensor<f32>) attributes {lamina.updates = array<i64: 1, 3, 4, 5, -1>} {

// WRT-LABEL: func.func @f_grad(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>, %s: tensor<2xf32> {lamina.role = "frozen"}) -> (tensor<f32>, tensor<8x2xf32>, tensor<2xf32>) attributes {lamina.gradients = array<i64: 1, 2>} {
