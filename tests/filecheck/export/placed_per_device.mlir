// RUN: lamina-opt %s -p propagate-sharding,insert-collectives -t linalg | filecheck %s

// Megatron's MLP on a 2 x 4 mesh: after the split, the export is the program ONE device runs.
// x (64x32, rows split over data = 2) is 32x32 on a device, w1 (32x128, columns split over
// model = 4) is 32x32; the second matmul's result is the device's partial sum (32x32: its rows'
// block, every column); y + y is linear, so it runs on the partial sums, and the all_reduce over
// `model` after it (the result is placed rows-split) is a call of a `lamina_collectives` import
// the caller binds, declared with what it does as an attribute.
lamina.mesh @m [data = 2, model = 4]
func.func @mlp(%x: tensor<64x32xf32, #lamina.place<@m, [[data], []]>>,
               %w1: tensor<32x128xf32, #lamina.place<@m, [[], [model]]>>,
               %w2: tensor<128x32xf32, #lamina.place<@m, [[model], []]>>)
    -> tensor<64x32xf32, #lamina.place<@m, [[data], []]>> {
  %h = lamina.matmul %x, %w1 : (tensor<64x32xf32, #lamina.place<@m, [[data], []]>>, tensor<32x128xf32, #lamina.place<@m, [[], [model]]>>) -> tensor<64x128xf32>
  %g = lamina.relu %h : tensor<64x128xf32>
  %y = lamina.matmul %g, %w2 : (tensor<64x128xf32>, tensor<128x32xf32, #lamina.place<@m, [[model], []]>>) -> tensor<64x32xf32>
  %o = lamina.add %y, %y : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32, #lamina.place<@m, [[data], []]>>
  func.return %o : tensor<64x32xf32, #lamina.place<@m, [[data], []]>>
}

// CHECK:       // lamina: per-device program of mesh @m [data = 2, model = 4] (8 devices
// CHECK:       func.func private @lamina_collectives.all_reduce_0(tensor<32x32xf32>) -> tensor<32x32xf32> attributes {lamina.collective = {kind = "all_reduce", axes = ["model"], reduce = "sum"
// CHECK-LABEL: func.func @mlp(%arg0: tensor<32x32xf32>, %arg1: tensor<32x32xf32>, %arg2: tensor<32x32xf32>, %lamina_device: tensor<2xi64>) -> (tensor<32x32xf32>)
// CHECK:       linalg.matmul ins(%arg0, %arg1 : tensor<32x32xf32>, tensor<32x32xf32>)
// CHECK:       linalg.matmul
// CHECK:       %[[S:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<32x32xf32>)
// CHECK:       %[[R:.*]] = func.call @lamina_collectives.all_reduce_0(%[[S]]) : (tensor<32x32xf32>) -> tensor<32x32xf32>
// CHECK-NEXT:  func.return %[[R]] : tensor<32x32xf32>
