// RUN: lamina-opt %s -p fuse-elementwise | filecheck %s

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
