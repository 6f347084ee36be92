// RUN: lamina-opt %s -p 'annotate-lifetimes,assign-memory-tiers{target=tiny hbm-capacity=50000}' --explain 2>&1 >/dev/null | filecheck %s
// RUN: lamina-opt %s -p 'annotate-lifetimes,assign-memory-tiers{target=tiny hbm-capacity=50000}' | filecheck %s --check-prefix=IR
// RUN: not lamina-opt %s -p 'annotate-lifetimes,assign-memory-tiers{target=tiny hbm-capacity=40000}' 2>&1 | filecheck %s --check-prefix=NOFIT

// CHECK: [annotate-lifetimes] {{.*}}explain.mlir:19:1: live range of %x: argument, last used by lamina.add at {{.*}}explain.mlir:25:3; spans 6 op(s), 16384 bytes; freed after it
// CHECK: [assign-memory-tiers] {{.*}}: copy %x (16384 B) to host as soon as it exists: HBM is over capacity
// CHECK: [assign-memory-tiers] {{.*}}explain.mlir:25:3: prefetch %x (16384 B) from host, issued {{[0-9]+}} op(s) before this use: HBM is over capacity
// CHECK: [assign-memory-tiers] {{.*}}: @f: {{[0-9]+}} move(s), {{[0-9]+}} recompute(s), modeled exposed transfer and recompute time

// IR: %[[H:[0-9]+]] = lamina.move %x to host
// IR: lamina.free %x
// IR: %[[P:[0-9]+]] = lamina.move %[[H]] to hbm {prefetch = {{[0-9]+}} : i64}
// IR: %f = lamina.add %e, %[[P]]
// IR: lamina.free %[[P]]
// IR: lamina.free %[[H]]

// NOFIT: explain.mlir:20:3: error: assign-memory-tiers: no assignment fits tier 'hbm' at program point 0 (%a = lamina.matmul): 49152 bytes per device needed, capacity 40000 (target 'tiny'); the op's own operands and result take 49152 bytes; largest live values: %a (16384 B), %w (16384 B), %x (16384 B)

func.func @f(%x: tensor<64x64xf32>, %w: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %a = lamina.matmul %x, %w : tensor<64x64xf32>
  %b = lamina.exp %a : tensor<64x64xf32>
  %c = lamina.tanh %b : tensor<64x64xf32>
  %d = lamina.matmul %c, %w : tensor<64x64xf32>
  %e = lamina.add %d, %a : tensor<64x64xf32>
  %f = lamina.add %e, %x : tensor<64x64xf32>
  func.return %f : tensor<64x64xf32>
}
