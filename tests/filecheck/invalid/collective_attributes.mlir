// Attribute kinds of the collective ops (`lamina.ir.mesh.collectives.attribute_rules`): each
// attribute is checked for its kind before the placement rules read it, and the error names it.
// RUN: lamina-opt %s --split-input-file --verify-diagnostics

// a string where an integer belongs
lamina.mesh @m [data = 2, model = 4]
func.func @f(%x: tensor<8x16xf32, #lamina.place<@m, [[data], [model]]>>) -> tensor<8x16xf32, #lamina.place<@m, [[data], []]>> {
  // expected-error @+1:3 {{lamina.all_gather: attribute 'dim' must be an integer, got "1"}}
  %0 = lamina.all_gather %x {dim = "1", axes = ["model"]} : tensor<8x16xf32, #lamina.place<@m, [[data], [model]]>> -> tensor<8x16xf32, #lamina.place<@m, [[data], []]>>
  func.return %0 : tensor<8x16xf32, #lamina.place<@m, [[data], []]>>
}

// -----

// true is not an integer
lamina.mesh @m [data = 2, model = 4]
func.func @f(%x: tensor<8x16xf32, #lamina.place<@m, [[data], [model]]>>) -> tensor<8x16xf32, #lamina.place<@m, [[data], []]>> {
  // expected-error @+1:3 {{lamina.all_gather: attribute 'dim' must be an integer, got true}}
  %0 = lamina.all_gather %x {dim = true, axes = ["model"]} : tensor<8x16xf32, #lamina.place<@m, [[data], [model]]>> -> tensor<8x16xf32, #lamina.place<@m, [[data], []]>>
  func.return %0 : tensor<8x16xf32, #lamina.place<@m, [[data], []]>>
}

// -----

// missing required integer
lamina.mesh @m [data = 2, model = 4]
func.func @f(%x: tensor<8x16xf32, #lamina.place<@m, [[], []]>>) -> tensor<8x16xf32, #lamina.place<@m, [[data], []]>> {
  // expected-error @+1:3 {{lamina.all_slice: missing required attribute 'dim', which must be an integer}}
  %0 = lamina.all_slice %x {axes = ["data"]} : tensor<8x16xf32, #lamina.place<@m, [[], []]>> -> tensor<8x16xf32, #lamina.place<@m, [[data], []]>>
  func.return %0 : tensor<8x16xf32, #lamina.place<@m, [[data], []]>>
}

// -----

// an integer where a list of axes belongs
lamina.mesh @m [data = 2, model = 4]
func.func @f(%x: tensor<8x16xf32, #lamina.place<@m, [[], []], partial = sum[model]>>) -> tensor<8x16xf32, #lamina.place<@m, [[], []]>> {
  // expected-error @+1:3 {{lamina.all_reduce: attribute 'axes' must be a non-empty list of mesh axis names, like ["model"], got 1 : i64}}
  %0 = lamina.all_reduce %x {axes = 1 : i64} : tensor<8x16xf32, #lamina.place<@m, [[], []], partial = sum[model]>> -> tensor<8x16xf32, #lamina.place<@m, [[], []]>>
  func.return %0 : tensor<8x16xf32, #lamina.place<@m, [[], []]>>
}

// -----

// a string where a list of axes belongs
lamina.mesh @m [data = 2, model = 4]
func.func @f(%x: tensor<8x16xf32, #lamina.place<@m, [[], []], partial = sum[model]>>) -> tensor<8x16xf32, #lamina.place<@m, [[], []]>> {
  // expected-error @+1:3 {{lamina.all_reduce: attribute 'axes' must be a non-empty list of mesh axis names, like ["model"], got "model"}}
  %0 = lamina.all_reduce %x {axes = "model"} : tensor<8x16xf32, #lamina.place<@m, [[], []], partial = sum[model]>> -> tensor<8x16xf32, #lamina.place<@m, [[], []]>>
  func.return %0 : tensor<8x16xf32, #lamina.place<@m, [[], []]>>
}

// -----

// a list of integers is not a list of axis names
lamina.mesh @m [data = 2, model = 4]
func.func @f(%x: tensor<8x16xf32, #lamina.place<@m, [[], []], partial = sum[model]>>) -> tensor<8x16xf32, #lamina.place<@m, [[], []]>> {
  // expected-error @+1:3 {{lamina.all_reduce: attribute 'axes' must be a non-empty list of mesh axis names, like ["model"], got [1 : i64, 2 : i64]}}
  %0 = lamina.all_reduce %x {axes = [1, 2]} : tensor<8x16xf32, #lamina.place<@m, [[], []], partial = sum[model]>> -> tensor<8x16xf32, #lamina.place<@m, [[], []]>>
  func.return %0 : tensor<8x16xf32, #lamina.place<@m, [[], []]>>
}

// -----

// an integer where the reduce kind belongs
lamina.mesh @m [data = 2, model = 4]
func.func @f(%x: tensor<8x16xf32, #lamina.place<@m, [[], []], partial = sum[model]>>) -> tensor<8x16xf32, #lamina.place<@m, [[], []]>> {
  // expected-error @+1:3 {{lamina.all_reduce: attribute 'kind' must be "sum" or "max", got 1 : i64}}
  %0 = lamina.all_reduce %x {axes = ["model"], kind = 1 : i64} : tensor<8x16xf32, #lamina.place<@m, [[], []], partial = sum[model]>> -> tensor<8x16xf32, #lamina.place<@m, [[], []]>>
  func.return %0 : tensor<8x16xf32, #lamina.place<@m, [[], []]>>
}

