// Verifier and parser rules of dropout (rate range, exactly one seed, seed operand type, float
// input) and constant (dense literal required, declared type must be the literal's).
// RUN: lamina-opt %s --split-input-file --verify-diagnostics

func.func @dropout_int(%x: tensor<4xi32>) -> tensor<4xi32> {
  // expected-error @+1:3 {{lamina.dropout: operand must have a float element type, got i32}}
  %0 = lamina.dropout %x {rate = 1.000000e-01 : f64, seed = 1 : i64} : tensor<4xi32>
  func.return %0 : tensor<4xi32>
}

// -----

func.func @dropout_rate_one(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.dropout: rate must be in [0, 1), got 1.0}}
  %0 = lamina.dropout %x {rate = 1.000000e+00 : f64, seed = 1 : i64} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @dropout_rate_negative(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.dropout: rate must be in [0, 1), got -0.1}}
  %0 = lamina.dropout %x {rate = -1.000000e-01 : f64, seed = 1 : i64} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @dropout_two_seeds(%x: tensor<4xf32>, %s: tensor<i64>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.dropout: seed is given both as an attribute and as an operand}}
  %0 = lamina.dropout %x seed %s {rate = 1.000000e-01 : f64, seed = 1 : i64} : (tensor<4xf32>, tensor<i64>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @dropout_no_seed(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.dropout: needs a seed: a 'seed' attribute or a seed operand}}
  %0 = lamina.dropout %x {rate = 1.000000e-01 : f64} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @dropout_seed_not_scalar(%x: tensor<4xf32>, %s: tensor<1xi64>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.dropout: seed operand must be a rank-0 i32 or i64 tensor, got tensor<1xi64>}}
  %0 = lamina.dropout %x seed %s {rate = 1.000000e-01 : f64} : (tensor<4xf32>, tensor<1xi64>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @dropout_seed_float(%x: tensor<4xf32>, %s: tensor<f32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.dropout: seed operand must be a rank-0 i32 or i64 tensor, got tensor<f32>}}
  %0 = lamina.dropout %x seed %s {rate = 1.000000e-01 : f64} : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @dropout_seed_i1(%x: tensor<4xf32>, %s: tensor<i1>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.dropout: seed operand must be a rank-0 i32 or i64 tensor, got tensor<i1>}}
  %0 = lamina.dropout %x seed %s {rate = 1.000000e-01 : f64} : (tensor<4xf32>, tensor<i1>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @dropout_no_rate(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.dropout: missing required attribute 'rate'}}
  %0 = lamina.dropout %x {seed = 1 : i64} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @dropout_result(%x: tensor<4xf32>) -> tensor<4xf16> {
  // expected-error @+1:3 {{lamina.dropout: result type tensor<4xf16> does not match the expected tensor<4xf32>}}
  %0 = lamina.dropout %x {rate = 1.000000e-01 : f64, seed = 1 : i64} : (tensor<4xf32>) -> tensor<4xf16>
  func.return %0 : tensor<4xf16>
}

// -----

// a constant's value must be a dense literal; the error points at the literal.
func.func @constant_not_dense() -> tensor<f32> {
  // expected-error @+1:24 {{lamina.constant expects a dense<...> literal, got 1.000000e+00 : f32}}
  %0 = lamina.constant 1.000000e+00 : f32
  func.return %0 : tensor<f32>
}

// -----

func.func @constant_bad_literal() -> tensor<2xf32> {
  // expected-error @+2:3 {{Shape mismatch in dense literal. Expected [2] shape from the type, but got [3] shape.}}
  %0 = lamina.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00]> : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @constant_unsupported_type() -> tensor<2xi8> {
  // expected-error @+1:3 {{lamina.constant: unsupported element type i8 (use f16, bf16, f32, f64, i1, i32, i64)}}
  %0 = lamina.constant dense<1> : tensor<2xi8>
  func.return %0 : tensor<2xi8>
}

// -----

// generic form: the result type must be the literal's type
func.func @constant_generic_result() -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.constant: result type tensor<4xf32> does not match the expected tensor<2xf32>}}
  %0 = "lamina.constant"() <{value = dense<1.000000e+00> : tensor<2xf32>}> : () -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @constant_generic_missing_value() -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.constant: missing required attribute 'value'}}
  %0 = "lamina.constant"() : () -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @constant_generic_not_dense() -> tensor<f32> {
  // expected-error @+1:3 {{lamina.constant: attribute 'value' must be a dense<...> tensor literal of a supported element type, got 1.000000e+00 : f32}}
  %0 = "lamina.constant"() <{value = 1.000000e+00 : f32}> : () -> tensor<f32>
  func.return %0 : tensor<f32>
}
