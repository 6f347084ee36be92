// Round trip of the 12 unary elementwise ops: custom syntax in, the same text out, both directly
// and through the generic form. gelu's 'approximate' attribute is printed only when given.
// RUN: lamina-opt %s | lamina-opt | filecheck --match-full-lines %s
// RUN: lamina-opt %s --print-op-generic | lamina-opt | filecheck --match-full-lines %s

func.func @unary_f32(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = lamina.neg %x : tensor<4x8xf32>
  %1 = lamina.abs %0 : tensor<4x8xf32>
  %2 = lamina.exp %1 : tensor<4x8xf32>
  %3 = lamina.log %2 : tensor<4x8xf32>
  %4 = lamina.tanh %3 : tensor<4x8xf32>
  %5 = lamina.sigmoid %4 : tensor<4x8xf32>
  %6 = lamina.relu %5 : tensor<4x8xf32>
  %7 = lamina.gelu %6 : tensor<4x8xf32>
  %8 = lamina.gelu %7 {approximate = "none"} : tensor<4x8xf32>
  %9 = lamina.gelu %8 {approximate = "tanh"} : tensor<4x8xf32>
  %10 = lamina.erf %9 : tensor<4x8xf32>
  %11 = lamina.sqrt %10 : tensor<4x8xf32>
  %12 = lamina.rsqrt %11 : tensor<4x8xf32>
  %13 = lamina.reciprocal %12 : tensor<4x8xf32>
  func.return %13 : tensor<4x8xf32>
}
// CHECK-LABEL: func.func @unary_f32(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT:  %0 = lamina.neg %x : tensor<4x8xf32>
// CHECK-NEXT:  %1 = lamina.abs %0 : tensor<4x8xf32>
// CHECK-NEXT:  %2 = lamina.exp %1 : tensor<4x8xf32>
// CHECK-NEXT:  %3 = lamina.log %2 : tensor<4x8xf32>
// CHECK-NEXT:  %4 = lamina.tanh %3 : tensor<4x8xf32>
// CHECK-NEXT:  %5 = lamina.sigmoid %4 : tensor<4x8xf32>
// CHECK-NEXT:  %6 = lamina.relu %5 : tensor<4x8xf32>
// CHECK-NEXT:  %7 = lamina.gelu %6 : tensor<4x8xf32>
// CHECK-NEXT:  %8 = lamina.gelu %7 {approximate = "none"} : tensor<4x8xf32>
// CHECK-NEXT:  %9 = lamina.gelu %8 {approximate = "tanh"} : tensor<4x8xf32>
// CHECK-NEXT:  %10 = lamina.erf %9 : tensor<4x8xf32>
// CHECK-NEXT:  %11 = lamina.sqrt %10 : tensor<4x8xf32>
// CHECK-NEXT:  %12 = lamina.rsqrt %11 : tensor<4x8xf32>
// CHECK-NEXT:  %13 = lamina.reciprocal %12 : tensor<4x8xf32>
// CHECK-NEXT:  func.return %13 : tensor<4x8xf32>
// CHECK-NEXT:  }

func.func @unary_types(%h: tensor<2x3xf16>, %b: tensor<2x3xbf16>, %d: tensor<2x3xf64>, %s: tensor<f32>, %r: tensor<2x3x4x5xf32>, %e: tensor<0x3xf32>) -> (tensor<2x3xf16>, tensor<2x3xbf16>, tensor<2x3xf64>, tensor<f32>, tensor<2x3x4x5xf32>, tensor<0x3xf32>) {
  %0 = lamina.exp %h : tensor<2x3xf16>
  %1 = lamina.gelu %b {approximate = "tanh"} : tensor<2x3xbf16>
  %2 = lamina.erf %d : tensor<2x3xf64>
  %3 = lamina.rsqrt %s : tensor<f32>
  %4 = lamina.sigmoid %r : tensor<2x3x4x5xf32>
  %5 = lamina.relu %e : tensor<0x3xf32>
  func.return %0, %1, %2, %3, %4, %5 : tensor<2x3xf16>, tensor<2x3xbf16>, tensor<2x3xf64>, tensor<f32>, tensor<2x3x4x5xf32>, tensor<0x3xf32>
}
// CHECK-LABEL: func.func @unary_types(%h: tensor<2x3xf16>, %b: tensor<2x3xbf16>, %d: tensor<2x3xf64>, %s: tensor<f32>, %r: tensor<2x3x4x5xf32>, %e: tensor<0x3xf32>) -> (tensor<2x3xf16>, tensor<2x3xbf16>, tensor<2x3xf64>, tensor<f32>, tensor<2x3x4x5xf32>, tensor<0x3xf32>) {
// CHECK-NEXT:  %0 = lamina.exp %h : tensor<2x3xf16>
// CHECK-NEXT:  %1 = lamina.gelu %b {approximate = "tanh"} : tensor<2x3xbf16>
// CHECK-NEXT:  %2 = lamina.erf %d : tensor<2x3xf64>
// CHECK-NEXT:  %3 = lamina.rsqrt %s : tensor<f32>
// CHECK-NEXT:  %4 = lamina.sigmoid %r : tensor<2x3x4x5xf32>
// CHECK-NEXT:  %5 = lamina.relu %e : tensor<0x3xf32>
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4, %5 : tensor<2x3xf16>, tensor<2x3xbf16>, tensor<2x3xf64>, tensor<f32>, tensor<2x3x4x5xf32>, tensor<0x3xf32>
// CHECK-NEXT:  }

func.func @unary_long_form(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = lamina.neg %x : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "lamina.abs"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "lamina.gelu"(%1) <{approximate = "tanh"}> : (tensor<4xf32>) -> tensor<4xf32>
  func.return %2 : tensor<4xf32>
}
// CHECK-LABEL: func.func @unary_long_form(%x: tensor<4xf32>) -> tensor<4xf32> {
// CHECK-NEXT:  %0 = lamina.neg %x : tensor<4xf32>
// CHECK-NEXT:  %1 = lamina.abs %0 : tensor<4xf32>
// CHECK-NEXT:  %2 = lamina.gelu %1 {approximate = "tanh"} : tensor<4xf32>
// CHECK-NEXT:  func.return %2 : tensor<4xf32>
// CHECK-NEXT:  }
