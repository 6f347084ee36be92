// RUN: lamina-opt %s -p fuse-elementwise | filecheck %s

// A diamond (%a feeds %b and %c, which meet in %d) with a value (%a) also used outside: one kernel
// with two results (multi-output fusion).
func.func @diamond(%x: tensor<8x16xf32>, %y: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  %a = lamina.exp %x : tensor<8x16xf32>
  %b = lamina.mul %a, %y : tensor<8x16xf32>
  %c = lamina.tanh %a : tensor<8x16xf32>
  %d = lamina.add %b, %c : tensor<8x16xf32>
  %e = lamina.neg %d : tensor<8x16xf32>
  func.return %a, %e : tensor<8x16xf32>, tensor<8x16xf32>
}

// Row statistics: a reduction's prologue and its keepdims epilogue broadcast back over the rows.
func.func @rows(%x: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x1xf32>) {
  %sq = lamina.mul %x, %x : tensor<8x16xf32>
  %ss = lamina.reduce_sum %sq {axes = array<i64: 1>, keepdims = true} : (tensor<8x16xf32>) -> tensor<8x1xf32>
  %r = lamina.rsqrt %ss : tensor<8x1xf32>
  %n = lamina.mul %x, %r : (tensor<8x16xf32>, tensor<8x1xf32>) -> tensor<8x16xf32>
  func.return %n, %ss : tensor<8x16xf32>, tensor<8x1xf32>
}

// CHECK-LABEL: func.func @diamond
// CHECK-NEXT:    %a, %e = lamina.fused "loop" (%x_1 = %x, %y_1 = %y) : (tensor<8x16xf32>, tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
// CHECK-NEXT:      %a_1 = lamina.exp %x_1
// CHECK-NEXT:      %b = lamina.mul %a_1, %y_1
// CHECK-NEXT:      %c = lamina.tanh %a_1
// CHECK-NEXT:      %d = lamina.add %b, %c
// CHECK-NEXT:      %e_1 = lamina.neg %d
// CHECK-NEXT:      lamina.yield %a_1, %e_1 : tensor<8x16xf32>, tensor<8x16xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %a, %e

// CHECK-LABEL: func.func @rows
// CHECK-NEXT:    %ss, %n = lamina.fused "row_reduction" (%x_1 = %x) : (tensor<8x16xf32>) -> (tensor<8x1xf32>, tensor<8x16xf32>) {
// CHECK-NEXT:      %sq = lamina.mul %x_1, %x_1
// CHECK-NEXT:      %ss_1 = lamina.reduce_sum %sq
// CHECK-NEXT:      %r = lamina.rsqrt %ss_1
// CHECK-NEXT:      %n_1 = lamina.mul %x_1, %r
// CHECK-NEXT:      lamina.yield %ss_1, %n_1
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %n, %ss
