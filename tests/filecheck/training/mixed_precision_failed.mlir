// mixed-precision refuses, with one located error: a step that already computes in a low type
// (the pass ran twice, or was written so), and a hand-written step without derive-backward's
// gradient marks.
// RUN: lamina-opt %s --split-input-file --verify-diagnostics -p 'mixed-precision'

func.func @twice_step(%x: tensor<4xf32>, %w: tensor<4xf32> {lamina.role = "parameter"}) -> (tensor<4xf32>, tensor<f32>) attributes {lamina.updates = array<i64: 1, -1>} {
  // expected-error @+1 {{mixed-precision: @twice_step already computes in bf16 here; the pass takes an f32 training step (once)}}
  %c = lamina.cast %w : (tensor<4xf32>) -> tensor<4xbf16>
  %p = lamina.cast %c : (tensor<4xbf16>) -> tensor<4xf32>
  %l = lamina.reduce_sum %p {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  %d_w = lamina.mul %x, %x {lamina.gradient} : tensor<4xf32>
  %n = lamina.sub %w, %d_w : tensor<4xf32>
  func.return %n, %l : tensor<4xf32>, tensor<f32>
}

// -----

// expected-error @+1 {{mixed-precision: @hand_step has no op marked lamina.gradient (derive-backward marks each gradient; derive the step with it)}}
func.func @hand_step(%x: tensor<4xf32>, %w: tensor<4xf32> {lamina.role = "parameter"}) -> (tensor<4xf32>, tensor<f32>) attributes {lamina.updates = array<i64: 1, -1>} {
  %l = lamina.reduce_sum %w {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  %n = lamina.sub %w, %x : tensor<4xf32>
  func.return %n, %l : tensor<4xf32>, tensor<f32>
}
