// RUN: lamina-opt %s -p fuse-elementwise | filecheck %s
// RUN: lamina-opt %s -p fuse-elementwise | lamina-opt -p fuse-elementwise | filecheck %s
// RUN: lamina-opt %s -p 'fuse-elementwise{reduction-fusion=false}' | filecheck %s --check-prefix=NORED

// The seed example: layernorm(x) * gamma + beta -> gelu -> dropout is ONE row-reduction kernel.
func.func @seed(%x: tensor<16x64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>) -> tensor<16x64xf32> {
  %ln = lamina.layernorm %x {axis = -1 : i64, eps = 1.000000e-05 : f64} : tensor<16x64xf32>
  %scaled = lamina.mul %ln, %gamma : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %shifted = lamina.add %scaled, %beta : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %act = lamina.gelu %shifted {approximate = "tanh"} : tensor<16x64xf32>
  %y = lamina.dropout %act {rate = 1.000000e-01 : f64, seed = 42 : i64} : tensor<16x64xf32>
  func.return %y : tensor<16x64xf32>
}

// CHECK-LABEL: func.func @seed
// CHECK-NEXT:    %y = lamina.fused "row_reduction" (%x_1 = %x, %gamma_1 = %gamma, %beta_1 = %beta) : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<16x64xf32> {
// CHECK-NEXT:      %ln = lamina.layernorm %x_1
// CHECK-NEXT:      %scaled = lamina.mul %ln, %gamma_1
// CHECK-NEXT:      %shifted = lamina.add %scaled, %beta_1
// CHECK-NEXT:      %act = lamina.gelu %shifted {approximate = "tanh"}
// CHECK-NEXT:      %y_1 = lamina.dropout %act {rate = 1.000000e-01 : f64, seed = 42 : i64}
// CHECK-NEXT:      lamina.yield %y_1 : tensor<16x64xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %y : tensor<16x64xf32>
// CHECK-NOT:   lamina.fused

// Without reduction fusion the layernorm is its own kernel and the elementwise tail is a loop.
// NORED-LABEL: func.func @seed
// NORED-NEXT:    %ln = lamina.layernorm %x
// NORED-NEXT:    %y = lamina.fused "loop" (%ln_1 = %ln, %gamma_1 = %gamma, %beta_1 = %beta)
// NORED-NOT:       lamina.layernorm
// NORED:           lamina.yield
