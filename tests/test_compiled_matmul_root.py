"""Kernels rooted at a matmul on the compiled backend: one BLAS call, then the compiled epilogue.

`lamina.backends.compiled.matmul_root` runs the matmul over every row first and compiles what is
left. These tests check that such kernels compile (no fallback line), agree with the NumPy
interpreter (bit for bit where the epilogue's arithmetic is exact, within the backend's stated
tolerances otherwise), give the same bits on any thread count, and never hand back memory the
backend reuses for the next call (`lamina.backends.numpy.result_pool`).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.backends.compare import compare
from lamina.backends.compiled.backend import CompiledBackend
from lamina.backends.interface import RunResult, find_entry
from lamina.backends.numpy.options import NumpyOptions
from lamina.backends.numpy.runner import run_function
from lamina.ir.core.dtypes import tensor_dtype
from lamina.ir.ops.fused import FusedOp
from strategies import examples, signature_parts
from test_compiled_backend import fused


def _fused(text: str):
    m = fused(text)
    kinds = [o.fusion_kind for o in m.walk() if isinstance(o, FusedOp)]
    assert kinds == ["matmul"], kinds
    return m


def _run(m, inputs, compiled: bool, threads: int | None = None) -> RunResult:
    runners = CompiledBackend.op_runners if compiled else None
    return run_function(find_entry(m, None), inputs, options=NumpyOptions(threads=threads),
                        runners=runners)


def _close(m, got: RunResult, want: RunResult) -> None:
    func = find_entry(m, None)
    for i, (a, b, t) in enumerate(zip(got.outputs, want.outputs, func.function_type.outputs.data,
                                      strict=True)):
        d = compare(f"out{i}", tensor_dtype(t), a, b)
        assert d.ok, d.line()


def mlp_up(m: int, k: int, n: int, t: str = "f32", epilogue: str = "gelu") -> str:
    X, W, B, H = f"tensor<{m}x{k}x{t}>", f"tensor<{k}x{n}x{t}>", f"tensor<{n}x{t}>", \
        f"tensor<{m}x{n}x{t}>"
    tail = {
        "gelu": f'  %y = lamina.gelu %fb {{approximate = "tanh"}} : {H}\n',
        "layernorm": f"  %y = lamina.layernorm %fb scale %b {{axis = -1 : i64, eps = 1.0e-05 : f64}}"
                     f" : ({H}, {B}) -> {H}\n",
        "add": f"  %y = lamina.add %fb, %fb : {H}\n",
    }[epilogue]
    return f"""
