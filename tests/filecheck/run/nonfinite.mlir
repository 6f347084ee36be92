// `lamina-run --check` on outputs that are NaN or inf: agreeing in the same places on both sides
// checks nothing there, so the line says NONFINITE with the counts and the run exits 1, unless
// --allow-nonfinite. A training step's default random inputs are drawn by the arguments' roles
// (second moments >= 0), so its outputs are finite and its check is a real one.
// RUN: lamina-opt %s -p 'derive-backward{func=f data=x},append-optimizer' | lamina-run - --entry f_step -p fuse-elementwise --check | filecheck %s --check-prefix=STEP
// RUN: not lamina-run %s --entry nonfinite -p cse --check | filecheck %s --check-prefix=NAN
// RUN: not lamina-run %s --entry nonfinite -p cse --check 2>&1 >/dev/null | filecheck %s --check-prefix=NANERR
// RUN: lamina-run %s --entry nonfinite -p cse --check --allow-nonfinite | filecheck %s --check-prefix=ALLOW
// RUN: not lamina-run %s --entry nonfinite --allow-nonfinite 2>&1 | filecheck %s --check-prefix=USAGE

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>) -> tensor<f32> {
  %h = lamina.matmul %x, %w : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %l = lamina.reduce_mean %h {axes = array<i64: 0, 1>} : (tensor<4x2xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}

func.func @nonfinite(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %neg = lamina.constant dense<-1.0> : tensor<4xf32>
  %s = lamina.sqrt %neg : tensor<4xf32>
  %y = lamina.add %x, %s : tensor<4xf32>
  %z = lamina.mul %x, %x : tensor<4xf32>
  %zero = lamina.constant dense<0.0> : tensor<4xf32>
  %one = lamina.constant dense<1.0> : tensor<4xf32>
  %inf = lamina.div %one, %zero : tensor<4xf32>
  func.return %y, %z, %inf : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// STEP-NOT: {{nan|inf |NONFINITE|FAILED}}
// STEP:     check new_w: ok shape [8, 2] f32
// STEP-NEXT: check new_m_w: ok shape [8, 2] f32
// STEP-NEXT: check new_v_w: ok shape [8, 2] f32
// STEP-NEXT: check next_step: ok shape [] f32
// STEP-NEXT: check l: ok shape [] f32
// STEP-NOT: {{nan|inf |NONFINITE|FAILED}}

// NAN:      check FAILED y: NONFINITE shape [4] f32 max abs err 0 max rel err 0 (rtol 2e-05, atol 2e-06): 4 NaN, 0 inf on both sides
// NAN-NEXT: check FAILED z: ok shape [4] f32 max abs err 0 max rel err 0 (rtol 2e-05, atol 2e-06)
// NAN-NEXT: check FAILED inf: NONFINITE shape [4] f32 max abs err 0 max rel err 0 (rtol 2e-05, atol 2e-06): 0 NaN, 4 inf on both sides
// NANERR: lamina-run: error: outputs y, inf agree only by NaN or inf in the same places on both sides, which checks nothing there (--allow-nonfinite accepts it)

// ALLOW:      check y: ok shape [4] f32 max abs err 0 max rel err 0 (rtol 2e-05, atol 2e-06): 4 NaN, 0 inf on both sides (allowed)
// ALLOW-NEXT: check z: ok shape [4] f32 max abs err 0 max rel err 0 (rtol 2e-05, atol 2e-06)
// ALLOW-NEXT: check inf: ok shape [4] f32 max abs err 0 max rel err 0 (rtol 2e-05, atol 2e-06): 0 NaN, 4 inf on both sides (allowed)

// USAGE: lamina-run: error: --allow-nonfinite applies to --check, which is not given
