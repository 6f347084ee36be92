// A pre-LN GPT-2 transformer block (training mode, dropout on) with data and tensor parallelism on
// a 2 x 4 mesh: a batch of 8 sequences of T = 64 tokens, D = 64, H = 8 heads of Dh = 8, MLP
// width 256. The math is samples/gpt2_block.mlir's with a batch dimension and separate q/k/v
// projections (a fused [D, 3D] projection sliced into q, k, v cannot keep its columns split).
//   data   the batch: x and the result are split by sequences
//   model  Megatron-style tensor parallelism: W_q, W_k, W_v and W_fc split by columns (each device
//          holds 2 of the heads and a quarter of the MLP hidden), W_proj and W_out by rows
//          (their products are pending sums over model, each reduced once before its bias)
// Only x, the weights and the result are placed; propagate-sharding places the rest and
// insert-collectives adds the block's two all_reduces over model. The causal mask is a constant
// i1 lower-triangular matrix built by lamina.ge on index constants. benchmarks/bench_jax.py runs
// this block on the NumPy interpreter, the JAX backend and GSPMD.
// Run:
//   lamina-opt samples/gpt2_block_parallel.mlir -p 'propagate-sharding,insert-collectives{target=h100-node}' --explain
//   lamina-run samples/gpt2_block_parallel.mlir -p 'propagate-sharding,insert-collectives{target=h100-node}' --check --stats-json -
//   lamina-run samples/gpt2_block_parallel.mlir -p 'propagate-sharding,insert-collectives{target=h100-node}' --backend jax --check

