// propagate-sharding when operands disagree: every placement the rule accepts is priced by the
// collectives insert-collectives will emit for it plus the op's compute on its shards (h100-node),
// the cheapest wins, and --explain lists the others with their costs.
// RUN: lamina-opt %s -p 'propagate-sharding,insert-collectives{target=h100-node}' | filecheck %s
// RUN: lamina-opt %s -p 'propagate-sharding' --explain 2>&1 >/dev/null | filecheck %s --check-prefix=EXPLAIN

lamina.mesh @m [data = 2, model = 4]

// M on model in %p and N on model in %v cannot both stay; the batch split they agree on does:
// one all_gather of %p's model split (main replicated both operands: 4 all_gathers).
// CHECK-LABEL: func.func @matmul_batch
// CHECK-SAME: -> tensor<8x128x128xf32, #lamina.place<@m, {{\[\[}}data], [], [model]]>>
// CHECK-NEXT: %[[G:.*]] = lamina.all_gather %p {axes = ["model"], algorithm = "ring", dim = 1 : i64}
// CHECK-NEXT: %o = lamina.matmul %[[G]], %v : (tensor<8x128x64xf32, #lamina.place<@m, {{\[\[}}data], [], []]>>, tensor<8x64x128xf32, #lamina.place<@m, {{\[\[}}data], [], [model]]>>) -> tensor<8x128x128xf32, #lamina.place<@m, {{\[\[}}data], [], [model]]>>
// CHECK-NEXT: func.return
// EXPLAIN: operands of lamina.matmul disagree under the matmul rule: drop [model] of operand 0 dimension 1: 9.22 us (communication 9.22 us + compute 0.00212 us); alternatives: drop [model] of operand 1 dimension 2: 9.22 us (communication 9.22 us + compute 0.00212 us); matmul rule: operands made {{\[\[}}], [], []], {{\[\[}}], [], []]: 25 us (communication 25 us + compute 0.017 us)
// EXPLAIN-NEXT: reshard %p from {{\[\[}}data], [model], []] to {{\[\[}}data], [], []]: drop [model] of operand 0 dimension 1 (9.22 us on h100-node)
// EXPLAIN-NEXT: %o placed {{\[\[}}data], [], [model]]
func.func @matmul_batch(%p: tensor<8x128x64xf32, #lamina.place<@m, [[data], [model], []]>>, %v: tensor<8x64x128xf32, #lamina.place<@m, [[data], [], [model]]>>) -> tensor<8x128x128xf32> {
  %o = lamina.matmul %p, %v : (tensor<8x128x64xf32, #lamina.place<@m, [[data], [model], []]>>, tensor<8x64x128xf32, #lamina.place<@m, [[data], [], [model]]>>) -> tensor<8x128x128xf32>
  func.return %o : tensor<8x128x128xf32>
}

// Concatenating along dim 1: only the model split of dim 1 must go; dim 0 keeps data.
// CHECK-LABEL: func.func @concat_rows
// CHECK-SAME: -> tensor<64x256xf32, #lamina.place<@m, {{\[\[}}data], []]>>
// CHECK-NEXT: %[[A:.*]] = lamina.all_gather %a {axes = ["model"], algorithm = "ring", dim = 1 : i64}
// CHECK-NEXT: %[[B:.*]] = lamina.all_gather %b {axes = ["model"], algorithm = "ring", dim = 1 : i64}
// CHECK-NEXT: %o = lamina.concat %[[A]], %[[B]] {dim = 1 : i64}
// CHECK-NEXT: func.return
// EXPLAIN: operands of lamina.concat disagree under the concat rule: drop [model] of operand 0 dimension 1, [model] of operand 1 dimension 1: {{.*}}; alternatives: concat rule: operands made {{\[\[}}], []], {{\[\[}}], []]
func.func @concat_rows(%a: tensor<64x128xf32, #lamina.place<@m, [[data], [model]]>>, %b: tensor<64x128xf32, #lamina.place<@m, [[data], [model]]>>) -> tensor<64x256xf32> {
  %o = lamina.concat %a, %b {dim = 1 : i64} : (tensor<64x128xf32, #lamina.place<@m, [[data], [model]]>>, tensor<64x128xf32, #lamina.place<@m, [[data], [model]]>>) -> tensor<64x256xf32>
  func.return %o : tensor<64x256xf32>
}
