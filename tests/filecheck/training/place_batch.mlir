// place-batch declares a data-parallel mesh and splits the batch (dim 0) of the data arguments
// over its axis, every other argument replicated; after derive-backward, append-optimizer and
// the sharding passes the four gradients are reduced once, in one bucketed all_reduce. A batch
// the axis size does not divide is one located error; so is an axis the program's mesh lacks.
// RUN: lamina-opt %s -p 'place-batch{data=x,y size=8}' --explain 2>&1 | filecheck %s
// RUN: lamina-opt %s -p 'place-batch{data=x,y size=8},derive-backward{data=x,y},append-optimizer{lr-input=true},propagate-sharding,insert-collectives' | filecheck %s --check-prefix=STEP
// RUN: not lamina-opt %s -p 'place-batch{data=x,y size=3}' 2>&1 | filecheck %s --check-prefix=DIVIDE
// RUN: not lamina-opt %s -p 'place-batch{data=x size=8 axis=8x}' 2>&1 | filecheck %s --check-prefix=AXIS
// RUN: not lamina-opt %s -p 'place-batch{data=z size=8}' 2>&1 | filecheck %s --check-prefix=NAME
// RUN: not lamina-opt %s -p 'place-batch{data=x}' 2>&1 | filecheck %s --check-prefix=NOMESH

func.func @mlp_loss(%x: tensor<16x8xf32>, %y: tensor<16x4xf32>, %w1: tensor<8x32xf32>,
                    %b1: tensor<32xf32>, %w2: tensor<32x4xf32>, %b2: tensor<4xf32>) -> tensor<f32> {
  %h = lamina.matmul %x, %w1 : (tensor<16x8xf32>, tensor<8x32xf32>) -> tensor<16x32xf32>
  %hb = lamina.add %h, %b1 : (tensor<16x32xf32>, tensor<32xf32>) -> tensor<16x32xf32>
  %a = lamina.tanh %hb : tensor<16x32xf32>
  %o = lamina.matmul %a, %w2 : (tensor<16x32xf32>, tensor<32x4xf32>) -> tensor<16x4xf32>
  %ob = lamina.add %o, %b2 : (tensor<16x4xf32>, tensor<4xf32>) -> tensor<16x4xf32>
  %d = lamina.sub %ob, %y : tensor<16x4xf32>
  %d2 = lamina.mul %d, %d : tensor<16x4xf32>
  %loss = lamina.reduce_mean %d2 {axes = array<i64: 0, 1>} : (tensor<16x4xf32>) -> tensor<f32>
  func.return %loss : tensor<f32>
}

// CHECK: [place-batch] {{.*}}place_batch.mlir:12:1: declared lamina.mesh @dp [data = 8]: the module had no mesh
// CHECK: [place-batch] {{.*}}: @mlp_loss %x: {{\[\[}}data], []]: batch dimension 0 split over 'data' (2 rows per device)
// CHECK: [place-batch] {{.*}}: @mlp_loss %y: {{\[\[}}data], []]: batch dimension 0 split over 'data' (2 rows per device)
// CHECK: [place-batch] {{.*}}: @mlp_loss %w1: {{\[\[}}], []]: replicated
// CHECK: [place-batch] {{.*}}: @mlp_loss %b2: {{\[\[}}]]: replicated
// CHECK: lamina.mesh @dp [data = 8]
// CHECK: func.func @mlp_loss(%x: tensor<16x8xf32, #lamina.place<@dp, {{\[\[}}data], []]>>, %y: tensor<16x4xf32, #lamina.place<@dp, {{\[\[}}data], []]>>, %w1: tensor<8x32xf32, #lamina.place<@dp, {{\[\[}}], []]>>, %b1: tensor<32xf32, #lamina.place<@dp, {{\[\[}}]]>>, %w2: tensor<32x4xf32, #lamina.place<@dp, {{\[\[}}], []]>>, %b2: tensor<4xf32, #lamina.place<@dp, {{\[\[}}]]>>) -> tensor<f32>

// STEP-LABEL: func.func @mlp_loss_step(
// STEP:         lamina.all_reduce %d_b2, %d_w2, %d_b1, %d_w1 {axes = ["data"], algorithm = "ring", kind = "sum"}
// STEP-NOT:     lamina.all_reduce
// STEP:         func.return

// DIVIDE: place_batch.mlir:12:1: error: place-batch: the batch of %x (dimension 0 of tensor<16x8xf32>) is 16, which does not divide by the 3 devices of axis 'data'
// AXIS: error: option 'axis' for place-batch must be a mesh axis name, got '8x'
// NAME: place_batch.mlir:12:1: error: place-batch: option data names 'z', which is not an argument of @mlp_loss (arguments: x, y, w1, b1, w2, b2)
// NOMESH: place_batch.mlir:12:1: error: place-batch: the module has no mesh to place on; give size=N to declare one with axis 'data'
// RUN: not lamina-opt %s -p 'place-batch{size=8}' 2>&1 | filecheck %s --check-prefix=NODATA
// NODATA: place_batch.mlir:12:1: error: place-batch: option data names no argument of @mlp_loss: give the batch arguments, e.g. data=x,y
