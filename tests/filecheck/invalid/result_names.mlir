// `lamina.name` (what a result is called, `lamina.ir.text.result_names`): a non-empty string.
// RUN: lamina-opt %s --split-input-file --verify-diagnostics

// expected-error @+1:1 {{func.func @f: result #0: attribute 'lamina.name' must be a non-empty string, got 3 : i64}}
func.func @f(%x: tensor<4xf32>) -> (tensor<4xf32> {lamina.name = 3 : i64}) {
  func.return %x : tensor<4xf32>
}

// -----

// expected-error @+1:1 {{func.func @f: result #1: attribute 'lamina.name' must be a non-empty string, got ""}}
func.func @f(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32> {lamina.name = ""}) {
  func.return %x, %x : tensor<4xf32>, tensor<4xf32>
}

// -----

// expected-error @+1:1 {{func.func @f: result #0: attribute 'lamina.name' must be a non-empty string, got ["y"]}}
func.func @f(%x: tensor<4xf32>) -> (tensor<4xf32> {lamina.name = ["y"]}) {
  func.return %x : tensor<4xf32>
}
