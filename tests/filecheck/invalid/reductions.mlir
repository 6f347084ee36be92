// Verifier rules of reduce_sum/mean/max, layernorm, rmsnorm and softmax: every ShapeError of
// lamina.ir.core.shapes.reduce/normalization/softmax plus the declared-result check.
// RUN: lamina-opt %s --split-input-file --verify-diagnostics

func.func @reduce_int(%x: tensor<4x8xi32>) -> tensor<4xi32> {
  // expected-error @+1:3 {{lamina.reduce_sum: operand must have a float element type, got i32}}
  %0 = lamina.reduce_sum %x {axes = array<i64: 1>} : (tensor<4x8xi32>) -> tensor<4xi32>
  func.return %0 : tensor<4xi32>
}

// -----

func.func @reduce_axis_out_of_range(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.reduce_mean: reduction axis 2 is out of range for rank 2}}
  %0 = lamina.reduce_mean %x {axes = array<i64: 2>} : (tensor<4x8xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @reduce_negative_axis_out_of_range(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.reduce_max: reduction axis -3 is out of range for rank 2}}
  %0 = lamina.reduce_max %x {axes = array<i64: -3>} : (tensor<4x8xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @reduce_repeated_axis(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.reduce_sum: reduction axes [1, -1] repeat an axis}}
  %0 = lamina.reduce_sum %x {axes = array<i64: 1, -1>} : (tensor<4x8xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @reduce_no_axes(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.reduce_sum: needs at least one reduction axis}}
  %0 = lamina.reduce_sum %x {axes = array<i64>} : tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @reduce_missing_axes(%x: tensor<4x8xf32>) -> tensor<f32> {
  // expected-error @+1:3 {{lamina.reduce_sum: missing required attribute 'axes'}}
  %0 = lamina.reduce_sum %x : (tensor<4x8xf32>) -> tensor<f32>
  func.return %0 : tensor<f32>
}

// -----

