// Round trip of matmul: 2-D, batched, batch dims broadcast (rank 3 x rank 2, 1 x N batch), equal
// square types in the single-type form, and every float element type.
// RUN: lamina-opt %s | lamina-opt | filecheck --match-full-lines %s
// RUN: lamina-opt %s --print-op-generic | lamina-opt | filecheck --match-full-lines %s

func.func @matmul_forms(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %ba: tensor<2x4x8xf32>, %bb: tensor<2x8x16xf32>, %sq: tensor<3x5x5xf32>, %one: tensor<1x3x8x4xf32>, %many: tensor<5x1x4x8xf32>) -> (tensor<4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<3x5x5xf32>, tensor<5x3x8x8xf32>) {
  %0 = lamina.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %1 = lamina.matmul %ba, %bb : (tensor<2x4x8xf32>, tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
  %2 = lamina.matmul %ba, %b : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %3 = lamina.matmul %sq, %sq : tensor<3x5x5xf32>
  %4 = lamina.matmul %one, %many : (tensor<1x3x8x4xf32>, tensor<5x1x4x8xf32>) -> tensor<5x3x8x8xf32>
  func.return %0, %1, %2, %3, %4 : tensor<4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<3x5x5xf32>, tensor<5x3x8x8xf32>
}
// CHECK-LABEL: func.func @matmul_forms(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %ba: tensor<2x4x8xf32>, %bb: tensor<2x8x16xf32>, %sq: tensor<3x5x5xf32>, %one: tensor<1x3x8x4xf32>, %many: tensor<5x1x4x8xf32>) -> (tensor<4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<3x5x5xf32>, tensor<5x3x8x8xf32>) {
// CHECK-NEXT:  %0 = lamina.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:  %1 = lamina.matmul %ba, %bb : (tensor<2x4x8xf32>, tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT:  %2 = lamina.matmul %ba, %b : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT:  %3 = lamina.matmul %sq, %sq : tensor<3x5x5xf32>
// CHECK-NEXT:  %4 = lamina.matmul %one, %many : (tensor<1x3x8x4xf32>, tensor<5x1x4x8xf32>) -> tensor<5x3x8x8xf32>
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4 : tensor<4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<3x5x5xf32>, tensor<5x3x8x8xf32>
// CHECK-NEXT:  }

func.func @matmul_types(%h: tensor<2x3xf16>, %hh: tensor<3x2xf16>, %b: tensor<2x2xbf16>, %d: tensor<1x1xf64>) -> (tensor<2x2xf16>, tensor<2x2xbf16>, tensor<1x1xf64>) {
  %0 = lamina.matmul %h, %hh : (tensor<2x3xf16>, tensor<3x2xf16>) -> tensor<2x2xf16>
  %1 = lamina.matmul %b, %b : tensor<2x2xbf16>
  %2 = lamina.matmul %d, %d : tensor<1x1xf64>
  func.return %0, %1, %2 : tensor<2x2xf16>, tensor<2x2xbf16>, tensor<1x1xf64>
}
// CHECK-LABEL: func.func @matmul_types(%h: tensor<2x3xf16>, %hh: tensor<3x2xf16>, %b: tensor<2x2xbf16>, %d: tensor<1x1xf64>) -> (tensor<2x2xf16>, tensor<2x2xbf16>, tensor<1x1xf64>) {
// CHECK-NEXT:  %0 = lamina.matmul %h, %hh : (tensor<2x3xf16>, tensor<3x2xf16>) -> tensor<2x2xf16>
// CHECK-NEXT:  %1 = lamina.matmul %b, %b : tensor<2x2xbf16>
// CHECK-NEXT:  %2 = lamina.matmul %d, %d : tensor<1x1xf64>
// CHECK-NEXT:  func.return %0, %1, %2 : tensor<2x2xf16>, tensor<2x2xbf16>, tensor<1x1xf64>
// CHECK-NEXT:  }
