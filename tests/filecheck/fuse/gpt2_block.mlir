// The GPT-2 block of samples/gpt2_block.mlir, fused: 30 kernels unfused, 8 after fuse-elementwise,
// 6 with fuse-attention first. Pinned kernel by kernel:
//   LN1 alone (the QKV matmul reads its operand whole: no elementwise prologue);
//   QKV matmul + bias, writing q, k^T, v through slice + reshape + transpose (output views);
//   attention: q k^T, scale, causal select, softmax, dropout, @ v (one online-softmax kernel);
//   projection matmul reading the head merge (transpose + reshape) as its input view, with bias,
//   dropout, residual and LN2 as its epilogue (results h and m);
//   fc matmul + bias + GeLU; out matmul + bias + dropout + residual.
// RUN: lamina-opt %S/../../../samples/gpt2_block.mlir -p 'fuse-attention,fuse-elementwise' | filecheck %s
// RUN: lamina-opt %S/../../../samples/gpt2_block.mlir -p fuse-elementwise | filecheck %s --check-prefix=ELEM
// RUN: lamina-run %S/../../../samples/gpt2_block.mlir -p 'fuse-attention,fuse-elementwise' --check --stats-json - | filecheck %s --check-prefix=STATS

// CHECK-LABEL: func.func @gpt2_block
// CHECK-NEXT:    %a = lamina.layernorm %x scale %ln1_g bias %ln1_b
// CHECK-NEXT:    %qh, %kt, %vh = lamina.fused "matmul" (%a_1 = %a, %w_attn_1 = %w_attn, %b_attn_1 = %b_attn)
// CHECK-NEXT:      %qkv0 = lamina.matmul %a_1, %w_attn_1
// CHECK-NEXT:      %qkv = lamina.add %qkv0, %b_attn_1
// CHECK-NEXT:      %q = lamina.slice %qkv
// CHECK-NEXT:      %k = lamina.slice %qkv
// CHECK-NEXT:      %v = lamina.slice %qkv
// CHECK-NEXT:      %q3 = lamina.reshape %q
// CHECK-NEXT:      %k3 = lamina.reshape %k
// CHECK-NEXT:      %v3 = lamina.reshape %v
// CHECK-NEXT:      %qh_1 = lamina.transpose %q3 {permutation = array<i64: 1, 0, 2>}
// CHECK-NEXT:      %kt_1 = lamina.transpose %k3 {permutation = array<i64: 1, 2, 0>}
// CHECK-NEXT:      %vh_1 = lamina.transpose %v3 {permutation = array<i64: 1, 0, 2>}
// CHECK-NEXT:      lamina.yield %qh_1, %kt_1, %vh_1
// CHECK-NEXT:    }
// CHECK-NEXT:    %ctx = lamina.fused "attention" (%qh_1 = %qh, %kt_1 = %kt, %vh_1 = %vh)
// CHECK:           %scores = lamina.matmul %qh_1, %kt_1
// CHECK-NEXT:      %scaled = lamina.mul %scores, %inv_sqrt_dh
// CHECK-NEXT:      %causal = lamina.ge %rows, %cols
// CHECK-NEXT:      %masked = lamina.select %causal, %scaled, %neg_big
// CHECK-NEXT:      %probs = lamina.softmax %masked {axis = -1 : i64}
// CHECK-NEXT:      %probs_d = lamina.dropout %probs
// CHECK-NEXT:      %ctx_1 = lamina.matmul %probs_d, %vh_1
// CHECK-NEXT:      lamina.yield %ctx_1
// CHECK-NEXT:    }
// CHECK-NEXT:    %h, %m = lamina.fused "matmul" (%ctx_1 = %ctx, %w_proj_1 = %w_proj, %b_proj_1 = %b_proj, %x_1 = %x, %ln2_g_1 = %ln2_g, %ln2_b_1 = %ln2_b)
// CHECK-NEXT:      %ctx_t = lamina.transpose %ctx_1 {permutation = array<i64: 1, 0, 2>}
// CHECK-NEXT:      %merged = lamina.reshape %ctx_t
// CHECK-NEXT:      %proj0 = lamina.matmul %merged, %w_proj_1
// CHECK-NEXT:      %proj = lamina.add %proj0, %b_proj_1
// CHECK-NEXT:      %proj_d = lamina.dropout %proj
// CHECK-NEXT:      %h_1 = lamina.add %x_1, %proj_d
// CHECK-NEXT:      %m_1 = lamina.layernorm %h_1 scale %ln2_g_1 bias %ln2_b_1
// CHECK-NEXT:      lamina.yield %h_1, %m_1
// CHECK-NEXT:    }
// CHECK-NEXT:    %act = lamina.fused "matmul" (%m_1 = %m, %w_fc_1 = %w_fc, %b_fc_1 = %b_fc)
// CHECK-NEXT:      %fc0 = lamina.matmul %m_1, %w_fc_1
// CHECK-NEXT:      %fc = lamina.add %fc0, %b_fc_1
// CHECK-NEXT:      %act_1 = lamina.gelu %fc {approximate = "tanh"}
// CHECK-NEXT:      lamina.yield %act_1
// CHECK-NEXT:    }
// CHECK-NEXT:    %y = lamina.fused "matmul" (%act_1 = %act, %w_out_1 = %w_out, %b_out_1 = %b_out, %h_1 = %h)
// CHECK-NEXT:      %out0 = lamina.matmul %act_1, %w_out_1
// CHECK-NEXT:      %out = lamina.add %out0, %b_out_1
// CHECK-NEXT:      %out_d = lamina.dropout %out
// CHECK-NEXT:      %y_1 = lamina.add %h_1, %out_d
// CHECK-NEXT:      lamina.yield %y_1
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %y

// Without fuse-attention the scores are stored: their matmul and the context matmul are batched
// (not row-tiled) and stay apart, the scale + mask + softmax + dropout between them one kernel.
// ELEM-LABEL: func.func @gpt2_block
// ELEM:         %qh, %kt, %vh = lamina.fused "matmul"
// ELEM:         %scores = lamina.matmul %qh, %kt
// ELEM-NEXT:    %probs_d = lamina.fused "row_reduction" (%scores_1 = %scores)
// ELEM:         %ctx = lamina.matmul %probs_d, %vh
// ELEM-NEXT:    %h, %m = lamina.fused "matmul" (%ctx_1 = %ctx
// ELEM:         %act = lamina.fused "matmul"
// ELEM:         %y = lamina.fused "matmul"
// ELEM-NOT:     lamina.fused
// ELEM:         func.return %y

// STATS: "kernels": 6
