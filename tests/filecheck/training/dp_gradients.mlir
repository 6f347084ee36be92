// The data-parallel MLP's derived backward, placed: each parameter gradient is a pending sum over
// `data` returned placed like its parameter, so insert-collectives reduces all four, latency-bound,
// in one bucketed all_reduce (a 17000-byte cap makes two buckets; bucket=false four all_reduces).
// RUN: lamina-opt %S/../../../samples/mlp_dp_forward.mlir -p 'derive-backward{data=x},propagate-sharding,insert-collectives{target=h100-cluster}' | filecheck %s
// RUN: lamina-opt %S/../../../samples/mlp_dp_forward.mlir -p 'derive-backward{data=x},propagate-sharding,insert-collectives{target=h100-cluster bucket-bytes=17000}' | filecheck %s --check-prefix=CAP
// RUN: lamina-opt %S/../../../samples/mlp_dp_forward.mlir -p 'derive-backward{data=x},propagate-sharding,insert-collectives{target=h100-cluster bucket=false}' | filecheck %s --check-prefix=NOBUCKET

// CHECK-LABEL: func.func @dp_forward_grad(
// CHECK-SAME:    %d_y: tensor<64x32xf32, #lamina.place<@m, {{\[\[}}data], []]>>
// CHECK-NOT:     lamina.reshard
// CHECK:         %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} = lamina.all_reduce %d_b2, %d_w2, %d_b1, %d_w1 {axes = ["data"], algorithm = "ring", kind = "sum"} : (tensor<32xf32, #lamina.place<@m, {{\[\[}}]], partial = sum[data]>>, tensor<128x32xf32, #lamina.place<@m, {{\[\[}}], []], partial = sum[data]>>, tensor<128xf32, #lamina.place<@m, {{\[\[}}]], partial = sum[data]>>, tensor<32x128xf32, #lamina.place<@m, {{\[\[}}], []], partial = sum[data]>>)
// CHECK-NOT:     lamina.all_reduce
// CHECK:         func.return %y, {{.*}} : tensor<64x32xf32, #lamina.place<@m, {{\[\[}}data], []]>>, tensor<32x128xf32, #lamina.place<@m, {{\[\[}}], []]>>, tensor<128xf32, #lamina.place<@m, {{\[\[}}]]>>, tensor<128x32xf32, #lamina.place<@m, {{\[\[}}], []]>>, tensor<32xf32, #lamina.place<@m, {{\[\[}}]]>>

// CAP-LABEL: func.func @dp_forward_grad(
// CAP:         lamina.all_reduce %d_b2, %d_w2 {axes = ["data"]
// CAP:         lamina.all_reduce %d_b1, %d_w1 {axes = ["data"]
// CAP-NOT:     lamina.all_reduce

// NOBUCKET-LABEL: func.func @dp_forward_grad(
// NOBUCKET-COUNT-4: lamina.all_reduce {{%[a-z0-9_]+}} {axes = ["data"], algorithm = "ring", kind = "sum"}
// NOBUCKET-NOT:     lamina.all_reduce
