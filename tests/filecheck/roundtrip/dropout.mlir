// Round trip of dropout: seed as an attribute (single-type form), seed as an i64 or i32 rank-0
// operand after the 'seed' keyword (type list form), rate 0, and half-precision inputs.
// RUN: lamina-opt %s | lamina-opt | filecheck --match-full-lines %s
// RUN: lamina-opt %s --print-op-generic | lamina-opt | filecheck --match-full-lines %s

func.func @dropout_forms(%x: tensor<4x8xf32>, %s: tensor<i64>, %s32: tensor<i32>, %h: tensor<4x8xf16>, %b: tensor<4x8xbf16>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xbf16>) {
  %0 = lamina.dropout %x {rate = 1.000000e-01 : f64, seed = 42 : i64} : tensor<4x8xf32>
  %1 = lamina.dropout %x seed %s {rate = 5.000000e-01 : f64} : (tensor<4x8xf32>, tensor<i64>) -> tensor<4x8xf32>
  %2 = lamina.dropout %x seed %s32 {rate = 2.500000e-01 : f64} : (tensor<4x8xf32>, tensor<i32>) -> tensor<4x8xf32>
  %3 = lamina.dropout %x {rate = 0.000000e+00 : f64, seed = -1 : i64} : tensor<4x8xf32>
  %4 = lamina.dropout %h {rate = 1.000000e-01 : f64, seed = 0 : i64} : tensor<4x8xf16>
  %5 = lamina.dropout %b seed %s {rate = 9.900000e-01 : f64} : (tensor<4x8xbf16>, tensor<i64>) -> tensor<4x8xbf16>
  func.return %0, %1, %2, %3, %4, %5 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xbf16>
}
// CHECK-LABEL: func.func @dropout_forms(%x: tensor<4x8xf32>, %s: tensor<i64>, %s32: tensor<i32>, %h: tensor<4x8xf16>, %b: tensor<4x8xbf16>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xbf16>) {
// CHECK-NEXT:  %0 = lamina.dropout %x {rate = 1.000000e-01 : f64, seed = 42 : i64} : tensor<4x8xf32>
// CHECK-NEXT:  %1 = lamina.dropout %x seed %s {rate = 5.000000e-01 : f64} : (tensor<4x8xf32>, tensor<i64>) -> tensor<4x8xf32>
// CHECK-NEXT:  %2 = lamina.dropout %x seed %s32 {rate = 2.500000e-01 : f64} : (tensor<4x8xf32>, tensor<i32>) -> tensor<4x8xf32>
// CHECK-NEXT:  %3 = lamina.dropout %x {rate = 0.000000e+00 : f64, seed = -1 : i64} : tensor<4x8xf32>
// CHECK-NEXT:  %4 = lamina.dropout %h {rate = 1.000000e-01 : f64, seed = 0 : i64} : tensor<4x8xf16>
// CHECK-NEXT:  %5 = lamina.dropout %b seed %s {rate = 9.900000e-01 : f64} : (tensor<4x8xbf16>, tensor<i64>) -> tensor<4x8xbf16>
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4, %5 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xbf16>
// CHECK-NEXT:  }

func.func @dropout_attr_order(%x: tensor<8xf32>, %s: tensor<i64>) -> (tensor<8xf32>, tensor<8xf32>) {
  %0 = lamina.dropout %x {seed = 7 : i64, rate = 1.000000e-01 : f64} : tensor<8xf32>
  %1 = "lamina.dropout"(%x, %s) <{rate = 1.000000e-01 : f64}> : (tensor<8xf32>, tensor<i64>) -> tensor<8xf32>
  func.return %0, %1 : tensor<8xf32>, tensor<8xf32>
}
// CHECK-LABEL: func.func @dropout_attr_order(%x: tensor<8xf32>, %s: tensor<i64>) -> (tensor<8xf32>, tensor<8xf32>) {
// CHECK-NEXT:  %0 = lamina.dropout %x {seed = 7 : i64, rate = 1.000000e-01 : f64} : tensor<8xf32>
// CHECK-NEXT:  %1 = lamina.dropout %x seed %s {rate = 1.000000e-01 : f64} : (tensor<8xf32>, tensor<i64>) -> tensor<8xf32>
// CHECK-NEXT:  func.return %0, %1 : tensor<8xf32>, tensor<8xf32>
// CHECK-NEXT:  }
