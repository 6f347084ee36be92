// The memory samples: overflow without a plan, fit after annotate-lifetimes (+ assign-memory-tiers).
// RUN: not lamina-run %S/../../../samples/long_chain_frees.mlir --target tiny 2>&1 | filecheck %s --check-prefix=CHAIN
// RUN: lamina-run %S/../../../samples/long_chain_frees.mlir -p annotate-lifetimes --target tiny --stats-json - | filecheck %s --check-prefix=FREED
// RUN: not lamina-run %S/../../../samples/mlp_training_offload.mlir --target tiny 2>&1 | filecheck %s --check-prefix=MLP
// RUN: lamina-opt %S/../../../samples/mlp_training_offload.mlir -p 'annotate-lifetimes,assign-memory-tiers{target=tiny}' | filecheck %s --check-prefix=PLAN
// RUN: lamina-run %S/../../../samples/mlp_training_offload.mlir -p 'fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=tiny}' --target tiny --check | filecheck %s --check-prefix=CHECK
// RUN: lamina-run %S/../../../samples/zero_offload_step.mlir -p 'annotate-lifetimes,assign-memory-tiers{target=tiny}' --target tiny --stats-json - | filecheck %s --check-prefix=ZERO

// CHAIN: long_chain_frees.mlir:{{[0-9]+}}:3: error: checked execution: capacity overflow in tier 'hbm' at %t3 = lamina.abs: 1310720 bytes per device live, capacity 1048576 (target 'tiny'); live: %x (256 KiB), %t0 (256 KiB), %t1 (256 KiB), %t2 (256 KiB) and 1 more

// FREED:      "peak_bytes": {
// FREED-NEXT:   "sram": 0,
// FREED-NEXT:   "hbm": 524288,
// FREED-NEXT:   "host": 0,
// FREED:      "moved_bytes": {}

// MLP: error: checked execution: capacity overflow in tier 'hbm'

// PLAN: func.func @mlp_training_step({{.*}}#lamina.place<tier = {{host|hbm}}>
// PLAN: lamina.move %{{.*}} to host
// PLAN: lamina.move %{{.*}} to hbm {prefetch = {{[0-9]+}} : i64}
// PLAN: lamina.free
// PLAN: func.return

// CHECK: check w1n: ok
// CHECK-NEXT: check w2n: ok
// CHECK-NEXT: check m1n: ok
// CHECK-NEXT: check v1n: ok
// CHECK-NEXT: check m2n: ok
// CHECK-NEXT: check v2n: ok
// CHECK-NEXT: check loss: ok

// ZERO: "hbm": {{[0-9]+}},
// ZERO: "moved_bytes": {
// ZERO-NEXT: "hbm->host": {{[0-9]+}},
// ZERO-NEXT: "host->hbm": {{[0-9]+}}
