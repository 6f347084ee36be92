// RUN: lamina-opt %s -p 'propagate-sharding,insert-collectives{target=h100-node}' --report -o /dev/null | filecheck %s
// RUN: lamina-opt %s --compare 'propagate-sharding,insert-collectives' 'propagate-sharding,insert-collectives,fuse-elementwise' | filecheck %s --check-prefix=CMP
// RUN: not lamina-opt %s --report --cost-target nosuch 2>&1 | filecheck %s --check-prefix=BAD

// A matmul whose contracting dimension is split over `model`: its pending sum is reduced by one
// all_reduce of the 8x8 f32 result per model group (256 B payload, 3/4 * 2 of it sent per device).

lamina.mesh @m [data = 2, model = 4]
func.func @mm(%x: tensor<8x16xf32, #lamina.place<@m, [[data], [model]]>>, %w: tensor<16x8xf32, #lamina.place<@m, [[model], []]>>) -> tensor<8x8xf32, #lamina.place<@m, [[data], []]>> {
  %y = lamina.matmul %x, %w : (tensor<8x16xf32, #lamina.place<@m, [[data], [model]]>>, tensor<16x8xf32, #lamina.place<@m, [[model], []]>>) -> tensor<8x8xf32>
  %g = lamina.gelu %y : tensor<8x8xf32>
  %z = lamina.exp %g : (tensor<8x8xf32>) -> tensor<8x8xf32, #lamina.place<@m, [[data], []]>>
  func.return %z : tensor<8x8xf32, #lamina.place<@m, [[data], []]>>
}

// CHECK-LABEL: // report: @mm on cost target 'h100-node' (8 devices; numbers per device)
// CHECK-NEXT:  op  kernel {{ +}}kind {{ +}}devices {{ +}}flops {{ +}}bytes {{ +}}sent {{ +}}us {{ +}}share
// CHECK-NEXT:   0  matmul {{ +}}compute {{ +}}0-7 {{ +}}1024 {{ +}}320 B {{ +}}0 B {{ +}}9.552e-05 {{ +}}0.0%
// CHECK-NEXT:   1  all_reduce {{ +}}collective 0-7 {{ +}}0 {{ +}}256 B {{ +}}192 B {{ +}}18 {{ +}}100.0%
// CHECK-NEXT:   2  gelu {{ +}}compute {{ +}}0-7 {{ +}}384 {{ +}}256 B
// CHECK-NEXT:   3  exp {{ +}}compute {{ +}}0-7 {{ +}}128 {{ +}}256 B
// CHECK-NEXT: kernels: 3, collectives: 1, moves: 0
// CHECK-NEXT: flops: 1536, bytes moved: 1.062 KiB, bytes sent: 192 B
// CHECK-NEXT: peak per tier: sram 0 B, hbm 704 B, host 0 B, nvme 0 B
// CHECK-NEXT: kernel time: 18 us, modeled step: 18 us, bubble: 100%

// CMP:      // compare on cost target 'h100-node' (numbers per device)
// CMP-LABEL: @mm
// CMP:        kernels {{ +}}3 {{ +}}2 {{ +}}0.667x
// CMP-NEXT:   collectives {{ +}}1 {{ +}}1 {{ +}}1x
// CMP:        bytes sent {{ +}}192 B {{ +}}192 B {{ +}}1x
// CMP:        modeled step us {{ +}}18 {{ +}}18 {{ +}}1x

// BAD: error: unknown target 'nosuch' (built-in targets: {{.*}})
