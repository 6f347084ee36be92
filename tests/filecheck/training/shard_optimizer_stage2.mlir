// shard-optimizer stage 1 against stage 2 on an AdamW step over `data` = 4: stage 1 reduce_scatters
// the gradient where the optimizer first reads it (the full pending sum %d_w lives through the rest
// of the backward), stage 2 right after the op that makes it (only the shard lives on). After
// accumulate-gradients (2 micro-batches), stage 1 reduce_scatters the summed accumulator once;
// stage 2 each micro-batch's gradient as it is made, and sums the shards (a sharded accumulator).
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{bias-correction=false},shard-optimizer{stage=1},propagate-sharding,insert-collectives' | filecheck %s --check-prefix=S1
// RUN: lamina-opt %s -p 'derive-backward{data=x},append-optimizer{bias-correction=false},shard-optimizer{stage=2},propagate-sharding,insert-collectives' | filecheck %s --check-prefix=S2
// RUN: lamina-opt %s -p 'derive-backward{data=x},accumulate-gradients{micro-batches=2},append-optimizer{bias-correction=false},shard-optimizer{stage=1},propagate-sharding,insert-collectives' | filecheck %s --check-prefix=A1
// RUN: lamina-opt %s -p 'derive-backward{data=x},accumulate-gradients{micro-batches=2},append-optimizer{bias-correction=false},shard-optimizer{stage=2},propagate-sharding,insert-collectives' | filecheck %s --check-prefix=A2

lamina.mesh @m [data = 4]
func.func @f(%x: tensor<8x8xf32, #lamina.place<@m, [[data], []]>>, %w: tensor<8x4xf32, #lamina.place<@m, [[], []]>>) -> tensor<f32> {
  %h = lamina.matmul %x, %w : (tensor<8x8xf32, #lamina.place<@m, [[data], []]>>, tensor<8x4xf32, #lamina.place<@m, [[], []]>>) -> tensor<8x4xf32>
  %l = lamina.reduce_mean %h {axes = array<i64: 0, 1>} : (tensor<8x4xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}

// S1-LABEL: func.func @f_step(
// S1:         %d_w = lamina.matmul {{.*}} {lamina.gradient} : {{.*}} -> tensor<8x4xf32, #lamina.place<@m, {{\[\[}}], []], partial = sum[data]>>
// S1-NEXT:    lamina.constant dense<9.000000e-01>
// S1-NEXT:    lamina.mul %m_w
// S1-NEXT:    lamina.constant dense<1.000000e-01>
// S1-NEXT:    %[[G:.*]] = lamina.reduce_scatter %d_w {axes = ["data"], {{.*}}} : tensor<8x4xf32, #lamina.place<@m, {{\[\[}}], []], partial = sum[data]>> -> tensor<8x4xf32, #lamina.place<@m, {{\[\[}}data], []]>>
// S1-NEXT:    lamina.mul %[[G]],
// S1-COUNT-1: lamina.all_gather %new_w

// S2-LABEL: func.func @f_step(
// S2:         %d_w = lamina.matmul {{.*}} {lamina.gradient} : {{.*}} -> tensor<8x4xf32, #lamina.place<@m, {{\[\[}}], []], partial = sum[data]>>
// S2-NEXT:    %[[G:.*]] = lamina.reduce_scatter %d_w {axes = ["data"], {{.*}}} : tensor<8x4xf32, #lamina.place<@m, {{\[\[}}], []], partial = sum[data]>> -> tensor<8x4xf32, #lamina.place<@m, {{\[\[}}data], []]>>
// S2-NEXT:    lamina.constant dense<9.000000e-01>
// S2-NEXT:    lamina.mul %m_w
// S2-NEXT:    lamina.constant dense<1.000000e-01>
// S2-NEXT:    lamina.mul %[[G]],
// S2-COUNT-1: lamina.all_gather %new_w

// A1-LABEL: func.func @f_step(
// A1:         %d_w_mb0 = lamina.matmul {{.*}} {lamina.gradient}
// A1-NOT:     lamina.reduce_scatter
// A1:         %d_w_mb1 = lamina.matmul {{.*}} {lamina.gradient}
// A1-NOT:     lamina.reduce_scatter
// A1:         %[[SUM:.*]] = lamina.add %d_w_mb0, %d_w_mb1 : tensor<8x4xf32, #lamina.place<@m, {{\[\[}}], []], partial = sum[data]>>
// A1:         %d_w = lamina.mul %[[SUM]], {{.*}} -> tensor<8x4xf32, #lamina.place<@m, {{\[\[}}], []], partial = sum[data]>>
// A1:         lamina.reduce_scatter %d_w {axes = ["data"]
// A1-NOT:     lamina.reduce_scatter
// A1:         func.return

// A2-LABEL: func.func @f_step(
// A2:         %d_w_mb0 = lamina.matmul {{.*}} {lamina.gradient}
// A2-NEXT:    %[[G0:.*]] = lamina.reduce_scatter %d_w_mb0 {axes = ["data"]
// A2:         %d_w_mb1 = lamina.matmul {{.*}} {lamina.gradient}
// A2-NEXT:    %[[G1:.*]] = lamina.reduce_scatter %d_w_mb1 {axes = ["data"]
// A2:         %[[SUM:.*]] = lamina.add %[[G0]], %[[G1]] : tensor<8x4xf32, #lamina.place<@m, {{\[\[}}data], []]>>
// A2:         %d_w = lamina.mul %[[SUM]], {{.*}} -> tensor<8x4xf32, #lamina.place<@m, {{\[\[}}data], []]>>
// A2-NOT:     lamina.reduce_scatter
// A2:         func.return
