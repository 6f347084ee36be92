// A two-layer MLP regression loss to train with lamina-train: y_hat = tanh(x W1 + b1) W2 + b2,
// loss = mean((y_hat - y)^2). x and y are the data (a batch of 16 rows); W1, b1, W2, b2 are
// trained. lamina-train derives the backward pass and the optimizer step from this function
// (derive-backward, append-optimizer with the learning rate as an input), compiles the step once
// and runs the loop; tests/test_train.py trains it 50 steps with AdamW and with SGD + momentum
// against torch.optim and checks every step's loss and the final weights.
// samples/mlp_train_data.npz holds 4 batches of (x, y), y = tanh(x W) + noise for a fixed
// random W (numpy default_rng(0)), so the loss can fall well below its start.
// Run:
//   lamina-train samples/mlp_train.mlir --data samples/mlp_train_data.npz --steps 100 --lr 1e-2 --log log.jsonl --save final.npz
//   lamina-train samples/mlp_train.mlir --data samples/mlp_train_data.npz --steps 100 --optimizer sgd --momentum 0.9 --lr 0.05 --checkpoint ck --checkpoint-every 25

func.func @mlp_loss(%x: tensor<16x8xf32>, %y: tensor<16x4xf32>, %w1: tensor<8x32xf32>,
                    %b1: tensor<32xf32>, %w2: tensor<32x4xf32>, %b2: tensor<4xf32>) -> tensor<f32> {
  %h = lamina.matmul %x, %w1 : (tensor<16x8xf32>, tensor<8x32xf32>) -> tensor<16x32xf32>
  %hb = lamina.add %h, %b1 : (tensor<16x32xf32>, tensor<32xf32>) -> tensor<16x32xf32>
  %a = lamina.tanh %hb : tensor<16x32xf32>
  %o = lamina.matmul %a, %w2 : (tensor<16x32xf32>, tensor<32x4xf32>) -> tensor<16x4xf32>
  %ob = lamina.add %o, %b2 : (tensor<16x4xf32>, tensor<4xf32>) -> tensor<16x4xf32>
  %d = lamina.sub %ob, %y : tensor<16x4xf32>
  %d2 = lamina.mul %d, %d : tensor<16x4xf32>
  %loss = lamina.reduce_mean %d2 {axes = array<i64: 0, 1>} : (tensor<16x4xf32>) -> tensor<f32>
  func.return %loss : tensor<f32>
}
