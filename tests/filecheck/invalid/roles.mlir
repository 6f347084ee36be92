// `lamina.role` (what an argument holds, `lamina.ir.buffers.updates.ROLES`): a role is one of the table's
// strings, and `arg_attrs` holds one dictionary per argument (MLIR's rule).
// RUN: lamina-opt %s --split-input-file --verify-diagnostics

// expected-error @+1:1 {{func.func @s: argument #1 (%v): attribute 'lamina.role' must be a role, one of "parameter", "first_moment", "second_moment", "step_count", "momentum_buffer", "learning_rate", "loss_scale", "good_steps", "frozen", got "variance"}}
func.func @s(%x: tensor<4xf32>, %v: tensor<4xf32> {lamina.role = "variance"}) -> tensor<4xf32> {
  func.return %v : tensor<4xf32>
}

// -----

// expected-error @+1:1 {{func.func @s: argument #0 (%step): attribute 'lamina.role' must be a role, one of "parameter", "first_moment", "second_moment", "step_count", "momentum_buffer", "learning_rate", "loss_scale", "good_steps", "frozen", got 1 : i64}}
func.func @s(%step: tensor<f32> {lamina.role = 1 : i64}) -> tensor<f32> {
  func.return %step : tensor<f32>
}

// -----

"builtin.module"() ({
  // expected-error @+1:3 {{func.func @s: arg_attrs has 1 entry for 2 arguments (one per argument)}}
  "func.func"() <{sym_name = "s", function_type = (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>, arg_attrs = [{lamina.role = "parameter"}]}> ({
  ^bb0(%x: tensor<4xf32>, %w: tensor<4xf32>):
    "func.return"(%w) : (tensor<4xf32>) -> ()
  }) : () -> ()
}) : () -> ()

// -----

// expected-error @+1:1 {{func.func @s: argument #0 (%w): attribute 'lamina.role' must be a role, one of "parameter", "first_moment", "second_moment", "step_count", "momentum_buffer", "learning_rate", "loss_scale", "good_steps", "frozen", got ["parameter"]}}
func.func @s(%w: tensor<f32> {lamina.role = ["parameter"]}) -> tensor<f32> {
  func.return %w : tensor<f32>
}
