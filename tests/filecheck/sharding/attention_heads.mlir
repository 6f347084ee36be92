// Attention split by heads: everything local until the output projection; one all_reduce.
// RUN: lamina-opt %S/../../../samples/attention_heads.mlir -p 'propagate-sharding,insert-collectives{target=h100-node}' | filecheck %s
// RUN: lamina-opt %S/../../../samples/attention_heads.mlir -p 'propagate-sharding,insert-collectives{target=h100-cluster}' | filecheck %s
// RUN: lamina-opt %S/../../../samples/attention_heads.mlir -p 'propagate-sharding,insert-collectives{target=h200-node}' | filecheck %s
// RUN: lamina-opt %S/../../../samples/attention_heads.mlir -p 'propagate-sharding,insert-collectives{target=tiny}' | filecheck %s

// CHECK: %wo: tensor<256x64xf32, #lamina.place<@m, {{\[\[}}model], []]>>
// CHECK: lamina.softmax {{.*}}{{\[\[}}model], [], []]
// CHECK: lamina.reshape {{.*}} -> tensor<64x256xf32, #lamina.place<@m, {{\[\[}}], [model]]>>
// CHECK-NOT: lamina.all_gather
// CHECK: lamina.all_reduce %y {axes = ["model"], algorithm = "ring", kind = "sum"}
// CHECK-NOT: lamina.all_
// CHECK: func.return
