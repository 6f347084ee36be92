// Round trip of cast (every element type to every other family; always the '(T) -> R' form since
// the element types differ, and the single-type form for a same-type cast) and of constant
// (value printed in place: splat and dense literals, rank 0 to rank 3, every element type,
// negative and fractional floats printed in MLIR's canonical exponent form).
// RUN: lamina-opt %s | lamina-opt | filecheck --match-full-lines %s
// RUN: lamina-opt %s --print-op-generic | lamina-opt | filecheck --match-full-lines %s

func.func @casts(%f: tensor<2x3xf32>, %h: tensor<2x3xf16>, %b: tensor<2x3xbf16>, %d: tensor<2x3xf64>, %p: tensor<2x3xi1>, %i: tensor<2x3xi32>, %l: tensor<2x3xi64>) -> (tensor<2x3xf16>, tensor<2x3xbf16>, tensor<2x3xf64>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xi1>, tensor<2x3xi32>, tensor<2x3xi64>, tensor<2x3xf32>, tensor<2x3xi64>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %0 = lamina.cast %f : (tensor<2x3xf32>) -> tensor<2x3xf16>
  %1 = lamina.cast %f : (tensor<2x3xf32>) -> tensor<2x3xbf16>
  %2 = lamina.cast %f : (tensor<2x3xf32>) -> tensor<2x3xf64>
  %3 = lamina.cast %h : (tensor<2x3xf16>) -> tensor<2x3xf32>
  %4 = lamina.cast %b : (tensor<2x3xbf16>) -> tensor<2x3xf32>
  %5 = lamina.cast %d : (tensor<2x3xf64>) -> tensor<2x3xf32>
  %6 = lamina.cast %f : (tensor<2x3xf32>) -> tensor<2x3xi1>
  %7 = lamina.cast %f : (tensor<2x3xf32>) -> tensor<2x3xi32>
  %8 = lamina.cast %i : (tensor<2x3xi32>) -> tensor<2x3xi64>
  %9 = lamina.cast %p : (tensor<2x3xi1>) -> tensor<2x3xf32>
  %10 = lamina.cast %p : (tensor<2x3xi1>) -> tensor<2x3xi64>
  %11 = lamina.cast %l : (tensor<2x3xi64>) -> tensor<2x3xf32>
  %12 = lamina.cast %f : tensor<2x3xf32>
  func.return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12 : tensor<2x3xf16>, tensor<2x3xbf16>, tensor<2x3xf64>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xi1>, tensor<2x3xi32>, tensor<2x3xi64>, tensor<2x3xf32>, tensor<2x3xi64>, tensor<2x3xf32>, tensor<2x3xf32>
}
// CHECK-LABEL: func.func @casts(%f: tensor<2x3xf32>, %h: tensor<2x3xf16>, %b: tensor<2x3xbf16>, %d: tensor<2x3xf64>, %p: tensor<2x3xi1>, %i: tensor<2x3xi32>, %l: tensor<2x3xi64>) -> (tensor<2x3xf16>, tensor<2x3xbf16>, tensor<2x3xf64>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xi1>, tensor<2x3xi32>, tensor<2x3xi64>, tensor<2x3xf32>, tensor<2x3xi64>, tensor<2x3xf32>, tensor<2x3xf32>) {
// CHECK-NEXT:  %0 = lamina.cast %f : (tensor<2x3xf32>) -> tensor<2x3xf16>
// CHECK-NEXT:  %1 = lamina.cast %f : (tensor<2x3xf32>) -> tensor<2x3xbf16>
// CHECK-NEXT:  %2 = lamina.cast %f : (tensor<2x3xf32>) -> tensor<2x3xf64>
// CHECK-NEXT:  %3 = lamina.cast %h : (tensor<2x3xf16>) -> tensor<2x3xf32>
// CHECK-NEXT:  %4 = lamina.cast %b : (tensor<2x3xbf16>) -> tensor<2x3xf32>
// CHECK-NEXT:  %5 = lamina.cast %d : (tensor<2x3xf64>) -> tensor<2x3xf32>
// CHECK-NEXT:  %6 = lamina.cast %f : (tensor<2x3xf32>) -> tensor<2x3xi1>
// CHECK-NEXT:  %7 = lamina.cast %f : (tensor<2x3xf32>) -> tensor<2x3xi32>
// CHECK-NEXT:  %8 = lamina.cast %i : (tensor<2x3xi32>) -> tensor<2x3xi64>
// CHECK-NEXT:  %9 = lamina.cast %p : (tensor<2x3xi1>) -> tensor<2x3xf32>
// CHECK-NEXT:  %10 = lamina.cast %p : (tensor<2x3xi1>) -> tensor<2x3xi64>
// CHECK-NEXT:  %11 = lamina.cast %l : (tensor<2x3xi64>) -> tensor<2x3xf32>
// CHECK-NEXT:  %12 = lamina.cast %f : tensor<2x3xf32>
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12 : tensor<2x3xf16>, tensor<2x3xbf16>, tensor<2x3xf64>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xi1>, tensor<2x3xi32>, tensor<2x3xi64>, tensor<2x3xf32>, tensor<2x3xi64>, tensor<2x3xf32>, tensor<2x3xf32>
// CHECK-NEXT:  }

func.func @cast_rank0(%s: tensor<f64>) -> tensor<i32> {
  %0 = lamina.cast %s : (tensor<f64>) -> tensor<i32>
  func.return %0 : tensor<i32>
}
// CHECK-LABEL: func.func @cast_rank0(%s: tensor<f64>) -> tensor<i32> {
// CHECK-NEXT:  %0 = lamina.cast %s : (tensor<f64>) -> tensor<i32>
// CHECK-NEXT:  func.return %0 : tensor<i32>
// CHECK-NEXT:  }

