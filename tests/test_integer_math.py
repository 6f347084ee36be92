"""Integer math where torch computes on i64 (masks, position ids, T5's relative-position
buckets): min / max, the compares, select, gather and cumsum on i32 and i64 operands, on every
backend, exactly.

One program holds them all; it runs on the NumPy interpreter, the JAX backend and (after
`fuse-elementwise`, so its integer min / max / compare / select chain is one compiled kernel) the
compiled backend, and each output must equal a NumPy reference bit for bit: integer arithmetic has
no rounding, so any difference is a wrong result, not a tolerance question.
"""

from __future__ import annotations

import lamina
import numpy as np
import pytest
from lamina.ir.ops.fused import FusedOp

PROGRAM = """
func.func @f(%a: tensor<6x8xT>, %b: tensor<6x8xT>, %table: tensor<10x3xT>,
             %idx: tensor<6x8xi64>) -> (tensor<6x8xT>, tensor<6x8xT>, tensor<6x8xi1>,
                                        tensor<6x8x3xT>, tensor<6x8xT>) {
  %lo = lamina.min %a, %b : tensor<6x8xT>
  %hi = lamina.max %a, %b : tensor<6x8xT>
  %gt = lamina.gt %a, %b : (tensor<6x8xT>, tensor<6x8xT>) -> tensor<6x8xi1>
  %le = lamina.le %lo, %hi : (tensor<6x8xT>, tensor<6x8xT>) -> tensor<6x8xi1>
  %eq = lamina.eq %gt, %le : (tensor<6x8xi1>, tensor<6x8xi1>) -> tensor<6x8xi1>
  %pick = lamina.select %gt, %hi, %lo : (tensor<6x8xi1>, tensor<6x8xT>, tensor<6x8xT>) -> tensor<6x8xT>
  %row = lamina.gather %table, %idx {axis = 0 : i64} : (tensor<10x3xT>, tensor<6x8xi64>) -> tensor<6x8x3xT>
  %run = lamina.cumsum %pick {axis = 1 : i64, exclusive = true} : tensor<6x8xT>
  func.return %lo, %pick, %eq, %row, %run : tensor<6x8xT>, tensor<6x8xT>, tensor<6x8xi1>, tensor<6x8x3xT>, tensor<6x8xT>
}
"""


def _inputs(dtype: str) -> dict[str, np.ndarray]:
    g = np.random.default_rng(7)
    npdt = np.int32 if dtype == "i32" else np.int64
    big = 2**40 if dtype == "i64" else 2**20      # i64 values past i32's range
    a = g.integers(-big, big, (6, 8)).astype(npdt)
    b = g.integers(-big, big, (6, 8)).astype(npdt)
    b[0] = a[0]                                     # ties
    return {"a": a, "b": b, "table": g.integers(-big, big, (10, 3)).astype(npdt),
            "idx": g.integers(-12, 12, (6, 8)).astype(np.int64)}


def _reference(x: dict[str, np.ndarray]) -> list[np.ndarray]:
    a, b, table, idx = x["a"], x["b"], x["table"], x["idx"]
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    gt = a > b
    pick = np.where(gt, hi, lo)
    i = np.where(idx < 0, idx + 10, idx)
    inside = (i >= 0) & (i < 10)
    row = np.where(inside[..., None], table[np.where(inside, i, 0)], 0).astype(a.dtype)
    run = np.concatenate([np.zeros((6, 1), a.dtype), np.cumsum(pick, 1, dtype=a.dtype)[:, :-1]], 1)
    return [lo, pick, gt == (lo <= hi), row, run]


@pytest.mark.parametrize("backend", ["numpy", "jax", "compiled"])
@pytest.mark.parametrize("dtype", ["i32", "i64"])
def test_integer_ops_are_exact_on_every_backend(dtype: str, backend: str) -> None:
    if backend == "jax":
        pytest.importorskip("jax")
    m = lamina.parse(PROGRAM.replace("xT>", f"x{dtype}>"))
    if backend == "compiled":
        m = lamina.apply(m, "fuse-elementwise")
        fused = [op for op in m.walk() if isinstance(op, FusedOp)]
        assert fused, lamina.to_text(m)
    x = _inputs(dtype)
    got = lamina.run(m, x, backend=backend)
    for k, want in enumerate(_reference(x)):
        out = got.outputs[f"out{k}"]
        assert out.dtype == want.dtype and np.array_equal(out, want), (k, out, want)
    if backend == "compiled":
        assert got.stats["compiled"]["fallbacks"] == [], got.explain