// keepdims = true keeps the reduced dim as size 1
func.func @reduce_result_keepdims(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.reduce_sum: result type tensor<4xf32> does not match the expected tensor<4x1xf32>}}
  %0 = lamina.reduce_sum %x {axes = array<i64: 1>, keepdims = true} : (tensor<4x8xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @reduce_result_dropped(%x: tensor<4x8xf32>) -> tensor<4x1xf32> {
  // expected-error @+1:3 {{lamina.reduce_mean: result type tensor<4x1xf32> does not match the expected tensor<4xf32>}}
  %0 = lamina.reduce_mean %x {axes = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  func.return %0 : tensor<4x1xf32>
}

// -----

func.func @layernorm_int(%x: tensor<4x8xi32>) -> tensor<4x8xi32> {
  // expected-error @+1:3 {{lamina.layernorm: operand must have a float element type, got i32}}
  %0 = lamina.layernorm %x : tensor<4x8xi32>
  func.return %0 : tensor<4x8xi32>
}

// -----

func.func @layernorm_rank0(%x: tensor<f32>) -> tensor<f32> {
  // expected-error @+1:3 {{lamina.layernorm: operand must have rank >= 1}}
  %0 = lamina.layernorm %x : tensor<f32>
  func.return %0 : tensor<f32>
}

// -----

func.func @layernorm_axis(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.layernorm: axis 2 is out of range for rank 2}}
  %0 = lamina.layernorm %x {axis = 2 : i64} : tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @layernorm_negative_eps(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.layernorm: eps must be >= 0, got -1e-05}}
  %0 = lamina.layernorm %x {eps = -1.000000e-05 : f64} : tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @layernorm_scale_dtype(%x: tensor<4x8xf32>, %g: tensor<8xf16>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.layernorm: scale element type f16 differs from operand's f32}}
  %0 = lamina.layernorm %x scale %g : (tensor<4x8xf32>, tensor<8xf16>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @layernorm_scale_shape(%x: tensor<4x8xf32>, %g: tensor<4xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.layernorm: scale shape (4,) must equal the normalized shape (8,)}}
  %0 = lamina.layernorm %x scale %g : (tensor<4x8xf32>, tensor<4xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

// scale must not broadcast: it has exactly the normalized shape
func.func @layernorm_scale_broadcast(%x: tensor<4x8xf32>, %g: tensor<1x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.layernorm: scale shape (1, 8) must equal the normalized shape (8,)}}
  %0 = lamina.layernorm %x scale %g : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @layernorm_bias_dtype(%x: tensor<4x8xf32>, %b: tensor<8xf64>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.layernorm: bias element type f64 differs from operand's f32}}
  %0 = lamina.layernorm %x bias %b : (tensor<4x8xf32>, tensor<8xf64>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

// with axis = 0 the normalized shape is the whole operand shape
func.func @layernorm_bias_shape(%x: tensor<4x8xf32>, %g: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.layernorm: bias shape (8,) must equal the normalized shape (4, 8)}}
  %0 = lamina.layernorm %x scale %g bias %b {axis = 0 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @layernorm_result(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.layernorm: result type tensor<4xf32> does not match the expected tensor<4x8xf32>}}
  %0 = lamina.layernorm %x : (tensor<4x8xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @rmsnorm_int(%x: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error @+1:3 {{lamina.rmsnorm: operand must have a float element type, got i64}}
  %0 = lamina.rmsnorm %x : tensor<4xi64>
  func.return %0 : tensor<4xi64>
}

// -----

func.func @rmsnorm_rank0(%x: tensor<f16>) -> tensor<f16> {
  // expected-error @+1:3 {{lamina.rmsnorm: operand must have rank >= 1}}
  %0 = lamina.rmsnorm %x : tensor<f16>
  func.return %0 : tensor<f16>
}

// -----

func.func @rmsnorm_axis(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.rmsnorm: axis -3 is out of range for rank 2}}
  %0 = lamina.rmsnorm %x {axis = -3 : i64} : tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @rmsnorm_negative_eps(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.rmsnorm: eps must be >= 0, got -1.0}}
  %0 = lamina.rmsnorm %x {eps = -1.000000e+00 : f64} : tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @rmsnorm_scale_shape(%x: tensor<4x8xf32>, %g: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.rmsnorm: scale shape (4, 8) must equal the normalized shape (8,)}}
  %0 = lamina.rmsnorm %x scale %g : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @rmsnorm_scale_dtype(%x: tensor<4x8xbf16>, %g: tensor<8xf32>) -> tensor<4x8xbf16> {
  // expected-error @+1:3 {{lamina.rmsnorm: scale element type f32 differs from operand's bf16}}
  %0 = lamina.rmsnorm %x scale %g : (tensor<4x8xbf16>, tensor<8xf32>) -> tensor<4x8xbf16>
  func.return %0 : tensor<4x8xbf16>
}

// -----

// rmsnorm has no bias operand
func.func @rmsnorm_bias(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:26 {{Expected ':'}}
  %0 = lamina.rmsnorm %x bias %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @softmax_int(%x: tensor<4xi32>) -> tensor<4xi32> {
  // expected-error @+1:3 {{lamina.softmax: operand must have a float element type, got i32}}
  %0 = lamina.softmax %x : tensor<4xi32>
  func.return %0 : tensor<4xi32>
}

// -----

func.func @softmax_rank0(%x: tensor<f32>) -> tensor<f32> {
  // expected-error @+1:3 {{lamina.softmax: operand must have rank >= 1}}
  %0 = lamina.softmax %x : tensor<f32>
  func.return %0 : tensor<f32>
}

// -----

func.func @softmax_axis(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.softmax: axis 5 is out of range for rank 2}}
  %0 = lamina.softmax %x {axis = 5 : i64} : tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @softmax_result(%x: tensor<4x8xf32>) -> tensor<4x8xf64> {
  // expected-error @+1:3 {{lamina.softmax: result type tensor<4x8xf64> does not match the expected tensor<4x8xf32>}}
  %0 = lamina.softmax %x : (tensor<4x8xf32>) -> tensor<4x8xf64>
  func.return %0 : tensor<4x8xf64>
}
