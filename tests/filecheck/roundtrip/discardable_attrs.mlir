// Discardable attributes: a dialect-prefixed name (`mytool.tag`) is kept on any lamina op and
// round-trips in both forms; an undotted unknown name is a typo and is rejected (see
// invalid/attributes.mlir), in the custom form by the parser and in the generic form by the verifier.
// RUN: lamina-opt %s | lamina-opt | filecheck %s
// RUN: lamina-opt %s --print-op-generic | lamina-opt | filecheck %s

func.func @tagged(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "lamina.add"(%a, %a) {mytool.tag = "x"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = lamina.gelu %0 {approximate = "tanh", mytool.note = 3 : i64} : tensor<4xf32>
  func.return %1 : tensor<4xf32>
}
// CHECK-LABEL: func.func @tagged
// CHECK-NEXT:  %0 = lamina.add %a, %a {mytool.tag = "x"} : tensor<4xf32>
// CHECK-NEXT:  %1 = lamina.gelu %0 {approximate = "tanh", mytool.note = 3 : i64} : tensor<4xf32>
