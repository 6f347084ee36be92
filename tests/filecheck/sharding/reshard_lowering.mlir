// How insert-collectives lowers explicit reshards (2 x 4 mesh, h100-node).
// RUN: lamina-opt %s -p 'insert-collectives{target=h100-node}' | filecheck %s
// With lifetimes annotated first, frees follow the collectives that now read their values.
// RUN: lamina-opt %s -p 'annotate-lifetimes,insert-collectives{target=h100-node}' | filecheck %s --check-prefix=FREE
// The explanation of a plan with all_to_all names the best plan without one.
// RUN: lamina-opt %s -p 'insert-collectives{target=h100-node}' --explain 2>&1 >/dev/null | filecheck %s --check-prefix=EXPLAIN

lamina.mesh @m [data = 2, model = 4]

// Reordering dim 0's axes: model cannot move anywhere, so it alone is gathered; data then moves
// to dim 1 with one all_to_all; dim 0 takes model back with a local slice.
// CHECK-LABEL: func.func @reorder
// CHECK-NEXT: %[[G:.*]] = lamina.all_gather %x {axes = ["model"], algorithm = "ring", dim = 0 : i64}
// CHECK-NEXT: %[[M:.*]] = lamina.all_to_all %[[G]] {axes = ["data"], algorithm = "ring", split_dim = 1 : i64, concat_dim = 0 : i64}
// CHECK-NEXT: %{{.*}} = lamina.all_slice %[[M]] {axes = ["model"], dim = 0 : i64}
// CHECK-NEXT: func.return
func.func @reorder(%x: tensor<8x16xf32, #lamina.place<@m, [[data, model], []]>>) -> tensor<8x16xf32, #lamina.place<@m, [[model], [data]]>> {
  %r = lamina.reshard %x : tensor<8x16xf32, #lamina.place<@m, [[data, model], []]>> -> tensor<8x16xf32, #lamina.place<@m, [[model], [data]]>>
  func.return %r : tensor<8x16xf32, #lamina.place<@m, [[model], [data]]>>
}

// An all_reduce whose only reader is a reshard to a split: one reduce_scatter from its operand.
// CHECK-LABEL: func.func @fold
// CHECK-NEXT: %{{.*}} = lamina.reduce_scatter %x {axes = ["model"], algorithm = "ring", dim = 0 : i64, kind = "sum"}
// CHECK-NEXT: func.return
// FREE-LABEL: func.func @fold
// FREE-NEXT: %[[R:.*]] = lamina.reduce_scatter %x
// FREE-NEXT: lamina.free %x
// FREE-NEXT: func.return %[[R]]
func.func @fold(%x: tensor<8x16xf32, #lamina.place<@m, [[], []], partial = sum[model]>>) -> tensor<8x16xf32, #lamina.place<@m, [[model], []]>> {
  %a = lamina.all_reduce %x {axes = ["model"]} : tensor<8x16xf32, #lamina.place<@m, [[], []], partial = sum[model]>> -> tensor<8x16xf32, #lamina.place<@m, [[], []]>>
  %r = lamina.reshard %a : tensor<8x16xf32, #lamina.place<@m, [[], []]>> -> tensor<8x16xf32, #lamina.place<@m, [[model], []]>>
  func.return %r : tensor<8x16xf32, #lamina.place<@m, [[model], []]>>
}

// Reordering dim 0's axes of an 8 MiB value: gathering both (7 MiB sent per device) would move
// data that is sent again by the slices; instead model alone is gathered, data parks in dim 1,
// model is sliced back in front and data returns behind it: 5.5 MiB sent.
// CHECK-LABEL: func.func @reorder_big
// CHECK-NEXT: %[[G:.*]] = lamina.all_gather %x {axes = ["model"], algorithm = "ring", dim = 0 : i64}
// CHECK-NEXT: %[[M:.*]] = lamina.all_to_all %[[G]] {axes = ["data"], algorithm = "ring", split_dim = 1 : i64, concat_dim = 0 : i64}
// CHECK-NEXT: %[[S:.*]] = lamina.all_slice %[[M]] {axes = ["model"], dim = 0 : i64}
// CHECK-NEXT: %{{.*}} = lamina.all_to_all %[[S]] {axes = ["data"], algorithm = "ring", split_dim = 0 : i64, concat_dim = 1 : i64}
// CHECK-NEXT: func.return
// EXPLAIN: reshard {{\[\[}}data, model], []] -> {{\[\[}}model, data], []]: 3 collectives, 27.8 us, 5.5 MiB sent per device; without all_to_all 2 collectives, 28.3 us, 7 MiB sent
func.func @reorder_big(%x: tensor<1024x2048xf32, #lamina.place<@m, [[data, model], []]>>) -> tensor<1024x2048xf32, #lamina.place<@m, [[model, data], []]>> {
  %r = lamina.reshard %x : tensor<1024x2048xf32, #lamina.place<@m, [[data, model], []]>> -> tensor<1024x2048xf32, #lamina.place<@m, [[model, data], []]>>
  func.return %r : tensor<1024x2048xf32, #lamina.place<@m, [[model, data], []]>>
}
