"""Every verifier error, raised through `parse_text` + `verify` as a positioned `LaminaError`.

Each case is one op on line 2 of a small function; the error must be a `LaminaError` located at
`<stdin>:2:3` (the op) whose message starts with `lamina.<op>: ` and contains the rule's text.
The cases cover every `ShapeError` message in `lamina.ir.core.shapes`, every attribute-kind error,
missing required attributes, unsupported element types, dynamic shapes and result type
mismatches; parse-time errors (unknown attribute, wrong operand count) are checked at their
position too.
"""

from __future__ import annotations

import re

import pytest
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.text.source import parse_text, verify

F4 = "tensor<4xf32>"
F24 = "tensor<2x4xf32>"

# id -> (arguments, op line (without the leading two spaces), expected message text after "op: ")
CASES: dict[str, tuple[str, str, str]] = {
    # -- elementwise --
    "binary-no-broadcast": (
        "%a: tensor<3xf32>, %b: tensor<4xf32>",
        "%r = lamina.add %a, %b : (tensor<3xf32>, tensor<4xf32>) -> tensor<4xf32>",
        "operand shapes (3,), (4,) do not broadcast"),
    "binary-int-operand": (
        "%a: tensor<4xi32>",
        "%r = lamina.div %a, %a : tensor<4xi32>",
        "operand must have a float element type, got i32"),
    "binary-bool-operand": (
        "%a: tensor<4xi1>",
        "%r = lamina.mul %a, %a : tensor<4xi1>",
        "operand must have a numeric element type (a float, i32 or i64), got i1"),
    "unary-int-operand": (
        "%a: tensor<4xi1>",
        "%r = lamina.exp %a : tensor<4xi1>",
        "operand must have a float element type, got i1"),
    "binary-dtype-mismatch": (
        "%a: tensor<4xf32>, %b: tensor<4xf16>",
        "%r = lamina.sub %a, %b : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>",
        "operands must share one element type, got f32, f16"),
    "compare-dtype-mismatch": (
        "%a: tensor<4xi32>, %b: tensor<4xi64>",
        "%r = lamina.lt %a, %b : (tensor<4xi32>, tensor<4xi64>) -> tensor<4xi1>",
        "operands must share one element type, got i32, i64"),
    "compare-no-broadcast": (
        "%a: tensor<2xf32>, %b: tensor<3xf32>",
        "%r = lamina.eq %a, %b : (tensor<2xf32>, tensor<3xf32>) -> tensor<3xi1>",
        "operand shapes (2,), (3,) do not broadcast"),
    "select-condition-not-i1": (
        "%c: tensor<4xf32>, %a: tensor<4xf32>",
        "%r = lamina.select %c, %a, %a : tensor<4xf32>",
        "condition must have element type i1, got f32"),
    "select-branch-dtypes": (
        "%c: tensor<4xi1>, %a: tensor<4xf32>, %b: tensor<4xf64>",
        "%r = lamina.select %c, %a, %b : (tensor<4xi1>, tensor<4xf32>, tensor<4xf64>) -> "
        "tensor<4xf32>",
        "operands must share one element type, got f32, f64"),
    "select-no-broadcast": (
        "%c: tensor<3xi1>, %a: tensor<4xf32>",
        "%r = lamina.select %c, %a, %a : (tensor<3xi1>, tensor<4xf32>, tensor<4xf32>) -> "
        "tensor<4xf32>",
        "operand shapes (3,), (4,), (4,) do not broadcast"),
    "cast-shape-mismatch": (
        "%a: tensor<4xf32>",
        "%r = lamina.cast %a : (tensor<4xf32>) -> tensor<3xi32>",
        "result type tensor<3xi32> does not match the expected tensor<4xi32>"),
    # -- dropout --
    "dropout-rate-one": (
        f"%a: {F4}", f"%r = lamina.dropout %a {{rate = 1.0 : f64, seed = 1 : i64}} : {F4}",
        "rate must be in [0, 1), got 1.0"),
    "dropout-rate-negative": (
        f"%a: {F4}", f"%r = lamina.dropout %a {{rate = -0.5 : f64, seed = 1 : i64}} : {F4}",
        "rate must be in [0, 1), got -0.5"),
    "dropout-two-seeds": (
        f"%a: {F4}, %s: tensor<i64>",
        f"%r = lamina.dropout %a seed %s {{rate = 0.5 : f64, seed = 1 : i64}} : "
        f"({F4}, tensor<i64>) -> {F4}",
        "seed is given both as an attribute and as an operand"),
    "dropout-seed-not-scalar": (
        f"%a: {F4}, %s: tensor<2xi64>",
        f"%r = lamina.dropout %a seed %s {{rate = 0.5 : f64}} : ({F4}, tensor<2xi64>) -> {F4}",
        "seed operand must be a rank-0 i32 or i64 tensor, got tensor<2xi64>"),
    "dropout-seed-float": (
        f"%a: {F4}, %s: tensor<f32>",
        f"%r = lamina.dropout %a seed %s {{rate = 0.5 : f64}} : ({F4}, tensor<f32>) -> {F4}",
        "seed operand must be a rank-0 i32 or i64 tensor, got tensor<f32>"),
    "dropout-seed-i1": (
        f"%a: {F4}, %s: tensor<i1>",
        f"%r = lamina.dropout %a seed %s {{rate = 0.5 : f64}} : ({F4}, tensor<i1>) -> {F4}",
        "seed operand must be a rank-0 i32 or i64 tensor, got tensor<i1>"),
    "dropout-no-seed": (
        f"%a: {F4}", f"%r = lamina.dropout %a {{rate = 0.5 : f64}} : {F4}",
        "needs a seed: a 'seed' attribute or a seed operand"),
    "dropout-int-operand": (
        "%a: tensor<4xi32>",
        "%r = lamina.dropout %a {rate = 0.5 : f64, seed = 1 : i64} : tensor<4xi32>",
        "operand must have a float element type, got i32"),
    # -- reductions --
    "reduce-axis-out-of-range": (
        f"%a: {F24}",
        f"%r = lamina.reduce_sum %a {{axes = array<i64: 2>}} : ({F24}) -> tensor<2xf32>",
        "reduction axis 2 is out of range for rank 2"),
    "reduce-negative-axis-out-of-range": (
        f"%a: {F24}",
        f"%r = lamina.reduce_max %a {{axes = array<i64: -3>}} : ({F24}) -> tensor<2xf32>",
        "reduction axis -3 is out of range for rank 2"),
    "reduce-repeated-axis": (
        f"%a: {F24}",
        f"%r = lamina.reduce_mean %a {{axes = array<i64: 1, -1>}} : ({F24}) -> tensor<2xf32>",
        "reduction axes [1, -1] repeat an axis"),
    "reduce-no-axes": (
        f"%a: {F24}",
        f"%r = lamina.reduce_sum %a {{axes = array<i64>}} : {F24}",
        "needs at least one reduction axis"),
    "reduce-int-operand": (
        "%a: tensor<4xi64>",
        "%r = lamina.reduce_sum %a {axes = array<i64: 0>} : (tensor<4xi64>) -> tensor<i64>",
        "operand must have a float element type, got i64"),
    "reduce-wrong-result": (
        f"%a: {F24}",
        f"%r = lamina.reduce_sum %a {{axes = array<i64: 1>}} : ({F24}) -> tensor<2x1xf32>",
        "result type tensor<2x1xf32> does not match the expected tensor<2xf32>"),
    # -- normalizations / softmax --
    "layernorm-rank0": (
        "%a: tensor<f32>", "%r = lamina.layernorm %a : tensor<f32>",
        "operand must have rank >= 1"),
    "layernorm-axis-out-of-range": (
        f"%a: {F24}", f"%r = lamina.layernorm %a {{axis = 2 : i64}} : {F24}",
        "axis 2 is out of range for rank 2"),
    "layernorm-negative-eps": (
        f"%a: {F24}", f"%r = lamina.layernorm %a {{eps = -1.0 : f64}} : {F24}",
        "eps must be >= 0, got -1.0"),
    "layernorm-scale-dtype": (
        f"%a: {F24}, %g: tensor<4xf16>",
        f"%r = lamina.layernorm %a scale %g : ({F24}, tensor<4xf16>) -> {F24}",
        "scale element type f16 differs from operand's f32"),
    "layernorm-scale-shape": (
        f"%a: {F24}, %g: tensor<2x4xf32>",
        f"%r = lamina.layernorm %a scale %g : ({F24}, tensor<2x4xf32>) -> {F24}",
        "scale shape (2, 4) must equal the normalized shape (4,)"),
    "layernorm-bias-shape": (
        f"%a: {F24}, %b: tensor<3xf32>",
        f"%r = lamina.layernorm %a bias %b : ({F24}, tensor<3xf32>) -> {F24}",
        "bias shape (3,) must equal the normalized shape (4,)"),
    "layernorm-bias-dtype": (
        f"%a: {F24}, %b: tensor<4xbf16>",
        f"%r = lamina.layernorm %a bias %b : ({F24}, tensor<4xbf16>) -> {F24}",
        "bias element type bf16 differs from operand's f32"),
    "rmsnorm-scale-shape-axis0": (
        f"%a: {F24}, %g: tensor<4xf32>",
        f"%r = lamina.rmsnorm %a scale %g {{axis = 0 : i64}} : ({F24}, tensor<4xf32>) -> {F24}",
        "scale shape (4,) must equal the normalized shape (2, 4)"),
    "rmsnorm-int": (
        "%a: tensor<4xi32>", "%r = lamina.rmsnorm %a : tensor<4xi32>",
        "operand must have a float element type, got i32"),
    "softmax-rank0": (
        "%a: tensor<f64>", "%r = lamina.softmax %a : tensor<f64>",
        "operand must have rank >= 1"),
    "softmax-axis-out-of-range": (
        f"%a: {F24}", f"%r = lamina.softmax %a {{axis = -3 : i64}} : {F24}",
        "axis -3 is out of range for rank 2"),
    # -- matmul --
    "matmul-rank1": (
        f"%a: {F4}, %b: {F24}",
        f"%r = lamina.matmul %a, %b : ({F4}, {F24}) -> {F4}",
        "operands must have rank >= 2, got ranks 1 and 2"),
    "matmul-contracting": (
        "%a: tensor<2x3xf32>, %b: tensor<4x5xf32>",
        "%r = lamina.matmul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>",
        "contracting dimensions differ: lhs (2, 3) has 3, rhs (4, 5) has 4"),
    "matmul-batch": (
        "%a: tensor<2x3x4xf32>, %b: tensor<3x4x5xf32>",
        "%r = lamina.matmul %a, %b : (tensor<2x3x4xf32>, tensor<3x4x5xf32>) -> "
        "tensor<2x3x5xf32>",
        "operand shapes (2,), (3,) do not broadcast"),
    "matmul-int": (
        "%a: tensor<2x2xi32>", "%r = lamina.matmul %a, %a : tensor<2x2xi32>",
        "lhs must have a float element type, got i32"),
    "matmul-dtypes": (
        "%a: tensor<2x2xf32>, %b: tensor<2x2xf64>",
        "%r = lamina.matmul %a, %b : (tensor<2x2xf32>, tensor<2x2xf64>) -> tensor<2x2xf32>",
        "operands must share one element type, got f32, f64"),
    # -- layout --
    "transpose-not-permutation": (
        f"%a: {F24}",
        f"%r = lamina.transpose %a {{permutation = array<i64: 0, 0>}} : {F24}",
        "permutation [0, 0] is not a permutation of 0..1"),
    "transpose-wrong-length": (
        f"%a: {F24}",
        f"%r = lamina.transpose %a {{permutation = array<i64: 0>}} : {F24}",
        "permutation [0] is not a permutation of 0..1"),
    "reshape-element-count": (
        f"%a: {F24}", f"%r = lamina.reshape %a : ({F24}) -> tensor<7xf32>",
        "cannot reshape tensor<2x4xf32> (8 elements) to tensor<7xf32> (7 elements)"),
    "reshape-dtype": (
        f"%a: {F24}", f"%r = lamina.reshape %a : ({F24}) -> tensor<8xf16>",
        "result type tensor<8xf16> does not match the expected tensor<8xf32>"),
    "broadcast-dims-count": (
        f"%a: {F24}",
        f"%r = lamina.broadcast_in_dim %a {{broadcast_dimensions = array<i64: 0>}} : "
        f"({F24}) -> tensor<3x2x4xf32>",
        "broadcast_dimensions has 1 entries, operand has rank 2"),
    "broadcast-dims-repeat": (
        f"%a: {F24}",
        f"%r = lamina.broadcast_in_dim %a {{broadcast_dimensions = array<i64: 1, 1>}} : "
        f"({F24}) -> tensor<3x2x4xf32>",
        "broadcast_dimensions [1, 1] repeat a dimension"),
    "broadcast-dim-out-of-range": (
        f"%a: {F24}",
        f"%r = lamina.broadcast_in_dim %a {{broadcast_dimensions = array<i64: 0, 3>}} : "
        f"({F24}) -> tensor<2x4x4xf32>",
        "broadcast dimension 3 is out of range for result rank 3"),
    "broadcast-dim-size": (
        f"%a: {F24}",
        f"%r = lamina.broadcast_in_dim %a {{broadcast_dimensions = array<i64: 0, 1>}} : "
        f"({F24}) -> tensor<3x4xf32>",
        "operand dimension 0 of size 2 cannot broadcast to result dimension 0 of size 3"),
    "slice-start-length": (
        f"%a: {F24}",
        f"%r = lamina.slice %a {{start = array<i64: 0>, limit = array<i64: 2, 4>}} : {F24}",
        "start has 1 entries, operand has rank 2"),
    "slice-limit-length": (
        f"%a: {F24}",
        f"%r = lamina.slice %a {{start = array<i64: 0, 0>, limit = array<i64: 2>}} : {F24}",
        "limit has 1 entries, operand has rank 2"),
    "slice-strides-length": (
        f"%a: {F24}",
        f"%r = lamina.slice %a {{start = array<i64: 0, 0>, limit = array<i64: 2, 4>, "
        f"strides = array<i64: 1, 1, 1>}} : {F24}",
        "strides has 3 entries, operand has rank 2"),
    "slice-zero-stride": (
        f"%a: {F24}",
        f"%r = lamina.slice %a {{start = array<i64: 0, 0>, limit = array<i64: 2, 4>, "
        f"strides = array<i64: 0, 1>}} : {F24}",
        "stride 0 in dimension 0 must be >= 1"),
    "slice-out-of-bounds": (
        f"%a: {F24}",
        f"%r = lamina.slice %a {{start = array<i64: 0, 1>, limit = array<i64: 2, 5>}} : "
        f"({F24}) -> tensor<2x4xf32>",
        "slice [1, 5) of dimension 1 is out of bounds for size 4"),
    "slice-reversed": (
        f"%a: {F24}",
        f"%r = lamina.slice %a {{start = array<i64: 2, 0>, limit = array<i64: 1, 4>}} : "
        f"({F24}) -> tensor<0x4xf32>",
        "slice [2, 1) of dimension 0 is out of bounds for size 2"),
    "slice-wrong-result": (
        f"%a: {F24}",
        f"%r = lamina.slice %a {{start = array<i64: 0, 0>, limit = array<i64: 2, 4>, "
        f"strides = array<i64: 1, 3>}} : {F24}",
        "result type tensor<2x4xf32> does not match the expected tensor<2x2xf32>"),
    "concat-no-operands": (
        "", "%r = lamina.concat {dim = 0 : i64} : () -> tensor<4xf32>",
        "needs at least one operand"),
    "concat-rank0": (
        "%a: tensor<f32>", "%r = lamina.concat %a, %a {dim = 0 : i64} : "
        "(tensor<f32>, tensor<f32>) -> tensor<2xf32>",
        "operands must have rank >= 1"),
    "concat-ranks": (
        f"%a: {F4}, %b: {F24}",
        f"%r = lamina.concat %a, %b {{dim = 0 : i64}} : ({F4}, {F24}) -> tensor<8xf32>",
        "operands must share one rank, got [1, 2]"),
    "concat-dim-out-of-range": (
        f"%a: {F24}",
        f"%r = lamina.concat %a, %a {{dim = 2 : i64}} : ({F24}, {F24}) -> tensor<4x4xf32>",
        "dim 2 is out of range for rank 2"),
    "concat-other-dims": (
        f"%a: {F24}, %b: tensor<2x3xf32>",
        f"%r = lamina.concat %a, %b {{dim = 0 : i64}} : ({F24}, tensor<2x3xf32>) -> "
        f"tensor<4x4xf32>",
        "operand shapes (2, 4) and (2, 3) differ outside dim 0"),
    "concat-dtypes": (
        f"%a: {F4}, %b: tensor<4xi32>",
        f"%r = lamina.concat %a, %b {{dim = 0 : i64}} : ({F4}, tensor<4xi32>) -> tensor<8xf32>",
        "operands must share one element type, got f32, i32"),
    "concat-wrong-result": (
        f"%a: {F4}",
        f"%r = lamina.concat %a, %a {{dim = 0 : i64}} : ({F4}, {F4}) -> tensor<9xf32>",
        "result type tensor<9xf32> does not match the expected tensor<8xf32>"),
    # -- result type mismatches --
    "binary-result-shape": (
        f"%a: {F4}, %b: tensor<f32>",
        f"%r = lamina.add %a, %b : ({F4}, tensor<f32>) -> tensor<f32>",
        "result type tensor<f32> does not match the expected tensor<4xf32>"),
    "unary-result-dtype": (
        f"%a: {F4}", f"%r = lamina.tanh %a : ({F4}) -> tensor<4xf64>",
        "result type tensor<4xf64> does not match the expected tensor<4xf32>"),
    "compare-result-dtype": (
        f"%a: {F4}", f"%r = lamina.ge %a, %a : ({F4}, {F4}) -> {F4}",
        "result type tensor<4xf32> does not match the expected tensor<4xi1>"),
    "matmul-result": (
        "%a: tensor<2x3xf32>, %b: tensor<3x5xf32>",
        "%r = lamina.matmul %a, %b : (tensor<2x3xf32>, tensor<3x5xf32>) -> tensor<2x3xf32>",
        "result type tensor<2x3xf32> does not match the expected tensor<2x5xf32>"),
    "transpose-result": (
        f"%a: {F24}",
        f"%r = lamina.transpose %a {{permutation = array<i64: 1, 0>}} : {F24}",
        "result type tensor<2x4xf32> does not match the expected tensor<4x2xf32>"),
    "constant-result": (
        "", "%r = \"lamina.constant\"() <{value = dense<1.0> : tensor<2xf32>}> : () -> "
        "tensor<3xf32>",
        "result type tensor<3xf32> does not match the expected tensor<2xf32>"),
    # -- attribute kinds --
    "attr-int-given-float": (
        f"%a: {F24}", f"%r = lamina.softmax %a {{axis = 1.0 : f64}} : {F24}",
        "attribute 'axis' must be an integer, got 1.000000e+00 : f64"),
    "attr-int-given-bool": (
        f"%a: {F24}", f"%r = lamina.concat %a {{dim = true}} : {F24}",
        "attribute 'dim' must be an integer, got true"),
    "attr-float-given-int": (
        f"%a: {F24}", f"%r = lamina.layernorm %a {{eps = 1 : i64}} : {F24}",
        "attribute 'eps' must be a float (e.g. 1.0e-05), got 1 : i64"),
    "attr-bool-given-int": (
        f"%a: {F24}",
        f"%r = lamina.reduce_sum %a {{axes = array<i64: 0>, keepdims = 1 : i64}} : "
        f"({F24}) -> tensor<4xf32>",
        "attribute 'keepdims' must be true or false, got 1 : i64"),
    "attr-str-choice": (
        f"%a: {F4}", f"%r = lamina.gelu %a {{approximate = \"fast\"}} : {F4}",
        "attribute 'approximate' must be one of \"none\", \"tanh\", got \"fast\""),
    "attr-str-given-int": (
        f"%a: {F4}", f"%r = lamina.gelu %a {{approximate = 1 : i64}} : {F4}",
        "attribute 'approximate' must be one of \"none\", \"tanh\", got 1 : i64"),
    "attr-ints-given-int": (
        f"%a: {F24}",
        f"%r = lamina.reduce_sum %a {{axes = 1 : i64}} : ({F24}) -> tensor<2xf32>",
        "attribute 'axes' must be an integer array like array<i64: 0, 1>, got 1 : i64"),
    "attr-ints-given-floats": (
        f"%a: {F24}",
        f"%r = lamina.transpose %a {{permutation = array<f32: 1.0, 0.0>}} : "
        f"({F24}) -> tensor<4x2xf32>",
        "attribute 'permutation' must be an integer array like array<i64: 0, 1>"),
    "attr-dense-given-int": (
        "", "%r = \"lamina.constant\"() <{value = 1 : i64}> : () -> tensor<f32>",
        "attribute 'value' must be a dense<...> tensor literal of a supported element type, "
        "got 1 : i64"),
    "attr-dense-unsupported-type": (
        "", "%r = \"lamina.constant\"() <{value = dense<1> : tensor<2xi8>}> : () -> "
        "tensor<2xi8>",
        "unsupported element type i8"),
    "attr-rate-given-int": (
        f"%a: {F4}", f"%r = lamina.dropout %a {{rate = 1 : i64, seed = 1 : i64}} : {F4}",
        "attribute 'rate' must be a float (e.g. 1.0e-05), got 1 : i64"),
    # -- missing required attributes --
    "missing-axes": (
        f"%a: {F24}", f"%r = lamina.reduce_max %a : ({F24}) -> tensor<2xf32>",
        "missing required attribute 'axes'"),
    "missing-permutation": (
        f"%a: {F24}", f"%r = lamina.transpose %a : {F24}",
        "missing required attribute 'permutation'"),
    "missing-rate": (
        f"%a: {F4}", f"%r = lamina.dropout %a {{seed = 1 : i64}} : {F4}",
        "missing required attribute 'rate'"),
    "missing-dim": (
        f"%a: {F4}", f"%r = lamina.concat %a, %a : ({F4}, {F4}) -> tensor<8xf32>",
        "missing required attribute 'dim'"),
    "missing-limit": (
        f"%a: {F4}", f"%r = lamina.slice %a {{start = array<i64: 0>}} : {F4}",
        "missing required attribute 'limit'"),
    "missing-broadcast-dimensions": (
        f"%a: {F4}", f"%r = lamina.broadcast_in_dim %a : ({F4}) -> tensor<2x4xf32>",
        "missing required attribute 'broadcast_dimensions'"),
    "missing-value": (
        "", "%r = \"lamina.constant\"() : () -> tensor<f32>",
        "missing required attribute 'value'"),
    # -- element types and shapes --
    "unsupported-i8": (
        "%a: tensor<4xi8>", "%r = lamina.neg %a : tensor<4xi8>",
        "unsupported element type i8 (use f16, bf16, f32, f64, i1, i32, i64)"),
    "unsupported-unsigned": (
        "%a: tensor<4xui32>", "%r = lamina.eq %a, %a : (tensor<4xui32>, tensor<4xui32>) -> "
        "tensor<4xi1>",
        "unsupported element type ui32"),
    "unsupported-f80": (
        "%a: tensor<4xf80>", "%r = lamina.abs %a : tensor<4xf80>",
        "unsupported element type f80"),
    "unsupported-result-type": (
        f"%a: {F4}", f"%r = lamina.cast %a : ({F4}) -> tensor<4xi16>",
        "unsupported element type i16"),
    "dynamic-shape": (
        "%a: tensor<?x4xf32>", "%r = lamina.relu %a : tensor<?x4xf32>",
        "dynamic shapes are not supported: tensor<?x4xf32>"),
    "dynamic-result": (
        f"%a: {F4}", f"%r = lamina.reshape %a : ({F4}) -> tensor<?xf32>",
        "dynamic shapes are not supported: tensor<?xf32>"),
    "not-a-tensor": (
        "%a: f32", "%r = \"lamina.neg\"(%a) : (f32) -> f32",
        "operand 'input' at position 0 does not verify"),
}


