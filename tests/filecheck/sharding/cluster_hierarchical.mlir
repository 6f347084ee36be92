// Across the 4 nodes of h100-cluster a large all_reduce over both mesh axes is hierarchical,
// a small one across nodes only is a tree; inside a node (h100-node) it is a ring.
// RUN: lamina-opt %s -p 'propagate-sharding,insert-collectives{target=h100-cluster}' --explain 2>&1 | filecheck %s
// RUN: not lamina-opt %s -p 'propagate-sharding,insert-collectives{target=h100-node}' 2>&1 | filecheck %s --check-prefix=NODE

lamina.mesh @m [node = 4, gpu = 8]
func.func @f(%a: tensor<1024x1024xf32, #lamina.place<@m, [[], [node, gpu]]>>, %b: tensor<1024x1024xf32, #lamina.place<@m, [[node, gpu], []]>>, %c: tensor<64x8xf32, #lamina.place<@m, [[], [node]]>>, %d: tensor<8x16xf32, #lamina.place<@m, [[node], []]>>) -> (tensor<1024x1024xf32, #lamina.place<@m, [[], []]>>, tensor<64x16xf32, #lamina.place<@m, [[], []]>>) {
  %y = lamina.matmul %a, %b : (tensor<1024x1024xf32, #lamina.place<@m, [[], [node, gpu]]>>, tensor<1024x1024xf32, #lamina.place<@m, [[node, gpu], []]>>) -> tensor<1024x1024xf32>
  %yr = lamina.neg %y : (tensor<1024x1024xf32>) -> tensor<1024x1024xf32, #lamina.place<@m, [[], []]>>
  %z = lamina.matmul %c, %d : (tensor<64x8xf32, #lamina.place<@m, [[], [node]]>>, tensor<8x16xf32, #lamina.place<@m, [[node], []]>>) -> tensor<64x16xf32>
  %zr = lamina.neg %z : (tensor<64x16xf32>) -> tensor<64x16xf32, #lamina.place<@m, [[], []]>>
  func.return %yr, %zr : tensor<1024x1024xf32, #lamina.place<@m, [[], []]>>, tensor<64x16xf32, #lamina.place<@m, [[], []]>>
}

// CHECK-DAG: all_reduce over [node, gpu] {{.*}}hierarchical: 4 MiB payload
// CHECK-DAG: all_reduce over [node] {{.*}}tree: 4 KiB payload
// CHECK: lamina.all_reduce %yr {axes = ["node", "gpu"], algorithm = "hierarchical", inner = 8 : i64, kind = "sum"}
// CHECK: lamina.all_reduce %zr {axes = ["node"], algorithm = "tree", kind = "sum"}
// NODE: error: insert-collectives: mesh @m has 32 devices, target 'h100-node' has 8
