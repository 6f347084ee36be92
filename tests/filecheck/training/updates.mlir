// append-optimizer records which result of @f_step replaces which argument: `lamina.updates` holds
// one entry per result, the index of the argument it replaces (-1: none, the loss). With adamw:
// %w (1), its moments %m_w (2) and %v_w (3), the step count (4); with sgd only %w. It reads back.
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{state-tier=host}' | filecheck %s
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{state-tier=host}' | lamina-opt | filecheck %s
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{kind=sgd}' | filecheck %s --check-prefix=SGD
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer' --explain 2>&1 >/dev/null | filecheck %s --check-prefix=EXPLAIN

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>) -> tensor<f32> {
  %h = lamina.matmul %x, %w : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %l = lamina.reduce_mean %h {axes = array<i64: 0, 1>} : (tensor<4x2xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}

// CHECK-LABEL: func.func @f_step(%x: tensor<4x8xf32>, %w: tensor<8x2xf32> {lamina.role = "parameter"}, %m_w: tensor<8x2xf32, #lamina.place<tier = host>> {lamina.role = "first_moment"}, %v_w: tensor<8x2xf32, #lamina.place<tier = host>> {lamina.role = "second_moment"}, %step: tensor<f32> {lamina.role = "step_count"}) -> (tensor<8x2xf32>, tensor<8x2xf32, #lamina.place<tier = host>>, tensor<8x2xf32, #lamina.place<tier = host>>, tensor<f32>, tensor<f32>) attributes {lamina.updates = array<i64: 1, 2, 3, 4, -1>} {
// CHECK:         func.return %new_w, %new_m_w, %new_v_w, %next_step, %l

// SGD-LABEL: func.func @f_step(%x: tensor<4x8xf32>, %w: tensor<8x2xf32> {lamina.role = "parameter"}) -> (tensor<8x2xf32>, tensor<f32>) attributes {lamina.updates = array<i64: 1, -1>} {

// EXPLAIN: [append-optimizer] {{.*}}updates.mlir:9:1: @f_step: lamina.updates (result -> the argument it replaces): #0 -> %w, #1 -> %m_w, #2 -> %v_w, #3 -> %step; #4 (the loss) replaces none
