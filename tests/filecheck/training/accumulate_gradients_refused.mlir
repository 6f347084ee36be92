// accumulate-gradients refuses, with one diagnostic at the function or op, what it cannot split
// into micro-batches: a batch the micro-batch count does not divide, a training step (after
// append-optimizer), a loss of more than one element, and ops whose shapes do not follow the
// batch, and losses that are no sum or mean over independent rows (a max, a log after the
// mean, a batch statistic, a sum and a mean at once).
// RUN: lamina-opt %s -p 'accumulate-gradients{micro-batches=2}' --split-input-file --verify-diagnostics

// expected-error @+1:1 {{accumulate-gradients: micro-batches=2 does not divide the batch of %x (dimension 0 of tensor<3x4xf32>: 3 rows)}}
func.func @g(%x: tensor<3x4xf32>, %w: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>) attributes {lamina.gradients = array<i64: 1>} {
  %m = lamina.mul %x, %w : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %l = lamina.reduce_mean %m {axes = array<i64: 0, 1>} : (tensor<3x4xf32>) -> tensor<f32>
  func.return %l, %w : tensor<f32>, tensor<4xf32>
}

// -----

// expected-error @+1:1 {{accumulate-gradients: @g_step is a training step (it has lamina.updates): run accumulate-gradients on the gradient function, after derive-backward and before append-optimizer}}
func.func @g_step(%x: tensor<4x4xf32>, %w: tensor<4xf32>) -> (tensor<4xf32>, tensor<f32>) attributes {lamina.gradients = array<i64: 1>, lamina.updates = array<i64: 1, -1>} {
  %m = lamina.mul %x, %w : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
  %l = lamina.reduce_mean %m {axes = array<i64: 0, 1>} : (tensor<4x4xf32>) -> tensor<f32>
  func.return %w, %l : tensor<4xf32>, tensor<f32>
}

// -----

// expected-error @+1:1 {{accumulate-gradients: the loss of @g is tensor<4xf32>; micro-batches are summed into one loss of one element}}
func.func @g(%x: tensor<4x4xf32>, %w: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) attributes {lamina.gradients = array<i64: 1>} {
  %m = lamina.mul %x, %w : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
  %l = lamina.reduce_mean %m {axes = array<i64: 0>} : (tensor<4x4xf32>) -> tensor<4xf32>
  func.return %l, %w : tensor<4xf32>, tensor<4xf32>
}

// -----

func.func @g(%x: tensor<4x4xf32>, %w: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>) attributes {lamina.gradients = array<i64: 1>} {
  %m = lamina.mul %x, %w : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
  // expected-error @+1 {{accumulate-gradients: this slice takes part of batch dimension 0; it cannot be run on a micro-batch}}
  %s = lamina.slice %m {start = array<i64: 0, 0>, limit = array<i64: 2, 4>} : (tensor<4x4xf32>) -> tensor<2x4xf32>
  %l = lamina.reduce_mean %s {axes = array<i64: 0, 1>} : (tensor<2x4xf32>) -> tensor<f32>
  func.return %l, %w : tensor<f32>, tensor<4xf32>
}

// -----

func.func @g(%x: tensor<4x4xf32>, %w: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>) attributes {lamina.gradients = array<i64: 1>} {
  %c = lamina.iota {dim = 0 : i64} : () -> tensor<4x4xf32>
  // expected-error @+1 {{accumulate-gradients: this op's shape does not follow the micro-batch}}
  %m = lamina.mul %x, %c : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %l = lamina.reduce_mean %m {axes = array<i64: 0, 1>} : (tensor<4x4xf32>) -> tensor<f32>
  func.return %l, %w : tensor<f32>, tensor<4xf32>
}

// -----

func.func @g(%x: tensor<4x4xf32>, %w: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>) attributes {lamina.gradients = array<i64: 1>} {
  %m = lamina.mul %x, %w : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
  // expected-error @+1 {{accumulate-gradients: the loss reduces the batch with this lamina.reduce_max; accumulation needs a sum or a mean over the rows}}
  %l = lamina.reduce_max %m {axes = array<i64: 0, 1>} : (tensor<4x4xf32>) -> tensor<f32>
  func.return %l, %w : tensor<f32>, tensor<4xf32>
}

// -----

func.func @g(%x: tensor<4x4xf32>, %w: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>) attributes {lamina.gradients = array<i64: 1>} {
  %m = lamina.mul %x, %w : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
  %s = lamina.reduce_mean %m {axes = array<i64: 0, 1>} : (tensor<4x4xf32>) -> tensor<f32>
  // expected-error @+1 {{accumulate-gradients: the loss is not linear in the batch's mean after this lamina.log, so the micro-batches' losses would not combine into the full batch's}}
  %l = lamina.log %s : tensor<f32>
  func.return %l, %w : tensor<f32>, tensor<4xf32>
}

// -----

func.func @g(%x: tensor<4x4xf32>, %w: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>) attributes {lamina.gradients = array<i64: 1>} {
  %mu = lamina.reduce_mean %x {axes = array<i64: 0>} : (tensor<4x4xf32>) -> tensor<4xf32>
  // expected-error @+1 {{accumulate-gradients: this lamina.sub combines a statistic of the whole batch with its rows, so the micro-batches' losses would not add up to the full batch's}}
  %c = lamina.sub %x, %mu : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
  %m = lamina.mul %c, %w : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
  %l = lamina.reduce_mean %m {axes = array<i64: 0, 1>} : (tensor<4x4xf32>) -> tensor<f32>
  func.return %l, %w : tensor<f32>, tensor<4xf32>
}

// -----

func.func @g(%x: tensor<4x4xf32>, %w: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>) attributes {lamina.gradients = array<i64: 1>} {
  %m = lamina.mul %x, %w : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
  %a = lamina.reduce_mean %m {axes = array<i64: 0, 1>} : (tensor<4x4xf32>) -> tensor<f32>
  %b = lamina.reduce_sum %m {axes = array<i64: 0, 1>} : (tensor<4x4xf32>) -> tensor<f32>
  // expected-error @+1 {{accumulate-gradients: this lamina.add adds a sum and a mean over the batch; say which to accumulate with loss=mean|sum}}
  %l = lamina.add %a, %b : tensor<f32>
  func.return %l, %w : tensor<f32>, tensor<4xf32>
}

// -----

func.func @g(%x: tensor<4x4xf32>, %w: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>) attributes {lamina.gradients = array<i64: 1>} {
  %m = lamina.mul %x, %w : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
  %s = lamina.reduce_sum %m {axes = array<i64: 0, 1>} : (tensor<4x4xf32>) -> tensor<f32>
  %r = lamina.reduce_sum %w {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  // expected-error @+1 {{accumulate-gradients: this lamina.add adds a term that does not depend on the batch to a sum over it, which each micro-batch would add again; say loss=sum to accept that}}
  %l = lamina.add %s, %r : tensor<f32>
  func.return %l, %w : tensor<f32>, tensor<4xf32>
}
