// Layout ops: they move elements without arithmetic.
//   transpose         2-D swap and a rank-3 permutation
//   reshape           split and merge dims (result type only, no attributes)
//   broadcast_in_dim  a [N] vector to [M,N] (dims [1]), a [M,1] column to [M,K,N] (dims [0, 2]:
//                     size-1 dim replicated), a rank-0 scalar to [M,N] (dims [])
//   slice             a contiguous window and a strided (every other row/column) slice
//   concat            two and three operands along different dims (variadic)
// Run:
//   lamina-opt samples/layout.mlir
//   lamina-run samples/layout.mlir --entry layout --check -p cse,canonicalize --print-outputs

func.func @layout(%x: tensor<4x6xf32>, %v: tensor<6xf32>, %c: tensor<4x1xf32>, %s: tensor<f32>) -> (tensor<6x4xf32>, tensor<3x2x4xf32>, tensor<4x6xf32>, tensor<4x3x6xf32>, tensor<2x3xf32>, tensor<12x6xf32>, tensor<4x12xf32>) {
  %xt = lamina.transpose %x {permutation = array<i64: 1, 0>} : (tensor<4x6xf32>) -> tensor<6x4xf32>
  %r3 = lamina.reshape %x : (tensor<4x6xf32>) -> tensor<4x3x2xf32>
  %p3 = lamina.transpose %r3 {permutation = array<i64: 1, 2, 0>} : (tensor<4x3x2xf32>) -> tensor<3x2x4xf32>
  %bv = lamina.broadcast_in_dim %v {broadcast_dimensions = array<i64: 1>} : (tensor<6xf32>) -> tensor<4x6xf32>
  %bs = lamina.broadcast_in_dim %s {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4x6xf32>
  %sum = lamina.add %bv, %bs : tensor<4x6xf32>
  %bc = lamina.broadcast_in_dim %c {broadcast_dimensions = array<i64: 0, 2>} : (tensor<4x1xf32>) -> tensor<4x3x6xf32>
  %mid = lamina.slice %x {start = array<i64: 1, 2>, limit = array<i64: 3, 5>} : (tensor<4x6xf32>) -> tensor<2x3xf32>
  %strided = lamina.slice %x {start = array<i64: 0, 0>, limit = array<i64: 4, 6>, strides = array<i64: 2, 2>} : (tensor<4x6xf32>) -> tensor<2x3xf32>
  %both = lamina.add %mid, %strided : tensor<2x3xf32>
  %rows = lamina.concat %x, %sum, %x {dim = 0 : i64} : (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<12x6xf32>
  %flat = lamina.reshape %p3 : (tensor<3x2x4xf32>) -> tensor<4x6xf32>
  %cols = lamina.concat %x, %flat {dim = -1 : i64} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x12xf32>
  func.return %xt, %p3, %sum, %bc, %both, %rows, %cols : tensor<6x4xf32>, tensor<3x2x4xf32>, tensor<4x6xf32>, tensor<4x3x6xf32>, tensor<2x3xf32>, tensor<12x6xf32>, tensor<4x12xf32>
}
