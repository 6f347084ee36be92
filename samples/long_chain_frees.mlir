// A long chain of elementwise ops on f32[256,256] (256 KiB each): 48 intermediates are 12 MiB, far
// beyond the 1 MiB HBM of the `tiny` target when every value lives to the end of the function,
// yet only two are ever needed at once: annotate-lifetimes' frees alone make it fit (no offload).
// Run:
//   lamina-run samples/long_chain_frees.mlir --target tiny                        (overflows HBM)
//   lamina-run samples/long_chain_frees.mlir -p annotate-lifetimes --target tiny --stats-json -
//   lamina-opt samples/long_chain_frees.mlir -p 'annotate-lifetimes,assign-memory-tiers{target=tiny}' --explain

func.func @long_chain(%x: tensor<256x256xf32>) -> tensor<256x256xf32> {
  %t0 = lamina.tanh %x : tensor<256x256xf32>
  %t1 = lamina.sigmoid %t0 : tensor<256x256xf32>
  %t2 = lamina.neg %t1 : tensor<256x256xf32>
  %t3 = lamina.abs %t2 : tensor<256x256xf32>
  %t4 = lamina.relu %t3 : tensor<256x256xf32>
  %t5 = lamina.tanh %t4 : tensor<256x256xf32>
  %t6 = lamina.tanh %t5 : tensor<256x256xf32>
  %t7 = lamina.sigmoid %t6 : tensor<256x256xf32>
  %t8 = lamina.neg %t7 : tensor<256x256xf32>
  %t9 = lamina.abs %t8 : tensor<256x256xf32>
  %t10 = lamina.relu %t9 : tensor<256x256xf32>
  %t11 = lamina.tanh %t10 : tensor<256x256xf32>
  %t12 = lamina.tanh %t11 : tensor<256x256xf32>
  %t13 = lamina.sigmoid %t12 : tensor<256x256xf32>
  %t14 = lamina.neg %t13 : tensor<256x256xf32>
  %t15 = lamina.abs %t14 : tensor<256x256xf32>
  %t16 = lamina.relu %t15 : tensor<256x256xf32>
  %t17 = lamina.tanh %t16 : tensor<256x256xf32>
  %t18 = lamina.tanh %t17 : tensor<256x256xf32>
  %t19 = lamina.sigmoid %t18 : tensor<256x256xf32>
  %t20 = lamina.neg %t19 : tensor<256x256xf32>
  %t21 = lamina.abs %t20 : tensor<256x256xf32>
  %t22 = lamina.relu %t21 : tensor<256x256xf32>
  %t23 = lamina.tanh %t22 : tensor<256x256xf32>
  %t24 = lamina.tanh %t23 : tensor<256x256xf32>
  %t25 = lamina.sigmoid %t24 : tensor<256x256xf32>
  %t26 = lamina.neg %t25 : tensor<256x256xf32>
  %t27 = lamina.abs %t26 : tensor<256x256xf32>
  %t28 = lamina.relu %t27 : tensor<256x256xf32>
  %t29 = lamina.tanh %t28 : tensor<256x256xf32>
  %t30 = lamina.tanh %t29 : tensor<256x256xf32>
  %t31 = lamina.sigmoid %t30 : tensor<256x256xf32>
  %t32 = lamina.neg %t31 : tensor<256x256xf32>
  %t33 = lamina.abs %t32 : tensor<256x256xf32>
  %t34 = lamina.relu %t33 : tensor<256x256xf32>
  %t35 = lamina.tanh %t34 : tensor<256x256xf32>
  %t36 = lamina.tanh %t35 : tensor<256x256xf32>
  %t37 = lamina.sigmoid %t36 : tensor<256x256xf32>
  %t38 = lamina.neg %t37 : tensor<256x256xf32>
  %t39 = lamina.abs %t38 : tensor<256x256xf32>
  %t40 = lamina.relu %t39 : tensor<256x256xf32>
  %t41 = lamina.tanh %t40 : tensor<256x256xf32>
  %t42 = lamina.tanh %t41 : tensor<256x256xf32>
  %t43 = lamina.sigmoid %t42 : tensor<256x256xf32>
  %t44 = lamina.neg %t43 : tensor<256x256xf32>
  %t45 = lamina.abs %t44 : tensor<256x256xf32>
  %t46 = lamina.relu %t45 : tensor<256x256xf32>
  %t47 = lamina.tanh %t46 : tensor<256x256xf32>
  func.return %t47 : tensor<256x256xf32>
}