lamina.mesh @m [data = 2, model = 4]
func.func @gpt2_block_parallel(%x: tensor<8x64x64xf32, #lamina.place<@m, [[data], [], []]>>,
                               %ln1_g: tensor<64xf32>,
                               %ln1_b: tensor<64xf32>,
                               %w_q: tensor<64x64xf32, #lamina.place<@m, [[], [model]]>>,
                               %b_q: tensor<64xf32>,
                               %w_k: tensor<64x64xf32, #lamina.place<@m, [[], [model]]>>,
                               %b_k: tensor<64xf32>,
                               %w_v: tensor<64x64xf32, #lamina.place<@m, [[], [model]]>>,
                               %b_v: tensor<64xf32>,
                               %w_proj: tensor<64x64xf32, #lamina.place<@m, [[model], []]>>,
                               %b_proj: tensor<64xf32>,
                               %ln2_g: tensor<64xf32>,
                               %ln2_b: tensor<64xf32>,
                               %w_fc: tensor<64x256xf32, #lamina.place<@m, [[], [model]]>>,
                               %b_fc: tensor<256xf32>,
                               %w_out: tensor<256x64xf32, #lamina.place<@m, [[model], []]>>,
                               %b_out: tensor<64xf32>) -> tensor<8x64x64xf32, #lamina.place<@m, [[data], [], []]>> {
  // ---- attention sub-block: heads split on model, sequences on data ----
  %a = lamina.layernorm %x scale %ln1_g bias %ln1_b {axis = -1 : i64, eps = 1.000000e-05 : f64} : (tensor<8x64x64xf32, #lamina.place<@m, [[data], [], []]>>, tensor<64xf32>, tensor<64xf32>) -> tensor<8x64x64xf32>
  %q0 = lamina.matmul %a, %w_q : (tensor<8x64x64xf32>, tensor<64x64xf32, #lamina.place<@m, [[], [model]]>>) -> tensor<8x64x64xf32>
  %q = lamina.add %q0, %b_q : (tensor<8x64x64xf32>, tensor<64xf32>) -> tensor<8x64x64xf32>
  %q4 = lamina.reshape %q : (tensor<8x64x64xf32>) -> tensor<8x64x8x8xf32>
  %k0 = lamina.matmul %a, %w_k : (tensor<8x64x64xf32>, tensor<64x64xf32, #lamina.place<@m, [[], [model]]>>) -> tensor<8x64x64xf32>
  %k = lamina.add %k0, %b_k : (tensor<8x64x64xf32>, tensor<64xf32>) -> tensor<8x64x64xf32>
  %k4 = lamina.reshape %k : (tensor<8x64x64xf32>) -> tensor<8x64x8x8xf32>
  %v0 = lamina.matmul %a, %w_v : (tensor<8x64x64xf32>, tensor<64x64xf32, #lamina.place<@m, [[], [model]]>>) -> tensor<8x64x64xf32>
  %v = lamina.add %v0, %b_v : (tensor<8x64x64xf32>, tensor<64xf32>) -> tensor<8x64x64xf32>
  %v4 = lamina.reshape %v : (tensor<8x64x64xf32>) -> tensor<8x64x8x8xf32>
  %qh = lamina.transpose %q4 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<8x64x8x8xf32>) -> tensor<8x8x64x8xf32>
  %kt = lamina.transpose %k4 {permutation = array<i64: 0, 2, 3, 1>} : (tensor<8x64x8x8xf32>) -> tensor<8x8x8x64xf32>
  %vh = lamina.transpose %v4 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<8x64x8x8xf32>) -> tensor<8x8x64x8xf32>
  %scores = lamina.matmul %qh, %kt : (tensor<8x8x64x8xf32>, tensor<8x8x8x64xf32>) -> tensor<8x8x64x64xf32>
  %inv_sqrt_dh = lamina.constant dense<3.53553391e-01> : tensor<f32>
  %scaled = lamina.mul %scores, %inv_sqrt_dh : (tensor<8x8x64x64xf32>, tensor<f32>) -> tensor<8x8x64x64xf32>
  %rows = lamina.constant dense<[[0], [1], [2], [3], [4], [5], [6], [7], [8], [9], [10], [11], [12], [13], [14], [15], [16], [17], [18], [19], [20], [21], [22], [23], [24], [25], [26], [27], [28], [29], [30], [31], [32], [33], [34], [35], [36], [37], [38], [39], [40], [41], [42], [43], [44], [45], [46], [47], [48], [49], [50], [51], [52], [53], [54], [55], [56], [57], [58], [59], [60], [61], [62], [63]]> : tensor<64x1xi32>
  %cols = lamina.constant dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63]> : tensor<64xi32>
  %causal = lamina.ge %rows, %cols : (tensor<64x1xi32>, tensor<64xi32>) -> tensor<64x64xi1>
  %neg_big = lamina.constant dense<-1.000000e+09> : tensor<f32>
  %masked = lamina.select %causal, %scaled, %neg_big : (tensor<64x64xi1>, tensor<8x8x64x64xf32>, tensor<f32>) -> tensor<8x8x64x64xf32>
  %probs = lamina.softmax %masked {axis = -1 : i64} : tensor<8x8x64x64xf32>
  %probs_d = lamina.dropout %probs {rate = 1.000000e-01 : f64, seed = 1 : i64} : tensor<8x8x64x64xf32>
  %ctx = lamina.matmul %probs_d, %vh : (tensor<8x8x64x64xf32>, tensor<8x8x64x8xf32>) -> tensor<8x8x64x8xf32>
  %ctx_t = lamina.transpose %ctx {permutation = array<i64: 0, 2, 1, 3>} : (tensor<8x8x64x8xf32>) -> tensor<8x64x8x8xf32>
  %merged = lamina.reshape %ctx_t : (tensor<8x64x8x8xf32>) -> tensor<8x64x64xf32>
  %proj0 = lamina.matmul %merged, %w_proj : (tensor<8x64x64xf32>, tensor<64x64xf32, #lamina.place<@m, [[model], []]>>) -> tensor<8x64x64xf32>
  %proj = lamina.add %proj0, %b_proj : (tensor<8x64x64xf32>, tensor<64xf32>) -> tensor<8x64x64xf32>
  %proj_d = lamina.dropout %proj {rate = 1.000000e-01 : f64, seed = 2 : i64} : tensor<8x64x64xf32>
  %h = lamina.add %x, %proj_d : (tensor<8x64x64xf32, #lamina.place<@m, [[data], [], []]>>, tensor<8x64x64xf32>) -> tensor<8x64x64xf32>
  // ---- MLP sub-block: the hidden width split on model ----
  %mm = lamina.layernorm %h scale %ln2_g bias %ln2_b {axis = -1 : i64, eps = 1.000000e-05 : f64} : (tensor<8x64x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<8x64x64xf32>
  %fc0 = lamina.matmul %mm, %w_fc : (tensor<8x64x64xf32>, tensor<64x256xf32, #lamina.place<@m, [[], [model]]>>) -> tensor<8x64x256xf32>
  %fc = lamina.add %fc0, %b_fc : (tensor<8x64x256xf32>, tensor<256xf32>) -> tensor<8x64x256xf32>
  %act = lamina.gelu %fc {approximate = "tanh"} : tensor<8x64x256xf32>
  %out0 = lamina.matmul %act, %w_out : (tensor<8x64x256xf32>, tensor<256x64xf32, #lamina.place<@m, [[model], []]>>) -> tensor<8x64x64xf32>
  %out = lamina.add %out0, %b_out : (tensor<8x64x64xf32>, tensor<64xf32>) -> tensor<8x64x64xf32>
  %out_d = lamina.dropout %out {rate = 1.000000e-01 : f64, seed = 3 : i64} : tensor<8x64x64xf32>
  %y = lamina.add %h, %out_d : (tensor<8x64x64xf32>, tensor<8x64x64xf32>) -> tensor<8x64x64xf32, #lamina.place<@m, [[data], [], []]>>
  func.return %y : tensor<8x64x64xf32, #lamina.place<@m, [[data], [], []]>>
}
