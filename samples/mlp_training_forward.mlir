// The forward function of samples/mlp_training_offload.mlir and samples/zero_offload_step.mlir
// alone (x @ W1 -> relu -> @ W2, mean squared error against y; the same shapes), from which both
// training steps are derived instead of written: derive-backward adds @mlp_training_loss_grad
// (loss, dL/dW1, dL/dW2), append-optimizer turns it into @mlp_training_loss_step with the Adam
// update (moments m, v as explicit arguments and results). bias-correction=false is the samples'
// update; state-tier=host keeps the moments in host memory and moves each to HBM for its update,
// as zero_offload_step.mlir does by hand. tests/test_append_optimizer.py checks both derived steps
// equal the hand-written ones on random inputs.
// Run:
//   lamina-opt samples/mlp_training_forward.mlir -p 'derive-backward{data=x,y},append-optimizer{bias-correction=false}'
//   lamina-opt samples/mlp_training_forward.mlir -p 'derive-backward{data=x,y},append-optimizer{bias-correction=false state-tier=host}'
//   lamina-opt samples/mlp_training_forward.mlir -p 'derive-backward{data=x,y},append-optimizer{weight-decay=0.01}' -o step.mlir
//   lamina-run step.mlir --entry mlp_training_loss_step -p 'fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=tiny}' --target tiny --check

func.func @mlp_training_loss(%x: tensor<64x128xf32>, %y: tensor<64x128xf32>, %w1: tensor<128x256xf32>, %w2: tensor<256x128xf32>) -> tensor<f32> {
  %h = lamina.matmul %x, %w1 : (tensor<64x128xf32>, tensor<128x256xf32>) -> tensor<64x256xf32>
  %a = lamina.relu %h : tensor<64x256xf32>
  %o = lamina.matmul %a, %w2 : (tensor<64x256xf32>, tensor<256x128xf32>) -> tensor<64x128xf32>
  %d = lamina.sub %o, %y : tensor<64x128xf32>
  %d2 = lamina.mul %d, %d : tensor<64x128xf32>
  %loss = lamina.reduce_mean %d2 {axes = array<i64: 0, 1>} : (tensor<64x128xf32>) -> tensor<f32>
  func.return %loss : tensor<f32>
}
