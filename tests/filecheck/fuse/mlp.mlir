// RUN: lamina-opt %s -p fuse-elementwise | filecheck %s

// GPT-2 MLP: each matmul by a weight matrix roots a kernel, and what follows it on its result
// is its epilogue: bias add + gelu with the first, bias add + residual add with the second.
func.func @mlp_block(%x: tensor<64x128xf32>, %w1: tensor<128x512xf32>, %b1: tensor<512xf32>, %w2: tensor<512x128xf32>, %b2: tensor<128xf32>) -> tensor<64x128xf32> {
  %fc = lamina.matmul %x, %w1 : (tensor<64x128xf32>, tensor<128x512xf32>) -> tensor<64x512xf32>
  %fc_b = lamina.add %fc, %b1 : (tensor<64x512xf32>, tensor<512xf32>) -> tensor<64x512xf32>
  %h = lamina.gelu %fc_b {approximate = "tanh"} : tensor<64x512xf32>
  %proj = lamina.matmul %h, %w2 : (tensor<64x512xf32>, tensor<512x128xf32>) -> tensor<64x128xf32>
  %proj_b = lamina.add %proj, %b2 : (tensor<64x128xf32>, tensor<128xf32>) -> tensor<64x128xf32>
  %y = lamina.add %x, %proj_b : tensor<64x128xf32>
  func.return %y : tensor<64x128xf32>
}

// CHECK-LABEL: func.func @mlp_block
// CHECK-NEXT:    %h = lamina.fused "matmul" (%x_1 = %x, %w1_1 = %w1, %b1_1 = %b1) : (tensor<64x128xf32>, tensor<128x512xf32>, tensor<512xf32>) -> tensor<64x512xf32> {
// CHECK-NEXT:      %fc = lamina.matmul %x_1, %w1_1
// CHECK-NEXT:      %fc_b = lamina.add %fc, %b1_1
// CHECK-NEXT:      %h_1 = lamina.gelu %fc_b {approximate = "tanh"}
// CHECK-NEXT:      lamina.yield %h_1 : tensor<64x512xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %y = lamina.fused "matmul" (%h_1 = %h, %w2_1 = %w2, %b2_1 = %b2, %x_1 = %x)
// CHECK-NEXT:      %proj = lamina.matmul %h_1, %w2_1
// CHECK-NEXT:      %proj_b = lamina.add %proj, %b2_1
// CHECK-NEXT:      %y_1 = lamina.add %x_1, %proj_b
// CHECK-NEXT:      lamina.yield %y_1
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %y
