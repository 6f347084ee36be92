// A tiny language model to train with `lamina-train --tokens`: an embedding lookup, one tanh
// hidden layer, an LM head and the mean cross-entropy against the next token.
//   x = E[idx]                      (lamina.gather: the table's 64 rows are the vocabulary)
//   logits = tanh(x W1 + b1) W2     ([4, 16, 64]: batch 4, sequence 16, vocabulary 64)
//   loss = -mean(sum(onehot(targets) * log_softmax(logits), axis -1))
// idx (the first integer argument) takes random windows [batch, seq] of a token file and
// targets (the second) the same windows shifted by one token, as nanoGPT's loader draws them;
// lamina-train reads the vocabulary (64) from E's rows and refuses a token file with larger ids.
// samples/tiny_lm_tokens.npy is 4096 uint16 tokens of a repeating pattern with noise
// (a 32-token cycle, 10% of tokens replaced at random; numpy default_rng(0)), so the loss falls
// from log(64) = 4.16 to about 1 in a hundred steps; samples/tiny_lm_eval.npy is 1024 held-out
// tokens of the same cycle with other noise (default_rng(1)), for --eval-tokens.
// Run:
//   lamina-train samples/tiny_lm.mlir --tokens samples/tiny_lm_tokens.npy --seq 16 --batch 4 --steps 200 --lr 1e-2 --log lm.jsonl --plot lm.png
//   lamina-train samples/tiny_lm.mlir --tokens samples/tiny_lm_tokens.npy --steps 200 --lr 1e-2 --eval-every 20 --eval-tokens samples/tiny_lm_eval.npy --backend compiled
// RUN: lamina-train %s --tokens samples/tiny_lm_tokens.npy --seq 16 --batch 4 --steps 3 --lr 1e-2 --eval-every 2 --eval-tokens samples/tiny_lm_eval.npy

func.func @tiny_lm(%idx: tensor<4x16xi32>, %targets: tensor<4x16xi32>, %E: tensor<64x32xf32>,
                   %W1: tensor<32x64xf32>, %b1: tensor<64xf32>, %W2: tensor<64x64xf32>) -> tensor<f32> {
  %x = lamina.gather %E, %idx {axis = 0 : i64} : (tensor<64x32xf32>, tensor<4x16xi32>) -> tensor<4x16x32xf32>
  %h = lamina.matmul %x, %W1 : (tensor<4x16x32xf32>, tensor<32x64xf32>) -> tensor<4x16x64xf32>
  %hb = lamina.add %h, %b1 : (tensor<4x16x64xf32>, tensor<64xf32>) -> tensor<4x16x64xf32>
  %a = lamina.tanh %hb : tensor<4x16x64xf32>
  %logits = lamina.matmul %a, %W2 : (tensor<4x16x64xf32>, tensor<64x64xf32>) -> tensor<4x16x64xf32>
  %lp = lamina.log_softmax %logits {axis = -1 : i64} : tensor<4x16x64xf32>
  %vocab = lamina.iota {dim = 2 : i64} : () -> tensor<4x16x64xi32>
  %t = lamina.reshape %targets : (tensor<4x16xi32>) -> tensor<4x16x1xi32>
  %hit = lamina.eq %vocab, %t : (tensor<4x16x64xi32>, tensor<4x16x1xi32>) -> tensor<4x16x64xi1>
  %onehot = lamina.cast %hit : (tensor<4x16x64xi1>) -> tensor<4x16x64xf32>
  %picked = lamina.mul %onehot, %lp : tensor<4x16x64xf32>
  %nll = lamina.reduce_sum %picked {axes = array<i64: 2>} : (tensor<4x16x64xf32>) -> tensor<4x16xf32>
  %mean = lamina.reduce_mean %nll {axes = array<i64: 0, 1>} : (tensor<4x16xf32>) -> tensor<f32>
  %loss = lamina.neg %mean : tensor<f32>
  func.return %loss : tensor<f32>
}
