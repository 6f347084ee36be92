// Verifier rules of matmul and the layout ops (transpose, reshape, broadcast_in_dim, slice,
// concat): every ShapeError of lamina.ir.core.shapes.matmul/transpose/reshape/broadcast_in_dim/slice_/
// concat plus the declared-result check.
// RUN: lamina-opt %s --split-input-file --verify-diagnostics

func.func @matmul_int(%a: tensor<2x3xi32>, %b: tensor<3x4xi32>) -> tensor<2x4xi32> {
  // expected-error @+1:3 {{lamina.matmul: lhs must have a float element type, got i32}}
  %0 = lamina.matmul %a, %b : (tensor<2x3xi32>, tensor<3x4xi32>) -> tensor<2x4xi32>
  func.return %0 : tensor<2x4xi32>
}

// -----

func.func @matmul_mixed_dtypes(%a: tensor<2x3xf32>, %b: tensor<3x4xf16>) -> tensor<2x4xf32> {
  // expected-error @+1:3 {{lamina.matmul: operands must share one element type, got f32, f16}}
  %0 = lamina.matmul %a, %b : (tensor<2x3xf32>, tensor<3x4xf16>) -> tensor<2x4xf32>
  func.return %0 : tensor<2x4xf32>
}

// -----

func.func @matmul_rank1(%a: tensor<3xf32>, %b: tensor<3x4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.matmul: operands must have rank >= 2, got ranks 1 and 2}}
  %0 = lamina.matmul %a, %b : (tensor<3xf32>, tensor<3x4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @matmul_contracting(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) -> tensor<2x5xf32> {
  // expected-error @+1:3 {{lamina.matmul: contracting dimensions differ: lhs (2, 3) has 3, rhs (4, 5) has 4}}
  %0 = lamina.matmul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  func.return %0 : tensor<2x5xf32>
}

// -----

func.func @matmul_batch(%a: tensor<2x4x3xf32>, %b: tensor<5x3x4xf32>) -> tensor<2x4x4xf32> {
  // expected-error @+1:3 {{lamina.matmul: operand shapes (2,), (5,) do not broadcast}}
  %0 = lamina.matmul %a, %b : (tensor<2x4x3xf32>, tensor<5x3x4xf32>) -> tensor<2x4x4xf32>
  func.return %0 : tensor<2x4x4xf32>
}

// -----

func.func @matmul_result(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> tensor<4x2xf32> {
  // expected-error @+1:3 {{lamina.matmul: result type tensor<4x2xf32> does not match the expected tensor<2x4xf32>}}
  %0 = lamina.matmul %a, %b : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<4x2xf32>
  func.return %0 : tensor<4x2xf32>
}

// -----

func.func @transpose_repeat(%x: tensor<2x3xf32>) -> tensor<2x2xf32> {
  // expected-error @+1:3 {{lamina.transpose: permutation [0, 0] is not a permutation of 0..1}}
  %0 = lamina.transpose %x {permutation = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  func.return %0 : tensor<2x2xf32>
}

// -----

func.func @transpose_length(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  // expected-error @+1:3 {{lamina.transpose: permutation [1, 0, 2] is not a permutation of 0..1}}
  %0 = lamina.transpose %x {permutation = array<i64: 1, 0, 2>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return %0 : tensor<3x2xf32>
}

// -----

func.func @transpose_result(%x: tensor<2x3x4xf32>) -> tensor<4x3x2xf32> {
  // expected-error @+1:3 {{lamina.transpose: result type tensor<4x3x2xf32> does not match the expected tensor<4x2x3xf32>}}
  %0 = lamina.transpose %x {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x3x2xf32>
  func.return %0 : tensor<4x3x2xf32>
}

// -----

func.func @transpose_missing_permutation(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  // expected-error @+1:3 {{lamina.transpose: missing required attribute 'permutation'}}
  %0 = lamina.transpose %x : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return %0 : tensor<3x2xf32>
}

// -----

func.func @reshape_count(%x: tensor<4x8xf32>) -> tensor<5x6xf32> {
  // expected-error @+1:3 {{lamina.reshape: cannot reshape tensor<4x8xf32> (32 elements) to tensor<5x6xf32> (30 elements)}}
  %0 = lamina.reshape %x : (tensor<4x8xf32>) -> tensor<5x6xf32>
  func.return %0 : tensor<5x6xf32>
}

// -----

func.func @reshape_dtype(%x: tensor<4x8xf32>) -> tensor<32xf16> {
  // expected-error @+1:3 {{lamina.reshape: result type tensor<32xf16> does not match the expected tensor<32xf32>}}
  %0 = lamina.reshape %x : (tensor<4x8xf32>) -> tensor<32xf16>
  func.return %0 : tensor<32xf16>
}

// -----

func.func @bid_length(%x: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.broadcast_in_dim: broadcast_dimensions has 2 entries, operand has rank 1}}
  %0 = lamina.broadcast_in_dim %x {broadcast_dimensions = array<i64: 0, 1>} : (tensor<8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @bid_repeat(%x: tensor<4x4xf32>) -> tensor<4x4x4xf32> {
  // expected-error @+1:3 {{lamina.broadcast_in_dim: broadcast_dimensions [1, 1] repeat a dimension}}
  %0 = lamina.broadcast_in_dim %x {broadcast_dimensions = array<i64: 1, 1>} : (tensor<4x4xf32>) -> tensor<4x4x4xf32>
  func.return %0 : tensor<4x4x4xf32>
}

// -----

func.func @bid_out_of_range(%x: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.broadcast_in_dim: broadcast dimension 2 is out of range for result rank 2}}
  %0 = lamina.broadcast_in_dim %x {broadcast_dimensions = array<i64: 2>} : (tensor<8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @bid_negative(%x: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.broadcast_in_dim: broadcast dimension -1 is out of range for result rank 2}}
  %0 = lamina.broadcast_in_dim %x {broadcast_dimensions = array<i64: -1>} : (tensor<8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @bid_size(%x: tensor<3xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.broadcast_in_dim: operand dimension 0 of size 3 cannot broadcast to result dimension 1 of size 8}}
  %0 = lamina.broadcast_in_dim %x {broadcast_dimensions = array<i64: 1>} : (tensor<3xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @bid_dtype(%x: tensor<8xf32>) -> tensor<4x8xf64> {
  // expected-error @+1:3 {{lamina.broadcast_in_dim: result type tensor<4x8xf64> does not match the expected tensor<4x8xf32>}}
  %0 = lamina.broadcast_in_dim %x {broadcast_dimensions = array<i64: 1>} : (tensor<8xf32>) -> tensor<4x8xf64>
  func.return %0 : tensor<4x8xf64>
}

// -----

func.func @slice_start_length(%x: tensor<8x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.slice: start has 1 entries, operand has rank 2}}
  %0 = lamina.slice %x {start = array<i64: 2>, limit = array<i64: 6, 8>} : (tensor<8x8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @slice_limit_length(%x: tensor<8x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.slice: limit has 3 entries, operand has rank 2}}
  %0 = lamina.slice %x {start = array<i64: 2, 0>, limit = array<i64: 6, 8, 1>} : (tensor<8x8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @slice_strides_length(%x: tensor<8x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.slice: strides has 1 entries, operand has rank 2}}
  %0 = lamina.slice %x {start = array<i64: 2, 0>, limit = array<i64: 6, 8>, strides = array<i64: 1>} : (tensor<8x8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @slice_zero_stride(%x: tensor<8x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.slice: stride 0 in dimension 1 must be >= 1}}
  %0 = lamina.slice %x {start = array<i64: 2, 0>, limit = array<i64: 6, 8>, strides = array<i64: 1, 0>} : (tensor<8x8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @slice_past_end(%x: tensor<8x8xf32>) -> tensor<7x8xf32> {
  // expected-error @+1:3 {{lamina.slice: slice [2, 9) of dimension 0 is out of bounds for size 8}}
  %0 = lamina.slice %x {start = array<i64: 2, 0>, limit = array<i64: 9, 8>} : (tensor<8x8xf32>) -> tensor<7x8xf32>
  func.return %0 : tensor<7x8xf32>
}

// -----

func.func @slice_start_after_limit(%x: tensor<8x8xf32>) -> tensor<0x8xf32> {
  // expected-error @+1:3 {{lamina.slice: slice [5, 4) of dimension 1 is out of bounds for size 8}}
  %0 = lamina.slice %x {start = array<i64: 0, 5>, limit = array<i64: 0, 4>} : (tensor<8x8xf32>) -> tensor<0x8xf32>
  func.return %0 : tensor<0x8xf32>
}

// -----

func.func @slice_negative_start(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1:3 {{lamina.slice: slice [-1, 7) of dimension 0 is out of bounds for size 8}}
  %0 = lamina.slice %x {start = array<i64: -1, 0>, limit = array<i64: 7, 8>} : tensor<8x8xf32>
  func.return %0 : tensor<8x8xf32>
}

// -----

// (6 - 1) / 2 rounds up: 3 rows
func.func @slice_result(%x: tensor<8x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+1:3 {{lamina.slice: result type tensor<2x8xf32> does not match the expected tensor<3x8xf32>}}
  %0 = lamina.slice %x {start = array<i64: 1, 0>, limit = array<i64: 6, 8>, strides = array<i64: 2, 1>} : (tensor<8x8xf32>) -> tensor<2x8xf32>
  func.return %0 : tensor<2x8xf32>
}

// -----

func.func @slice_missing_limit(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1:3 {{lamina.slice: missing required attribute 'limit'}}
  %0 = lamina.slice %x {start = array<i64: 0, 0>} : tensor<8x8xf32>
  func.return %0 : tensor<8x8xf32>
}

// -----

func.func @concat_empty() -> tensor<0xf32> {
  // expected-error @+1:3 {{lamina.concat: needs at least one operand}}
  %0 = lamina.concat {dim = 0 : i64} : () -> tensor<0xf32>
  func.return %0 : tensor<0xf32>
}

// -----

func.func @concat_rank0(%a: tensor<f32>) -> tensor<f32> {
  // expected-error @+1:3 {{lamina.concat: operands must have rank >= 1}}
  %0 = lamina.concat %a, %a {dim = 0 : i64} : (tensor<f32>, tensor<f32>) -> tensor<f32>
  func.return %0 : tensor<f32>
}

// -----

func.func @concat_ranks(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<3x3xf32> {
  // expected-error @+1:3 {{lamina.concat: operands must share one rank, got [2, 1]}}
  %0 = lamina.concat %a, %b {dim = 0 : i64} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3x3xf32>
  func.return %0 : tensor<3x3xf32>
}

// -----

func.func @concat_other_dims(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) -> tensor<4x3xf32> {
  // expected-error @+1:3 {{lamina.concat: operand shapes (2, 3) and (2, 4) differ outside dim 0}}
  %0 = lamina.concat %a, %b {dim = 0 : i64} : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<4x3xf32>
  func.return %0 : tensor<4x3xf32>
}

// -----

func.func @concat_dim(%a: tensor<2x3xf32>) -> tensor<4x3xf32> {
  // expected-error @+1:3 {{lamina.concat: dim 2 is out of range for rank 2}}
  %0 = lamina.concat %a, %a {dim = 2 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  func.return %0 : tensor<4x3xf32>
}

// -----

func.func @concat_dtypes(%a: tensor<2x3xf32>, %b: tensor<2x3xf16>) -> tensor<4x3xf32> {
  // expected-error @+1:3 {{lamina.concat: operands must share one element type, got f32, f16}}
  %0 = lamina.concat %a, %b {dim = 0 : i64} : (tensor<2x3xf32>, tensor<2x3xf16>) -> tensor<4x3xf32>
  func.return %0 : tensor<4x3xf32>
}

// -----

func.func @concat_result(%a: tensor<2x3xf32>) -> tensor<2x6xf32> {
  // expected-error @+1:3 {{lamina.concat: result type tensor<2x6xf32> does not match the expected tensor<4x3xf32>}}
  %0 = lamina.concat %a, %a {dim = 0 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x6xf32>
  func.return %0 : tensor<2x6xf32>
}

// -----

func.func @concat_missing_dim(%a: tensor<2x3xf32>) -> tensor<4x3xf32> {
  // expected-error @+1:3 {{lamina.concat: missing required attribute 'dim'}}
  %0 = lamina.concat %a, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  func.return %0 : tensor<4x3xf32>
}
