// RUN: lamina-opt %s -p fuse-elementwise | filecheck %s
// RUN: lamina-opt %s -p fuse-attention | filecheck %s --check-prefix=ATTN
// RUN: lamina-opt %s -p fuse-attention --print-op-generic | lamina-opt | filecheck %s --check-prefix=ATTN
// RUN: lamina-opt %s -p fuse-attention,fuse-elementwise --explain 2>&1 | filecheck %s --check-prefix=EXPLAIN

// Attention scores: the scale, the causal mask (built from constants, computed once per kernel) and
// the select fuse with the softmax over the last axis; the matmuls stay outside.
func.func @attn(%q: tensor<4x16x16xf32>, %kt: tensor<4x16x16xf32>, %v: tensor<4x16x16xf32>) -> tensor<4x16x16xf32> {
  %scores = lamina.matmul %q, %kt : tensor<4x16x16xf32>
  %scale = lamina.constant dense<2.500000e-01> : tensor<f32>
  %scaled = lamina.mul %scores, %scale : (tensor<4x16x16xf32>, tensor<f32>) -> tensor<4x16x16xf32>
  %rows = lamina.constant dense<[[0], [1], [2], [3], [4], [5], [6], [7], [8], [9], [10], [11], [12], [13], [14], [15]]> : tensor<16x1xi64>
  %cols = lamina.constant dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]> : tensor<16xi64>
  %mask = lamina.le %cols, %rows : (tensor<16xi64>, tensor<16x1xi64>) -> tensor<16x16xi1>
  %neg = lamina.constant dense<-1.000000e+09> : tensor<f32>
  %masked = lamina.select %mask, %scaled, %neg : (tensor<16x16xi1>, tensor<4x16x16xf32>, tensor<f32>) -> tensor<4x16x16xf32>
  %probs = lamina.softmax %masked {axis = -1 : i64} : tensor<4x16x16xf32>
  %ctx = lamina.matmul %probs, %v : tensor<4x16x16xf32>
  func.return %ctx : tensor<4x16x16xf32>
}

// CHECK-LABEL: func.func @attn
// CHECK-NEXT:    %scores = lamina.matmul %q, %kt
// CHECK-NEXT:    %probs = lamina.fused "row_reduction" (%scores_1 = %scores) : (tensor<4x16x16xf32>) -> tensor<4x16x16xf32> {
// CHECK-NEXT:      %scale = lamina.constant dense<2.500000e-01> : tensor<f32>
// CHECK-NEXT:      %cols = lamina.constant
// CHECK-NEXT:      %rows = lamina.constant
// CHECK-NEXT:      %neg = lamina.constant dense<-1.000000e+09> : tensor<f32>
// CHECK-NEXT:      %scaled = lamina.mul %scores_1, %scale
// CHECK-NEXT:      %mask = lamina.le %cols, %rows
// CHECK-NEXT:      %masked = lamina.select %mask, %scaled, %neg
// CHECK-NEXT:      %probs_1 = lamina.softmax %masked {axis = -1 : i64}
// CHECK-NEXT:      lamina.yield %probs_1 : tensor<4x16x16xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %ctx = lamina.matmul %probs, %v
// CHECK-NEXT:    func.return %ctx

// fuse-attention takes the whole of @attn, both matmuls included, as one kernel whose body is the
// ops themselves (the mask's compare with it); the scores never leave it.
// ATTN-LABEL: func.func @attn
// ATTN-NEXT:    %ctx = lamina.fused "attention" (%q_1 = %q, %kt_1 = %kt, %v_1 = %v) : (tensor<4x16x16xf32>, tensor<4x16x16xf32>, tensor<4x16x16xf32>) -> tensor<4x16x16xf32> {
// ATTN-NEXT:      %scale = lamina.constant dense<2.500000e-01> : tensor<f32>
// ATTN-NEXT:      %cols = lamina.constant
// ATTN-NEXT:      %rows = lamina.constant
// ATTN-NEXT:      %neg = lamina.constant dense<-1.000000e+09> : tensor<f32>
// ATTN-NEXT:      %scores = lamina.matmul %q_1, %kt_1 : tensor<4x16x16xf32>
// ATTN-NEXT:      %scaled = lamina.mul %scores, %scale
// ATTN-NEXT:      %mask = lamina.le %cols, %rows
// ATTN-NEXT:      %masked = lamina.select %mask, %scaled, %neg
// ATTN-NEXT:      %probs = lamina.softmax %masked {axis = -1 : i64}
// ATTN-NEXT:      %ctx_1 = lamina.matmul %probs, %v_1 : tensor<4x16x16xf32>
// ATTN-NEXT:      lamina.yield %ctx_1 : tensor<4x16x16xf32>
// ATTN-NEXT:    }
// ATTN-NEXT:    func.return %ctx

// A softmax over the queries (axis 1) is not one an online softmax over key blocks computes:
// refused, with the reason, and left for fuse-elementwise.
// ATTN-LABEL: func.func @over_queries
// ATTN-NEXT:    %s = lamina.matmul %q, %kt
// ATTN-NEXT:    %p = lamina.softmax %s {axis = 1 : i64}
// ATTN-NEXT:    %o = lamina.matmul %p, %v
func.func @over_queries(%q: tensor<2x8x4xf32>, %kt: tensor<2x4x8xf32>, %v: tensor<2x8x4xf32>) -> tensor<2x8x4xf32> {
  %s = lamina.matmul %q, %kt : (tensor<2x8x4xf32>, tensor<2x4x8xf32>) -> tensor<2x8x8xf32>
  %p = lamina.softmax %s {axis = 1 : i64} : tensor<2x8x8xf32>
  %o = lamina.matmul %p, %v : (tensor<2x8x8xf32>, tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  func.return %o : tensor<2x8x4xf32>
}

// EXPLAIN:      [fuse-attention] {{.*}}attention.mlir:9:3: attention: %scores = lamina.matmul ... %ctx = lamina.matmul -> lamina.fused "attention" (6 ops, 1 of them building side operands; the 4x16x16 scores are never stored)
// EXPLAIN-NEXT: [fuse-attention] {{.*}}attention.mlir:[[L:[0-9]+]]:3: not fused as attention: the softmax %p normalizes over axis 1, not the last axis (the keys)
// EXPLAIN-NEXT: [fuse-attention] {{.*}}attention.mlir:{{[0-9]+}}:3: not fused as attention: %o is used by func.return, not by an op-table op
