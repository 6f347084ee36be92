// Round trip of the 6 compare ops (result element type i1, operands of any one element type,
// broadcasting) and of select (i1 condition, broadcasting all three operands). select of i1
// values whose operands all share the result type prints the single-type form.
// RUN: lamina-opt %s | lamina-opt | filecheck --match-full-lines %s
// RUN: lamina-opt %s --print-op-generic | lamina-opt | filecheck --match-full-lines %s

func.func @compare_f32(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %row: tensor<8xf32>, %s: tensor<f32>) -> (tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>) {
  %0 = lamina.eq %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
  %1 = lamina.ne %a, %row : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
  %2 = lamina.lt %s, %a : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xi1>
  %3 = lamina.le %a, %s : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xi1>
  %4 = lamina.gt %row, %b : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
  %5 = lamina.ge %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
  func.return %0, %1, %2, %3, %4, %5 : tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>
}
// CHECK-LABEL: func.func @compare_f32(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %row: tensor<8xf32>, %s: tensor<f32>) -> (tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>) {
// CHECK-NEXT:  %0 = lamina.eq %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
// CHECK-NEXT:  %1 = lamina.ne %a, %row : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
// CHECK-NEXT:  %2 = lamina.lt %s, %a : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xi1>
// CHECK-NEXT:  %3 = lamina.le %a, %s : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xi1>
// CHECK-NEXT:  %4 = lamina.gt %row, %b : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
// CHECK-NEXT:  %5 = lamina.ge %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4, %5 : tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>
// CHECK-NEXT:  }

func.func @compare_types(%h: tensor<3xf16>, %b: tensor<3xbf16>, %d: tensor<3xf64>, %i: tensor<3xi32>, %l: tensor<3xi64>, %p: tensor<3xi1>) -> (tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>) {
  %0 = lamina.lt %h, %h : (tensor<3xf16>, tensor<3xf16>) -> tensor<3xi1>
  %1 = lamina.gt %b, %b : (tensor<3xbf16>, tensor<3xbf16>) -> tensor<3xi1>
  %2 = lamina.le %d, %d : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xi1>
  %3 = lamina.ge %i, %i : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi1>
  %4 = lamina.ne %l, %l : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi1>
  %5 = lamina.eq %p, %p : tensor<3xi1>
  func.return %0, %1, %2, %3, %4, %5 : tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>
}
// CHECK-LABEL: func.func @compare_types(%h: tensor<3xf16>, %b: tensor<3xbf16>, %d: tensor<3xf64>, %i: tensor<3xi32>, %l: tensor<3xi64>, %p: tensor<3xi1>) -> (tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>) {
// CHECK-NEXT:  %0 = lamina.lt %h, %h : (tensor<3xf16>, tensor<3xf16>) -> tensor<3xi1>
// CHECK-NEXT:  %1 = lamina.gt %b, %b : (tensor<3xbf16>, tensor<3xbf16>) -> tensor<3xi1>
// CHECK-NEXT:  %2 = lamina.le %d, %d : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xi1>
// CHECK-NEXT:  %3 = lamina.ge %i, %i : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi1>
// CHECK-NEXT:  %4 = lamina.ne %l, %l : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi1>
// CHECK-NEXT:  %5 = lamina.eq %p, %p : tensor<3xi1>
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4, %5 : tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>
// CHECK-NEXT:  }

func.func @select_forms(%c: tensor<4x8xi1>, %crow: tensor<8xi1>, %a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %s: tensor<f32>, %i: tensor<4x8xi32>, %p: tensor<4x8xi1>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xi32>, tensor<4x8xi1>) {
  %0 = lamina.select %c, %a, %b : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = lamina.select %crow, %a, %s : (tensor<8xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %2 = lamina.select %c, %s, %s : (tensor<4x8xi1>, tensor<f32>, tensor<f32>) -> tensor<4x8xf32>
  %3 = lamina.select %c, %i, %i : (tensor<4x8xi1>, tensor<4x8xi32>, tensor<4x8xi32>) -> tensor<4x8xi32>
  %4 = lamina.select %c, %p, %c : tensor<4x8xi1>
  func.return %0, %1, %2, %3, %4 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xi32>, tensor<4x8xi1>
}
// CHECK-LABEL: func.func @select_forms(%c: tensor<4x8xi1>, %crow: tensor<8xi1>, %a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %s: tensor<f32>, %i: tensor<4x8xi32>, %p: tensor<4x8xi1>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xi32>, tensor<4x8xi1>) {
// CHECK-NEXT:  %0 = lamina.select %c, %a, %b : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:  %1 = lamina.select %crow, %a, %s : (tensor<8xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT:  %2 = lamina.select %c, %s, %s : (tensor<4x8xi1>, tensor<f32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT:  %3 = lamina.select %c, %i, %i : (tensor<4x8xi1>, tensor<4x8xi32>, tensor<4x8xi32>) -> tensor<4x8xi32>
// CHECK-NEXT:  %4 = lamina.select %c, %p, %c : tensor<4x8xi1>
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xi32>, tensor<4x8xi1>
// CHECK-NEXT:  }
