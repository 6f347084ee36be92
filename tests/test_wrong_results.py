"""Regression tests for results that used to be silently wrong (issue: "Trust the text and the tools").

- A pending sum (`partial`) flowed through every `cast`: each device cast its part and the parts were
  summed afterwards (i32 truncation per part, i1 -> f32 giving 2.0 for 1.0, narrowing casts rounding
  per device). Now only widening float casts are additive; the others make propagate-sharding
  reduce the operand first, and the verifier rejects a placed program that claims otherwise.
- LayerNorm (and RMSNorm) of a row whose squares overflow returned zeros; it now rescales the row.
(erf's accuracy is checked in tests/test_formulas.py.)
"""

from __future__ import annotations

import lamina
import numpy as np
import pytest
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import run_function
from lamina.backends.numpy.spmd import run_spmd
from lamina.ir.core.diagnostics import LaminaError

P_X = "#lamina.place<@m, [[], [model]]>"
P_W = "#lamina.place<@m, [[model], []]>"


def _cast_program(dst: str, via: str | None = None) -> str:
    """x @ w with the contracting dim split on `model` (a partial sum), then cast to `dst`
    (through `via` first when given): the casts must see the reduced value."""
    body = "  %c = lamina.cast %p : (tensor<4x6xf32>) -> tensor<4x6x{t}>\n"
    if via is None:
        casts = body.format(t=dst)
    else:
        casts = (f"  %v = lamina.cast %p : (tensor<4x6xf32>) -> tensor<4x6x{via}>\n"
                 f"  %c = lamina.cast %v : (tensor<4x6x{via}>) -> tensor<4x6x{dst}>\n")
    return (f"lamina.mesh @m [model = 2]\n"
            f"func.func @f(%x: tensor<4x8xf32, {P_X}>, %w: tensor<8x6xf32, {P_W}>) -> tensor<4x6x{dst}> {{\n"
            f"  %p = lamina.matmul %x, %w : (tensor<4x8xf32, {P_X}>, tensor<8x6xf32, {P_W}>) -> tensor<4x6xf32>\n"
            f"{casts}"
            f"  func.return %c : tensor<4x6x{dst}>\n}}\n")


def _inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(11)
    return [(rng.standard_normal((4, 8)) * 2).astype(np.float32),
            (rng.standard_normal((8, 6)) * 2).astype(np.float32)]


@pytest.mark.parametrize("dst,via", [("i32", None), ("f32", "i1"), ("bf16", None), ("f16", None),
                                     ("i64", None)])
def test_cast_of_a_pending_sum_reduces_first(dst: str, via: str | None) -> None:
    text = _cast_program(dst, via)
    ref = find_entry(lamina.parse(text), None)
    placed = lamina.apply(lamina.parse(text), "propagate-sharding,insert-collectives")
    func = find_entry(placed, None)
    got = run_spmd(func, _inputs()).outputs[0]
    want = run_function(ref, _inputs()).outputs[0]
    assert got.dtype == want.dtype
    assert np.array_equal(got, want), f"{np.count_nonzero(got != want)} of {got.size} differ"
    # the reduction happens before the first cast
    ops = [op.name for op in func.walk()]
    reduced = min(i for i, n in enumerate(ops) if n in ("lamina.all_reduce", "lamina.reduce_scatter"))
    assert reduced < ops.index("lamina.cast"), ops


def test_widening_float_cast_keeps_the_sum_pending() -> None:
    text = _cast_program("f64")
    placed = lamina.apply(lamina.parse(text), "propagate-sharding")
    cast = next(op for op in find_entry(placed, None).walk() if op.name == "lamina.cast")
    assert "partial = sum[model]" in str(cast.results[0].type)


def test_verifier_rejects_an_integer_cast_of_a_partial_value() -> None:
    part = "#lamina.place<@m, [[], []], partial = sum[model]>"
    text = ("lamina.mesh @m [model = 2]\n"
            f"func.func @f(%p: tensor<4x6xf32, {part}>) -> tensor<4x6xi32, {part}> {{\n"
            f"  %c = lamina.cast %p : (tensor<4x6xf32, {part}>) -> tensor<4x6xi32, {part}>\n"
            f"  func.return %c : tensor<4x6xi32, {part}>\n}}\n")
    with pytest.raises(LaminaError, match="lamina.cast is not linear: operand 0 is partial"):
        lamina.parse(text, "c.mlir")


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("fuse", [False, True])
def test_normalization_of_a_row_whose_squares_overflow(op: str, fuse: bool) -> None:
    text = (f"func.func @f(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {{\n"
            f"  %y = lamina.{op} %x : tensor<3x4xf32>\n"
            f"  %z = lamina.mul %y, %y : tensor<3x4xf32>\n"
            f"  func.return %y : tensor<3x4xf32>\n}}\n")
    module = lamina.parse(text)
    if fuse:
        lamina.apply(module, "fuse-elementwise")
    x = np.array([[1e30, -1e30, 1e30, 0.0], [3e38, -3e38, 1.0, 0.0], [1.0, 2.0, 3.0, 4.0]],
                 np.float32)
    y = lamina.run(module, [x]).outputs["out0"]
    x64 = x.astype(np.float64)
    if op == "layernorm":
        c = x64 - x64.mean(axis=1, keepdims=True)
        want = c / np.sqrt((c * c).mean(axis=1, keepdims=True) + 1e-5)
    else:
        want = x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + 1e-5)
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=1e-6)
