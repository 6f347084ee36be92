// `lamina.gradients` (which argument each gradient result of `@NAME_grad` differentiates,
// `lamina.ir.buffers.updates`): an i64 array with one distinct argument index per result after
// the loss. Checked at load, so a hand-edited one is a diagnostic here and not an index error
// inside append-optimizer.
// RUN: lamina-opt %s --split-input-file --verify-diagnostics

// expected-error @+1:1 {{func.func @g: attribute 'lamina.gradients' has 2 entries for 1 gradient results (the results after the loss)}}
func.func @g(%x: tensor<4xf32>, %w: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>) attributes {lamina.gradients = array<i64: 1, 0>} {
  %l = lamina.reduce_sum %x {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  func.return %l, %w : tensor<f32>, tensor<4xf32>
}

// -----

// expected-error @+1:1 {{func.func @g: attribute 'lamina.gradients': result #1 names argument #5, which does not exist (2 arguments)}}
func.func @g(%x: tensor<4xf32>, %w: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>) attributes {lamina.gradients = array<i64: 5>} {
  %l = lamina.reduce_sum %x {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  func.return %l, %w : tensor<f32>, tensor<4xf32>
}

// -----

// expected-error @+1:1 {{func.func @g: attribute 'lamina.gradients': results #1 and #2 are both the gradient of argument #1 (%w)}}
func.func @g(%x: tensor<4xf32>, %w: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>, tensor<4xf32>) attributes {lamina.gradients = array<i64: 1, 1>} {
  %l = lamina.reduce_sum %x {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  func.return %l, %w, %w : tensor<f32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// expected-error @+1:1 {{func.func @g: attribute 'lamina.gradients' must be an array<i64: ...> of argument indices, got "w"}}
func.func @g(%x: tensor<4xf32>, %w: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>) attributes {lamina.gradients = "w"} {
  %l = lamina.reduce_sum %x {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  func.return %l, %w : tensor<f32>, tensor<4xf32>
}

