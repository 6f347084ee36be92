// Round trip of reduce_sum, reduce_mean and reduce_max: 'axes' (an i64 array: one axis, several,
// negative), 'keepdims' absent / true / false (printed only when given), reduction to rank 0.
// RUN: lamina-opt %s | lamina-opt | filecheck --match-full-lines %s
// RUN: lamina-opt %s --print-op-generic | lamina-opt | filecheck --match-full-lines %s

func.func @reductions(%x: tensor<2x3x4xf32>) -> (tensor<2x3xf32>, tensor<2x1x4xf32>, tensor<3xf32>, tensor<f32>, tensor<1x1x1xf32>, tensor<2x3x1xf32>) {
  %0 = lamina.reduce_sum %x {axes = array<i64: 2>} : (tensor<2x3x4xf32>) -> tensor<2x3xf32>
  %1 = lamina.reduce_mean %x {axes = array<i64: 1>, keepdims = true} : (tensor<2x3x4xf32>) -> tensor<2x1x4xf32>
  %2 = lamina.reduce_max %x {axes = array<i64: 0, 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<3xf32>
  %3 = lamina.reduce_sum %x {axes = array<i64: 0, 1, 2>} : (tensor<2x3x4xf32>) -> tensor<f32>
  %4 = lamina.reduce_mean %x {axes = array<i64: 2, 0, 1>, keepdims = true} : (tensor<2x3x4xf32>) -> tensor<1x1x1xf32>
  %5 = lamina.reduce_max %x {axes = array<i64: -1>, keepdims = true} : (tensor<2x3x4xf32>) -> tensor<2x3x1xf32>
  func.return %0, %1, %2, %3, %4, %5 : tensor<2x3xf32>, tensor<2x1x4xf32>, tensor<3xf32>, tensor<f32>, tensor<1x1x1xf32>, tensor<2x3x1xf32>
}
// CHECK-LABEL: func.func @reductions(%x: tensor<2x3x4xf32>) -> (tensor<2x3xf32>, tensor<2x1x4xf32>, tensor<3xf32>, tensor<f32>, tensor<1x1x1xf32>, tensor<2x3x1xf32>) {
// CHECK-NEXT:  %0 = lamina.reduce_sum %x {axes = array<i64: 2>} : (tensor<2x3x4xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %1 = lamina.reduce_mean %x {axes = array<i64: 1>, keepdims = true} : (tensor<2x3x4xf32>) -> tensor<2x1x4xf32>
// CHECK-NEXT:  %2 = lamina.reduce_max %x {axes = array<i64: 0, 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<3xf32>
// CHECK-NEXT:  %3 = lamina.reduce_sum %x {axes = array<i64: 0, 1, 2>} : (tensor<2x3x4xf32>) -> tensor<f32>
// CHECK-NEXT:  %4 = lamina.reduce_mean %x {axes = array<i64: 2, 0, 1>, keepdims = true} : (tensor<2x3x4xf32>) -> tensor<1x1x1xf32>
// CHECK-NEXT:  %5 = lamina.reduce_max %x {axes = array<i64: -1>, keepdims = true} : (tensor<2x3x4xf32>) -> tensor<2x3x1xf32>
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4, %5 : tensor<2x3xf32>, tensor<2x1x4xf32>, tensor<3xf32>, tensor<f32>, tensor<1x1x1xf32>, tensor<2x3x1xf32>
// CHECK-NEXT:  }

func.func @reduction_types(%h: tensor<8xf16>, %b: tensor<8xbf16>, %d: tensor<8xf64>, %k: tensor<1xf32>) -> (tensor<f16>, tensor<bf16>, tensor<1xf64>, tensor<1xf32>) {
  %0 = lamina.reduce_sum %h {axes = array<i64: 0>} : (tensor<8xf16>) -> tensor<f16>
  %1 = lamina.reduce_mean %b {axes = array<i64: -1>} : (tensor<8xbf16>) -> tensor<bf16>
  %2 = lamina.reduce_max %d {axes = array<i64: 0>, keepdims = true} : (tensor<8xf64>) -> tensor<1xf64>
  %3 = lamina.reduce_sum %k {axes = array<i64: 0>, keepdims = true} : tensor<1xf32>
  func.return %0, %1, %2, %3 : tensor<f16>, tensor<bf16>, tensor<1xf64>, tensor<1xf32>
}
// CHECK-LABEL: func.func @reduction_types(%h: tensor<8xf16>, %b: tensor<8xbf16>, %d: tensor<8xf64>, %k: tensor<1xf32>) -> (tensor<f16>, tensor<bf16>, tensor<1xf64>, tensor<1xf32>) {
// CHECK-NEXT:  %0 = lamina.reduce_sum %h {axes = array<i64: 0>} : (tensor<8xf16>) -> tensor<f16>
// CHECK-NEXT:  %1 = lamina.reduce_mean %b {axes = array<i64: -1>} : (tensor<8xbf16>) -> tensor<bf16>
// CHECK-NEXT:  %2 = lamina.reduce_max %d {axes = array<i64: 0>, keepdims = true} : (tensor<8xf64>) -> tensor<1xf64>
// CHECK-NEXT:  %3 = lamina.reduce_sum %k {axes = array<i64: 0>, keepdims = true} : tensor<1xf32>
// CHECK-NEXT:  func.return %0, %1, %2, %3 : tensor<f16>, tensor<bf16>, tensor<1xf64>, tensor<1xf32>
// CHECK-NEXT:  }
