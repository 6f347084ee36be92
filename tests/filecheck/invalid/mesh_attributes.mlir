// Attribute kinds of `lamina.mesh`, `lamina.fused` and `lamina.yield` in generic form (their
// `ATTRIBUTES`, checked by `lamina.ir.core.attrs` before IRDL's constraints): each error names the
// attribute and what it must be.
// RUN: lamina-opt %s --split-input-file --verify-diagnostics

// sym_name must be a string
// expected-error @+1:1 {{lamina.mesh: attribute 'sym_name' must be a symbol name string, got 3 : i64}}
"lamina.mesh"() <{sym_name = 3 : i64, axes = ["a"], shape = array<i64: 2>}> : () -> ()

// -----

// axes must be a list of strings
// expected-error @+1:1 {{lamina.mesh: attribute 'axes' must be a list of strings like ["data", "model"], got [1 : i64]}}
"lamina.mesh"() <{sym_name = "m", axes = [1 : i64], shape = array<i64: 2>}> : () -> ()

// -----

// axes: a string is not a list
// expected-error @+1:1 {{lamina.mesh: attribute 'axes' must be a list of strings like ["data", "model"], got "a"}}
"lamina.mesh"() <{sym_name = "m", axes = "a", shape = array<i64: 2>}> : () -> ()

// -----

// shape: a float array is not an integer array
// expected-error @+1:1 {{lamina.mesh: attribute 'shape' must be an integer array like array<i64: 2, 4>, got array<f32: 2.000000e+00>}}
"lamina.mesh"() <{sym_name = "m", axes = ["a"], shape = array<f32: 2.0>}> : () -> ()

// -----

// shape: an i1 array is not an integer array
// expected-error @+1:1 {{lamina.mesh: attribute 'shape' must be an integer array like array<i64: 2, 4>, got array<i1: true>}}
"lamina.mesh"() <{sym_name = "m", axes = ["a"], shape = array<i1: true>}> : () -> ()

// -----

// shape: an integer is not an array
// expected-error @+1:1 {{lamina.mesh: attribute 'shape' must be an integer array like array<i64: 2, 4>, got 2 : i64}}
"lamina.mesh"() <{sym_name = "m", axes = ["a"], shape = 2 : i64}> : () -> ()

// -----

// shape is required
// expected-error @+1:1 {{lamina.mesh: missing required attribute 'shape', which must be an integer array like array<i64: 2, 4>}}
"lamina.mesh"() <{sym_name = "m", axes = ["a"]}> : () -> ()

// -----

// an unknown property
// expected-error @+1:1 {{lamina.mesh has no attribute 'foo' (it takes: sym_name, axes, shape; other attributes must be dialect-prefixed, e.g. 'mytool.tag')}}
"lamina.mesh"() <{sym_name = "m", axes = ["a"], shape = array<i64: 2>, foo = 1 : i64}> : () -> ()

// -----

// lamina.fused: an integer where the kind belongs
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.fused: attribute 'kind' must be a fusion kind string ("loop", "row_reduction", "matmul", "attention"), got 3 : i64}}
  %0 = "lamina.fused"(%x) <{kind = 3 : i64}> ({
  ^bb0(%a: tensor<4xf32>):
    %1 = lamina.exp %a : tensor<4xf32>
    lamina.yield %1 : tensor<4xf32>
  }) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// lamina.fused: the kind is required
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.fused: missing required attribute 'kind', which must be a fusion kind string ("loop", "row_reduction", "matmul", "attention")}}
  %0 = "lamina.fused"(%x) ({
  ^bb0(%a: tensor<4xf32>):
    %1 = lamina.exp %a : tensor<4xf32>
    lamina.yield %1 : tensor<4xf32>
  }) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// lamina.yield takes no attribute
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "lamina.fused"(%x) <{kind = "loop"}> ({
  ^bb0(%a: tensor<4xf32>):
    %1 = lamina.exp %a : tensor<4xf32>
    // expected-error @+1:5 {{lamina.yield has no attribute 'foo' (it takes: none; other attributes must be dialect-prefixed, e.g. 'mytool.tag')}}
    "lamina.yield"(%1) {foo = 1 : i64} : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
