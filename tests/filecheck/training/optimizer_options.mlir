// append-optimizer's options for a training loop (lamina-train sets them): lr-input=true makes the
// learning rate the last argument %lr (role learning_rate, replaced by no result), used where the
// constant was, so a schedule never recompiles the step; momentum= gives SGD a momentum buffer
// per parameter (b' = mu b + g, w' = w - lr b'); grad-clip= scales the gradients by
// min(1, c / (global norm + 1e-6)), the norm computed in the IR. Without them the step prints as
// before (training/append_optimizer.mlir).
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{lr-input=true weight-decay=0.25}' | filecheck %s --check-prefix=LR
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{kind=sgd momentum=0.9 lr-input=true}' | filecheck %s --check-prefix=MOM
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{kind=sgd lr=0.5 grad-clip=1.5}' | filecheck %s --check-prefix=CLIP
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{kind=sgd momentum=0.9 state-tier=host}' | filecheck %s --check-prefix=HOST
// RUN: not lamina-opt %s -p 'derive-backward{data=x},append-optimizer{momentum=0.9}' 2>&1 | filecheck %s --check-prefix=ERR

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>) -> tensor<f32> {
  %h = lamina.matmul %x, %w : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %l = lamina.reduce_mean %h {axes = array<i64: 0, 1>} : (tensor<4x2xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}

// LR-LABEL: func.func @f_step(%x: tensor<4x8xf32>, %w: tensor<8x2xf32> {lamina.role = "parameter"}, %m_w: tensor<8x2xf32> {lamina.role = "first_moment"}, %v_w: tensor<8x2xf32> {lamina.role = "second_moment"}, %step: tensor<f32> {lamina.role = "step_count"}, %lr: tensor<f32> {lamina.role = "learning_rate"}) -> (tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2xf32>, tensor<f32>, tensor<f32>) attributes {lamina.updates = array<i64: 1, 2, 3, 4, -1>} {
// the bias-corrected rate lr / (1 - beta1^t) and the decay factor 1 - lr * weight_decay, from %lr
// LR:         %[[T:.*]] = lamina.add %step, %[[ONE:.*]] : tensor<f32>
// LR:         %[[B1T:.*]] = lamina.pow %{{.*}}, %[[T]] : tensor<f32>
// LR-NEXT:    %[[C1:.*]] = lamina.sub %[[ONE]], %[[B1T]] : tensor<f32>
// LR-NEXT:    %[[RATE:.*]] = lamina.div %lr, %[[C1]] : tensor<f32>
// LR:         %[[WD:.*]] = lamina.constant dense<2.500000e-01> : tensor<f32>
// LR-NEXT:    %[[LRWD:.*]] = lamina.mul %lr, %[[WD]] : tensor<f32>
// LR-NEXT:    %[[FACTOR:.*]] = lamina.sub %[[ONE]], %[[LRWD]] : tensor<f32>
// LR-NEXT:    %[[DECAYED:.*]] = lamina.mul %w, %[[FACTOR]]
// LR-NEXT:    %[[STEP:.*]] = lamina.mul %{{.*}}, %[[RATE]]
// LR-NEXT:    %new_w = lamina.sub %[[DECAYED]], %[[STEP]] : tensor<8x2xf32>
// LR:         func.return %new_w, %new_m_w, %new_v_w, %next_step, %l

// MOM-LABEL: func.func @f_step(%x: tensor<4x8xf32>, %w: tensor<8x2xf32> {lamina.role = "parameter"}, %buf_w: tensor<8x2xf32> {lamina.role = "momentum_buffer"}, %lr: tensor<f32> {lamina.role = "learning_rate"}) -> (tensor<8x2xf32>, tensor<8x2xf32>, tensor<f32>) attributes {lamina.updates = array<i64: 1, 2, -1>} {
// MOM:         %d_w = lamina.matmul
// MOM-NEXT:    %[[MU:.*]] = lamina.constant dense<9.000000e-01> : tensor<f32>
// MOM-NEXT:    %[[KEPT:.*]] = lamina.mul %buf_w, %[[MU]] : (tensor<8x2xf32>, tensor<f32>) -> tensor<8x2xf32>
// MOM-NEXT:    %new_buf_w = lamina.add %[[KEPT]], %d_w : tensor<8x2xf32>
// MOM-NEXT:    %[[S:.*]] = lamina.mul %new_buf_w, %lr : (tensor<8x2xf32>, tensor<f32>) -> tensor<8x2xf32>
// MOM-NEXT:    %new_w = lamina.sub %w, %[[S]] : tensor<8x2xf32>
// MOM-NEXT:    func.return %new_w, %new_buf_w, %l

// CLIP-LABEL: func.func @f_step(%x: tensor<4x8xf32>, %w: tensor<8x2xf32> {lamina.role = "parameter"}) -> (tensor<8x2xf32>, tensor<f32>) attributes {lamina.updates = array<i64: 1, -1>} {
// CLIP:         %d_w = lamina.matmul
// CLIP-NEXT:    %[[SQ:.*]] = lamina.mul %d_w, %d_w : tensor<8x2xf32>
// CLIP-NEXT:    %[[SUM:.*]] = lamina.reduce_sum %[[SQ]] {axes = array<i64: 0, 1>, keepdims = false} : (tensor<8x2xf32>) -> tensor<f32>
// CLIP-NEXT:    %grad_norm = lamina.sqrt %[[SUM]] : tensor<f32>
// CLIP-NEXT:    %[[MAX:.*]] = lamina.constant dense<1.500000e+00> : tensor<f32>
// CLIP-NEXT:    %[[EPS:.*]] = lamina.constant dense<1.000000e-06> : tensor<f32>
// CLIP-NEXT:    %[[DEN:.*]] = lamina.add %grad_norm, %[[EPS]] : tensor<f32>
// CLIP-NEXT:    %[[Q:.*]] = lamina.div %[[MAX]], %[[DEN]] : tensor<f32>
// CLIP-NEXT:    %[[ONE:.*]] = lamina.constant dense<1.000000e+00> : tensor<f32>
// CLIP-NEXT:    %clip_coef = lamina.min %[[Q]], %[[ONE]] : tensor<f32>
// CLIP-NEXT:    %[[G:.*]] = lamina.mul %d_w, %clip_coef : (tensor<8x2xf32>, tensor<f32>) -> tensor<8x2xf32>
// CLIP-NEXT:    %[[HALF:.*]] = lamina.constant dense<5.000000e-01> : tensor<f32>
// CLIP-NEXT:    %[[S:.*]] = lamina.mul %[[G]], %[[HALF]]
// CLIP-NEXT:    %new_w = lamina.sub %w, %[[S]] : tensor<8x2xf32>

// the buffer lives in host memory like Adam's moments do, moved to HBM around its update
// HOST-LABEL: func.func @f_step(%x: tensor<4x8xf32>, %w: tensor<8x2xf32> {lamina.role = "parameter"}, %buf_w: tensor<8x2xf32, #lamina.place<tier = host>> {lamina.role = "momentum_buffer"})
// HOST:         %[[B:.*]] = lamina.move %buf_w to hbm
// HOST:         lamina.mul %[[B]], %{{.*}}
// HOST:         %new_buf_w = lamina.move %{{.*}} to host
// HOST:         func.return %new_w, %new_buf_w, %l

// ERR: error: option 'momentum' for append-optimizer applies to kind=sgd (adamw keeps moments of its own), got momentum=0.9 with kind=adamw
