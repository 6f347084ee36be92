// RUN: lamina-opt %s -p fuse-attention | filecheck %s --check-prefix=ATTN
// RUN: lamina-opt %s -p fuse-attention --print-op-generic | lamina-opt | filecheck %s --check-prefix=ATTN
// RUN: lamina-opt %s -p fuse-attention --explain 2>&1 >/dev/null | filecheck %s --check-prefix=EXPLAIN
// RUN: lamina-run %s -p fuse-attention --check | filecheck %s --check-prefix=OUT

// Attention as PyTorch's scaled_dot_product_attention imports it: a mask writing -inf, and the
// safe softmax (0 on a row of only -inf, torch's `_safe_softmax`) that gives query 0, which the
// mask lets see no key, 0 instead of nan. The safe softmax is softmax's row with an attribute,
// so it plays the softmax's part and the whole chain fuses into one attention kernel.
func.func @attn(%q: tensor<2x4x8xf32>, %kt: tensor<2x8x4xf32>, %v: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %scores = lamina.matmul %q, %kt : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
  %scale = lamina.constant dense<3.535534e-01> : tensor<f32>
  %scaled = lamina.mul %scores, %scale : (tensor<2x4x4xf32>, tensor<f32>) -> tensor<2x4x4xf32>
  %rows = lamina.constant dense<[[-1], [1], [2], [3]]> : tensor<4x1xi64>
  %cols = lamina.constant dense<[0, 1, 2, 3]> : tensor<4xi64>
  %mask = lamina.le %cols, %rows : (tensor<4xi64>, tensor<4x1xi64>) -> tensor<4x4xi1>
  %ninf = lamina.constant dense<0xFF800000> : tensor<f32>
  %masked = lamina.select %mask, %scaled, %ninf : (tensor<4x4xi1>, tensor<2x4x4xf32>, tensor<f32>) -> tensor<2x4x4xf32>
  %probs = lamina.softmax %masked {axis = -1 : i64, safe = true} : tensor<2x4x4xf32>
  %ctx = lamina.matmul %probs, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  func.return %ctx : tensor<2x4x8xf32>
}

// ATTN-LABEL: func.func @attn
// ATTN-NEXT:    %ctx = lamina.fused "attention" (%q_1 = %q, %kt_1 = %kt, %v_1 = %v) : (tensor<2x4x8xf32>, tensor<2x8x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
// ATTN-NEXT:      %scale = lamina.constant
// ATTN-NEXT:      %cols = lamina.constant dense<[0, 1, 2, 3]> : tensor<4xi64>
// ATTN-NEXT:      %rows = lamina.constant dense<{{\[\[}}-1], [1], [2], [3]]> : tensor<4x1xi64>
// ATTN-NEXT:      %ninf = lamina.constant dense<0xff800000> : tensor<f32>
// ATTN-NEXT:      %scores = lamina.matmul %q_1, %kt_1
// ATTN-NEXT:      %scaled = lamina.mul %scores, %scale
// ATTN-NEXT:      %mask = lamina.le %cols, %rows
// ATTN-NEXT:      %masked = lamina.select %mask, %scaled, %ninf
// ATTN-NEXT:      %probs = lamina.softmax %masked {axis = -1 : i64, safe = true} : tensor<2x4x4xf32>
// ATTN-NEXT:      %ctx_1 = lamina.matmul %probs, %v_1
// ATTN-NEXT:      lamina.yield %ctx_1 : tensor<2x4x8xf32>
// ATTN-NEXT:    }
// ATTN-NEXT:    func.return %ctx

// EXPLAIN: [fuse-attention] {{.*}}attention_safe.mlir:{{[0-9]+}}:3: attention: %scores = lamina.matmul ... %ctx = lamina.matmul -> lamina.fused "attention" (6 ops, 1 of them building side operands; the 2x4x4 scores are never stored)

// Row 0 of each of the 2 batches is 0 (8 zeros each), the same in the fused kernel as unfused;
// a plain softmax would make it nan and the check would fail as NONFINITE.
// OUT:      ctx: f32[2, 4, 8] {{.*}} zeros 16
// OUT-NEXT: check ctx: ok shape [2, 4, 8] f32
