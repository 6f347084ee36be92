// The four gradient all_reduces of the data-parallel step are latency-bound: one bucket.
// RUN: lamina-opt %S/../../../samples/mlp_dp_training_step.mlir -p 'insert-collectives{target=h100-node}' | filecheck %s
// RUN: lamina-opt %S/../../../samples/mlp_dp_training_step.mlir -p 'insert-collectives{target=h100-cluster}' | filecheck %s
// RUN: lamina-opt %S/../../../samples/mlp_dp_training_step.mlir -p 'insert-collectives{target=h200-node}' | filecheck %s
// RUN: lamina-opt %S/../../../samples/mlp_dp_training_step.mlir -p 'insert-collectives{target=h100-node bucket=false}' | filecheck %s --check-prefix=NOBUCKET

// CHECK: %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} = lamina.all_reduce %dw1p, %db1p, %dw2p, %db2p {axes = ["data"], algorithm = "ring", kind = "sum"}
// CHECK-NOT: lamina.all_reduce
// CHECK: func.return

// NOBUCKET-COUNT-4: lamina.all_reduce {{%[a-z0-9]+}} {axes = ["data"], algorithm = "ring"}
