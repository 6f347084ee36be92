// Parse errors, each pinned by an expected-error annotation (message, line, column): unknown ops
// (with the closest op name as a suggestion), missing tokens (reported just after the text before
// them, not at the next line),
// malformed custom syntax (missing ':' or type, operand/type count mismatches, wrong number of
// positional operands, unknown or repeated operand keywords), undefined and redefined values, and
// type mismatches between an operand's use and its definition.
// RUN: lamina-opt %s --split-input-file --verify-diagnostics

func.func @unknown_op(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:8 {{Operation lamina.frobnicate is not registered}}
  %0 = lamina.frobnicate %x : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @unknown_op_generic(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:9 {{Operation lamina.swish is not registered}}
  %0 = "lamina.swish"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @unknown_dialect(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:8 {{Operation stablehlo.exponential is not registered}}
  %0 = stablehlo.exponential %x : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @missing_colon(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:22 {{Expected ':'}}
  %0 = lamina.exp %x tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @missing_type(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:23 {{type expected}}
  %0 = lamina.exp %x :
  func.return %0 : tensor<4xf32>
}

// -----

func.func @missing_result_type(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:58 {{Expected '->'}}
  %0 = lamina.add %a, %a : (tensor<4xf32>, tensor<4xf32>)
  func.return %0 : tensor<4xf32>
}

// -----

func.func @too_few_types(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:19 {{lamina.add: 2 operands but 1 operand types}}
  %0 = lamina.add %a, %a : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @too_many_types(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:19 {{lamina.exp: 1 operands but 2 operand types}}
  %0 = lamina.exp %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @too_few_operands(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:19 {{lamina.add expects 2 positional operand(s) (lhs, rhs), got 1}}
  %0 = lamina.add %a : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @too_many_operands(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:19 {{lamina.exp expects 1 positional operand(s) (input), got 2}}
  %0 = lamina.exp %a, %a : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @select_two_operands(%c: tensor<4xi1>, %a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:22 {{lamina.select expects 3 positional operand(s) (cond, true_value, false_value), got 2}}
  %0 = lamina.select %c, %a : (tensor<4xi1>, tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// an optional operand must be named by its keyword, not given positionally
func.func @optional_positional(%x: tensor<4x8xf32>, %g: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:25 {{lamina.layernorm expects 1 positional operand(s) (input), got 2}}
  %0 = lamina.layernorm %x, %g : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @unknown_keyword(%x: tensor<4x8xf32>, %g: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:28 {{Expected ':'}}
  %0 = lamina.layernorm %x gamma %g : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @repeated_keyword(%x: tensor<4x8xf32>, %g: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:37 {{Expected ':'}}
  %0 = lamina.layernorm %x scale %g scale %g : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @keyword_without_value(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:31 {{operand expected}}
  %0 = lamina.dropout %x seed {rate = 1.000000e-01 : f64} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @undefined_value(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:23 {{values used but not defined: [%b]}}
  %0 = lamina.add %a, %b : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @undefined_optional_operand(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:32 {{values used but not defined: [%gamma]}}
  %0 = lamina.rmsnorm %x scale %gamma : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @use_before_def(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.exp: operand #0 does not dominate this use}}
  %0 = lamina.exp %1 : tensor<4xf32>
  // expected-note @+1:3 {{operand #0 defined here}}
  %1 = lamina.exp %a : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @redefined_value(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = lamina.exp %a : tensor<4xf32>
  // expected-error @+1:3 {{SSA value %0 is already defined}}
  %0 = lamina.log %a : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// the type list must agree with the operand's defining type
func.func @use_type_mismatch(%a: tensor<4xf32>) -> tensor<8xf32> {
  // expected-error @+1:19 {{operand is used with type tensor<8xf32>, but has been previously used or defined with type tensor<4xf32>}}
  %0 = lamina.exp %a : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

func.func @bad_attr_dict(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:34 {{attribute expected}}
  %0 = lamina.softmax %x {axis = } : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @bad_type(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:33 {{Expected shape type.}}
  %0 = lamina.exp %x : tensor<4xfloat>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @constant_missing_type() -> tensor<f32> {
  // expected-error @+1:43 {{Expected ':' in dense attribute}}
  %0 = lamina.constant dense<1.000000e+00>
  func.return %0 : tensor<f32>
}

// -----

func.func @op_name_typo(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:8 {{Operation lamina.gelu2 is not registered (did you mean 'lamina.gelu'?)}}
  %0 = lamina.gelu2 %x : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @op_name_typo_generic(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:9 {{Operation lamina.soflmax is not registered (did you mean 'lamina.softmax'?)}}
  %0 = "lamina.soflmax"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// the '>' is missing at the end of the line, where it is reported (not at the next line's
// first token); the comment after it is not code
func.func @missing_angle(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:36 {{Expected '>' after builtin parameter list}}
  %0 = lamina.exp %x : tensor<4xf32 // a comment with a ">"

  func.return %0 : tensor<4xf32>
}

// -----

// a shape of more than 256 dimensions is refused while parsing, at its 257th dimension
// expected-error @+1:550 {{shape has more than 256 dimensions (Lamina computes with at most 64)}}
func.func @rank_too_large(%x: tensor<1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1xf32>) -> tensor<f32> {
  %0 = lamina.reduce_sum %x : (tensor<1x1xf32>) -> tensor<f32>
  func.return %0 : tensor<f32>
}
