// The generic form of Lamina ops: attributes become properties `<{...}>`, optional operands of
// layernorm are told apart by `operandSegmentSizes` (scale only: 1, 1, 0; bias only: 1, 0, 1),
// single-optional ops (rmsnorm, dropout) need no segment sizes, constants carry `value`.
// RUN: lamina-opt %s --print-op-generic | filecheck --match-full-lines %s
// RUN: lamina-opt %s | lamina-opt --print-op-generic | filecheck --match-full-lines %s

func.func @generic(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>, %s: tensor<i64>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x8xf32>, tensor<f32>, tensor<4x8xf32>) {
  %0 = lamina.layernorm %x scale %g {eps = 1.000000e-05 : f64} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = lamina.layernorm %x bias %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %2 = lamina.rmsnorm %x scale %g : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %3 = lamina.dropout %x seed %s {rate = 1.000000e-01 : f64} : (tensor<4x8xf32>, tensor<i64>) -> tensor<4x8xf32>
  %4 = lamina.concat %x, %x {dim = 0 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %5 = lamina.constant dense<1.000000e+00> : tensor<f32>
  %6 = lamina.add %x, %5 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  func.return %0, %1, %2, %3, %4, %5, %6 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x8xf32>, tensor<f32>, tensor<4x8xf32>
}
// CHECK:      ^bb0(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>, %s: tensor<i64>):
// CHECK-NEXT: %0 = "lamina.layernorm"(%x, %g) <{eps = 1.000000e-05 : f64, operandSegmentSizes = array<i32: 1, 1, 0>}> : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %1 = "lamina.layernorm"(%x, %b) <{operandSegmentSizes = array<i32: 1, 0, 1>}> : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %2 = "lamina.rmsnorm"(%x, %g) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %3 = "lamina.dropout"(%x, %s) <{rate = 1.000000e-01 : f64}> : (tensor<4x8xf32>, tensor<i64>) -> tensor<4x8xf32>
// CHECK-NEXT: %4 = "lamina.concat"(%x, %x) <{dim = 0 : i64}> : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %5 = "lamina.constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
// CHECK-NEXT: %6 = "lamina.add"(%x, %5) : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
