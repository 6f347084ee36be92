// mixed-precision{narrow-saved} (the default): the backward reads the narrow side of each cast.
// The softmax and the layernorm are f32 rows whose bf16 casts feed the matmuls; the backward's
// transposes of them (for the weight gradients) move to bf16 and read those casts, and the f32
// copy of the bf16 residual %r that the layernorm reads is cast again where the layernorm's VJP
// reads it, so no f32 tensor of the forward is held for the backward. Same bits either way
// (tests/test_mixed_precision.py); narrow-saved=false keeps the casts where AMP's rules put them.
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{kind=sgd lr=0.5},mixed-precision' | filecheck %s
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{kind=sgd lr=0.5},mixed-precision' | filecheck %s --check-prefix=BACKWARD
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{kind=sgd lr=0.5},mixed-precision{narrow-saved=false}' | filecheck %s --check-prefix=WIDE
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{kind=sgd lr=0.5},mixed-precision' --explain 2>&1 | filecheck %s --check-prefix=EXPLAIN

func.func @mlp(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<f32> {
  %h = lamina.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r = lamina.add %h, %x : tensor<4x8xf32>
  %n = lamina.layernorm %r scale %g bias %b {axis = 1 : i64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %p = lamina.matmul %n, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %s = lamina.softmax %p {axis = 1 : i64} : tensor<4x8xf32>
  %q = lamina.matmul %s, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %l = lamina.reduce_mean %q {axes = array<i64: 0, 1>} : (tensor<4x8xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}

// CHECK-LABEL: func.func @mlp_step
// CHECK:         %r = lamina.add %{{.*}}, %{{.*}} : tensor<4x8xbf16>
// CHECK-NEXT:    %[[R32:.*]] = lamina.cast %r : (tensor<4x8xbf16>) -> tensor<4x8xf32>
// CHECK-NEXT:    %n = lamina.layernorm %[[R32]]
// CHECK-NEXT:    %[[N16:.*]] = lamina.cast %n : (tensor<4x8xf32>) -> tensor<4x8xbf16>
// CHECK:         %s = lamina.softmax
// CHECK-NEXT:    %[[S16:.*]] = lamina.cast %s : (tensor<4x8xf32>) -> tensor<4x8xbf16>
// CHECK:         lamina.loss_seed
// CHECK:         lamina.transpose %[[S16]] {permutation = array<i64: 1, 0>} : (tensor<4x8xbf16>) -> tensor<8x4xbf16>
// CHECK:         lamina.transpose %[[N16]] {permutation = array<i64: 1, 0>} : (tensor<4x8xbf16>) -> tensor<8x4xbf16>
// CHECK:         %[[AGAIN:.*]] = lamina.cast %r : (tensor<4x8xbf16>) -> tensor<4x8xf32>
// CHECK-NEXT:    lamina.reduce_mean %[[AGAIN]]

// after the seed nothing reads the forward's f32 residual copy, layernorm output or softmax
// BACKWARD:      %[[R32:.*]] = lamina.cast %r : (tensor<4x8xbf16>) -> tensor<4x8xf32>
// BACKWARD:      lamina.loss_seed
// BACKWARD-NOT:  %[[R32]]{{[ ,]}}
// BACKWARD-NOT:  {{%(n|s)[ ,]}}
// BACKWARD:      func.return

// WIDE:          lamina.loss_seed
// WIDE:          lamina.transpose %s {permutation = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
// WIDE:          lamina.transpose %n {permutation = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>

// EXPLAIN: [mixed-precision] {{.*}}: @mlp_step: what the backward reads of the forward, at the same bits: 2 data-movement op(s) moved to bf16 ahead of the casts their readers made; 1 cast(s) recomputed in the backward, 0 narrowing cast(s) moved into the forward (128 bytes of copies not held for the backward)
