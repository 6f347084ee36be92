// Hexadecimal float literals are bit patterns, as in MLIR: +inf, -inf, NaN and exact values in
// f16 / bf16 / f32 / f64, splat and list forms; non-finite values print back as hex. A finite f32
// whose short decimal form would not read back prints as its bit pattern too. Constants whose
// result type carries a placement or tier print that type (the literal's own type has none).
// RUN: lamina-opt %s | lamina-opt | filecheck --match-full-lines %s
// RUN: lamina-opt %s --print-op-generic | lamina-opt | filecheck --match-full-lines %s

func.func @masks() -> (tensor<2x3xf32>, tensor<4xf32>, tensor<2xf16>, tensor<2xbf16>, tensor<f64>, tensor<f32>) {
  %0 = lamina.constant dense<[[0.0, 0.0, 0xFF800000], [0.0, 0xFF800000, 0xFF800000]]> : tensor<2x3xf32>
  %1 = lamina.constant dense<0x7F800000> : tensor<4xf32>
  %2 = lamina.constant dense<[0x7C00, 0x7E00]> : tensor<2xf16>
  %3 = lamina.constant dense<[0xFF80, 0x3F80]> : tensor<2xbf16>
  %4 = lamina.constant dense<0xFFF0000000000000> : tensor<f64>
  %5 = lamina.constant dense<123456789.0> : tensor<f32>
  func.return %0, %1, %2, %3, %4, %5 : tensor<2x3xf32>, tensor<4xf32>, tensor<2xf16>, tensor<2xbf16>, tensor<f64>, tensor<f32>
}
// CHECK-LABEL: func.func @masks() -> (tensor<2x3xf32>, tensor<4xf32>, tensor<2xf16>, tensor<2xbf16>, tensor<f64>, tensor<f32>) {
// CHECK-NEXT:  %0 = lamina.constant dense<[[0.000000e+00, 0.000000e+00, 0xff800000], [0.000000e+00, 0xff800000, 0xff800000]]> : tensor<2x3xf32>
// CHECK-NEXT:  %1 = lamina.constant dense<0x7f800000> : tensor<4xf32>
// CHECK-NEXT:  %2 = lamina.constant dense<[0x7c00, 0x7e00]> : tensor<2xf16>
// CHECK-NEXT:  %3 = lamina.constant dense<[0xff80, 1.000000e+00]> : tensor<2xbf16>
// CHECK-NEXT:  %4 = lamina.constant dense<0xfff0000000000000> : tensor<f64>
// CHECK-NEXT:  %5 = lamina.constant dense<0x4CEB79A3> : tensor<f32>

lamina.mesh @m [data = 2]
func.func @placed(%x: tensor<4xf32, #lamina.place<@m, [[data]]>>) -> (tensor<4xf32, #lamina.place<@m, [[data]]>>, tensor<2xf32, #lamina.place<tier = hbm>>) {
  %c = lamina.constant dense<2.0> : tensor<f32, #lamina.place<@m, []>>
  %t = lamina.constant dense<[1.0, 0xFF800000]> : tensor<2xf32, #lamina.place<tier = hbm>>
  %y = lamina.mul %x, %c : (tensor<4xf32, #lamina.place<@m, [[data]]>>, tensor<f32, #lamina.place<@m, []>>) -> tensor<4xf32, #lamina.place<@m, [[data]]>>
  func.return %y, %t : tensor<4xf32, #lamina.place<@m, [[data]]>>, tensor<2xf32, #lamina.place<tier = hbm>>
}
// CHECK-LABEL: func.func @placed(%x: tensor<4xf32, #lamina.place<@m, {{\[\[}}data]]>>) -> (tensor<4xf32, #lamina.place<@m, {{\[\[}}data]]>>, tensor<2xf32, #lamina.place<tier = hbm>>) {
// CHECK-NEXT:  %c = lamina.constant dense<2.000000e+00> : tensor<f32, #lamina.place<@m, []>>
// CHECK-NEXT:  %t = lamina.constant dense<[1.000000e+00, 0xff800000]> : tensor<2xf32, #lamina.place<tier = hbm>>
