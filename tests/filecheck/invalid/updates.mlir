// `lamina.updates` (which result of a function replaces which argument, `lamina.ir.buffers.updates`): one
// entry per result, each -1 or an argument index, no argument replaced twice, and a result typed
// exactly like its argument (shape, element type, placement and tier).
// RUN: lamina-opt %s --split-input-file --verify-diagnostics

// expected-error @+1:1 {{func.func @s: lamina.updates has 1 entry for 2 results (one per result)}}
func.func @s(%x: tensor<4xf32>, %w: tensor<4xf32>) -> (tensor<4xf32>, tensor<f32>) attributes {lamina.updates = array<i64: 1>} {
  %l = lamina.reduce_sum %x {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  func.return %w, %l : tensor<4xf32>, tensor<f32>
}

// -----

// expected-error @+1:1 {{func.func @s: lamina.updates: result #0 names argument #2, which does not exist (2 arguments; -1 for a result that replaces none)}}
func.func @s(%x: tensor<4xf32>, %w: tensor<4xf32>) -> (tensor<4xf32>, tensor<f32>) attributes {lamina.updates = array<i64: 2, -1>} {
  %l = lamina.reduce_sum %x {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  func.return %w, %l : tensor<4xf32>, tensor<f32>
}

// -----

// expected-error @+1:1 {{func.func @s: lamina.updates: results #0 and #1 both update argument #1 (%w)}}
func.func @s(%x: tensor<4xf32>, %w: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) attributes {lamina.updates = array<i64: 1, 1>} {
  func.return %w, %x : tensor<4xf32>, tensor<4xf32>
}

// -----

// expected-error @+1:1 {{func.func @s: lamina.updates: result #0 updates argument #1 (%m) but has type tensor<4xf32>, not the argument's tensor<4xf32, #lamina.place<tier = host>>}}
func.func @s(%x: tensor<4xf32>, %m: tensor<4xf32, #lamina.place<tier = host>>) -> (tensor<4xf32>, tensor<4xf32, #lamina.place<tier = host>>) attributes {lamina.updates = array<i64: 1, -1>} {
  func.return %x, %m : tensor<4xf32>, tensor<4xf32, #lamina.place<tier = host>>
}

// -----

// expected-error @+1:1 {{func.func @s: attribute 'lamina.updates' must be an array<i64: ...> with one argument index (or -1) per result, got "w"}}
func.func @s(%x: tensor<4xf32>, %w: tensor<4xf32>) -> tensor<4xf32> attributes {lamina.updates = "w"} {
  func.return %w : tensor<4xf32>
}

// -----

// expected-error @+1:1 {{func.func @s: attribute 'lamina.updates' must be an array<i64: ...> with one argument index (or -1) per result, got 0 : i64}}
func.func @s(%w: tensor<4xf32>) -> tensor<4xf32> attributes {lamina.updates = 0 : i64} {
  func.return %w : tensor<4xf32>
}
