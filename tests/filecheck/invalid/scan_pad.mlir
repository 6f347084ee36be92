// Verifier rules of lamina.cumsum and lamina.pad: every ShapeError of lamina.ir.core.shapes.scan
// and .pad, and their sharding rules (a scanned or padded dimension must be unsplit).
// RUN: lamina-opt %s --split-input-file --verify-diagnostics

func.func @scan_bool(%x: tensor<4x8xi1>) -> tensor<4x8xi1> {
  // expected-error @+1:3 {{lamina.cumsum: operand must have a numeric element type (a float, i32 or i64), got i1}}
  %0 = lamina.cumsum %x {axis = 1 : i64} : tensor<4x8xi1>
  func.return %0 : tensor<4x8xi1>
}

// -----

func.func @scan_rank0(%x: tensor<f32>) -> tensor<f32> {
  // expected-error @+1:3 {{lamina.cumsum: operand must have rank >= 1}}
  %0 = lamina.cumsum %x {axis = 0 : i64} : tensor<f32>
  func.return %0 : tensor<f32>
}

// -----

func.func @scan_axis_out_of_range(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1:3 {{lamina.cumsum: axis -3 is out of range for rank 2}}
  %0 = lamina.cumsum %x {axis = -3 : i64} : tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

lamina.mesh @m [data = 2]
func.func @scan_split_axis(%x: tensor<4x8xf32, #lamina.place<@m, [[data], []]>>) -> tensor<4x8xf32, #lamina.place<@m, [[data], []]>> {
  // expected-error @+1:3 {{lamina.cumsum: the scanned dimension 0 must be unsplit, got [data]}}
  %0 = lamina.cumsum %x {axis = 0 : i64} : tensor<4x8xf32, #lamina.place<@m, [[data], []]>>
  func.return %0 : tensor<4x8xf32, #lamina.place<@m, [[data], []]>>
}

// -----

func.func @pad_negative(%x: tensor<4x8xf32>) -> tensor<4x7xf32> {
  // expected-error @+1:3 {{lamina.pad: high [0, -1] has a negative entry (a crop is a lamina.slice)}}
  %0 = lamina.pad %x {low = array<i64: 0, 0>, high = array<i64: 0, -1>} : (tensor<4x8xf32>) -> tensor<4x7xf32>
  func.return %0 : tensor<4x7xf32>
}

// -----

func.func @pad_fraction_on_integers(%x: tensor<4xi64>) -> tensor<5xi64> {
  // expected-error @+1:3 {{lamina.pad: value 0.5 is not an integer, the operand is i64}}
  %0 = lamina.pad %x {low = array<i64: 1>, high = array<i64: 0>, value = 0.5 : f64} : (tensor<4xi64>) -> tensor<5xi64>
  func.return %0 : tensor<5xi64>
}

// -----

func.func @pad_rank(%x: tensor<4xf32>) -> tensor<5xf32> {
  // expected-error @+1:3 {{lamina.pad: low has 2 entries, operand has rank 1}}
  %0 = lamina.pad %x {low = array<i64: 1, 0>, high = array<i64: 0>} : (tensor<4xf32>) -> tensor<5xf32>
  func.return %0 : tensor<5xf32>
}

// -----

lamina.mesh @m [data = 2]
func.func @pad_split_dim(%x: tensor<4x8xf32, #lamina.place<@m, [[data], []]>>) -> tensor<6x8xf32, #lamina.place<@m, [[data], []]>> {
  // expected-error @+1:3 {{lamina.pad: padded dimension 0 must be unsplit, got [data]}}
  %0 = lamina.pad %x {low = array<i64: 1, 0>, high = array<i64: 1, 0>} : (tensor<4x8xf32, #lamina.place<@m, [[data], []]>>) -> tensor<6x8xf32, #lamina.place<@m, [[data], []]>>
  func.return %0 : tensor<6x8xf32, #lamina.place<@m, [[data], []]>>
}
