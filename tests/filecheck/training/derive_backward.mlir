// derive-backward adds @mlp_grad after @mlp: the forward's arguments, the loss and the gradients
// of the non-data arguments in argument order (recorded in lamina.gradients); the ops off the
// loss (%t) are not copied; each VJP is emitted at its forward op's location, in reverse order.
// RUN: lamina-opt %s -p 'derive-backward{data=x}' | filecheck %s
// RUN: lamina-opt %s -p 'derive-backward{data=x}' --explain 2>&1 | filecheck %s --check-prefix=EXPLAIN
// RUN: lamina-opt %s -p 'derive-backward{data=x}' --print-debuginfo | filecheck %s --check-prefix=LOC
// A non-scalar result is pulled back from a cotangent argument named after it.
// RUN: lamina-opt %s -p 'derive-backward{loss=1 wrt=x}' | filecheck %s --check-prefix=SEED
// RUN: lamina-opt %s -p 'derive-backward{data=x},cse,fuse-elementwise,annotate-lifetimes' | filecheck %s --check-prefix=PIPE

func.func @mlp(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> (tensor<f32>, tensor<4x8xf32>) {
  %h = lamina.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %hb = lamina.add %h, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %r = lamina.relu %hb : tensor<4x16xf32>
  %l = lamina.reduce_sum %r {axes = array<i64: 0, 1>} : (tensor<4x16xf32>) -> tensor<f32>
  %t = lamina.tanh %x : tensor<4x8xf32>
  func.return %l, %t : tensor<f32>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @mlp(
// CHECK:       func.func @mlp_grad(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> (tensor<f32>, tensor<8x16xf32>, tensor<16xf32>) attributes {lamina.gradients = array<i64: 1, 2>} {
// CHECK-NEXT:    %h = lamina.matmul %x, %w
// CHECK-NEXT:    %hb = lamina.add %h, %b
// CHECK-NEXT:    %r = lamina.relu %hb
// CHECK-NEXT:    %l = lamina.reduce_sum %r
// CHECK-NOT:     lamina.tanh
// CHECK:         %[[ONE:.*]] = lamina.constant {lamina.loss_seed} dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[G:.*]] = lamina.broadcast_in_dim %[[ONE]] {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %[[Z:.*]] = lamina.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[POS:.*]] = lamina.gt %hb, %[[Z]]
// CHECK-NEXT:    %[[GH:.*]] = lamina.select %[[POS]], %[[G]], %[[Z]]
// CHECK-NEXT:    %[[SB:.*]] = lamina.reduce_sum %[[GH]] {axes = array<i64: 0>, keepdims = true} : (tensor<4x16xf32>) -> tensor<1x16xf32>
// CHECK-NEXT:    %d_b = lamina.reshape %[[SB]] {lamina.gradient} : (tensor<1x16xf32>) -> tensor<16xf32>
// CHECK-NEXT:    %[[XT:.*]] = lamina.transpose %x {permutation = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
// CHECK-NEXT:    %d_w = lamina.matmul %[[XT]], %[[GH]] {lamina.gradient} : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT:    func.return %l, %d_w, %d_b : tensor<f32>, tensor<8x16xf32>, tensor<16xf32>

// EXPLAIN:      [derive-backward] {{.*}}derive_backward.mlir:11:1: @mlp_grad: d(result 0: tensor<f32>)/d(%w, %b), seeded with 1; data arguments (no gradient): %x; 4 forward op(s) copied
// EXPLAIN-NEXT: [derive-backward] {{.*}}derive_backward.mlir:15:3: VJP of %l = lamina.reduce_sum: 1 op(s) for operand(s) 0
// EXPLAIN-NEXT: [derive-backward] {{.*}}derive_backward.mlir:14:3: VJP of %r = lamina.relu: 3 op(s) for operand(s) 0
// EXPLAIN-NEXT: [derive-backward] {{.*}}derive_backward.mlir:13:3: VJP of %hb = lamina.add: 2 op(s) for operand(s) 0, 1
// EXPLAIN-NEXT: [derive-backward] {{.*}}derive_backward.mlir:12:3: VJP of %h = lamina.matmul: 2 op(s) for operand(s) 1
// EXPLAIN-NEXT: builtin.module

// LOC: %[[POS:.*]] = lamina.gt %hb, %{{.*}} loc({{.*}}derive_backward.mlir":14:3)
// LOC: %d_w = lamina.matmul %{{.*}} loc({{.*}}derive_backward.mlir":12:3)

// SEED: func.func @mlp_grad(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>, %d_t: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) attributes {lamina.gradients = array<i64: 0>} {
// SEED-NEXT:  %t = lamina.tanh %x : tensor<4x8xf32>
// SEED-NEXT:  %[[ONE:.*]] = lamina.constant dense<1.000000e+00> : tensor<f32>
// SEED-NEXT:  %[[SQ:.*]] = lamina.mul %t, %t : tensor<4x8xf32>
// SEED-NEXT:  %[[D:.*]] = lamina.sub %[[ONE]], %[[SQ]] : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// SEED-NEXT:  %d_x = lamina.mul %d_t, %[[D]] {lamina.gradient} : tensor<4x8xf32>
// SEED-NEXT:  func.return %t, %d_x : tensor<4x8xf32>, tensor<4x8xf32>

// The derived program goes through the rest of the pipeline like any other.
// PIPE: func.func @mlp_grad(
// PIPE: lamina.fused
// PIPE: lamina.free
// PIPE: func.return %l, %d_w, %d_b