// -----

// an integer where the algorithm belongs
lamina.mesh @m [data = 2, model = 4]
func.func @f(%x: tensor<8x16xf32, #lamina.place<@m, [[], []], partial = sum[model]>>) -> tensor<8x16xf32, #lamina.place<@m, [[], []]>> {
  // expected-error @+1:3 {{lamina.all_reduce: attribute 'algorithm' must be one of "ring", "tree", "hierarchical", "direct", got 2 : i64}}
  %0 = lamina.all_reduce %x {axes = ["model"], algorithm = 2 : i64} : tensor<8x16xf32, #lamina.place<@m, [[], []], partial = sum[model]>> -> tensor<8x16xf32, #lamina.place<@m, [[], []]>>
  func.return %0 : tensor<8x16xf32, #lamina.place<@m, [[], []]>>
}

// -----

// the point-to-point algorithm on a ring collective
lamina.mesh @m [data = 2, model = 4]
func.func @f(%x: tensor<8x16xf32, #lamina.place<@m, [[], []], partial = sum[model]>>) -> tensor<8x16xf32, #lamina.place<@m, [[], []]>> {
  // expected-error @+1:3 {{lamina.all_reduce: algorithm "direct" is not this kind's: "direct" is a point-to-point kind's (collective_permute)}}
  %0 = lamina.all_reduce %x {axes = ["model"], algorithm = "direct"} : tensor<8x16xf32, #lamina.place<@m, [[], []], partial = sum[model]>> -> tensor<8x16xf32, #lamina.place<@m, [[], []]>>
  func.return %0 : tensor<8x16xf32, #lamina.place<@m, [[], []]>>
}

// -----

// a string where inner belongs
lamina.mesh @m [data = 2, model = 4]
func.func @f(%x: tensor<8x16xf32, #lamina.place<@m, [[], []], partial = sum[model]>>) -> tensor<8x16xf32, #lamina.place<@m, [[], []]>> {
  // expected-error @+1:3 {{lamina.all_reduce: attribute 'inner' must be an integer >= 2, got "2"}}
  %0 = lamina.all_reduce %x {axes = ["model"], algorithm = "hierarchical", inner = "2"} : tensor<8x16xf32, #lamina.place<@m, [[], []], partial = sum[model]>> -> tensor<8x16xf32, #lamina.place<@m, [[], []]>>
  func.return %0 : tensor<8x16xf32, #lamina.place<@m, [[], []]>>
}

// -----

// all_to_all: a float where split_dim belongs
lamina.mesh @m [data = 2, model = 4]
func.func @f(%x: tensor<8x16xf32, #lamina.place<@m, [[data], [model]]>>) -> tensor<8x16xf32, #lamina.place<@m, [[data, model], []]>> {
  // expected-error @+1:3 {{lamina.all_to_all: attribute 'split_dim' must be an integer, got 1.000000e+00 : f64}}
  %0 = lamina.all_to_all %x {split_dim = 1.0, concat_dim = 1 : i64, axes = ["model"]} : tensor<8x16xf32, #lamina.place<@m, [[data], [model]]>> -> tensor<8x16xf32, #lamina.place<@m, [[data, model], []]>>
  func.return %0 : tensor<8x16xf32, #lamina.place<@m, [[data, model], []]>>
}

// -----

// an unknown attribute
lamina.mesh @m [data = 2, model = 4]
func.func @f(%x: tensor<8x16xf32, #lamina.place<@m, [[data], [model]]>>) -> tensor<8x16xf32, #lamina.place<@m, [[data], []]>> {
  // expected-error @+1:23 {{lamina.reshard has no attribute 'dims' (it takes axes, algorithm, inner, kind)}}
  %0 = lamina.reshard %x {axes = ["model"], dims = 1 : i64} : tensor<8x16xf32, #lamina.place<@m, [[data], [model]]>> -> tensor<8x16xf32, #lamina.place<@m, [[data], []]>>
  func.return %0 : tensor<8x16xf32, #lamina.place<@m, [[data], []]>>
}


// -----

// generic form: an undotted attribute the op does not take is refused by the verifier too
lamina.mesh @m [data = 2, model = 4]
func.func @f(%x: tensor<8x16xf32, #lamina.place<@m, [[], []], partial = sum[model]>>) -> tensor<8x16xf32, #lamina.place<@m, [[], []]>> {
  // expected-error @+1:3 {{lamina.all_reduce has no attribute 'color' (it takes: axes, algorithm, inner, kind; other attributes must be dialect-prefixed, e.g. 'mytool.tag')}}
  %0 = "lamina.all_reduce"(%x) <{axes = ["model"]}> {color = 1 : i64} : (tensor<8x16xf32, #lamina.place<@m, [[], []], partial = sum[model]>>) -> tensor<8x16xf32, #lamina.place<@m, [[], []]>>
  func.return %0 : tensor<8x16xf32, #lamina.place<@m, [[], []]>>
}