def _program(args: str, line: str) -> str:
    return f"func.func @main({args}) {{\n  {line}\n  func.return\n}}\n"


def _op_name(line: str) -> str:
    m = re.search(r"\"?(lamina\.\w+)", line)
    assert m
    return m.group(1)


@pytest.mark.parametrize("case", sorted(CASES))
def test_verifier_error(case: str) -> None:
    args, line, expected = CASES[case]
    text = _program(args, line)
    with pytest.raises(LaminaError) as info:
        verify(parse_text(text))
    err = info.value
    op = _op_name(line)
    assert err.loc is not None, err
    assert (err.loc.file, err.loc.line, err.loc.col) == ("<stdin>", 2, 3), err.render()
    assert err.message.startswith(f"{op}: "), err.render()
    assert expected in err.message, err.render()
    assert err.render().startswith(f"<stdin>:2:3: error: {op}: ")


def test_errors_point_at_the_failing_op_among_many() -> None:
    text = (f"func.func @main(%a: {F24}) -> {F24} {{\n"
            f"  %0 = lamina.exp %a : {F24}\n"
            f"  %1 = lamina.add %0, %a : {F24}\n"
            f"\n"
            f"      %2 = lamina.softmax %1 {{axis = 5 : i64}} : {F24}\n"
            f"  func.return %2 : {F24}\n}}\n")
    with pytest.raises(LaminaError) as info:
        verify(parse_text(text, name="prog.mlir"))
    assert info.value.render() == \
        "prog.mlir:5:7: error: lamina.softmax: axis 5 is out of range for rank 2"


