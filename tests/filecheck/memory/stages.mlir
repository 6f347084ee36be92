// Per-stage capacities (issue 28): a value placed `stage = pp[i]` occupies only the devices of
// stage i, so each stage fits its own capacity. At 50000 B the stages peak at 32768 and 49152 B
// and nothing moves (counting both stages on one device, as the planner once did, put 57344 B at
// step 5 and offloaded stage 0's %b to relieve stage 1). At 40000 B only stage 1's values move,
// each for an overflow on stage pp[1] (the four moves are those of %s and %c); at 30000 B
// stage 0's matmul cannot fit.
// RUN: lamina-opt %s -p 'annotate-lifetimes,assign-memory-tiers{target=tiny hbm-capacity=50000}' --explain 2>&1 >/dev/null | filecheck %s --check-prefix=FITS
// RUN: lamina-opt %s -p 'annotate-lifetimes,assign-memory-tiers{target=tiny hbm-capacity=40000}' --explain 2>&1 >/dev/null | filecheck %s --check-prefix=STAGE1
// RUN: lamina-opt %s -p 'annotate-lifetimes,assign-memory-tiers{target=tiny hbm-capacity=40000 solver=ilp}' --explain 2>&1 >/dev/null | filecheck %s --check-prefix=ILP
// RUN: not lamina-opt %s -p 'annotate-lifetimes,assign-memory-tiers{target=tiny hbm-capacity=30000}' 2>&1 | filecheck %s --check-prefix=NOFIT

// FITS: [assign-memory-tiers] {{.*}}: @f: 0 move(s), 0 recompute(s)
// FITS-NEXT: [assign-memory-tiers] {{.*}}: modeled hbm peak per device by stage: pp[0] 32768 B, pp[1] 49152 B; stage pp[1] binds (49152 of 50000 B)

// STAGE1: [assign-memory-tiers] {{.*}}stages.mlir:31:3: copy %s (8192 B) to host as soon as it exists: HBM is over capacity after point 3 (step 6 on stage pp[1]), before its next use
// STAGE1: [assign-memory-tiers] {{.*}}stages.mlir:37:3: prefetch %s (8192 B) from host, issued 1 op(s) before this use: HBM is over capacity at step 6 on stage pp[1] since its previous use
// STAGE1: [assign-memory-tiers] {{.*}}stages.mlir:32:3: copy %c (8192 B) to host as soon as it exists: HBM is over capacity after point 4 (step 6 on stage pp[1])
// STAGE1: [assign-memory-tiers] {{.*}}stages.mlir:36:3: prefetch %c (8192 B) from host, issued 0 op(s) before this use: HBM is over capacity at step 6 on stage pp[1]
// STAGE1-NEXT: [assign-memory-tiers] {{.*}}: @f: 4 move(s), 0 recompute(s)
// STAGE1-NEXT: [assign-memory-tiers] {{.*}}: modeled hbm peak per device by stage: pp[0] 32768 B, pp[1] 32768 B

// ILP: @f: 4 move(s), 0 recompute(s)
// ILP-NEXT: modeled hbm peak per device by stage: pp[0] 32768 B, pp[1] {{[0-9]+}} B

// NOFIT: stages.mlir:29:3: error: assign-memory-tiers: no assignment fits tier 'hbm' on stage pp[0] at program point 0 (%a = lamina.matmul): 32768 bytes per device needed, capacity 30000 (target 'tiny'); the op's own operands and result take 32768 bytes; largest live values: %w (16384 B), %a (8192 B), %x (8192 B)

lamina.mesh @m [pp = 2]
func.func @f(%x: tensor<32x64xf32, #lamina.place<@m, [[], []], stage = pp[0]>>, %w: tensor<64x64xf32, #lamina.place<@m, [[], []], stage = pp[0]>>, %v: tensor<64x64xf32, #lamina.place<@m, [[], []], stage = pp[1]>>) -> (tensor<32x64xf32, #lamina.place<@m, [[], []], stage = pp[0]>>, tensor<32x64xf32, #lamina.place<@m, [[], []], stage = pp[1]>>) {
  %a = lamina.matmul %x, %w : (tensor<32x64xf32, #lamina.place<@m, [[], []], stage = pp[0]>>, tensor<64x64xf32, #lamina.place<@m, [[], []], stage = pp[0]>>) -> tensor<32x64xf32, #lamina.place<@m, [[], []], stage = pp[0]>>
  %b = lamina.tanh %a : tensor<32x64xf32, #lamina.place<@m, [[], []], stage = pp[0]>>
  %s = lamina.collective_permute %b {axes = ["pp"]} : tensor<32x64xf32, #lamina.place<@m, [[], []], stage = pp[0]>> -> tensor<32x64xf32, #lamina.place<@m, [[], []], stage = pp[1]>>
  %c = lamina.matmul %s, %v : (tensor<32x64xf32, #lamina.place<@m, [[], []], stage = pp[1]>>, tensor<64x64xf32, #lamina.place<@m, [[], []], stage = pp[1]>>) -> tensor<32x64xf32, #lamina.place<@m, [[], []], stage = pp[1]>>
  %d = lamina.exp %c : tensor<32x64xf32, #lamina.place<@m, [[], []], stage = pp[1]>>
  %e = lamina.tanh %d : tensor<32x64xf32, #lamina.place<@m, [[], []], stage = pp[1]>>
  %g = lamina.matmul %e, %v : (tensor<32x64xf32, #lamina.place<@m, [[], []], stage = pp[1]>>, tensor<64x64xf32, #lamina.place<@m, [[], []], stage = pp[1]>>) -> tensor<32x64xf32, #lamina.place<@m, [[], []], stage = pp[1]>>
  %h = lamina.add %g, %c : tensor<32x64xf32, #lamina.place<@m, [[], []], stage = pp[1]>>
  %i = lamina.add %h, %s : tensor<32x64xf32, #lamina.place<@m, [[], []], stage = pp[1]>>
  func.return %b, %i : tensor<32x64xf32, #lamina.place<@m, [[], []], stage = pp[0]>>, tensor<32x64xf32, #lamina.place<@m, [[], []], stage = pp[1]>>
}
