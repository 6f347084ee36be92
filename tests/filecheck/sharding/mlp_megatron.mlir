// The Megatron MLP needs exactly one all_reduce (4 MiB payload, 6 MiB sent per device), on both targets.
// RUN: lamina-opt %S/../../../samples/mlp_megatron.mlir -p 'propagate-sharding,insert-collectives{target=h100-node}' | filecheck %s
// RUN: lamina-opt %S/../../../samples/mlp_megatron.mlir -p 'propagate-sharding,insert-collectives{target=h100-cluster}' | filecheck %s
// RUN: lamina-opt %S/../../../samples/mlp_megatron.mlir -p 'propagate-sharding,insert-collectives{target=h200-node}' | filecheck %s
// RUN: lamina-opt %S/../../../samples/mlp_megatron.mlir -p 'propagate-sharding,insert-collectives{target=h100-node}' --explain 2>&1 >/dev/null | filecheck %s --check-prefix=EXPLAIN
// The tiny target has 4 devices: the 2 x 4 mesh does not fit it, and that is one diagnostic.
// RUN: not lamina-opt %S/../../../samples/mlp_megatron.mlir -p 'propagate-sharding,insert-collectives{target=tiny}' 2>&1 | filecheck %s --check-prefix=TINY
// TINY: mlp_megatron.mlir:10:1: error: insert-collectives: mesh @m has 8 devices, target 'tiny' has 4

// CHECK: %b1: tensor<4096xf32, #lamina.place<@m, {{\[\[}}model]]>>
// CHECK-SAME: %w2: tensor<4096x1024xf32, #lamina.place<@m, {{\[\[}}model], []]>>
// CHECK: lamina.gelu {{.*}}{{\[\[}}data], [model]]
// CHECK-NOT: lamina.all_gather
// CHECK-NOT: lamina.reduce_scatter
// CHECK: lamina.all_reduce %y {axes = ["model"], algorithm = "ring", kind = "sum"}
// CHECK-NOT: lamina.all_
// CHECK: func.return

// EXPLAIN: [insert-collectives] {{.*}}all_reduce over [model] {{.*}}ring: 4 MiB payload, 6 MiB sent per device
