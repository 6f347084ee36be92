// shard-optimizer (ZeRO) on an AdamW step over `data` = 4: stage 1 keeps %w replicated and splits
// its moments; insert-collectives then reduce_scatters the gradient into the split update, slices
// %w locally (all_slice, no communication) and all_gathers the new %w. Stage 3 splits %w too and
// all_gathers it before its use in the forward. Refusals are one located diagnostic.
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{bias-correction=false},shard-optimizer{stage=1},propagate-sharding,insert-collectives' | filecheck %s
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{bias-correction=false},shard-optimizer{stage=3},propagate-sharding,insert-collectives' | filecheck %s --check-prefix=S3
// RUN: not lamina-opt %s -p 'derive-backward{data=x},shard-optimizer' 2>&1 | filecheck %s --check-prefix=NOSTEP
// RUN: not lamina-opt %s -p 'derive-backward{data=x},append-optimizer,shard-optimizer{axis=model}' 2>&1 | filecheck %s --check-prefix=AXIS

lamina.mesh @m [data = 4]
func.func @f(%x: tensor<8x8xf32, #lamina.place<@m, [[data], []]>>, %w: tensor<8x4xf32, #lamina.place<@m, [[], []]>>) -> tensor<f32> {
  %h = lamina.matmul %x, %w : (tensor<8x8xf32, #lamina.place<@m, [[data], []]>>, tensor<8x4xf32, #lamina.place<@m, [[], []]>>) -> tensor<8x4xf32>
  %l = lamina.reduce_mean %h {axes = array<i64: 0, 1>} : (tensor<8x4xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}

// CHECK-LABEL: func.func @f_step(%x: tensor<8x8xf32, #lamina.place<@m, {{\[\[}}data], []]>>, %w: tensor<8x4xf32, #lamina.place<@m, {{\[\[}}], []]>> {lamina.role = "parameter"}, %m_w: tensor<8x4xf32, #lamina.place<@m, {{\[\[}}data], []]>> {lamina.role = "first_moment"}, %v_w: tensor<8x4xf32, #lamina.place<@m, {{\[\[}}data], []]>> {lamina.role = "second_moment"})
// CHECK:         lamina.reduce_scatter %d_w {axes = ["data"], {{.*}}} : tensor<8x4xf32, #lamina.place<@m, {{\[\[}}], []], partial = sum[data]>> -> tensor<8x4xf32, #lamina.place<@m, {{\[\[}}data], []]>>
// CHECK:         lamina.all_slice %w {axes = ["data"], dim = 0 : i64}
// CHECK:         %[[G:.*]] = lamina.all_gather %new_w {axes = ["data"], {{.*}}} : tensor<8x4xf32, #lamina.place<@m, {{\[\[}}data], []]>> -> tensor<8x4xf32, #lamina.place<@m, {{\[\[}}], []]>>
// CHECK-NEXT:    func.return %[[G]], %new_m_w, %new_v_w, %l

// S3-LABEL: func.func @f_step(%x: tensor<8x8xf32, #lamina.place<@m, {{\[\[}}data], []]>>, %w: tensor<8x4xf32, #lamina.place<@m, {{\[\[}}data], []]>> {lamina.role = "parameter"}
// S3-NEXT:    lamina.all_gather %w {axes = ["data"], {{.*}}} : tensor<8x4xf32, #lamina.place<@m, {{\[\[}}data], []]>> -> tensor<8x4xf32, #lamina.place<@m, {{\[\[}}], []]>>
// S3:         lamina.reduce_scatter %d_w
// S3-NOT:     lamina.all_gather %new_w
// S3:         func.return %new_w, %new_m_w, %new_v_w, %l : tensor<8x4xf32, #lamina.place<@m, {{\[\[}}data], []]>>

// NOSTEP: error: shard-optimizer: the module has no training step (run derive-backward and append-optimizer first)
// AXIS: shard_optimizer.mlir:11:1: error: shard-optimizer: mesh @m has no axis 'model' (axes: data)
