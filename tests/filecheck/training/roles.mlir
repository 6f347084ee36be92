// append-optimizer says what each argument it updates holds: `lamina.role` on the argument
// (`arg_attrs`, the table `lamina.ir.buffers.updates.ROLES`): each parameter, Adam's two moments and the
// step count; data arguments get none. The roles read back through the custom and the generic
// form, and the passes after append-optimizer (placement, collectives, fusion, lifetimes, tiers)
// keep them on the retyped signature.
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer' | filecheck %s
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer' --print-op-generic | lamina-opt | filecheck %s
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer' --print-op-generic | filecheck %s --check-prefix=GENERIC
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{kind=sgd}' | filecheck %s --check-prefix=SGD
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer' --explain 2>&1 >/dev/null | filecheck %s --check-prefix=EXPLAIN
// RUN: lamina-opt %S/../../../samples/mlp_dp_forward.mlir -p 'derive-backward{data=x},append-optimizer{state-tier=host},propagate-sharding,insert-collectives{target=h100-cluster},fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=h100-node}' | filecheck %s --check-prefix=PASSES

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>) -> tensor<f32> {
  %h = lamina.matmul %x, %w : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %l = lamina.reduce_mean %h {axes = array<i64: 0, 1>} : (tensor<4x2xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}

// CHECK-LABEL: func.func @f_step(%x: tensor<4x8xf32>, %w: tensor<8x2xf32> {lamina.role = "parameter"}, %m_w: tensor<8x2xf32> {lamina.role = "first_moment"}, %v_w: tensor<8x2xf32> {lamina.role = "second_moment"}, %step: tensor<f32> {lamina.role = "step_count"}) -> (tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2xf32>, tensor<f32>, tensor<f32>) attributes {lamina.updates = array<i64: 1, 2, 3, 4, -1>} {

// GENERIC: "func.func"() <{sym_name = "f_step", {{.*}}, arg_attrs = [{}, {lamina.role = "parameter"}, {lamina.role = "first_moment"}, {lamina.role = "second_moment"}, {lamina.role = "step_count"}]}>

// SGD-LABEL: func.func @f_step(%x: tensor<4x8xf32>, %w: tensor<8x2xf32> {lamina.role = "parameter"}) -> (tensor<8x2xf32>, tensor<f32>) attributes {lamina.updates = array<i64: 1, -1>} {

// EXPLAIN: [append-optimizer] {{.*}}roles.mlir:13:1: @f_step: lamina.role (what an argument holds): %w parameter, %m_w first_moment, %v_w second_moment, %step step_count

// PASSES-LABEL: func.func @dp_forward_step(
// PASSES-SAME: %x: {{[^{]*}}, %w1: {{[^{]*}} {lamina.role = "parameter"}, %b1: {{[^{]*}} {lamina.role = "parameter"},
// PASSES-SAME: %w2: {{[^{]*}} {lamina.role = "parameter"}, %b2: {{[^{]*}} {lamina.role = "parameter"}, %d_y: {{[^{]*}}, %m_w1: {{[^{]*}}tier = host>> {lamina.role = "first_moment"},
// PASSES-SAME: %v_w1: {{[^{]*}}tier = host>> {lamina.role = "second_moment"}, {{.*}}, %v_b2: {{[^{]*}} {lamina.role = "second_moment"}, %step: {{[^{]*}} {lamina.role = "step_count"}) -> (
