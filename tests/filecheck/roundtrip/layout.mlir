// Round trip of the layout ops: transpose {permutation}, reshape (result type only, to and from
// rank 0), broadcast_in_dim {broadcast_dimensions} (including the empty array for a scalar),
// slice {start, limit} with and without strides, and variadic concat with 1, 2 and 3 operands.
// Layout ops accept integer and i1 element types too.
// RUN: lamina-opt %s | lamina-opt | filecheck --match-full-lines %s
// RUN: lamina-opt %s --print-op-generic | lamina-opt | filecheck --match-full-lines %s

func.func @transpose_reshape(%x: tensor<2x3x4xf32>, %m: tensor<4x6xi32>, %one: tensor<1xf32>) -> (tensor<4x2x3xf32>, tensor<6x4xi32>, tensor<2x3x4xf32>, tensor<24xi32>, tensor<f32>, tensor<1x1xf32>) {
  %0 = lamina.transpose %x {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %1 = lamina.transpose %m {permutation = array<i64: 1, 0>} : (tensor<4x6xi32>) -> tensor<6x4xi32>
  %2 = lamina.transpose %x {permutation = array<i64: 0, 1, 2>} : tensor<2x3x4xf32>
  %3 = lamina.reshape %m : (tensor<4x6xi32>) -> tensor<24xi32>
  %4 = lamina.reshape %one : (tensor<1xf32>) -> tensor<f32>
  %5 = lamina.reshape %4 : (tensor<f32>) -> tensor<1x1xf32>
  func.return %0, %1, %2, %3, %4, %5 : tensor<4x2x3xf32>, tensor<6x4xi32>, tensor<2x3x4xf32>, tensor<24xi32>, tensor<f32>, tensor<1x1xf32>
}
// CHECK-LABEL: func.func @transpose_reshape(%x: tensor<2x3x4xf32>, %m: tensor<4x6xi32>, %one: tensor<1xf32>) -> (tensor<4x2x3xf32>, tensor<6x4xi32>, tensor<2x3x4xf32>, tensor<24xi32>, tensor<f32>, tensor<1x1xf32>) {
// CHECK-NEXT:  %0 = lamina.transpose %x {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
// CHECK-NEXT:  %1 = lamina.transpose %m {permutation = array<i64: 1, 0>} : (tensor<4x6xi32>) -> tensor<6x4xi32>
// CHECK-NEXT:  %2 = lamina.transpose %x {permutation = array<i64: 0, 1, 2>} : tensor<2x3x4xf32>
// CHECK-NEXT:  %3 = lamina.reshape %m : (tensor<4x6xi32>) -> tensor<24xi32>
// CHECK-NEXT:  %4 = lamina.reshape %one : (tensor<1xf32>) -> tensor<f32>
// CHECK-NEXT:  %5 = lamina.reshape %4 : (tensor<f32>) -> tensor<1x1xf32>
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4, %5 : tensor<4x2x3xf32>, tensor<6x4xi32>, tensor<2x3x4xf32>, tensor<24xi32>, tensor<f32>, tensor<1x1xf32>
// CHECK-NEXT:  }

func.func @broadcast_in_dim_forms(%v: tensor<8xf32>, %col: tensor<4x1xf32>, %s: tensor<f16>, %p: tensor<3xi1>) -> (tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x3x6xf32>, tensor<2x2xf16>, tensor<3x2xi1>, tensor<8xf32>) {
  %0 = lamina.broadcast_in_dim %v {broadcast_dimensions = array<i64: 1>} : (tensor<8xf32>) -> tensor<4x8xf32>
  %1 = lamina.broadcast_in_dim %v {broadcast_dimensions = array<i64: 0>} : (tensor<8xf32>) -> tensor<8x4xf32>
  %2 = lamina.broadcast_in_dim %col {broadcast_dimensions = array<i64: 0, 2>} : (tensor<4x1xf32>) -> tensor<4x3x6xf32>
  %3 = lamina.broadcast_in_dim %s {broadcast_dimensions = array<i64>} : (tensor<f16>) -> tensor<2x2xf16>
  %4 = lamina.broadcast_in_dim %p {broadcast_dimensions = array<i64: 0>} : (tensor<3xi1>) -> tensor<3x2xi1>
  %5 = lamina.broadcast_in_dim %v {broadcast_dimensions = array<i64: 0>} : tensor<8xf32>
  func.return %0, %1, %2, %3, %4, %5 : tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x3x6xf32>, tensor<2x2xf16>, tensor<3x2xi1>, tensor<8xf32>
}
// CHECK-LABEL: func.func @broadcast_in_dim_forms(%v: tensor<8xf32>, %col: tensor<4x1xf32>, %s: tensor<f16>, %p: tensor<3xi1>) -> (tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x3x6xf32>, tensor<2x2xf16>, tensor<3x2xi1>, tensor<8xf32>) {
// CHECK-NEXT:  %0 = lamina.broadcast_in_dim %v {broadcast_dimensions = array<i64: 1>} : (tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:  %1 = lamina.broadcast_in_dim %v {broadcast_dimensions = array<i64: 0>} : (tensor<8xf32>) -> tensor<8x4xf32>
// CHECK-NEXT:  %2 = lamina.broadcast_in_dim %col {broadcast_dimensions = array<i64: 0, 2>} : (tensor<4x1xf32>) -> tensor<4x3x6xf32>
// CHECK-NEXT:  %3 = lamina.broadcast_in_dim %s {broadcast_dimensions = array<i64>} : (tensor<f16>) -> tensor<2x2xf16>
// CHECK-NEXT:  %4 = lamina.broadcast_in_dim %p {broadcast_dimensions = array<i64: 0>} : (tensor<3xi1>) -> tensor<3x2xi1>
// CHECK-NEXT:  %5 = lamina.broadcast_in_dim %v {broadcast_dimensions = array<i64: 0>} : tensor<8xf32>
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4, %5 : tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x3x6xf32>, tensor<2x2xf16>, tensor<3x2xi1>, tensor<8xf32>
// CHECK-NEXT:  }

func.func @slice_forms(%x: tensor<8x8xf32>, %i: tensor<10xi64>) -> (tensor<4x8xf32>, tensor<2x3xf32>, tensor<0x8xf32>, tensor<8x8xf32>, tensor<5xi64>) {
  %0 = lamina.slice %x {start = array<i64: 2, 0>, limit = array<i64: 6, 8>} : (tensor<8x8xf32>) -> tensor<4x8xf32>
  %1 = lamina.slice %x {start = array<i64: 1, 0>, limit = array<i64: 5, 7>, strides = array<i64: 2, 3>} : (tensor<8x8xf32>) -> tensor<2x3xf32>
  %2 = lamina.slice %x {start = array<i64: 3, 0>, limit = array<i64: 3, 8>} : (tensor<8x8xf32>) -> tensor<0x8xf32>
  %3 = lamina.slice %x {start = array<i64: 0, 0>, limit = array<i64: 8, 8>, strides = array<i64: 1, 1>} : tensor<8x8xf32>
  %4 = lamina.slice %i {start = array<i64: 0>, limit = array<i64: 10>, strides = array<i64: 2>} : (tensor<10xi64>) -> tensor<5xi64>
  func.return %0, %1, %2, %3, %4 : tensor<4x8xf32>, tensor<2x3xf32>, tensor<0x8xf32>, tensor<8x8xf32>, tensor<5xi64>
}
// CHECK-LABEL: func.func @slice_forms(%x: tensor<8x8xf32>, %i: tensor<10xi64>) -> (tensor<4x8xf32>, tensor<2x3xf32>, tensor<0x8xf32>, tensor<8x8xf32>, tensor<5xi64>) {
// CHECK-NEXT:  %0 = lamina.slice %x {start = array<i64: 2, 0>, limit = array<i64: 6, 8>} : (tensor<8x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:  %1 = lamina.slice %x {start = array<i64: 1, 0>, limit = array<i64: 5, 7>, strides = array<i64: 2, 3>} : (tensor<8x8xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %2 = lamina.slice %x {start = array<i64: 3, 0>, limit = array<i64: 3, 8>} : (tensor<8x8xf32>) -> tensor<0x8xf32>
// CHECK-NEXT:  %3 = lamina.slice %x {start = array<i64: 0, 0>, limit = array<i64: 8, 8>, strides = array<i64: 1, 1>} : tensor<8x8xf32>
// CHECK-NEXT:  %4 = lamina.slice %i {start = array<i64: 0>, limit = array<i64: 10>, strides = array<i64: 2>} : (tensor<10xi64>) -> tensor<5xi64>
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4 : tensor<4x8xf32>, tensor<2x3xf32>, tensor<0x8xf32>, tensor<8x8xf32>, tensor<5xi64>
// CHECK-NEXT:  }

func.func @concat_forms(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>, %c: tensor<2x5xf32>, %p: tensor<2xi1>) -> (tensor<2x3xf32>, tensor<6x3xf32>, tensor<2x11xf32>, tensor<4x3xf32>, tensor<4xi1>) {
  %0 = lamina.concat %a {dim = 0 : i64} : tensor<2x3xf32>
  %1 = lamina.concat %a, %b {dim = 0 : i64} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<6x3xf32>
  %2 = lamina.concat %a, %c, %a {dim = -1 : i64} : (tensor<2x3xf32>, tensor<2x5xf32>, tensor<2x3xf32>) -> tensor<2x11xf32>
  %3 = lamina.concat %a, %a {dim = 0 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  %4 = lamina.concat %p, %p {dim = 0 : i64} : (tensor<2xi1>, tensor<2xi1>) -> tensor<4xi1>
  func.return %0, %1, %2, %3, %4 : tensor<2x3xf32>, tensor<6x3xf32>, tensor<2x11xf32>, tensor<4x3xf32>, tensor<4xi1>
}
// CHECK-LABEL: func.func @concat_forms(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>, %c: tensor<2x5xf32>, %p: tensor<2xi1>) -> (tensor<2x3xf32>, tensor<6x3xf32>, tensor<2x11xf32>, tensor<4x3xf32>, tensor<4xi1>) {
// CHECK-NEXT:  %0 = lamina.concat %a {dim = 0 : i64} : tensor<2x3xf32>
// CHECK-NEXT:  %1 = lamina.concat %a, %b {dim = 0 : i64} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<6x3xf32>
// CHECK-NEXT:  %2 = lamina.concat %a, %c, %a {dim = -1 : i64} : (tensor<2x3xf32>, tensor<2x5xf32>, tensor<2x3xf32>) -> tensor<2x11xf32>
// CHECK-NEXT:  %3 = lamina.concat %a, %a {dim = 0 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
// CHECK-NEXT:  %4 = lamina.concat %p, %p {dim = 0 : i64} : (tensor<2xi1>, tensor<2xi1>) -> tensor<4xi1>
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4 : tensor<2x3xf32>, tensor<6x3xf32>, tensor<2x11xf32>, tensor<4x3xf32>, tensor<4xi1>
// CHECK-NEXT:  }