func.func @constants() -> (tensor<f32>, tensor<4x8xf32>, tensor<3xf32>, tensor<2x2xf32>, tensor<2x1x2xf32>, tensor<2xf16>, tensor<2xbf16>, tensor<2xf64>, tensor<i1>, tensor<3xi1>, tensor<2xi32>, tensor<2x2xi64>, tensor<0xf32>) {
  %0 = lamina.constant dense<1.000000e+00> : tensor<f32>
  %1 = lamina.constant dense<-2.500000e-01> : tensor<4x8xf32>
  %2 = lamina.constant dense<[1.000000e-01, 0.000000e+00, -3.000000e+00]> : tensor<3xf32>
  %3 = lamina.constant dense<[[1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]> : tensor<2x2xf32>
  %4 = lamina.constant dense<[[[1.000000e+00, 2.000000e+00]], [[3.000000e+00, 4.000000e+00]]]> : tensor<2x1x2xf32>
  %5 = lamina.constant dense<[5.000000e-01, 6.550400e+04]> : tensor<2xf16>
  %6 = lamina.constant dense<[1.000000e+00, -2.000000e+00]> : tensor<2xbf16>
  %7 = lamina.constant dense<[1.000000e-300, 1.000000e+300]> : tensor<2xf64>
  %8 = lamina.constant dense<true> : tensor<i1>
  %9 = lamina.constant dense<[true, false, true]> : tensor<3xi1>
  %10 = lamina.constant dense<[-7, 2147483647]> : tensor<2xi32>
  %11 = lamina.constant dense<[[0, 1], [-9223372036854775808, 9223372036854775807]]> : tensor<2x2xi64>
  %12 = lamina.constant dense<> : tensor<0xf32>
  func.return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12 : tensor<f32>, tensor<4x8xf32>, tensor<3xf32>, tensor<2x2xf32>, tensor<2x1x2xf32>, tensor<2xf16>, tensor<2xbf16>, tensor<2xf64>, tensor<i1>, tensor<3xi1>, tensor<2xi32>, tensor<2x2xi64>, tensor<0xf32>
}
// CHECK-LABEL: func.func @constants() -> (tensor<f32>, tensor<4x8xf32>, tensor<3xf32>, tensor<2x2xf32>, tensor<2x1x2xf32>, tensor<2xf16>, tensor<2xbf16>, tensor<2xf64>, tensor<i1>, tensor<3xi1>, tensor<2xi32>, tensor<2x2xi64>, tensor<0xf32>) {
// CHECK-NEXT:  %0 = lamina.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:  %1 = lamina.constant dense<-2.500000e-01> : tensor<4x8xf32>
// CHECK-NEXT:  %2 = lamina.constant dense<[1.000000e-01, 0.000000e+00, -3.000000e+00]> : tensor<3xf32>
// CHECK-NEXT:  %3 = lamina.constant dense<[[1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]> : tensor<2x2xf32>
// CHECK-NEXT:  %4 = lamina.constant dense<[[[1.000000e+00, 2.000000e+00]], [[3.000000e+00, 4.000000e+00]]]> : tensor<2x1x2xf32>
// CHECK-NEXT:  %5 = lamina.constant dense<[5.000000e-01, 6.550400e+04]> : tensor<2xf16>
// CHECK-NEXT:  %6 = lamina.constant dense<[1.000000e+00, -2.000000e+00]> : tensor<2xbf16>
// CHECK-NEXT:  %7 = lamina.constant dense<[1.000000e-300, 1.000000e+300]> : tensor<2xf64>
// CHECK-NEXT:  %8 = lamina.constant dense<true> : tensor<i1>
// CHECK-NEXT:  %9 = lamina.constant dense<[true, false, true]> : tensor<3xi1>
// CHECK-NEXT:  %10 = lamina.constant dense<[-7, 2147483647]> : tensor<2xi32>
// CHECK-NEXT:  %11 = lamina.constant dense<[[0, 1], [-9223372036854775808, 9223372036854775807]]> : tensor<2x2xi64>
// CHECK-NEXT:  %12 = lamina.constant dense<> : tensor<0xf32>
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12 : tensor<f32>, tensor<4x8xf32>, tensor<3xf32>, tensor<2x2xf32>, tensor<2x1x2xf32>, tensor<2xf16>, tensor<2xbf16>, tensor<2xf64>, tensor<i1>, tensor<3xi1>, tensor<2xi32>, tensor<2x2xi64>, tensor<0xf32>
// CHECK-NEXT:  }

func.func @constant_short_forms() -> (tensor<2xf32>, tensor<2xi32>, tensor<2xf32>) {
  %0 = lamina.constant dense<[1.0, 2.5]> : tensor<2xf32>
  %1 = lamina.constant dense<[3, 3]> : tensor<2xi32>
  %2 = "lamina.constant"() <{value = dense<0.5> : tensor<2xf32>}> : () -> tensor<2xf32>
  func.return %0, %1, %2 : tensor<2xf32>, tensor<2xi32>, tensor<2xf32>
}
// CHECK-LABEL: func.func @constant_short_forms() -> (tensor<2xf32>, tensor<2xi32>, tensor<2xf32>) {
// CHECK-NEXT:  %0 = lamina.constant dense<[1.000000e+00, 2.500000e+00]> : tensor<2xf32>
// CHECK-NEXT:  %1 = lamina.constant dense<3> : tensor<2xi32>
// CHECK-NEXT:  %2 = lamina.constant dense<5.000000e-01> : tensor<2xf32>
// CHECK-NEXT:  func.return %0, %1, %2 : tensor<2xf32>, tensor<2xi32>, tensor<2xf32>
// CHECK-NEXT:  }
