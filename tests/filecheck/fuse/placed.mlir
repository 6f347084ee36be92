// RUN: lamina-opt %s -p 'propagate-sharding,insert-collectives{target=h100-node},fuse-elementwise' | filecheck %s
// RUN: lamina-opt %s -p 'propagate-sharding,insert-collectives{target=h100-node},fuse-elementwise' --explain 2>&1 >/dev/null | filecheck %s --check-prefix=WHY

// Placed programs fuse: the bias %b1 is placed [[model]] and the activations [[data], [model]]
// (they agree on the dimension they share), so bias add + GeLU is one kernel carrying its
// result's placement, the epilogue of the first matmul (each device holds a block of W1: a
// matmul by a weight matrix); the second matmul reads the GeLU whole, and the pending sum's
// all_reduce is a boundary: the second bias add, whose producer is that collective, is alone.
// CHECK-LABEL: func.func @mlp
// CHECK:         %g = lamina.fused "matmul" (%x_1 = %x, %w1_1 = %w1, %b1_1 = %b1) : (tensor<16x8xf32, #lamina.place<@m, {{\[\[}}data], []]>>, tensor<8x32xf32, #lamina.place<@m, {{\[\[}}], [model]]>>, tensor<32xf32, #lamina.place<@m, {{\[\[}}model]]>>) -> tensor<16x32xf32, #lamina.place<@m, {{\[\[}}data], [model]]>> {
// CHECK-NEXT:      %h = lamina.matmul %x_1, %w1_1
// CHECK-NEXT:      %hb = lamina.add %h, %b1_1
// CHECK-NEXT:      %g_1 = lamina.gelu %hb
// CHECK-NEXT:      lamina.yield %g_1
// CHECK-NEXT:    }
// CHECK-NEXT:    %y = lamina.matmul %g, %w2
// CHECK-NEXT:    %0 = lamina.all_reduce %y
// CHECK-NEXT:    %yb = lamina.add %0, %b2
// CHECK-NOT:     lamina.fused
// WHY: placed.mlir:27:3: fused %hb = lamina.add with %h = lamina.matmul (loop over 16x32)
// WHY: placed.mlir:28:3: fused %g = lamina.gelu with %hb = lamina.add (loop over 16x32)
// WHY: placed.mlir:29:3: not fused with %g = lamina.gelu: a matmul reads its operands whole
// WHY: placed.mlir:30:3: not fused: %0 = lamina.all_reduce is not an op-table op
lamina.mesh @m [data = 2, model = 4]
func.func @mlp(%x: tensor<16x8xf32, #lamina.place<@m, [[data], []]>>, %w1: tensor<8x32xf32, #lamina.place<@m, [[], [model]]>>, %b1: tensor<32xf32>, %w2: tensor<32x8xf32>, %b2: tensor<8xf32>) -> tensor<16x8xf32, #lamina.place<@m, [[data], []]>> {
  %h = lamina.matmul %x, %w1 : (tensor<16x8xf32, #lamina.place<@m, [[data], []]>>, tensor<8x32xf32, #lamina.place<@m, [[], [model]]>>) -> tensor<16x32xf32>
  %hb = lamina.add %h, %b1 : (tensor<16x32xf32>, tensor<32xf32>) -> tensor<16x32xf32>
  %g = lamina.gelu %hb : tensor<16x32xf32>
  %y = lamina.matmul %g, %w2 : (tensor<16x32xf32>, tensor<32x8xf32>) -> tensor<16x8xf32>
  %yb = lamina.add %y, %b2 : (tensor<16x8xf32>, tensor<8xf32>) -> tensor<16x8xf32, #lamina.place<@m, [[data], []]>>
  func.return %yb : tensor<16x8xf32, #lamina.place<@m, [[data], []]>>
}
