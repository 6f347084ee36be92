// The four gradient all_reduces of the data-parallel step are latency-bound: one bucket.
// RUN: lamina-opt %S/../../../samples/mlp_dp_training_step.mlir -p 'insert-collectives{target=h100-node}' | filecheck %s
// RUN: lamina-opt %S/../../../samples/mlp_dp_training_step.mlir -p 'insert-collectives{target=h100-cluster}' | filecheck %s
// RUN: lamina-opt %S/../../../samples/mlp_dp_training_step.mlir -p 'insert-collectives{target=h200-node}' | filecheck %s
// RUN: lamina-opt %S/../../../samples/mlp_dp_training_step.mlir -p 'insert-collectives{target=h100-node bucket=false}' | filecheck %s --check-prefix=NOBUCKET
// A 17000-byte cap per bucket: dw1 (16 KiB) + db1 (512 B) fill the first; dw2 opens a second.
// RUN: lamina-opt %S/../../../samples/mlp_dp_training_step.mlir -p 'insert-collectives{target=h100-node bucket-bytes=17000}' | filecheck %s --check-prefix=CAP

// CHECK: %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} = lamina.all_reduce %dw1p, %db1p, %dw2p, %db2p {axes = ["data"], algorithm = "ring", kind = "sum"}
// CHECK-NOT: lamina.all_reduce
// CHECK: func.return

// NOBUCKET-COUNT-4: lamina.all_reduce {{%[a-z0-9]+}} {axes = ["data"], algorithm = "ring"}

// CAP: %{{.*}}, %{{.*}} = lamina.all_reduce %dw1p, %db1p {axes = ["data"], algorithm = "ring", kind = "sum"}
// CAP: %{{.*}}, %{{.*}} = lamina.all_reduce %dw2p, %db2p {axes = ["data"], algorithm = "ring", kind = "sum"}
// CAP-NOT: lamina.all_reduce
// CAP: func.return
