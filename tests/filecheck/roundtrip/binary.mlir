// Round trip of the 7 binary elementwise ops. Equal operand and result types print as one type;
// any broadcast (row vector, column, rank-0 scalar, both sides) prints the '(T1, T2) -> R' list.
// RUN: lamina-opt %s | lamina-opt | filecheck --match-full-lines %s
// RUN: lamina-opt %s --print-op-generic | lamina-opt | filecheck --match-full-lines %s

func.func @binary_same(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = lamina.add %a, %b : tensor<4x8xf32>
  %1 = lamina.sub %0, %b : tensor<4x8xf32>
  %2 = lamina.mul %1, %a : tensor<4x8xf32>
  %3 = lamina.div %2, %b : tensor<4x8xf32>
  %4 = lamina.max %3, %a : tensor<4x8xf32>
  %5 = lamina.min %4, %b : tensor<4x8xf32>
  %6 = lamina.pow %5, %a : tensor<4x8xf32>
  %7 = lamina.add %6, %6 : tensor<4x8xf32>
  func.return %7 : tensor<4x8xf32>
}
// CHECK-LABEL: func.func @binary_same(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT:  %0 = lamina.add %a, %b : tensor<4x8xf32>
// CHECK-NEXT:  %1 = lamina.sub %0, %b : tensor<4x8xf32>
// CHECK-NEXT:  %2 = lamina.mul %1, %a : tensor<4x8xf32>
// CHECK-NEXT:  %3 = lamina.div %2, %b : tensor<4x8xf32>
// CHECK-NEXT:  %4 = lamina.max %3, %a : tensor<4x8xf32>
// CHECK-NEXT:  %5 = lamina.min %4, %b : tensor<4x8xf32>
// CHECK-NEXT:  %6 = lamina.pow %5, %a : tensor<4x8xf32>
// CHECK-NEXT:  %7 = lamina.add %6, %6 : tensor<4x8xf32>
// CHECK-NEXT:  func.return %7 : tensor<4x8xf32>
// CHECK-NEXT:  }

func.func @binary_broadcast(%m: tensor<4x8xf32>, %row: tensor<8xf32>, %col: tensor<4x1xf32>, %one_row: tensor<1x8xf32>, %s: tensor<f32>) -> tensor<4x8xf32> {
  %0 = lamina.add %m, %row : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = lamina.sub %row, %0 : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = lamina.mul %1, %col : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %3 = lamina.div %2, %s : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %4 = lamina.max %s, %3 : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %5 = lamina.min %col, %one_row : (tensor<4x1xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  %6 = lamina.pow %5, %4 : tensor<4x8xf32>
  %7 = lamina.add %s, %s : tensor<f32>
  %8 = lamina.mul %6, %7 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  func.return %8 : tensor<4x8xf32>
}
// CHECK-LABEL: func.func @binary_broadcast(%m: tensor<4x8xf32>, %row: tensor<8xf32>, %col: tensor<4x1xf32>, %one_row: tensor<1x8xf32>, %s: tensor<f32>) -> tensor<4x8xf32> {
// CHECK-NEXT:  %0 = lamina.add %m, %row : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:  %1 = lamina.sub %row, %0 : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:  %2 = lamina.mul %1, %col : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:  %3 = lamina.div %2, %s : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT:  %4 = lamina.max %s, %3 : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:  %5 = lamina.min %col, %one_row : (tensor<4x1xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:  %6 = lamina.pow %5, %4 : tensor<4x8xf32>
// CHECK-NEXT:  %7 = lamina.add %s, %s : tensor<f32>
// CHECK-NEXT:  %8 = lamina.mul %6, %7 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT:  func.return %8 : tensor<4x8xf32>
// CHECK-NEXT:  }

func.func @binary_rank_growth(%a: tensor<2x1x5xf32>, %b: tensor<3x1xf32>) -> tensor<2x3x5xf32> {
  %0 = lamina.add %a, %b : (tensor<2x1x5xf32>, tensor<3x1xf32>) -> tensor<2x3x5xf32>
  func.return %0 : tensor<2x3x5xf32>
}
// CHECK-LABEL: func.func @binary_rank_growth(%a: tensor<2x1x5xf32>, %b: tensor<3x1xf32>) -> tensor<2x3x5xf32> {
// CHECK-NEXT:  %0 = lamina.add %a, %b : (tensor<2x1x5xf32>, tensor<3x1xf32>) -> tensor<2x3x5xf32>
// CHECK-NEXT:  func.return %0 : tensor<2x3x5xf32>
// CHECK-NEXT:  }

func.func @binary_types(%h: tensor<3xf16>, %b: tensor<3xbf16>, %d: tensor<3xf64>) -> (tensor<3xf16>, tensor<3xbf16>, tensor<3xf64>) {
  %0 = lamina.add %h, %h : tensor<3xf16>
  %1 = lamina.pow %b, %b : tensor<3xbf16>
  %2 = lamina.div %d, %d : tensor<3xf64>
  func.return %0, %1, %2 : tensor<3xf16>, tensor<3xbf16>, tensor<3xf64>
}
// CHECK-LABEL: func.func @binary_types(%h: tensor<3xf16>, %b: tensor<3xbf16>, %d: tensor<3xf64>) -> (tensor<3xf16>, tensor<3xbf16>, tensor<3xf64>) {
// CHECK-NEXT:  %0 = lamina.add %h, %h : tensor<3xf16>
// CHECK-NEXT:  %1 = lamina.pow %b, %b : tensor<3xbf16>
// CHECK-NEXT:  %2 = lamina.div %d, %d : tensor<3xf64>
// CHECK-NEXT:  func.return %0, %1, %2 : tensor<3xf16>, tensor<3xbf16>, tensor<3xf64>
// CHECK-NEXT:  }

func.func @binary_long_form(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = lamina.add %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "lamina.max"(%0, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %1 : tensor<4xf32>
}
// CHECK-LABEL: func.func @binary_long_form(%a: tensor<4xf32>) -> tensor<4xf32> {
// CHECK-NEXT:  %0 = lamina.add %a, %a : tensor<4xf32>
// CHECK-NEXT:  %1 = lamina.max %0, %a : tensor<4xf32>
// CHECK-NEXT:  func.return %1 : tensor<4xf32>
// CHECK-NEXT:  }
