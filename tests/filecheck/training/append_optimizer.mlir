// append-optimizer turns @f_grad (from derive-backward) into @f_step: the moments of each
// parameter and the step count become arguments and results; with state-tier=host the moments
// arrive and leave in host memory and are moved to HBM around their update (ZeRO-Offload).
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{lr=0.01 weight-decay=0.1 state-tier=host}' | filecheck %s
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{kind=sgd lr=0.5}' | filecheck %s --check-prefix=SGD
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{bias-correction=false}' | filecheck %s --check-prefix=NOBC
// RUN: not lamina-opt %s -p 'append-optimizer' 2>&1 | filecheck %s --check-prefix=ERR

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>) -> tensor<f32> {
  %h = lamina.matmul %x, %w : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %l = lamina.reduce_mean %h {axes = array<i64: 0, 1>} : (tensor<4x2xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}

// CHECK-LABEL: func.func @f_step(%x: tensor<4x8xf32>, %w: tensor<8x2xf32> {lamina.role = "parameter"}, %m_w: tensor<8x2xf32, #lamina.place<tier = host>> {lamina.role = "first_moment"}, %v_w: tensor<8x2xf32, #lamina.place<tier = host>> {lamina.role = "second_moment"}, %step: tensor<f32> {lamina.role = "step_count"}) -> (tensor<8x2xf32>, tensor<8x2xf32, #lamina.place<tier = host>>, tensor<8x2xf32, #lamina.place<tier = host>>, tensor<f32>, tensor<f32>) attributes {lamina.updates = array<i64: 1, 2, 3, 4, -1>} {
// CHECK:         %d_w = lamina.matmul
// CHECK:         %[[T:.*]] = lamina.add %step, %[[ONE:.*]] : tensor<f32>
// CHECK:         lamina.pow %{{.*}}, %[[T]] : tensor<f32>
// CHECK:         %[[M:.*]] = lamina.move %m_w to hbm
// CHECK-NEXT:    %[[V:.*]] = lamina.move %v_w to hbm
// CHECK:         lamina.mul %[[M]], %{{.*}} : (tensor<8x2xf32, #lamina.place<tier = hbm>>, tensor<f32>) -> tensor<8x2xf32>
// CHECK:         lamina.mul %d_w, %d_w
// CHECK:         lamina.sqrt
// CHECK:         %new_w = lamina.sub
// CHECK-NEXT:    %new_m_w = lamina.move %{{.*}} to host
// CHECK-NEXT:    %new_v_w = lamina.move %{{.*}} to host
// CHECK-NEXT:    %next_step = lamina.add %step, %[[ONE]]
// CHECK-NEXT:    func.return %new_w, %new_m_w, %new_v_w, %next_step, %l

// SGD-LABEL: func.func @f_step(%x: tensor<4x8xf32>, %w: tensor<8x2xf32> {lamina.role = "parameter"}) -> (tensor<8x2xf32>, tensor<f32>) attributes {lamina.updates = array<i64: 1, -1>} {
// SGD:         %d_w = lamina.matmul
// SGD-NEXT:    %[[LR:.*]] = lamina.constant dense<5.000000e-01> : tensor<f32>
// SGD-NEXT:    %[[S:.*]] = lamina.mul %d_w, %[[LR]] : (tensor<8x2xf32>, tensor<f32>) -> tensor<8x2xf32>
// SGD-NEXT:    %new_w = lamina.sub %w, %[[S]] : tensor<8x2xf32>
// SGD-NEXT:    func.return %new_w, %l : tensor<8x2xf32>, tensor<f32>

// NOBC-LABEL: func.func @f_step(%x: tensor<4x8xf32>, %w: tensor<8x2xf32> {lamina.role = "parameter"}, %m_w: tensor<8x2xf32> {lamina.role = "first_moment"}, %v_w: tensor<8x2xf32> {lamina.role = "second_moment"}) -> (tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2xf32>, tensor<f32>) attributes {lamina.updates = array<i64: 1, 2, 3, -1>} {
// NOBC-NOT:     lamina.pow
// NOBC:         func.return %new_w, %new_m_w, %new_v_w, %l

// ERR: error: append-optimizer: the module has no gradient function (run derive-backward first)
