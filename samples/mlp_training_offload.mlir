// One MLP training step: forward (x @ W1 -> relu -> @ W2, mean squared error), a hand-written
// backward (gradients of W1 and W2 through relu) and an Adam update with moments m, v.
// x, y f32[64,128]; W1 f32[128,256], W2 f32[256,128] and each moment 128 KiB: weights, optimizer
// state, gradients and activations together need more than the 1 MiB of HBM of the made-up
// `tiny` target, so the plan offloads values to host and prefetches them back ahead of use.
// Shows: annotate-lifetimes + assign-memory-tiers making a step fit, checked by the interpreter,
// also after fusion (the fused Adam kernel reads 4 and writes 3 values: 896 KiB at once).
// Run:
//   lamina-run samples/mlp_training_offload.mlir --target tiny                     (overflows HBM)
//   lamina-opt samples/mlp_training_offload.mlir -p 'annotate-lifetimes,assign-memory-tiers{target=tiny}' --explain
//   lamina-run samples/mlp_training_offload.mlir -p 'fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=tiny}' --target tiny --check --stats-json -

func.func @mlp_training_step(%x: tensor<64x128xf32>, %y: tensor<64x128xf32>, %w1: tensor<128x256xf32>, %w2: tensor<256x128xf32>, %m1: tensor<128x256xf32>, %v1: tensor<128x256xf32>, %m2: tensor<256x128xf32>, %v2: tensor<256x128xf32>) -> (tensor<128x256xf32>, tensor<256x128xf32>, tensor<128x256xf32>, tensor<128x256xf32>, tensor<256x128xf32>, tensor<256x128xf32>, tensor<f32>) {
  %beta1 = lamina.constant dense<0.9> : tensor<f32>
  %one_m_beta1 = lamina.constant dense<0.1> : tensor<f32>
  %beta2 = lamina.constant dense<0.999> : tensor<f32>
  %one_m_beta2 = lamina.constant dense<0.001> : tensor<f32>
  %eps = lamina.constant dense<1.0e-08> : tensor<f32>
  %lr = lamina.constant dense<1.0e-03> : tensor<f32>
  %scale = lamina.constant dense<1.220703125e-04> : tensor<f32>
  %zero = lamina.constant dense<0.0> : tensor<64x256xf32>
  // forward: h = x @ W1, a = relu(h), o = a @ W2, loss = mean((o - y)^2)
  %h = lamina.matmul %x, %w1 : (tensor<64x128xf32>, tensor<128x256xf32>) -> tensor<64x256xf32>
  %a = lamina.relu %h : tensor<64x256xf32>
  %o = lamina.matmul %a, %w2 : (tensor<64x256xf32>, tensor<256x128xf32>) -> tensor<64x128xf32>
  %d = lamina.sub %o, %y : tensor<64x128xf32>
  %d2 = lamina.mul %d, %d : tensor<64x128xf32>
  %loss = lamina.reduce_mean %d2 {axes = array<i64: 0, 1>} : (tensor<64x128xf32>) -> tensor<f32>
  // backward: dL/do = 2 (o - y) / numel, then through W2, relu and W1
  %d2x = lamina.add %d, %d : tensor<64x128xf32>
  %go = lamina.mul %d2x, %scale : (tensor<64x128xf32>, tensor<f32>) -> tensor<64x128xf32>
  %at = lamina.transpose %a {permutation = array<i64: 1, 0>} : (tensor<64x256xf32>) -> tensor<256x64xf32>
  %gw2 = lamina.matmul %at, %go : (tensor<256x64xf32>, tensor<64x128xf32>) -> tensor<256x128xf32>
  %w2t = lamina.transpose %w2 {permutation = array<i64: 1, 0>} : (tensor<256x128xf32>) -> tensor<128x256xf32>
  %ga = lamina.matmul %go, %w2t : (tensor<64x128xf32>, tensor<128x256xf32>) -> tensor<64x256xf32>
  %pos = lamina.gt %h, %zero : (tensor<64x256xf32>, tensor<64x256xf32>) -> tensor<64x256xi1>
  %gh = lamina.select %pos, %ga, %zero : (tensor<64x256xi1>, tensor<64x256xf32>, tensor<64x256xf32>) -> tensor<64x256xf32>
  %xt = lamina.transpose %x {permutation = array<i64: 1, 0>} : (tensor<64x128xf32>) -> tensor<128x64xf32>
  %gw1 = lamina.matmul %xt, %gh : (tensor<128x64xf32>, tensor<64x256xf32>) -> tensor<128x256xf32>
  // Adam update (no bias correction) of W1 and W2 with moments m, v. The second moment is a running
  // mean of squared gradients, so it is never negative in a real run; inputs drawn at random (e.g.
  // lamina-run without --inputs: standard normal) are, and sqrt would give NaN. The step reads |v|,
  // which is v itself for any valid state, so the update stays finite by construction.
  %bm1 = lamina.mul %m1, %beta1 : (tensor<128x256xf32>, tensor<f32>) -> tensor<128x256xf32>
  %gm1 = lamina.mul %gw1, %one_m_beta1 : (tensor<128x256xf32>, tensor<f32>) -> tensor<128x256xf32>
  %m1n = lamina.add %bm1, %gm1 : tensor<128x256xf32>
  %av1 = lamina.abs %v1 : tensor<128x256xf32>
  %bv1 = lamina.mul %av1, %beta2 : (tensor<128x256xf32>, tensor<f32>) -> tensor<128x256xf32>
  %g21 = lamina.mul %gw1, %gw1 : tensor<128x256xf32>
  %gv1 = lamina.mul %g21, %one_m_beta2 : (tensor<128x256xf32>, tensor<f32>) -> tensor<128x256xf32>
  %v1n = lamina.add %bv1, %gv1 : tensor<128x256xf32>
  %sq1 = lamina.sqrt %v1n : tensor<128x256xf32>
  %den1 = lamina.add %sq1, %eps : (tensor<128x256xf32>, tensor<f32>) -> tensor<128x256xf32>
  %r1 = lamina.div %m1n, %den1 : tensor<128x256xf32>
  %st1 = lamina.mul %r1, %lr : (tensor<128x256xf32>, tensor<f32>) -> tensor<128x256xf32>
  %w1n = lamina.sub %w1, %st1 : tensor<128x256xf32>
  %bm2 = lamina.mul %m2, %beta1 : (tensor<256x128xf32>, tensor<f32>) -> tensor<256x128xf32>
  %gm2 = lamina.mul %gw2, %one_m_beta1 : (tensor<256x128xf32>, tensor<f32>) -> tensor<256x128xf32>
  %m2n = lamina.add %bm2, %gm2 : tensor<256x128xf32>
  %av2 = lamina.abs %v2 : tensor<256x128xf32>
  %bv2 = lamina.mul %av2, %beta2 : (tensor<256x128xf32>, tensor<f32>) -> tensor<256x128xf32>
  %g22 = lamina.mul %gw2, %gw2 : tensor<256x128xf32>
  %gv2 = lamina.mul %g22, %one_m_beta2 : (tensor<256x128xf32>, tensor<f32>) -> tensor<256x128xf32>
  %v2n = lamina.add %bv2, %gv2 : tensor<256x128xf32>
  %sq2 = lamina.sqrt %v2n : tensor<256x128xf32>
  %den2 = lamina.add %sq2, %eps : (tensor<256x128xf32>, tensor<f32>) -> tensor<256x128xf32>
  %r2 = lamina.div %m2n, %den2 : tensor<256x128xf32>
  %st2 = lamina.mul %r2, %lr : (tensor<256x128xf32>, tensor<f32>) -> tensor<256x128xf32>
  %w2n = lamina.sub %w2, %st2 : tensor<256x128xf32>
  func.return %w1n, %w2n, %m1n, %v1n, %m2n, %v2n, %loss : tensor<128x256xf32>, tensor<256x128xf32>, tensor<128x256xf32>, tensor<128x256xf32>, tensor<256x128xf32>, tensor<256x128xf32>, tensor<f32>
}
