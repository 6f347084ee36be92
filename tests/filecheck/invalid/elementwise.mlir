// Verifier rules of the elementwise ops (unary, binary, compare, select, cast): every ShapeError of
// lamina.ir.core.shapes.unary/binary/compare/select/cast and the declared-result check, one chunk each.
// RUN: lamina-opt %s --split-input-file --verify-diagnostics

// unary ops need a float operand
func.func @unary_int(%x: tensor<4xi32>) -> tensor<4xi32> {
  // expected-error @+1:3 {{lamina.exp: operand must have a float element type, got i32}}
  %0 = lamina.exp %x : tensor<4xi32>
  func.return %0 : tensor<4xi32>
}

// -----

func.func @unary_i1(%x: tensor<4xi1>) -> tensor<4xi1> {
  // expected-error @+1:3 {{lamina.relu: operand must have a float element type, got i1}}
  %0 = lamina.relu %x : tensor<4xi1>
  func.return %0 : tensor<4xi1>
}

// -----

// unary result must equal the operand type
func.func @unary_result_shape(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @+1:3 {{lamina.tanh: result type tensor<8x4xf32> does not match the expected tensor<4x8xf32>}}
  %0 = lamina.tanh %x : (tensor<4x8xf32>) -> tensor<8x4xf32>
  func.return %0 : tensor<8x4xf32>
}

// -----

func.func @unary_result_dtype(%x: tensor<4xf32>) -> tensor<4xf16> {
  // expected-error @+1:3 {{lamina.neg: result type tensor<4xf16> does not match the expected tensor<4xf32>}}
  %0 = lamina.neg %x : (tensor<4xf32>) -> tensor<4xf16>
  func.return %0 : tensor<4xf16>
}

// -----

// binary ops broadcast like NumPy
func.func @binary_no_broadcast(%a: tensor<4x8xf32>, %b: tensor<3xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.add: operand shapes (4, 8), (3,) do not broadcast}}
  %0 = lamina.add %a, %b : (tensor<4x8xf32>, tensor<3xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @binary_no_broadcast_inner(%a: tensor<2x3x4xf32>, %b: tensor<5x1xf32>) -> tensor<2x5x4xf32> {
  // expected-error @+1:3 {{lamina.mul: operand shapes (2, 3, 4), (5, 1) do not broadcast}}
  %0 = lamina.mul %a, %b : (tensor<2x3x4xf32>, tensor<5x1xf32>) -> tensor<2x5x4xf32>
  func.return %0 : tensor<2x5x4xf32>
}

// -----

func.func @binary_int(%a: tensor<4xi64>, %b: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error @+1:3 {{lamina.div: operand must have a float element type, got i64}}
  %0 = lamina.div %a, %b : tensor<4xi64>
  func.return %0 : tensor<4xi64>
}

// -----

func.func @binary_bool(%a: tensor<4xi1>, %b: tensor<4xi1>) -> tensor<4xi1> {
  // expected-error @+1:3 {{lamina.sub: operand must have a numeric element type (a float, i32 or i64), got i1}}
  %0 = lamina.sub %a, %b : tensor<4xi1>
  func.return %0 : tensor<4xi1>
}

// -----

func.func @binary_mixed_dtypes(%a: tensor<4xf32>, %b: tensor<4xf16>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.div: operands must share one element type, got f32, f16}}
  %0 = lamina.div %a, %b : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @binary_float_int(%a: tensor<4xf32>, %b: tensor<4xi32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.pow: operands must share one element type, got f32, i32}}
  %0 = lamina.pow %a, %b : (tensor<4xf32>, tensor<4xi32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// the declared result must be the broadcast shape (not a larger one)
func.func @binary_result_shape(%a: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<2x4x8xf32> {
  // expected-error @+1:3 {{lamina.max: result type tensor<2x4x8xf32> does not match the expected tensor<4x8xf32>}}
  %0 = lamina.max %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  func.return %0 : tensor<2x4x8xf32>
}

// -----

func.func @binary_result_dtype(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf64> {
  // expected-error @+1:3 {{lamina.min: result type tensor<4xf64> does not match the expected tensor<4xf32>}}
  %0 = lamina.min %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf64>
  func.return %0 : tensor<4xf64>
}

// -----

// compare: operands share an element type, shapes broadcast, result is i1
func.func @compare_mixed_dtypes(%a: tensor<4xf32>, %b: tensor<4xi32>) -> tensor<4xi1> {
  // expected-error @+1:3 {{lamina.lt: operands must share one element type, got f32, i32}}
  %0 = lamina.lt %a, %b : (tensor<4xf32>, tensor<4xi32>) -> tensor<4xi1>
  func.return %0 : tensor<4xi1>
}

// -----

func.func @compare_no_broadcast(%a: tensor<4xf32>, %b: tensor<5xf32>) -> tensor<4xi1> {
  // expected-error @+1:3 {{lamina.eq: operand shapes (4,), (5,) do not broadcast}}
  %0 = lamina.eq %a, %b : (tensor<4xf32>, tensor<5xf32>) -> tensor<4xi1>
  func.return %0 : tensor<4xi1>
}

// -----

func.func @compare_result_not_i1(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.ge: result type tensor<4xf32> does not match the expected tensor<4xi1>}}
  %0 = lamina.ge %a, %b : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// select: condition is i1, all three broadcast, the two values share an element type
func.func @select_cond_not_i1(%c: tensor<4xf32>, %a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.select: condition must have element type i1, got f32}}
  %0 = lamina.select %c, %a, %b : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @select_no_broadcast(%c: tensor<3xi1>, %a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.select: operand shapes (3,), (4,), (4,) do not broadcast}}
  %0 = lamina.select %c, %a, %b : (tensor<3xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @select_mixed_dtypes(%c: tensor<4xi1>, %a: tensor<4xf32>, %b: tensor<4xbf16>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.select: operands must share one element type, got f32, bf16}}
  %0 = lamina.select %c, %a, %b : (tensor<4xi1>, tensor<4xf32>, tensor<4xbf16>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @select_result_shape(%c: tensor<4x1xi1>, %a: tensor<4xf32>, %b: tensor<f32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.select: result type tensor<4xf32> does not match the expected tensor<4x4xf32>}}
  %0 = lamina.select %c, %a, %b : (tensor<4x1xi1>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// cast keeps the shape; only the element type changes
func.func @cast_shape(%x: tensor<4x8xf32>) -> tensor<32xf16> {
  // expected-error @+1:3 {{lamina.cast: result type tensor<32xf16> does not match the expected tensor<4x8xf16>}}
  %0 = lamina.cast %x : (tensor<4x8xf32>) -> tensor<32xf16>
  func.return %0 : tensor<32xf16>
}

// -----

func.func @cast_unsupported_target(%x: tensor<4xf32>) -> tensor<4xi8> {
  // expected-error @+1:3 {{lamina.cast: unsupported element type i8 (use f16, bf16, f32, f64, i1, i32, i64)}}
  %0 = lamina.cast %x : (tensor<4xf32>) -> tensor<4xi8>
  func.return %0 : tensor<4xi8>
}
