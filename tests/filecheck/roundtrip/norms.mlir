// Round trip of layernorm (optional 'scale' and 'bias' operands: none, either, both), rmsnorm
// (optional 'scale') and softmax (with its `safe`). Attributes axis/eps/safe are printed only when
// given; the operand type list appears whenever scale/bias are present.
// RUN: lamina-opt %s | lamina-opt | filecheck --match-full-lines %s
// RUN: lamina-opt %s --print-op-generic | lamina-opt | filecheck --match-full-lines %s

func.func @layernorm_forms(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = lamina.layernorm %x : tensor<4x8xf32>
  %1 = lamina.layernorm %x {axis = -1 : i64, eps = 1.000000e-05 : f64} : tensor<4x8xf32>
  %2 = lamina.layernorm %x scale %g {axis = 1 : i64} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %3 = lamina.layernorm %x bias %b {eps = 1.000000e-06 : f64} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %4 = lamina.layernorm %x scale %g bias %b {axis = -1 : i64, eps = 0.000000e+00 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  func.return %0, %1, %2, %3, %4 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
// CHECK-LABEL: func.func @layernorm_forms(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
// CHECK-NEXT:  %0 = lamina.layernorm %x : tensor<4x8xf32>
// CHECK-NEXT:  %1 = lamina.layernorm %x {axis = -1 : i64, eps = 1.000000e-05 : f64} : tensor<4x8xf32>
// CHECK-NEXT:  %2 = lamina.layernorm %x scale %g {axis = 1 : i64} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:  %3 = lamina.layernorm %x bias %b {eps = 1.000000e-06 : f64} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:  %4 = lamina.layernorm %x scale %g bias %b {axis = -1 : i64, eps = 0.000000e+00 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
// CHECK-NEXT:  }

func.func @layernorm_multi_axis(%x: tensor<2x3x4xbf16>, %g: tensor<3x4xbf16>, %b: tensor<3x4xbf16>) -> tensor<2x3x4xbf16> {
  %0 = lamina.layernorm %x scale %g bias %b {axis = 1 : i64} : (tensor<2x3x4xbf16>, tensor<3x4xbf16>, tensor<3x4xbf16>) -> tensor<2x3x4xbf16>
  func.return %0 : tensor<2x3x4xbf16>
}
// CHECK-LABEL: func.func @layernorm_multi_axis(%x: tensor<2x3x4xbf16>, %g: tensor<3x4xbf16>, %b: tensor<3x4xbf16>) -> tensor<2x3x4xbf16> {
// CHECK-NEXT:  %0 = lamina.layernorm %x scale %g bias %b {axis = 1 : i64} : (tensor<2x3x4xbf16>, tensor<3x4xbf16>, tensor<3x4xbf16>) -> tensor<2x3x4xbf16>
// CHECK-NEXT:  func.return %0 : tensor<2x3x4xbf16>
// CHECK-NEXT:  }

// rank-1 operand: scale, bias and result share one type, so the single-type form is used
func.func @layernorm_rank1(%x: tensor<8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %0 = lamina.layernorm %x scale %g bias %b : tensor<8xf32>
  %1 = lamina.rmsnorm %x scale %g {eps = 1.000000e-06 : f64} : tensor<8xf32>
  func.return %0, %1 : tensor<8xf32>, tensor<8xf32>
}
// CHECK-LABEL: func.func @layernorm_rank1(%x: tensor<8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
// CHECK-NEXT:  %0 = lamina.layernorm %x scale %g bias %b : tensor<8xf32>
// CHECK-NEXT:  %1 = lamina.rmsnorm %x scale %g {eps = 1.000000e-06 : f64} : tensor<8xf32>
// CHECK-NEXT:  func.return %0, %1 : tensor<8xf32>, tensor<8xf32>
// CHECK-NEXT:  }

func.func @layernorm_keyword_order(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = lamina.layernorm %x bias %b scale %g : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}
// CHECK-LABEL: func.func @layernorm_keyword_order(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT:  %0 = lamina.layernorm %x scale %g bias %b : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:  func.return %0 : tensor<4x8xf32>
// CHECK-NEXT:  }

func.func @rmsnorm_forms(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %h: tensor<4x8xf16>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf16>) {
  %0 = lamina.rmsnorm %x : tensor<4x8xf32>
  %1 = lamina.rmsnorm %x scale %g {axis = -1 : i64, eps = 1.000000e-06 : f64} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %2 = lamina.rmsnorm %h {axis = 0 : i64} : tensor<4x8xf16>
  func.return %0, %1, %2 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf16>
}
// CHECK-LABEL: func.func @rmsnorm_forms(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %h: tensor<4x8xf16>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf16>) {
// CHECK-NEXT:  %0 = lamina.rmsnorm %x : tensor<4x8xf32>
// CHECK-NEXT:  %1 = lamina.rmsnorm %x scale %g {axis = -1 : i64, eps = 1.000000e-06 : f64} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:  %2 = lamina.rmsnorm %h {axis = 0 : i64} : tensor<4x8xf16>
// CHECK-NEXT:  func.return %0, %1, %2 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf16>
// CHECK-NEXT:  }

func.func @softmax_forms(%x: tensor<2x4x8xf32>, %d: tensor<5xf64>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<5xf64>) {
  %0 = lamina.softmax %x : tensor<2x4x8xf32>
  %1 = lamina.softmax %x {axis = -1 : i64} : tensor<2x4x8xf32>
  %2 = lamina.softmax %x {axis = 1 : i64} : tensor<2x4x8xf32>
  %3 = lamina.softmax %d {axis = 0 : i64} : tensor<5xf64>
  func.return %0, %1, %2, %3 : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<5xf64>
}
// CHECK-LABEL: func.func @softmax_forms(%x: tensor<2x4x8xf32>, %d: tensor<5xf64>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<5xf64>) {
// CHECK-NEXT:  %0 = lamina.softmax %x : tensor<2x4x8xf32>
// CHECK-NEXT:  %1 = lamina.softmax %x {axis = -1 : i64} : tensor<2x4x8xf32>
// CHECK-NEXT:  %2 = lamina.softmax %x {axis = 1 : i64} : tensor<2x4x8xf32>
// CHECK-NEXT:  %3 = lamina.softmax %d {axis = 0 : i64} : tensor<5xf64>
// CHECK-NEXT:  func.return %0, %1, %2, %3 : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<5xf64>
// CHECK-NEXT:  }

// softmax's `safe` (0 on a line of only -inf) is printed when given, true or false
func.func @softmax_safe(%x: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %0 = lamina.softmax %x {safe = true} : tensor<2x4x8xf32>
  %1 = lamina.softmax %x {axis = 1 : i64, safe = true} : tensor<2x4x8xf32>
  %2 = lamina.softmax %x {axis = -1 : i64, safe = false} : tensor<2x4x8xf32>
  func.return %0, %1, %2 : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
}
// CHECK-LABEL: func.func @softmax_safe(%x: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
// CHECK-NEXT:  %0 = lamina.softmax %x {safe = true} : tensor<2x4x8xf32>
// CHECK-NEXT:  %1 = lamina.softmax %x {axis = 1 : i64, safe = true} : tensor<2x4x8xf32>
// CHECK-NEXT:  %2 = lamina.softmax %x {axis = -1 : i64, safe = false} : tensor<2x4x8xf32>
// CHECK-NEXT:  func.return %0, %1, %2 : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
// CHECK-NEXT:  }
