// The stage rules of the verifier: an op reading another stage's value, and a
// collective_permute that does not move between two stages of its one axis.
// RUN: lamina-opt %s --split-input-file --verify-diagnostics

lamina.mesh @pp [stage = 2]
func.func @mixed(%x: tensor<4xf32, #lamina.place<@pp, [[]], stage = stage[0]>>, %w: tensor<4xf32, #lamina.place<@pp, [[]], stage = stage[1]>>) -> tensor<4xf32, #lamina.place<@pp, [[]], stage = stage[1]>> {
  // expected-error @+1:3 {{lamina.add: operand 0 is on stage stage[0] but the op runs on stage stage[1] (the stage of its result); a value crosses stages only by lamina.collective_permute}}
  %y = lamina.add %x, %w : (tensor<4xf32, #lamina.place<@pp, [[]], stage = stage[0]>>, tensor<4xf32, #lamina.place<@pp, [[]], stage = stage[1]>>) -> tensor<4xf32, #lamina.place<@pp, [[]], stage = stage[1]>>
  func.return %y : tensor<4xf32, #lamina.place<@pp, [[]], stage = stage[1]>>
}

// -----

lamina.mesh @pp [stage = 2]
func.func @same(%x: tensor<4xf32, #lamina.place<@pp, [[]], stage = stage[0]>>) -> tensor<4xf32, #lamina.place<@pp, [[]], stage = stage[0]>> {
  // expected-error @+1:3 {{lamina.collective_permute: moves a value between two stages of its one axis [stage], got stage stage[0] -> stage stage[0]}}
  %y = lamina.collective_permute %x {axes = ["stage"]} : tensor<4xf32, #lamina.place<@pp, [[]], stage = stage[0]>> -> tensor<4xf32, #lamina.place<@pp, [[]], stage = stage[0]>>
  func.return %y : tensor<4xf32, #lamina.place<@pp, [[]], stage = stage[0]>>
}

// -----

lamina.mesh @pp [stage = 2]
func.func @keeps(%x: tensor<4xf32, #lamina.place<@pp, [[]], stage = stage[0]>>) -> tensor<4xf32, #lamina.place<@pp, [[stage]]>> {
  // expected-error @+1:3 {{lamina.all_slice: the result must stay on the operand's stage (stage stage[0] -> every stage)}}
  %y = lamina.all_slice %x {dim = 0 : i64, axes = ["stage"]} : tensor<4xf32, #lamina.place<@pp, [[]], stage = stage[0]>> -> tensor<4xf32, #lamina.place<@pp, [[stage]]>>
  func.return %y : tensor<4xf32, #lamina.place<@pp, [[stage]]>>
}

// -----

lamina.mesh @pp [stage = 2]
func.func @ring(%x: tensor<4xf32, #lamina.place<@pp, [[]], stage = stage[0]>>) -> tensor<4xf32, #lamina.place<@pp, [[]], stage = stage[1]>> {
  // expected-error @+1:3 {{lamina.collective_permute: algorithm "ring" is not this kind's: a point-to-point kind runs as "direct", its one send}}
  %y = lamina.collective_permute %x {axes = ["stage"], algorithm = "ring"} : tensor<4xf32, #lamina.place<@pp, [[]], stage = stage[0]>> -> tensor<4xf32, #lamina.place<@pp, [[]], stage = stage[1]>>
  func.return %y : tensor<4xf32, #lamina.place<@pp, [[]], stage = stage[1]>>
}
