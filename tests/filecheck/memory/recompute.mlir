// Recompute as a planning option: %a = exp %x is dropped after its first use and recomputed from
// %x (still live) before its second, since moving it to host and back would expose more time.
// RUN: lamina-opt %s -p 'annotate-lifetimes,assign-memory-tiers{target=tiny hbm-capacity=70000}' --explain 2>&1 >/dev/null | filecheck %s
// RUN: lamina-opt %s -p 'annotate-lifetimes,assign-memory-tiers{target=tiny hbm-capacity=70000 solver=ilp}' --explain 2>&1 >/dev/null | filecheck %s
// RUN: lamina-opt %s -p 'annotate-lifetimes,assign-memory-tiers{target=tiny hbm-capacity=70000}' | filecheck %s --check-prefix=IR
// RUN: lamina-opt %s -p 'annotate-lifetimes,assign-memory-tiers{target=tiny hbm-capacity=70000 recompute=false}' --explain 2>&1 >/dev/null | filecheck %s --check-prefix=OFF
// RUN: lamina-run %s -p 'annotate-lifetimes,assign-memory-tiers{target=tiny hbm-capacity=70000}' --target tiny --check | filecheck %s --check-prefix=EXEC

// CHECK: [assign-memory-tiers] {{.*}}recompute.mlir:30:3: recompute %a (16384 B, lamina.exp) before this use: HBM is over capacity at {{.*}} since its previous use; recompute 0.0328 us beats moving it to host and back 1.11 us
// CHECK: @f: 0 move(s), 1 recompute(s), modeled exposed transfer and recompute time 0.0328 us

// IR:      %a = lamina.exp %x
// IR:      lamina.free %a
// IR:      %d = lamina.matmul
// IR:      %[[A:[a-z0-9_]+]] = lamina.exp %x
// IR-NEXT: %e = lamina.add %d, %[[A]]
// IR-NEXT: lamina.free %[[A]]

// OFF: copy %a (16384 B) to host
// OFF: prefetch %a (16384 B) from host
// OFF: @f: 2 move(s), 0 recompute(s), modeled exposed transfer and recompute time 1.11 us

// EXEC: check f: ok shape [64, 64] f32 max abs err 0

func.func @f(%x: tensor<64x64xf32>, %w: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %a = lamina.exp %x : tensor<64x64xf32>
  %b = lamina.matmul %a, %w : tensor<64x64xf32>
  %c = lamina.tanh %b : tensor<64x64xf32>
  %d = lamina.matmul %c, %w : tensor<64x64xf32>
  %e = lamina.add %d, %a : tensor<64x64xf32>
  %f = lamina.add %e, %x : tensor<64x64xf32>
  func.return %f : tensor<64x64xf32>
}
