// Attribute rules shared by every op: each attribute kind rejects values of another kind (int,
// float, bool, string with choices, integer array, dense literal), required attributes must be
// present, and attributes an op does not take are rejected (custom and generic form).
// RUN: lamina-opt %s --split-input-file --verify-diagnostics

// INT: a float is not an integer
func.func @int_got_float(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.softmax: attribute 'axis' must be an integer, got 1.000000e+00 : f64}}
  %0 = lamina.softmax %x {axis = 1.000000e+00 : f64} : tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

// INT: i1 (a bool) is not an integer
func.func @int_got_bool(%x: tensor<4x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1:3 {{lamina.concat: attribute 'dim' must be an integer, got false}}
  %0 = lamina.concat %x, %x {dim = false} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  func.return %0 : tensor<8x8xf32>
}

// -----

func.func @int_got_string(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.dropout: attribute 'seed' must be an integer, got "42"}}
  %0 = lamina.dropout %x {rate = 1.000000e-01 : f64, seed = "42"} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// FLOAT: an integer is not a float
func.func @float_got_int(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.dropout: attribute 'rate' must be a float (e.g. 1.0e-05), got 0 : i64}}
  %0 = lamina.dropout %x {rate = 0 : i64, seed = 1 : i64} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @float_got_f32_array(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.layernorm: attribute 'eps' must be a float (e.g. 1.0e-05), got array<f64: 1.000000e-05>}}
  %0 = lamina.layernorm %x {eps = array<f64: 1.0e-05>} : tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

// BOOL: an i64 is not true/false
func.func @bool_got_int(%x: tensor<4x8xf32>) -> tensor<4x1xf32> {
  // expected-error @+1:3 {{lamina.reduce_sum: attribute 'keepdims' must be true or false, got 1 : i64}}
  %0 = lamina.reduce_sum %x {axes = array<i64: 1>, keepdims = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  func.return %0 : tensor<4x1xf32>
}

// -----

func.func @bool_got_string(%x: tensor<4x8xf32>) -> tensor<4x1xf32> {
  // expected-error @+1:3 {{lamina.reduce_max: attribute 'keepdims' must be true or false, got "true"}}
  %0 = lamina.reduce_max %x {axes = array<i64: 1>, keepdims = "true"} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  func.return %0 : tensor<4x1xf32>
}

// -----

// STR with choices: not a string, and a string that is not a choice
func.func @str_got_int(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.gelu: attribute 'approximate' must be one of "none", "tanh", got 1 : i64}}
  %0 = lamina.gelu %x {approximate = 1 : i64} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @str_bad_choice(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.gelu: attribute 'approximate' must be one of "none", "tanh", got "fast"}}
  %0 = lamina.gelu %x {approximate = "fast"} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @str_wrong_case(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.gelu: attribute 'approximate' must be one of "none", "tanh", got "Tanh"}}
  %0 = lamina.gelu %x {approximate = "Tanh"} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// INTS: an integer, a plain array attribute and a float array are not array<i64: ...>
func.func @ints_got_int(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.reduce_sum: attribute 'axes' must be an integer array like array<i64: 0, 1>, got 1 : i64}}
  %0 = lamina.reduce_sum %x {axes = 1 : i64} : (tensor<4x8xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @ints_got_array_attr(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  // expected-error @+1:3 {{lamina.transpose: attribute 'permutation' must be an integer array like array<i64: 0, 1>, got [1 : i64, 0 : i64]}}
  %0 = lamina.transpose %x {permutation = [1, 0]} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return %0 : tensor<3x2xf32>
}

// -----

func.func @ints_got_float_array(%x: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.broadcast_in_dim: attribute 'broadcast_dimensions' must be an integer array like array<i64: 0, 1>, got array<f32: 1.000000e+00>}}
  %0 = lamina.broadcast_in_dim %x {broadcast_dimensions = array<f32: 1.0>} : (tensor<8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @ints_got_dense(%x: tensor<8x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.slice: attribute 'start' must be an integer array like array<i64: 0, 1>, got dense<[2, 0]> : tensor<2xi64>}}
  %0 = lamina.slice %x {start = dense<[2, 0]> : tensor<2xi64>, limit = array<i64: 6, 8>} : (tensor<8x8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

// DENSE: a dense literal of an unsupported element type (generic form; the result type is fine)
func.func @dense_unsupported(%x: tensor<4xf32>) -> tensor<2xf32> {
  // expected-error @+1:3 {{lamina.constant: attribute 'value' must be a dense<...> tensor literal of a supported element type, got dense<1> : tensor<2xui8>}}
  %0 = "lamina.constant"() <{value = dense<1> : tensor<2xui8>}> : () -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

// missing required attributes (the rest are in the per-family files)
func.func @missing_broadcast_dimensions(%x: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.broadcast_in_dim: missing required attribute 'broadcast_dimensions'}}
  %0 = lamina.broadcast_in_dim %x : (tensor<8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @missing_start(%x: tensor<8xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.slice: missing required attribute 'start'}}
  %0 = lamina.slice %x {limit = array<i64: 4>} : (tensor<8xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// unknown attributes: custom form names the op's attributes
func.func @unknown_attr_none(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:19 {{lamina.add has no attribute 'alpha' (it takes: none)}}
  %0 = lamina.add %a, %a {alpha = 1.000000e+00 : f64} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @unknown_attr_typo(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:25 {{lamina.layernorm has no attribute 'epsilon' (it takes: axis, eps)}}
  %0 = lamina.layernorm %x {axis = -1 : i64, epsilon = 1.000000e-05 : f64} : tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @unknown_attr_generic(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.softmax has no attribute 'temperature' (it takes: axis, safe; other attributes must be dialect-prefixed, e.g. 'mytool.tag')}}
  %0 = "lamina.softmax"(%a) <{axis = 0 : i64, temperature = 2.000000e+00 : f64}> : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
