// Round trip of sin, cos, cumsum (axis, exclusive, reverse) and pad (low, high, value): custom
// syntax in, the same text out, directly and through the generic form. cumsum's flags and pad's
// value are printed only when given.
// RUN: lamina-opt %s | lamina-opt | filecheck --match-full-lines %s
// RUN: lamina-opt %s --print-op-generic | lamina-opt | filecheck --match-full-lines %s

func.func @trig_scan_pad(%x: tensor<4x8xf32>, %i: tensor<4x8xi64>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xi64>, tensor<6x9xf32>) {
  %0 = lamina.sin %x : tensor<4x8xf32>
  %1 = lamina.cos %0 : tensor<4x8xf32>
  %2 = lamina.cumsum %1 {axis = 1 : i64} : tensor<4x8xf32>
  %3 = lamina.cumsum %i {axis = 0 : i64, exclusive = true, reverse = true} : tensor<4x8xi64>
  %4 = lamina.pad %2 {low = array<i64: 1, 0>, high = array<i64: 1, 1>, value = 2.5 : f64} : (tensor<4x8xf32>) -> tensor<6x9xf32>
  func.return %1, %2, %3, %4 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xi64>, tensor<6x9xf32>
}
// CHECK-LABEL: func.func @trig_scan_pad(%x: tensor<4x8xf32>, %i: tensor<4x8xi64>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xi64>, tensor<6x9xf32>) {
// CHECK-NEXT:  %0 = lamina.sin %x : tensor<4x8xf32>
// CHECK-NEXT:  %1 = lamina.cos %0 : tensor<4x8xf32>
// CHECK-NEXT:  %2 = lamina.cumsum %1 {axis = 1 : i64} : tensor<4x8xf32>
// CHECK-NEXT:  %3 = lamina.cumsum %i {axis = 0 : i64, exclusive = true, reverse = true} : tensor<4x8xi64>
// CHECK-NEXT:  %4 = lamina.pad %2 {low = array<i64: 1, 0>, high = array<i64: 1, 1>, value = 2.500000e+00 : f64} : (tensor<4x8xf32>) -> tensor<6x9xf32>
// CHECK-NEXT:  func.return %1, %2, %3, %4 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xi64>, tensor<6x9xf32>
// CHECK-NEXT:  }
