// A split contracting dimension: reduce_scatter of the hidden (24 MiB sent), gelu on a quarter of it,
// then one all_reduce of the output (12 MiB sent): 36 MiB per device, against GSPMD's 48 MiB.
// RUN: lamina-opt %S/../../../samples/mlp_contracting.mlir -p 'propagate-sharding,insert-collectives{target=h100-node}' | filecheck %s
// RUN: lamina-opt %S/../../../samples/mlp_contracting.mlir -p 'propagate-sharding,insert-collectives{target=h100-cluster}' | filecheck %s
// RUN: lamina-opt %S/../../../samples/mlp_contracting.mlir -p 'propagate-sharding,insert-collectives{target=h200-node}' | filecheck %s
// RUN: lamina-opt %S/../../../samples/mlp_contracting.mlir -p 'propagate-sharding,insert-collectives{target=h100-node}' --explain 2>&1 >/dev/null | filecheck %s --check-prefix=EXPLAIN

// CHECK: lamina.reduce_scatter %h {axes = ["model"], algorithm = "ring", dim = 1 : i64, kind = "sum"}
// CHECK: lamina.gelu %hb : tensor<2048x4096xf32, #lamina.place<@m, {{\[\[}}], [model]]>>
// CHECK: lamina.all_reduce %y {axes = ["model"], algorithm = "ring", kind = "sum"}
// CHECK-NOT: lamina.all_
// CHECK: func.return

// EXPLAIN: reduce_scatter over [model] {{.*}}32 MiB payload, 24 MiB sent per device{{.*}}beats all_reduce + all_slice
// EXPLAIN: all_reduce over [model] {{.*}}8 MiB payload, 12 MiB sent per device
