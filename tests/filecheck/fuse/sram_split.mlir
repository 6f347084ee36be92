// RUN: lamina-opt %s -p 'fuse-elementwise{target=tiny}' --explain 2>&1 | filecheck %s
// RUN: lamina-opt %s -p 'fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=tiny}' --explain 2>&1 | filecheck %s
// RUN: lamina-opt %s -p fuse-elementwise --explain 2>&1 | filecheck %s --check-prefix=NOTARGET

// One row of a kernel's intermediates must fit the target's sram (tiny: 64 KiB; a row of each
// value here is 32 KiB). %a and %b, read only inside the kernel, fill it; %d joining would make
// %c an intermediate too (96 KiB a row), so the group is split there and the explain line says so with the bytes; %d and %e
// form a second kernel. With no target known the chain is one kernel. The pipeline gives
// fuse-elementwise the target of its assign-memory-tiers (second RUN line).
// CHECK:      fused %b = lamina.exp with %a = lamina.neg (loop over 2x8192)
// CHECK-NEXT: fused %c = lamina.tanh with %b = lamina.exp (loop over 2x8192)
// CHECK-NEXT: not fused with %c = lamina.tanh: split here: one row of the kernel would hold 96 KiB (98304 B) of intermediates, over the 64 KiB sram of target 'tiny'
// CHECK-NEXT: fused %e = lamina.sqrt with %d = lamina.abs (loop over 2x8192)
// CHECK-NEXT: group of 3 ops -> lamina.fused "loop" with 1 inputs, 1 outputs
// CHECK-NEXT: group of 2 ops -> lamina.fused "loop" with 1 inputs, 1 outputs
// NOTARGET:      fused %d = lamina.abs with %c = lamina.tanh (loop over 2x8192)
// NOTARGET-NOT:  split here
// NOTARGET:      group of 5 ops -> lamina.fused "loop"

func.func @f(%x: tensor<2x8192xf32>) -> tensor<2x8192xf32> {
  %a = lamina.neg %x : tensor<2x8192xf32>
  %b = lamina.exp %a : tensor<2x8192xf32>
  %c = lamina.tanh %b : tensor<2x8192xf32>
  %d = lamina.abs %c : tensor<2x8192xf32>
  %e = lamina.sqrt %d : tensor<2x8192xf32>
  func.return %e : tensor<2x8192xf32>
}
