// Verifier rules of lamina.cumsum: every ShapeError of lamina.ir.core.shapes.scan, and the scan
// sharding rule (a scanned dimension must be unsplit: Lamina has no prefix-sum collective).
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
