// Type rules: operands and results are statically shaped tensors of f16, bf16, f32, f64, i1, i32
// or i64. Unsupported element types (on an operand or a result), dynamic and unranked shapes,
// and non-tensor types are rejected; a declared result type that is not the one the op's rule
// infers is rejected for every op family (see the per-family files for each op's own case).
// Non-tensor operands fail xDSL's operand constraint; its whole message, with the reason after
// 'does not verify:', is pinned.
// RUN: lamina-opt %s --split-input-file --verify-diagnostics

func.func @operand_i8(%x: tensor<4xi8>) -> tensor<4xi8> {
  // expected-error @+1:3 {{lamina.neg: unsupported element type i8 (use f16, bf16, f32, f64, i1, i32, i64)}}
  %0 = lamina.neg %x : tensor<4xi8>
  func.return %0 : tensor<4xi8>
}

// -----

func.func @operand_i16(%a: tensor<4xi16>, %b: tensor<4xi16>) -> tensor<4xi1> {
  // expected-error @+1:3 {{lamina.eq: unsupported element type i16 (use f16, bf16, f32, f64, i1, i32, i64)}}
  %0 = lamina.eq %a, %b : (tensor<4xi16>, tensor<4xi16>) -> tensor<4xi1>
  func.return %0 : tensor<4xi1>
}

// -----

func.func @operand_unsigned(%x: tensor<4xui32>) -> tensor<2x2xui32> {
  // expected-error @+1:3 {{lamina.reshape: unsupported element type ui32 (use f16, bf16, f32, f64, i1, i32, i64)}}
  %0 = lamina.reshape %x : (tensor<4xui32>) -> tensor<2x2xui32>
  func.return %0 : tensor<2x2xui32>
}

// -----

func.func @operand_signed(%x: tensor<4xsi64>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.cast: unsupported element type si64 (use f16, bf16, f32, f64, i1, i32, i64)}}
  %0 = lamina.cast %x : (tensor<4xsi64>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @operand_f80(%x: tensor<4xf80>) -> tensor<4xf80> {
  // expected-error @+1:3 {{lamina.exp: unsupported element type f80 (use f16, bf16, f32, f64, i1, i32, i64)}}
  %0 = lamina.exp %x : tensor<4xf80>
  func.return %0 : tensor<4xf80>
}

// -----

func.func @operand_complex(%x: tensor<4xcomplex<f32>>) -> tensor<4xcomplex<f32>> {
  // expected-error @+1:3 {{lamina.neg: unsupported element type complex<f32> (use f16, bf16, f32, f64, i1, i32, i64)}}
  %0 = lamina.neg %x : tensor<4xcomplex<f32>>
  func.return %0 : tensor<4xcomplex<f32>>
}

// -----

func.func @operand_index(%x: tensor<4xindex>) -> tensor<4xindex> {
  // expected-error @+1:3 {{lamina.transpose: unsupported element type index (use f16, bf16, f32, f64, i1, i32, i64)}}
  %0 = lamina.transpose %x {permutation = array<i64: 0>} : tensor<4xindex>
  func.return %0 : tensor<4xindex>
}

// -----

func.func @result_f8(%x: tensor<4xf32>) -> tensor<4xf8E4M3FN> {
  // expected-error @+1:3 {{lamina.cast: unsupported element type f8E4M3FN (use f16, bf16, f32, f64, i1, i32, i64)}}
  %0 = lamina.cast %x : (tensor<4xf32>) -> tensor<4xf8E4M3FN>
  func.return %0 : tensor<4xf8E4M3FN>
}

// -----

func.func @dynamic_operand(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1:3 {{lamina.relu: dynamic shapes are not supported: tensor<?x8xf32>}}
  %0 = lamina.relu %x : tensor<?x8xf32>
  func.return %0 : tensor<?x8xf32>
}

// -----

func.func @dynamic_result(%x: tensor<4x8xf32>) -> tensor<?xf32> {
  // expected-error @+1:3 {{lamina.reshape: dynamic shapes are not supported: tensor<?xf32>}}
  %0 = lamina.reshape %x : (tensor<4x8xf32>) -> tensor<?xf32>
  func.return %0 : tensor<?xf32>
}

// -----

func.func @unranked(%x: tensor<*xf32>) -> tensor<*xf32> {
  // expected-error @+1:3 {{lamina.abs: operand 'input' at position 0 does not verify: tensor<*xf32> should be of base attribute tensor}}
  %0 = lamina.abs %x : tensor<*xf32>
  func.return %0 : tensor<*xf32>
}

// -----

func.func @scalar_not_tensor(%x: f32) -> f32 {
  // expected-error @+1:3 {{lamina.exp: operand 'input' at position 0 does not verify: f32 should be of base attribute tensor}}
  %0 = lamina.exp %x : f32
  func.return %0 : f32
}

// -----

func.func @memref_not_tensor(%x: memref<4xf32>) -> memref<4xf32> {
  // expected-error @+1:3 {{lamina.exp: operand 'input' at position 0 does not verify: memref<4xf32> should be of base attribute tensor}}
  %0 = lamina.exp %x : memref<4xf32>
  func.return %0 : memref<4xf32>
}

// -----

func.func @vector_operand(%x: vector<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.add: operand 'lhs' at position 0 does not verify: vector<4xf32> should be of base attribute tensor}}
  %0 = lamina.add %x, %y : (vector<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// wrong result types, one per remaining family
func.func @result_rank0_expected(%x: tensor<4xf32>) -> tensor<1xf32> {
  // expected-error @+1:3 {{lamina.reduce_sum: result type tensor<1xf32> does not match the expected tensor<f32>}}
  %0 = lamina.reduce_sum %x {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<1xf32>
  func.return %0 : tensor<1xf32>
}

// -----

func.func @result_not_i1_select(%c: tensor<4xi1>, %a: tensor<4xi32>) -> tensor<4xi64> {
  // expected-error @+1:3 {{lamina.select: result type tensor<4xi64> does not match the expected tensor<4xi32>}}
  %0 = lamina.select %c, %a, %a : (tensor<4xi1>, tensor<4xi32>, tensor<4xi32>) -> tensor<4xi64>
  func.return %0 : tensor<4xi64>
}

// -----

func.func @result_dtype_dropout_seed(%x: tensor<4xbf16>, %s: tensor<i32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.dropout: result type tensor<4xf32> does not match the expected tensor<4xbf16>}}
  %0 = lamina.dropout %x seed %s {rate = 1.000000e-01 : f64} : (tensor<4xbf16>, tensor<i32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// the function's return must agree with the op's (valid) result type
func.func @return_mismatch(%x: tensor<4xf32>) -> tensor<4xf16> {
  %0 = lamina.exp %x : tensor<4xf32>
  // expected-error @+1:3 {{func.return: Expected arguments to have the same types as the function output types: expected [tensor<4xf16>], got [tensor<4xf32>]}}
  func.return %0 : tensor<4xf32>
}
