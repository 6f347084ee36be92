// RUN: lamina-opt %s -p 'fuse-elementwise{explain=true}' 2>&1 | filecheck %s
// RUN: lamina-opt %s -p fuse-elementwise --explain 2>&1 | filecheck %s
// RUN: lamina-opt %s -p 'fuse-elementwise{max-group-size=1}' --explain 2>&1 | filecheck %s --check-prefix=SIZE

// One line per decision, at the op it concerns, before the printed module. The matmul roots a
// kernel with its epilogue (neg, tanh) but reads its operand whole: exp + add stay a kernel.
// CHECK:      [fuse-elementwise] {{.*}}explain.mlir:21:3: fused %b = lamina.add with %a = lamina.exp (loop over 8x16)
// CHECK-NEXT: [fuse-elementwise] {{.*}}explain.mlir:22:3: not fused with %b = lamina.add: a matmul reads its operands whole, so an elementwise prologue stays its own kernel
// CHECK-NEXT: [fuse-elementwise] {{.*}}explain.mlir:23:3: fused %c = lamina.neg with %m = lamina.matmul (loop over 8x16)
// CHECK-NEXT: [fuse-elementwise] {{.*}}explain.mlir:24:3: fused %d = lamina.tanh with %c = lamina.neg (loop over 8x16)
// CHECK-NEXT: [fuse-elementwise] {{.*}}explain.mlir:20:3: group of 2 ops -> lamina.fused "loop" with 2 inputs, 1 outputs
// CHECK-NEXT: [fuse-elementwise] {{.*}}explain.mlir:22:3: group of 3 ops -> lamina.fused "matmul" with 2 inputs, 1 outputs
// CHECK-NEXT: builtin.module

// SIZE: not fused with %a = lamina.exp: group would exceed max-group-size=1
// SIZE: not fused with %m = lamina.matmul: group would exceed max-group-size=1
// SIZE-NOT: lamina.fused

func.func @f(%x: tensor<8x16xf32>, %y: tensor<8x16xf32>, %w: tensor<16x16xf32>) -> tensor<8x16xf32> {
  %a = lamina.exp %x : tensor<8x16xf32>
  %b = lamina.add %a, %y : tensor<8x16xf32>
  %m = lamina.matmul %b, %w : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %c = lamina.neg %m : tensor<8x16xf32>
  %d = lamina.tanh %c : tensor<8x16xf32>
  func.return %d : tensor<8x16xf32>
}
