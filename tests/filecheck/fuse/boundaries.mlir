// RUN: lamina-opt %s -p fuse-elementwise --split-input-file | filecheck %s
// RUN: lamina-opt %s -p fuse-elementwise --split-input-file --explain 2>&1 >/dev/null | filecheck %s --check-prefix=WHY

// A batched matmul is opaque (a block of its result rows needs more than the same rows of its
// left operand): exp and add are not fused across it, and fusing them directly would make a
// cycle (%b uses %a directly and through the matmul).
// CHECK-LABEL: func.func @cycle
// CHECK-NOT:   lamina.fused
// CHECK:       func.return
// WHY: boundaries.mlir:15:3: not fused with %a = lamina.exp: would create a cycle through %m
// WHY-NEXT: boundaries.mlir:15:3: not fused: %m = lamina.matmul is opaque here (a batched matmul
func.func @cycle(%x: tensor<2x8x8xf32>, %w: tensor<2x8x8xf32>) -> tensor<2x8x8xf32> {
  %a = lamina.exp %x : tensor<2x8x8xf32>
  %m = lamina.matmul %a, %w : tensor<2x8x8xf32>
  %b = lamina.add %a, %m : tensor<2x8x8xf32>
  func.return %b : tensor<2x8x8xf32>
}

// -----

// A layout op joins a kernel at its edges only: the transpose is written by exp's kernel (an
// output view), so neg, which would read it inside that kernel, stays apart.
// CHECK-LABEL: func.func @layout
// CHECK-NEXT:    %t = lamina.fused "loop" (%x_1 = %x)
// CHECK-NEXT:      %a = lamina.exp %x_1
// CHECK-NEXT:      %t_1 = lamina.transpose %a
// CHECK-NEXT:      lamina.yield %t_1
// CHECK-NEXT:    }
// CHECK-NEXT:    %b = lamina.neg %t
// WHY: fused %t = lamina.transpose into the kernel of %a as an output view
// WHY: not fused with %t = lamina.transpose: %b reads %t, which the kernel writes through a layout op
func.func @layout(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  %a = lamina.exp %x : tensor<4x8xf32>
  %t = lamina.transpose %a {permutation = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %b = lamina.neg %t : tensor<8x4xf32>
  func.return %b : tensor<8x4xf32>
}

// -----

// A reduction over a leading axis is not row-wise: it stays a kernel of its own.
// CHECK-LABEL: func.func @columns
// CHECK-NEXT:    %a = lamina.exp %x
// CHECK-NEXT:    %s = lamina.reduce_sum %a
// WHY: not fused: %s = lamina.reduce_sum is a reduction over non-trailing dims
func.func @columns(%x: tensor<4x8xf32>) -> tensor<8xf32> {
  %a = lamina.exp %x : tensor<4x8xf32>
  %s = lamina.reduce_sum %a {axes = array<i64: 0>} : (tensor<4x8xf32>) -> tensor<8xf32>
  %n = lamina.neg %s : tensor<8xf32>
  func.return %n : tensor<8xf32>
}

// -----

// A row vector (keepdims = false) must not meet the full rows directly: x[8,8] - s[8] broadcasts
// s along the columns, not the rows.
// CHECK-LABEL: func.func @rowvec
// CHECK:         lamina.fused "row_reduction"
// CHECK-NEXT:      lamina.exp
// CHECK-NEXT:      lamina.reduce_sum
// CHECK-NEXT:      lamina.yield
// CHECK:         lamina.sub
// WHY: not fused with %s = lamina.reduce_sum: a row vector would broadcast along the reduced dims
func.func @rowvec(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %a = lamina.exp %x : tensor<8x8xf32>
  %s = lamina.reduce_sum %a {axes = array<i64: 1>} : (tensor<8x8xf32>) -> tensor<8xf32>
  %d = lamina.sub %x, %s : (tensor<8x8xf32>, tensor<8xf32>) -> tensor<8x8xf32>
  func.return %d : tensor<8x8xf32>
}

// -----

// Different iteration spaces that do not broadcast into each other stay apart.
// CHECK-LABEL: func.func @spaces
// CHECK-NOT:   lamina.fused
// WHY: not fused with %s = lamina.reduce_sum: different iteration spaces (rows 4x8 reducing 16 vs rows 4 reducing 8x1)
func.func @spaces(%x: tensor<4x8x16xf32>) -> tensor<4x1x1xf32> {
  %s = lamina.reduce_sum %x {axes = array<i64: 2>, keepdims = true} : (tensor<4x8x16xf32>) -> tensor<4x8x1xf32>
  %t = lamina.reduce_sum %s {axes = array<i64: 1, 2>, keepdims = true} : (tensor<4x8x1xf32>) -> tensor<4x1x1xf32>
  func.return %t : tensor<4x1x1xf32>
}