@pytest.mark.parametrize("line,expected,col", [
    (f"%r = lamina.add %a, %a {{foo = 1 : i64}} : {F4}",
     "lamina.add has no attribute 'foo' (it takes: none)", 19),
    (f"%r = lamina.softmax %a {{dims = 1 : i64}} : {F4}",
     "lamina.softmax has no attribute 'dims' (it takes: axis, safe)", 23),
    (f"%r = lamina.add %a : {F4}",
     "lamina.add expects 2 positional operand(s) (lhs, rhs), got 1", 19),
])
def test_parse_time_errors_are_positioned(line: str, expected: str, col: int) -> None:
    with pytest.raises(LaminaError) as info:
        parse_text(_program(f"%a: {F4}", line))
    err = info.value
    assert err.loc is not None and (err.loc.line, err.loc.col) == (2, col), err.render()
    assert err.message == expected


def test_valid_program_verifies() -> None:
    text = ("func.func @f(%x: tensor<4x8xf32>, %g: tensor<8xf32>) -> tensor<4x1xf32> {\n"
            "  %0 = lamina.layernorm %x scale %g {axis = -1 : i64, eps = 1.000000e-05 : f64} : "
            "(tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>\n"
            "  %1 = lamina.gelu %0 {approximate = \"tanh\"} : tensor<4x8xf32>\n"
            "  %2 = lamina.dropout %1 {rate = 1.000000e-01 : f64, seed = 42 : i64} : "
            "tensor<4x8xf32>\n"
            "  %c = lamina.constant dense<2.000000e+00> : tensor<f32>\n"
            "  %3 = lamina.mul %2, %c : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>\n"
            "  %4 = lamina.reduce_sum %3 {axes = array<i64: 1>, keepdims = true} : "
            "(tensor<4x8xf32>) -> tensor<4x1xf32>\n"
            "  func.return %4 : tensor<4x1xf32>\n}\n")
    verify(parse_text(text))