func.func @f(%x: {X}, %w: {W}, %b: {B}) -> {H} {{
  %fc = lamina.matmul %x, %w : ({X}, {W}) -> {H}
  %fb = lamina.add %fc, %b : ({H}, {B}) -> {H}
{tail}  func.return %y : {H}
}}"""


def _inputs(gen: np.random.Generator, m: int, k: int, n: int, dtype: type = np.float32,
            integers: bool = False) -> list[np.ndarray]:
    def draw(*shape: int) -> np.ndarray:
        a = gen.integers(-3, 4, shape) if integers else gen.standard_normal(shape)
        return a.astype(dtype)

    return [draw(m, k), draw(k, n), draw(n)]


@pytest.mark.parametrize("epilogue", ["gelu", "layernorm", "add"])
def test_matmul_rooted_kernels_compile_their_epilogue(epilogue: str) -> None:
    """bias + GeLU, bias + LayerNorm (a row reduction over the matmul's columns) and bias +
    doubling: no fallback line, one compiled kernel, the interpreter's outputs."""
    m = _fused(mlp_up(64, 32, 48, epilogue=epilogue))
    args = _inputs(np.random.default_rng(1), 64, 32, 48)
    want, got = _run(m, args, False), _run(m, args, True)
    assert got.explain == [] and got.stats["compiled"]["fallbacks"] == [], got.explain
    c = got.stats["compiled"]
    assert c["kernels_compiled"] + c["kernels_loaded"] + c["kernels_reused"] == 1
    _close(m, got, want)
    assert got.stats["kernels"] == want.stats["kernels"] == 1
    assert got.stats["bytes_moved"] == want.stats["bytes_moved"]


def test_the_matmul_bits_are_the_interpreters() -> None:
    """With small integers every sum is exact: the compiled kernel's result (BLAS once, then
    bias and doubling compiled) equals the interpreter's bit for bit."""
    m = _fused(mlp_up(96, 40, 24, epilogue="add"))
    args = _inputs(np.random.default_rng(2), 96, 40, 24, integers=True)
    want, got = _run(m, args, False), _run(m, args, True)
    assert got.stats["compiled"]["fallbacks"] == []
    assert np.array_equal(got.outputs[0], want.outputs[0])


TWO_RESULTS = """
func.func @f(%x: tensor<32x16xf32>, %w: tensor<16x24xf32>, %b: tensor<24xf32>) -> (tensor<32x24xf32>, tensor<32x24xf32>) {
  %fc = lamina.matmul %x, %w : (tensor<32x16xf32>, tensor<16x24xf32>) -> tensor<32x24xf32>
  %fb = lamina.add %fc, %b : (tensor<32x24xf32>, tensor<24xf32>) -> tensor<32x24xf32>
  %y = lamina.tanh %fb : tensor<32x24xf32>
  func.return %fc, %y : tensor<32x24xf32>, tensor<32x24xf32>
}
"""


@pytest.mark.parametrize("text", [TWO_RESULTS, mlp_up(32, 16, 24)], ids=["root-leaves", "gelu"])
def test_results_never_alias_reused_memory(text: str) -> None:
    """The matmul's intermediate and the results come from the result pool: a second run
    (other inputs) must leave the first run's outputs as they were, also when the matmul's own
    value is one of the kernel's results."""
    m = _fused(text)
    gen = np.random.default_rng(3)
    first = _run(m, _inputs(gen, 32, 16, 24), True)
    kept = [a.copy() for a in first.outputs]
    second = _run(m, _inputs(gen, 32, 16, 24), True)
    assert first.stats["compiled"]["fallbacks"] == []
    for a, b, c in zip(first.outputs, kept, second.outputs, strict=True):
        assert np.array_equal(a, b)
        assert not np.array_equal(a, c)
        assert not np.shares_memory(a, c)


# (rows, k, n): numba compiles a kernel per shape, so `make test` draws from these (all ones;
# small odd sizes; sizes off the tile boundaries; the largest of the long run's range); the long
# run draws any shape too
MATMUL_SHAPES = signature_parts(
    [(1, 1, 1), (7, 3, 5), (33, 17, 65), (70, 40, 70)],
    st.tuples(st.integers(1, 70), st.integers(1, 40), st.integers(1, 70)),
    key="compiled-matmul-shape")


@settings(max_examples=examples(8), deadline=None)
@given(MATMUL_SHAPES[0], MATMUL_SHAPES[1], MATMUL_SHAPES[2],
       st.sampled_from(["gelu", "layernorm", "add"]), st.sampled_from(["f32", "f64"]),
       st.integers(0, 2**31 - 1))
def test_random_matmul_kernels_match_the_interpreter_on_any_thread_count(
        rows: int, k: int, n: int, epilogue: str, t: str, seed: int) -> None:
    """Any shape and float type: the compiled kernel agrees with the interpreter, and 1 and 2
    threads give the same bits (BLAS's result does not depend on how the epilogue's rows are
    shared out, and each epilogue row is computed whole)."""
    m = _fused(mlp_up(rows, k, n, t, epilogue))
    args = _inputs(np.random.default_rng(seed), rows, k, n,
                   dtype=np.float64 if t == "f64" else np.float32)
    want = _run(m, args, False)
    one, two = _run(m, args, True, threads=1), _run(m, args, True, threads=2)
    assert one.stats["compiled"]["fallbacks"] == []
    _close(m, one, want)
    assert np.array_equal(one.outputs[0], two.outputs[0], equal_nan=True)
