// RUN: lamina-opt %s -t linalg | filecheck %s
// RUN: lamina-opt %s -p fuse-elementwise -t linalg | filecheck %s --check-prefix=FUSED

// The seed example's elementwise tail (x * gamma + beta, then gelu's tanh form): as parsed, one
// linalg.generic per op; after fuse-elementwise, the one kernel is ONE linalg.generic whose body
// is all three ops' scalar forms (gamma and beta read through broadcasting maps), so the export
// shows the fusion decision.
func.func @w1_tail(%x: tensor<16x64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>) -> tensor<16x64xf32> {
  %s = lamina.mul %x, %gamma : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %b = lamina.add %s, %beta : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %g = lamina.gelu %b {approximate = "tanh"} : tensor<16x64xf32>
  func.return %g : tensor<16x64xf32>
}

// CHECK-LABEL: func.func @w1_tail(%arg0: tensor<16x64xf32>, %arg1: tensor<64xf32>, %arg2: tensor<64xf32>) -> (tensor<16x64xf32>)
// CHECK-COUNT-3: linalg.generic
// CHECK-NOT:     linalg.generic
// CHECK:         func.return

// FUSED-LABEL: func.func @w1_tail
// FUSED:         %[[E:.*]] = tensor.empty() : tensor<16x64xf32>
// FUSED-NEXT:    %[[R:.*]] = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1, %arg2 : tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>) outs(%[[E]] : tensor<16x64xf32>) {
// FUSED-NEXT:    ^bb0(%in0: f32, %in1: f32, %in2: f32, %out: f32):
// FUSED:           arith.mulf %in0, %in1 : f32
// FUSED:           math.tanh
// FUSED:           linalg.yield
// FUSED-NEXT:    } -> tensor<16x64xf32>
// FUSED-NOT:     linalg.generic
// FUSED-NEXT:    func.return %[[R]] : tensor<16x64xf32>
