// A program with one mistake, for the README tour's first error: the bias %b has 3 elements
// where the rows of %x have 8, so lamina.add cannot broadcast them. `lamina-opt samples/bad.mlir`
// (and lamina-run) report it at the op, with the source line and a caret under it, and exit 1.
// RUN: lamina-opt --verify-diagnostics %s
// The RUN line checks the annotation below (tests/test_samples.py runs it); the annotation also
// marks this sample as invalid for the tests that run every sample.
// expected-error @+4 {{lamina.add: operand shapes (4, 8), (3,) do not broadcast}}
func.func @bias_relu(%x: tensor<4x8xf32>, %b: tensor<3xf32>) -> tensor<4x8xf32> {
  %r = lamina.relu %x : tensor<4x8xf32>
  // the bias should be tensor<8xf32>
  %y = lamina.add %r, %b : (tensor<4x8xf32>, tensor<3xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
