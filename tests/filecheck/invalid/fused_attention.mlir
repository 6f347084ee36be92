// Verifier rules of a lamina.fused "attention" body (lamina.ir.ops.attention): one chunk per broken
// rule, each at the fused op.
// RUN: lamina-opt %s --split-input-file --verify-diagnostics

// the softmax must normalize over the keys, the last axis
func.func @softmax_over_queries(%q: tensor<2x4x3xf32>, %kt: tensor<2x3x4xf32>, %v: tensor<2x4x5xf32>) -> tensor<2x4x5xf32> {
  // expected-error @+1:3 {{lamina.fused "attention": the softmax %p normalizes over axis 1, not the last axis (the keys)}}
  %o = lamina.fused "attention" (%a = %q, %b = %kt, %c = %v) : (tensor<2x4x3xf32>, tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x4x5xf32> {
    %s = lamina.matmul %a, %b : (tensor<2x4x3xf32>, tensor<2x3x4xf32>) -> tensor<2x4x4xf32>
    %p = lamina.softmax %s {axis = 1 : i64} : tensor<2x4x4xf32>
    %r = lamina.matmul %p, %c : (tensor<2x4x4xf32>, tensor<2x4x5xf32>) -> tensor<2x4x5xf32>
    lamina.yield %r : tensor<2x4x5xf32>
  }
  func.return %o : tensor<2x4x5xf32>
}

// -----

// an op after the softmax must be homogeneous-linear in the probabilities: exp is not
func.func @exp_after_softmax(%q: tensor<4x3xf32>, %kt: tensor<3x4xf32>, %v: tensor<4x5xf32>) -> tensor<4x5xf32> {
  // expected-error @+1:3 {{lamina.fused "attention": the probabilities flow into %e = lamina.exp, which is not linear in the probabilities}}
  %o = lamina.fused "attention" (%a = %q, %b = %kt, %c = %v) : (tensor<4x3xf32>, tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<4x5xf32> {
    %s = lamina.matmul %a, %b : (tensor<4x3xf32>, tensor<3x4xf32>) -> tensor<4x4xf32>
    %p = lamina.softmax %s {axis = -1 : i64} : tensor<4x4xf32>
    %e = lamina.exp %p : tensor<4x4xf32>
    %r = lamina.matmul %e, %c : (tensor<4x4xf32>, tensor<4x5xf32>) -> tensor<4x5xf32>
    lamina.yield %r : tensor<4x5xf32>
  }
  func.return %o : tensor<4x5xf32>
}

// -----

// the scores are an intermediate: yielding them too would store them
func.func @scores_yielded(%q: tensor<4x3xf32>, %kt: tensor<3x4xf32>, %v: tensor<4x5xf32>) -> tensor<4x5xf32> {
  // expected-error @+1:3 {{lamina.fused "attention": %s is used 2 times; every value of the chain must be used once, by the next op}}
  %o, %so = lamina.fused "attention" (%a = %q, %b = %kt, %c = %v) : (tensor<4x3xf32>, tensor<3x4xf32>, tensor<4x5xf32>) -> (tensor<4x5xf32>, tensor<4x4xf32>) {
    %s = lamina.matmul %a, %b : (tensor<4x3xf32>, tensor<3x4xf32>) -> tensor<4x4xf32>
    %p = lamina.softmax %s {axis = -1 : i64} : tensor<4x4xf32>
    %r = lamina.matmul %p, %c : (tensor<4x4xf32>, tensor<4x5xf32>) -> tensor<4x5xf32>
    lamina.yield %r, %s : tensor<4x5xf32>, tensor<4x4xf32>
  }
  func.return %o : tensor<4x5xf32>
}

// -----

// the scores must flow on to a softmax and a second matmul, not out of the kernel
func.func @no_softmax(%q: tensor<4x3xf32>, %kt: tensor<3x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1:3 {{lamina.fused "attention": %s is used by lamina.yield, not by an op-table op}}
  %o = lamina.fused "attention" (%a = %q, %b = %kt) : (tensor<4x3xf32>, tensor<3x4xf32>) -> tensor<4x4xf32> {
    %s = lamina.matmul %a, %b : (tensor<4x3xf32>, tensor<3x4xf32>) -> tensor<4x4xf32>
    lamina.yield %s : tensor<4x4xf32>
  }
  func.return %o : tensor<4x4xf32>
}

// -----

// a body op's attribute of the wrong kind is reported by that op's verifier, at the op, before
// the kernel's verifier reads it (it used to end in an AttributeError with no position)
func.func @softmax_axis_string(%q: tensor<2x4x3xf32>, %kt: tensor<2x3x4xf32>, %v: tensor<2x4x5xf32>) -> tensor<2x4x5xf32> {
  %o = lamina.fused "attention" (%a = %q, %b = %kt, %c = %v) : (tensor<2x4x3xf32>, tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x4x5xf32> {
    %s = lamina.matmul %a, %b : (tensor<2x4x3xf32>, tensor<2x3x4xf32>) -> tensor<2x4x4xf32>
    // expected-error @+1:5 {{lamina.softmax: attribute 'axis' must be an integer, got "0"}}
    %p = lamina.softmax %s {axis = "0"} : tensor<2x4x4xf32>
    %r = lamina.matmul %p, %c : (tensor<2x4x4xf32>, tensor<2x4x5xf32>) -> tensor<2x4x5xf32>
    lamina.yield %r : tensor<2x4x5xf32>
  }
  func.return %o : tensor<2x4x5xf32>
}

// -----

// the kernel itself takes no attributes but other tools' (dialect-prefixed) ones
func.func @fused_unknown_attribute(%q: tensor<2x4x3xf32>, %kt: tensor<2x3x4xf32>, %v: tensor<2x4x5xf32>) -> tensor<2x4x5xf32> {
  // expected-error @+1:3 {{lamina.fused "attention" has no attribute 'axis' (it takes none; other attributes must be dialect-prefixed, e.g. 'mytool.tag')}}
  %o = lamina.fused "attention" (%a = %q, %b = %kt, %c = %v) : (tensor<2x4x3xf32>, tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x4x5xf32> {
    %s = lamina.matmul %a, %b : (tensor<2x4x3xf32>, tensor<2x3x4xf32>) -> tensor<2x4x4xf32>
    %p = lamina.softmax %s {axis = -1 : i64} : tensor<2x4x4xf32>
    %r = lamina.matmul %p, %c : (tensor<2x4x4xf32>, tensor<2x4x5xf32>) -> tensor<2x4x5xf32>
    lamina.yield %r : tensor<2x4x5xf32>
  } {axis = "0"}
  func.return %o : tensor<2x4x5xf32>
}
