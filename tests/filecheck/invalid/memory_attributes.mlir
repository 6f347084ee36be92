// Attribute kinds of `lamina.move` and `lamina.free` (`ATTRIBUTES` in `lamina.ir.buffers.memory`,
// checked by `lamina.ir.core.attrs` before IRDL's constraints): each error names the attribute and
// what it must be. Mostly the generic form, which bypasses the custom parsers' own checks.
// RUN: lamina-opt %s --split-input-file --verify-diagnostics

// lamina.move: an integer where the tier belongs
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32, #lamina.place<tier = host>> {
  // expected-error @+1:3 {{lamina.move: attribute 'to' must be a memory tier name ("sram", "hbm", "host", "nvme"), got 1 : i64}}
  %0 = "lamina.move"(%x) <{to = 1 : i64}> : (tensor<4xf32>) -> tensor<4xf32, #lamina.place<tier = host>>
  func.return %0 : tensor<4xf32, #lamina.place<tier = host>>
}

// -----

// lamina.move: the tier is required
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32, #lamina.place<tier = host>> {
  // expected-error @+1:3 {{lamina.move: missing required attribute 'to', which must be a memory tier name ("sram", "hbm", "host", "nvme")}}
  %0 = "lamina.move"(%x)  : (tensor<4xf32>) -> tensor<4xf32, #lamina.place<tier = host>>
  func.return %0 : tensor<4xf32, #lamina.place<tier = host>>
}

// -----

// lamina.move: a string where the prefetch distance belongs
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32, #lamina.place<tier = host>> {
  // expected-error @+1:3 {{lamina.move: attribute 'prefetch' must be an integer, got "3"}}
  %0 = "lamina.move"(%x) <{to = "host", prefetch = "3"}> : (tensor<4xf32>) -> tensor<4xf32, #lamina.place<tier = host>>
  func.return %0 : tensor<4xf32, #lamina.place<tier = host>>
}

// -----

// lamina.move: true is not a distance
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32, #lamina.place<tier = host>> {
  // expected-error @+1:3 {{lamina.move: attribute 'prefetch' must be an integer, got true}}
  %0 = "lamina.move"(%x) <{to = "host", prefetch = true}> : (tensor<4xf32>) -> tensor<4xf32, #lamina.place<tier = host>>
  func.return %0 : tensor<4xf32, #lamina.place<tier = host>>
}

// -----

// lamina.move: a float is not a distance
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32, #lamina.place<tier = host>> {
  // expected-error @+1:3 {{lamina.move: attribute 'prefetch' must be an integer, got 1.000000e+00 : f64}}
  %0 = "lamina.move"(%x) <{to = "host", prefetch = 1.0}> : (tensor<4xf32>) -> tensor<4xf32, #lamina.place<tier = host>>
  func.return %0 : tensor<4xf32, #lamina.place<tier = host>>
}

// -----

// lamina.move: an unknown property
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32, #lamina.place<tier = host>> {
  // expected-error @+1:3 {{lamina.move has no attribute 'junk' (it takes: to, prefetch; other attributes must be dialect-prefixed, e.g. 'mytool.tag')}}
  %0 = "lamina.move"(%x) <{to = "host", junk = 1 : i64}> : (tensor<4xf32>) -> tensor<4xf32, #lamina.place<tier = host>>
  func.return %0 : tensor<4xf32, #lamina.place<tier = host>>
}

// -----

// lamina.move: an undotted discardable attribute
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32, #lamina.place<tier = host>> {
  // expected-error @+1:3 {{lamina.move has no attribute 'junk' (it takes: to, prefetch; other attributes must be dialect-prefixed, e.g. 'mytool.tag')}}
  %0 = "lamina.move"(%x) <{to = "host"}> {junk = 1 : i64} : (tensor<4xf32>) -> tensor<4xf32, #lamina.place<tier = host>>
  func.return %0 : tensor<4xf32, #lamina.place<tier = host>>
}

// -----

// lamina.move, custom form: a string where the prefetch distance belongs
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32, #lamina.place<tier = host>> {
  // expected-error @+1:20 {{lamina.move: attribute 'prefetch' must be an integer, got "3"}}
  %0 = lamina.move %x to host {prefetch = "3"} : tensor<4xf32> -> tensor<4xf32, #lamina.place<tier = host>>
  func.return %0 : tensor<4xf32, #lamina.place<tier = host>>
}

// -----

// lamina.free takes no undotted attribute (the custom parser refuses it; the verifier too)
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.free has no attribute 'junk' (it takes: none; other attributes must be dialect-prefixed, e.g. 'mytool.tag')}}
  "lamina.free"(%x) {junk = 1 : i64} : (tensor<4xf32>) -> ()
  func.return %y : tensor<4xf32>
}

// -----

// lamina.free takes no property
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1:3 {{lamina.free has no attribute 'junk' (it takes: none; other attributes must be dialect-prefixed, e.g. 'mytool.tag')}}
  "lamina.free"(%x) <{junk = 1 : i64}> : (tensor<4xf32>) -> ()
  func.return %y : tensor<4xf32>
}
