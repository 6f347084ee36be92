"""The compiled backend: fused kernels compiled by numba agree with the NumPy interpreter.

- each float32 transcendental of `libm` is within its stated ulp of NumPy over a dense sweep;
- every sample passes `--check` on it, random programs (the fusion property test's generator)
  match the interpreter within tolerance and give the same bits on 1 and 2 threads, and dropout
  masks are the interpreter's bits (also for rows of a tensor past 2**32 elements);
- a second process loads a kernel from the disk cache instead of compiling it, a body the
  generator cannot compile runs on the interpreter with one explain line, and rows whose squares
  overflow are recomputed by the interpreter.

Kernels compile in seconds, so the shapes are small and the programs few; the disk cache
(`LAMINA_CACHE_DIR`, else the user's cache) makes reruns fast.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import lamina.backends.compiled.fused as compiled_exec
import lamina.backends.numpy.fused as fused_exec
import lamina.backends.numpy.tile_threads as tile_exec
import numpy as np
import pytest
from hypothesis import given, settings
from lamina.backends.compare import compare
from lamina.backends.compiled.backend import CompiledBackend
from lamina.backends.compiled.cache import KERNELS
from lamina.backends.compiled.intrinsics import SUM_LEAF, row_sum, sum_error_bound
from lamina.backends.compiled.libm import (
    GELU_TANH_BOUNDS,
    ULP_BOUNDS,
    ULP_BOUNDS_F64,
    ULP_BOUNDS_TRUE,
    exp_f32,
    log_f32,
    tanh_f32,
    tanh_f64,
)
from lamina.backends.interface import RunResult, find_entry
from lamina.backends.numpy.options import NumpyOptions
from lamina.backends.numpy.runner import run_function
from lamina.cli.run import main as run_main
from lamina.ir.core.dtypes import tensor_dtype
from lamina.ir.ops import rng
from lamina.ir.ops.fused import FusedOp
from lamina.ir.text.source import make_context, parse_text, verify
from lamina.passes.pipeline import build_pipeline, run_pipeline
from numba import njit
from strategies import examples
from strategies.programs import programs, random_program
from support import count_calls
from test_samples import ENTRIES

ROOT = Path(__file__).resolve().parent.parent
COMPILED = CompiledBackend.op_runners


def fused(text: str):
    ctx = make_context()
    m = parse_text(text, "t.mlir", ctx)
    verify(m)
    run_pipeline(ctx, m, build_pipeline("fuse-elementwise"))
    verify(m)
    return m


def run_both(m, inputs, options: NumpyOptions | None = None) -> tuple[RunResult, RunResult]:
    """(the interpreter's run, the compiled run) of the same fused program."""
    func = find_entry(m, None)
    return (run_function(func, inputs, options=options),
            run_function(func, inputs, options=options, runners=COMPILED))


def assert_close(m, got: RunResult, want: RunResult) -> None:
    func = find_entry(m, None)
    for i, (a, b, t) in enumerate(zip(got.outputs, want.outputs, func.function_type.outputs.data,
                                      strict=True)):
        d = compare(f"out{i}", tensor_dtype(t), a, b)
        assert d.ok, d.line() + "\n" + str(m)


# ---- transcendentals: max ulp against NumPy over dense sweeps -------------------------------------

def _ordered(a: np.ndarray) -> np.ndarray:
    """float32 bits as integers in the order of the values (so ulp distance is a difference)."""
    i = a.view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def ulp_distance(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    d = np.abs(_ordered(got) - _ordered(want))
    d[np.isnan(got) & np.isnan(want)] = 0
    return d


@njit(error_model="numpy")
def _apply(kind: int, x: np.ndarray, out: np.ndarray) -> None:
    for i in range(x.size):
        v = x[i]
        out[i] = exp_f32(v) if kind == 0 else (log_f32(v) if kind == 1 else tanh_f32(v))


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754944e-38,
                     3.4028235e38, -3.4028235e38, 1.0, -1.0, 88.72283, 88.7229, -87.33655,
                     -103.97208, -103.9721], dtype=np.float32)


def _sweep(fn: np.ufunc) -> np.ndarray:
    if fn is np.exp:          # every 2**-15 of [-104, 89]: overflow, subnormal results, 0
        xs = np.arange(-104 * 2**15, 89 * 2**15, dtype=np.int64).astype(np.float32) / 2**15
    elif fn is np.log:         # 4096 mantissas in every binade, subnormals included, and < 0
        e = np.arange(-149, 128, dtype=np.float32)
        m = np.linspace(1.0, 2.0, 4096, endpoint=False, dtype=np.float32)
        xs = (np.exp2(e)[:, None] * m[None, :]).ravel()
        xs = np.concatenate([xs, -xs[::97]])
    else:                      # every 2**-17 of [-12, 12], and small values down to subnormal
        xs = np.arange(-12 * 2**17, 12 * 2**17, dtype=np.int64).astype(np.float32) / 2**17
        tiny = np.exp2(np.linspace(-149, -1, 20000, dtype=np.float32))
        xs = np.concatenate([xs, tiny, -tiny])
    return np.concatenate([xs.astype(np.float32), SPECIALS])


LIBM = {np.exp: (0, exp_f32), np.log: (1, log_f32), np.tanh: (2, tanh_f32)}


def test_every_stated_bound_is_tested() -> None:
    assert set(ULP_BOUNDS) == set(ULP_BOUNDS_TRUE) == set(LIBM)


@pytest.mark.parametrize("fn", list(LIBM), ids=[f.__name__ for f in LIBM])
def test_transcendental_within_stated_ulps(fn: np.ufunc) -> None:
    """`libm`'s float32 function over a dense sweep (subnormals, overflow and underflow
    included): within its stated ulp of NumPy's and of the correctly rounded result (NumPy's
    float64 function rounded), and exactly NumPy's results at 0, -0, infinities, NaN and
    wherever NumPy's result is not finite."""
    x = _sweep(fn)
    out = np.empty_like(x)
    _apply(LIBM[fn][0], x, out)
    with np.errstate(all="ignore"):
        want = fn(x)
        rounded = fn(x.astype(np.float64)).astype(np.float32)
    for ref, bound in ((want, ULP_BOUNDS[fn]), (rounded, ULP_BOUNDS_TRUE[fn])):
        d = ulp_distance(out, ref)
        worst = int(d.argmax())
        assert d.max() <= bound, (fn.__name__, x[worst], out[worst], ref[worst], d.max())
    special = ~np.isfinite(x) | (x == 0) | ~np.isfinite(want)
    assert np.array_equal(out[special], want[special], equal_nan=True)
    signed = special & ~np.isnan(want)
    assert np.array_equal(np.signbit(out[signed]), np.signbit(want[signed]))


@njit(error_model="numpy")
def _tanh64(x: np.ndarray, out: np.ndarray) -> None:
    for i in range(x.size):
        out[i] = tanh_f64(x[i])


def _ulp64(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    def ordered(a: np.ndarray) -> np.ndarray:
        i = a.view(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFFFFFFFFFF), i)
    d = np.abs(ordered(got) - ordered(want))     # < 2**63: both are tanh values of one sign
    d[np.isnan(got) & np.isnan(want)] = 0
    return d


def test_float64_tanh_within_stated_ulps() -> None:
    """float64 tanh (branch-free, so tanh-GeLU vectorizes in float64 too) over a dense sweep:
    within its stated ulp of NumPy's, and NumPy's results at 0, -0, infinities and NaN."""
    tiny = np.exp2(np.linspace(-1074, -1, 20000))
    x = np.concatenate([np.arange(-21 * 2**15, 21 * 2**15) / 2**15,
                        np.linspace(-0.4, 0.4, 800_001), tiny, -tiny,
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 19.06, 19.07]])
    out = np.empty_like(x)
    _tanh64(x, out)
    want = np.tanh(x)
    d = _ulp64(out, want)
    worst = int(d.argmax())
    assert d.max() <= ULP_BOUNDS_F64[np.tanh], (x[worst], out[worst], want[worst], d.max())
    special = ~np.isfinite(x) | (x == 0)
    assert np.array_equal(out[special], want[special], equal_nan=True)
    assert np.array_equal(np.signbit(out[special]), np.signbit(want[special]))


GELU = """
func.func @f(%x: tensor<{r}x4096xf32>) -> tensor<{r}x4096xf32> {{
  %g = lamina.gelu %x {{approximate = "{approx}"}} : tensor<{r}x4096xf32>
  %n = lamina.neg %g : tensor<{r}x4096xf32>
  func.return %n : tensor<{r}x4096xf32>
}}
"""


@pytest.mark.parametrize("approx", ["tanh", "none"])
def test_gelu_forms_within_stated_bounds(approx: str) -> None:
    """Compiled GeLU (in a fused kernel) against the interpreter's over every 2**-14 of [-16, 16]
    and the special values: tanh-GeLU within `GELU_TANH_BOUNDS` (absolute where 1 + tanh
    cancels), erf-GeLU with NumPy's bits; NaN and infinities where NumPy has them."""
    sweep = np.arange(-16 * 2**14, 16 * 2**14, dtype=np.int64).astype(np.float32) / 2**14
    x = np.concatenate([sweep, np.resize(SPECIALS, 4096)]).reshape(-1, 4096)
    m = fused(GELU.format(r=x.shape[0], approx=approx))
    want, got = run_both(m, [x])
    assert got.stats["compiled"]["fallbacks"] == []
    a, b, xs = got.outputs[0].ravel(), want.outputs[0].ravel(), x.ravel()
    finite = np.isfinite(b)
    assert np.array_equal(a[~finite], b[~finite], equal_nan=True)
    a, b, xs = a[finite], b[finite], xs[finite]
    if approx == "none":
        assert np.array_equal(a, b)
        return
    k, ulps, above = GELU_TANH_BOUNDS
    err = np.abs(a.astype(np.float64) - b)
    assert np.all(err <= k * 2.0**-24 * np.maximum(np.abs(xs), np.abs(b))), float(err.max())
    assert ulp_distance(a[xs >= above], b[xs >= above]).max() <= ulps


VECTOR_BODY = """
func.func @f(%x: tensor<4x256x{t}>) -> tensor<4x256x{t}> {{
  %n = lamina.layernorm %x {{axis = -1 : i64, eps = 1.0e-05 : f64}} : tensor<4x256x{t}>
  %g = lamina.gelu %n {{approximate = "tanh"}} : tensor<4x256x{t}>
  %y = lamina.dropout %g {{rate = 0.25 : f64, seed = 5 : i64}} : tensor<4x256x{t}>
  func.return %y : tensor<4x256x{t}>
}}
"""


@pytest.mark.parametrize("t", ["f32", "f64"])
def test_tanh_gelu_kernels_vectorize(t: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LayerNorm + tanh-GeLU + dropout compiles to vector code: LLVM's optimized IR of the
    kernel divides whole vectors (the normalization and tanh's rational) and calls no scalar
    libm tanh, which would keep the element loop scalar (float64 tanh did, before it had a form
    of its own). A fresh cache directory, since numba cannot show IR of code loaded from disk."""
    monkeypatch.setenv("LAMINA_CACHE_DIR", str(tmp_path))
    m = fused(VECTOR_BODY.format(t=t))
    fop = next(op for op in find_entry(m, None).walk() if isinstance(op, FusedOp))
    x = np.ones((4, 256), dtype=np.float32 if t == "f32" else np.float64)
    call = compiled_exec.prepare(fused_exec.plan_fused(fop, [x], min_rows=1))
    assert call.kernel.compiled
    module = sys.modules["lamina_kernel_" + call.kernel.name.removeprefix("k")]
    ir = "\n".join(module.kernel.inspect_llvm().values())
    elem = "float" if t == "f32" else "double"
    assert re.search(rf"fdiv [a-z ]*<\d+ x {elem}>", ir), "no vector division in the kernel"
    assert not re.search(r"@tanhf?\b", ir), "a scalar libm tanh call"


# ---- row sums: the stated order and its error bound -----------------------------------------------

@njit(error_model="numpy")
def _row_sums(x: np.ndarray, n: int, out: np.ndarray) -> None:
    for r in range(x.shape[0]):
        out[r] = row_sum(x[r], 0, n)


def _documented_sum(x: np.ndarray) -> np.floating:
    """`intrinsics.row_sum`'s order, written from its docstring in NumPy scalar steps."""
    n = x.size
    if n > SUM_LEAF:
        subtrees: list[list] = []        # [sum, blocks]
        for b0 in range(0, n, SUM_LEAF):
            subtrees.append([_documented_sum(x[b0:b0 + SUM_LEAF]), 1])
            while len(subtrees) >= 2 and subtrees[-2][1] == subtrees[-1][1]:
                newer = subtrees.pop()
                subtrees[-1] = [subtrees[-1][0] + newer[0], 2 * newer[1]]
        res = subtrees[-1][0]
        for older in reversed(subtrees[:-1]):
            res = older[0] + res
        return res
    full = n - n % 64
    if full == 0:
        res = x[0]
        for v in x[1:]:
            res = res + v
        return res
    parts = x[:full].reshape(-1, 64)
    acc = parts[0].copy()
    for row in parts[1:]:
        acc = acc + row                          # lane by lane, in increasing i
    vec = (acc[0:16] + acc[16:32]) + (acc[32:48] + acc[48:64])
    lanes = list(vec)
    while len(lanes) > 1:
        lanes = [lanes[k] + lanes[k + 1] for k in range(0, len(lanes), 2)]
    res = lanes[0]
    for v in x[full:]:
        res = res + v
    return res


SUM_LENGTHS = [1, 2, 7, 63, 64, 65, 127, 128, 1000, 4095, 4096, 4097, 4160, 10000, 20481,
               70001]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", SUM_LENGTHS)
def test_row_sum_has_its_documented_order_and_bound(n: int, dtype: type) -> None:
    """A row's sum is the documented order's bits (64 partial sums, split past SUM_LEAF), is
    within k(n) u sum|x| of the exact sum, and differs from NumPy's pairwise sum (the
    interpreter's) by no more than both orders' bounds; rows of mixed signs and magnitudes."""
    gen = np.random.default_rng(n)
    rows = 3
    x = (gen.standard_normal((rows, n)) * np.exp2(gen.integers(-8, 9, (rows, n)))).astype(dtype)
    x[1] = np.abs(x[1])        # a row without cancellation
    out = np.empty(rows, dtype=dtype)
    _row_sums(x, n, out)
    u = float(np.finfo(dtype).eps) / 2
    numpy_k = 23 + max(0, int(np.ceil(np.log2(max(n, 1) / 128))))
    for r in range(rows):
        want = _documented_sum(x[r])
        assert out[r] == want, (r, out[r], want)
        exact = np.sum(x[r].astype(np.longdouble))
        scale = float(np.sum(np.abs(x[r].astype(np.float64))))
        assert abs(float(out[r]) - float(exact)) <= sum_error_bound(n) * u * scale
        assert abs(float(out[r]) - float(x[r].sum())) <= (sum_error_bound(n) + numpy_k) * u * scale


# ---- samples and random programs -------------------------------------------------------------------

def _placed(path: str) -> bool:
    return "lamina.mesh" in Path(path).read_text(encoding="utf-8")


@pytest.mark.parametrize("path, entry", ENTRIES,
                         ids=[f"{os.path.basename(p)}@{e}" for p, e in ENTRIES])
def test_sample_checks_on_compiled_backend(path: str, entry: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """`lamina-run SAMPLE --backend compiled -p fuse-elementwise --check --explain` exits 0 on
    every sample function (placed ones propagated and given collectives first, as in
    test_samples), and every fused kernel of an unplaced one was compiled (no explain line)
    unless it is one the generator documents it cannot compile: one writing its outputs through
    layout ops (a kernel rooted at a matmul compiles its epilogue after one BLAS call). A placed
    program runs every device on the interpreter, its fused kernels included."""
    pipeline = ("propagate-sharding,insert-collectives," if _placed(path) else "") + \
        "fuse-elementwise"
    rc = run_main([path, "--entry", entry, "-p", pipeline, "--backend", "compiled",
                   "--check", "--explain", "--stats-json", "-"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    documented = ("through layout ops",)
    lines = [ln for ln in err.splitlines() if "[backend compiled]" in ln]
    assert all(any(d in ln for d in documented) for ln in lines), err
    stats = json.loads(out[out.index("{"):])
    if "fused_ops_executed" in stats and not _placed(path):   # each fused kernel compiled
        c = stats["compiled"]
        assert all(any(d in f for d in documented) for f in c["fallbacks"]), c["fallbacks"]
        assert len(c["fallbacks"]) == len(lines) and c["rows_to_interpreter"] == 0
        assert c["kernels_compiled"] + c["kernels_loaded"] + c["kernels_reused"] + \
            len(c["fallbacks"]) >= 1


def _property(prog, threads: bool) -> None:
    m = fused(prog.text)
    want, got = run_both(m, prog.inputs)
    assert_close(m, got, want)
    # every kernel compiles, except those the backend documents it falls back on, each with its
    # explain line: a composite normalizing over only part of its group's row (softmax along
    # axis 0 in a group whose row is the whole tensor) and one writing outputs through layout ops
    # (a kernel rooted at a matmul runs its BLAS call, then compiles its epilogue)
    documented = ("a reduction over dims", "through layout ops")
    assert all(any(d in line for d in documented) for line in got.explain), got.explain
    assert len(got.stats.get("compiled", {"fallbacks": []})["fallbacks"]) == len(got.explain)
    if threads:   # more chunks than rows per chunk, on 2 threads: the same bits
        old = tile_exec.PARALLEL_MIN_ELEMENTS, compiled_exec.CHUNK_ELEMENTS
        tile_exec.PARALLEL_MIN_ELEMENTS, compiled_exec.CHUNK_ELEMENTS = 1, 1
        try:
            two = run_function(find_entry(m, None), prog.inputs, runners=COMPILED,
                               options=NumpyOptions(threads=2))
        finally:
            tile_exec.PARALLEL_MIN_ELEMENTS, compiled_exec.CHUNK_ELEMENTS = old
        for a, b in zip(two.outputs, got.outputs, strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


@settings(max_examples=examples(5))
@given(programs(min_ops=2, max_ops=14, dtypes=("f32", "f64", "f16", "bf16")))
def test_random_programs_match_the_interpreter(prog) -> None:
    """The fusion property test's programs (every op family, four float types): the compiled
    run of the fused program matches the interpreter's within tolerance, on 1 and 2 threads."""
    _property(prog, threads=True)


@pytest.mark.parametrize("seed", range(3))
def test_larger_random_programs_match_the_interpreter(seed: int) -> None:
    _property(random_program(seed + 65, 60), threads=False)


# ---- dropout masks -------------------------------------------------------------------------------

DROPOUT = """
func.func @f(%x: tensor<{r}x{c}x{t}>, %s: tensor<i64>) -> (tensor<{r}x{c}x{t}>, tensor<{r}x{c}x{t}>) {{
  %a = lamina.dropout %x {{rate = 0.3 : f64, seed = 7 : i64}} : tensor<{r}x{c}x{t}>
  %b = lamina.dropout %x seed %s {{rate = 0.5 : f64}} : (tensor<{r}x{c}x{t}>, tensor<i64>) -> tensor<{r}x{c}x{t}>
  %n = lamina.neg %b : tensor<{r}x{c}x{t}>
  func.return %a, %n : tensor<{r}x{c}x{t}>, tensor<{r}x{c}x{t}>
}}
"""


@pytest.mark.parametrize("r, c, t", [(37, 100, "f32"), (5, 64, "f16"), (16, 9, "f64")])
def test_dropout_masks_are_the_interpreters_bits(r: int, c: int, t: str) -> None:
    m = fused(DROPOUT.format(r=r, c=c, t=t))
    x = np.ones((r, c), dtype=np.float16 if t == "f16" else np.float64 if t == "f64" else np.float32)
    want, got = run_both(m, [x, np.array(-123456789012, dtype=np.int64)])
    for a, b in zip(got.outputs, want.outputs, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert 0 < np.count_nonzero(got.outputs[0] == 0) < x.size


BIASED_DROPOUT = """
func.func @f(%x: tensor<4x256xf32>, %b: tensor<256xf32>) -> tensor<4x256xf32> {
  %y = lamina.add %x, %b : (tensor<4x256xf32>, tensor<256xf32>) -> tensor<4x256xf32>
  %d = lamina.dropout %y {rate = 0.3 : f64, seed = 7 : i64} : tensor<4x256xf32>
  func.return %d : tensor<4x256xf32>
}
"""


def test_dropout_rows_past_two_to_the_32() -> None:
    """A kernel's rows placed at global index 2**32 - 300 (as rows of a huge tensor would be):
    the masks of the rows below and above the boundary are `rng`'s, and the row that crosses
    it is left to the interpreter (flagged)."""
    m = fused(BIASED_DROPOUT)
    fop = next(op for op in find_entry(m, None).walk() if isinstance(op, FusedOp))
    x, b = np.ones((4, 256), dtype=np.float32), np.zeros(256, dtype=np.float32)
    plan = fused_exec.plan_fused(fop, [x, b], min_rows=1)
    assert plan.space.rows == 4
    base = 2**32 - 300
    flags = compiled_exec.prepare(plan).run(NumpyOptions(), base)
    assert flags.tolist() == [0, 1, 0, 0]
    keep = rng.keep_mask(7, 0.3, (2**33,), (base,), (4 * 256,)).reshape(4, 256)
    got = plan.steps[-1].out2d
    assert got is not None
    for row in (0, 2, 3):
        assert np.array_equal(got[row] != 0, keep[row]), row


PER_ROW_DROPOUT = """
func.func @f(%x: tensor<300x8xf32>) -> tensor<300xf32> {
  %n = lamina.neg %x : tensor<300x8xf32>
  %s = lamina.reduce_sum %n {axes = array<i64: -1>, keepdims = false} : (tensor<300x8xf32>) -> tensor<300xf32>
  %d = lamina.dropout %s {rate = 0.3 : f64, seed = 7 : i64} : tensor<300xf32>
  func.return %d : tensor<300xf32>
}
"""


def test_dropout_of_a_per_row_value_compiles_with_the_interpreters_mask() -> None:
    """Dropout after a row reduction in one group draws one mask bit per row, from the row's
    own index (found by the property test: it used to fall back to the tile loop)."""
    m = fused(PER_ROW_DROPOUT)
    want, got = run_both(m, [np.ones((300, 8), dtype=np.float32)])   # sums exact in any order
    assert got.explain == [] and got.stats["compiled"]["fallbacks"] == []
    assert np.array_equal(got.outputs[0], want.outputs[0])
    assert 0 < np.count_nonzero(got.outputs[0] == 0) < 300


# ---- the cache, fallbacks and rescued rows --------------------------------------------------------

def _run_cli(args: list[str], env: dict[str, str]) -> dict:
    r = subprocess.run([sys.executable, "-m", "lamina.cli.run", *args, "--stats-json", "-"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout[r.stdout.index("{"):])


LONG_ROWS = """
func.func @long_rows(%x: tensor<3x9000xf32>) -> tensor<3x9000xf32> {
  %n = lamina.layernorm %x {axis = -1 : i64, eps = 1.0e-05 : f64} : tensor<3x9000xf32>
  %y = lamina.gelu %n {approximate = "tanh"} : tensor<3x9000xf32>
  func.return %y : tensor<3x9000xf32>
}
"""


@pytest.mark.parametrize("program", ["sample", "long rows"])
def test_a_second_process_loads_the_kernel_from_disk(tmp_path: Path, program: str) -> None:
    """Compile time is in --stats-json, and a second run of the same program compiles nothing:
    numba loads the machine code cached next to the kernel's source. Rows longer than
    SUM_LEAF sum through a called (not inlined) function, which a loaded kernel must reach
    (a recursive one crashed the second process)."""
    env = {**os.environ, "LAMINA_CACHE_DIR": str(tmp_path / "cache")}
    args = ["samples/layernorm_gelu_dropout.mlir", "--entry", "ln_gelu_dropout_small"]
    if program == "long rows":
        path = tmp_path / "long.mlir"
        path.write_text(LONG_ROWS, encoding="utf-8")
        args = [str(path), "--check"]
    args += ["-p", "fuse-elementwise", "--backend", "compiled"]
    first = _run_cli(args, env)["compiled"]
    assert first["kernels_compiled"] == 1 and first["compile_seconds"] > 0
    second = _run_cli(args, env)["compiled"]
    assert second["kernels_compiled"] == 0 and second["kernels_loaded"] == 1
    assert len(list(tmp_path.glob("cache/kernels-*/k*.py"))) == 1


SOFTMAX_MIDDLE = """
func.func @f(%x: tensor<4x8x16xf32>) -> tensor<4x8x16xf32> {
  %e = lamina.exp %x : tensor<4x8x16xf32>
  %s = lamina.softmax %e {axis = 1 : i64} : tensor<4x8x16xf32>
  func.return %s : tensor<4x8x16xf32>
}
"""


def test_a_body_the_generator_cannot_compile_falls_back_with_one_line(tmp_path: Path) -> None:
    """softmax over a middle dim reduces part of a row: the kernel runs on the NumPy tile loop,
    one explain line names the op and the reason, and the outputs are the interpreter's."""
    m = fused(SOFTMAX_MIDDLE)
    x = np.random.default_rng(0).standard_normal((4, 8, 16)).astype(np.float32)
    want, got = run_both(m, [x])
    assert np.array_equal(got.outputs[0], want.outputs[0])
    assert len(got.explain) == 1, got.explain
    line = got.explain[0]
    assert line.startswith("[backend compiled] t.mlir:3:3: lamina.fused not compiled: "
                           "lamina.softmax: a reduction over dims [1]"), line
    assert got.stats["compiled"]["fallbacks"] == [line.split("not compiled: ")[1].split(";")[0]]
    path = tmp_path / "p.mlir"
    path.write_text(SOFTMAX_MIDDLE, encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "lamina.cli.run", str(path), "-p",
                        "fuse-elementwise", "--backend", "compiled", "--check", "--explain"],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    assert [x for x in r.stderr.splitlines() if x.startswith("[backend")] == \
        [line.replace("t.mlir", str(path))]


LAYERNORM = """
func.func @f(%x: tensor<6x32xf32>, %g: tensor<32xf32>) -> tensor<6x32xf32> {
  %n = lamina.layernorm %x scale %g {axis = -1 : i64, eps = 1.0e-05 : f64} : (tensor<6x32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
  %y = lamina.gelu %n : tensor<6x32xf32>
  func.return %y : tensor<6x32xf32>
}
"""


def test_rows_whose_squares_overflow_go_to_the_interpreter() -> None:
    m = fused(LAYERNORM)
    gen = np.random.default_rng(1)
    x = gen.standard_normal((6, 32)).astype(np.float32)
    x[2, ::2] = 3e30
    x[2, 1::2] = -3e30
    want, got = run_both(m, [x, gen.standard_normal(32).astype(np.float32)])
    assert got.stats["compiled"]["rows_to_interpreter"] == 1
    assert np.isfinite(got.outputs[0]).all()
    assert np.array_equal(got.outputs[0][2], want.outputs[0][2])
    assert_close(m, got, want)


# ---- rows of one element (found by the property test) -----------------------------------------

ONE_ELEMENT_ROWS = {
    "softmax over a size-1 dim": ("""
func.func @f(%x: tensor<1x1x1xf32>) -> tensor<1x1x1xf32> {
  %n = lamina.neg %x : tensor<1x1x1xf32>
  %s = lamina.softmax %n {axis = 0 : i64} : tensor<1x1x1xf32>
  func.return %s : tensor<1x1x1xf32>
}
""", (1, 1, 1)),
    "a sum over one element": ("""
func.func @f(%x: tensor<1xf32>) -> tensor<1xf32> {
  %s = lamina.reduce_sum %x {axes = array<i64: -1>, keepdims = true} : tensor<1xf32>
  %n = lamina.neg %s : tensor<1xf32>
  func.return %n : tensor<1xf32>
}
""", (1,)),
    "softmax over the size-1 dim of a tail [1, 3]": ("""
func.func @f(%x: tensor<1x1x3xf32>) -> tensor<1x1x3xf32> {
  %n = lamina.neg %x : tensor<1x1x3xf32>
  %s = lamina.softmax %n {axis = 0 : i64} : tensor<1x1x3xf32>
  %m = lamina.neg %s : tensor<1x1x3xf32>
  func.return %m : tensor<1x1x3xf32>
}
""", (1, 1, 3)),
    "a sum over the size-1 dim of a tail [3, 1]": ("""
func.func @f(%x: tensor<2x3x1xf32>) -> tensor<2x3x1xf32> {
  %e = lamina.exp %x : tensor<2x3x1xf32>
  %s = lamina.softmax %e {axis = 2 : i64} : tensor<2x3x1xf32>
  func.return %s : tensor<2x3x1xf32>
}
""", (2, 3, 1)),
}


@pytest.mark.parametrize("name", list(ONE_ELEMENT_ROWS))
def test_rows_of_one_element_compile(name: str) -> None:
    """A reduction whose dims hold one element is that element, one over size-1 dims and the
    rest of a row reduces the row, and a row of one element has no inner loop: all compile and
    match the interpreter."""
    text, shape = ONE_ELEMENT_ROWS[name]
    m = fused(text)
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    want, got = run_both(m, [x])
    assert got.stats["compiled"]["fallbacks"] == [], got.explain
    assert_close(m, got, want)


CHAIN = """
func.func @f(%x: tensor<6x40x32xf32>, %y: tensor<6x40x32xf32>) -> tensor<6x40x32xf32> {
  %a = lamina.mul %x, %y : tensor<6x40x32xf32>
  %t = lamina.tanh %a : tensor<6x40x32xf32>
  %d = lamina.dropout %t {rate = 0.3 : f64, seed = 7 : i64} : tensor<6x40x32xf32>
  func.return %d : tensor<6x40x32xf32>
}
"""


def test_an_elementwise_group_gets_long_rows() -> None:
    """Inputs that span the whole domain give the interpreter rows of one element; the kernel
    takes trailing dims as its row instead (40 x 32 = 1280 >= ROW_MIN elements), with the
    interpreter's results and dropout bits."""
    m = fused(CHAIN)
    fop = next(op for op in find_entry(m, None).walk() if isinstance(op, FusedOp))
    gen = np.random.default_rng(5)
    x, y = (gen.standard_normal((6, 40, 32)).astype(np.float32) for _ in range(2))
    plan = fused_exec.plan_fused(fop, [x, y], min_rows=1)
    assert plan.space.tail == ()
    call = compiled_exec.prepare(plan)
    assert (call.rows, call.T, call.per_row) == (6, 1280, 1280)
    want, got = run_both(m, [x, y])
    assert_close(m, got, want)
    assert np.array_equal(got.outputs[0] == 0, want.outputs[0] == 0)


# ---- a compiled program plans each kernel once (`lamina.backends.compiled.replay`) ------------

REPLAYED = """
func.func @f(%x: tensor<16x64x{t}>, %w: tensor<64x64x{t}>, %b: tensor<64x{t}>, %s: tensor<64x{t}>, %v: tensor<8x32x{t}>) -> (tensor<16x64x{t}>, tensor<16x64x{t}>, tensor<8x32x{t}>) {{
  %h = lamina.matmul %x, %w : (tensor<16x64x{t}>, tensor<64x64x{t}>) -> tensor<16x64x{t}>
  %hb = lamina.add %h, %b : (tensor<16x64x{t}>, tensor<64x{t}>) -> tensor<16x64x{t}>
  %n = lamina.layernorm %hb {{axis = -1 : i64, eps = 1.0e-05 : f64}} : tensor<16x64x{t}>
  %g = lamina.gelu %n {{approximate = "tanh"}} : tensor<16x64x{t}>
  %d = lamina.dropout %g {{rate = 0.3 : f64, seed = 7 : i64}} : tensor<16x64x{t}>
  %bs = lamina.broadcast_in_dim %s {{broadcast_dimensions = array<i64: 1>}} : (tensor<64x{t}>) -> tensor<16x64x{t}>
  %y = lamina.mul %d, %bs : tensor<16x64x{t}>
  %z = lamina.tanh %x : tensor<16x64x{t}>
  %e = lamina.add %z, %bs : tensor<16x64x{t}>
  %u = lamina.exp %v : tensor<8x32x{t}>
  %uv = lamina.mul %u, %v : tensor<8x32x{t}>
  func.return %y, %e, %uv : tensor<16x64x{t}>, tensor<16x64x{t}>, tensor<8x32x{t}>
}}
"""


def _replay_inputs(gen: np.random.Generator, t: str, strided: bool) -> list[np.ndarray]:
    """Fresh inputs; `strided` gives `x`, `w` and `v` other layouts (a column slice, transposes)."""
    dt = np.float64 if t == "f64" else np.float32
    x = gen.standard_normal((16, 128 if strided else 64)).astype(dt)
    w = gen.standard_normal((64, 64)).astype(dt) / 8
    v = gen.standard_normal((32, 8) if strided else (8, 32)).astype(dt)
    return [x[:, ::2] if strided else x, w.T if strided else w,
            gen.standard_normal(64).astype(dt), gen.standard_normal(64).astype(dt),
            v.T if strided else v]



@pytest.mark.parametrize("t", ["f32", "f64"])
def test_a_program_called_many_times_gives_the_full_runs_bits(t: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`lamina.compile` once, then calls on fresh inputs, contiguous and not: every call's
    outputs are a full run's (`run_function` with the compiled runners) bit for bit, for a kernel
    rooted at a matmul, with dropout and a per-kernel value (a broadcast of an input), and a loop.
    The contiguous layout was planned at compile time (the checked call on zeros); a strided
    layout's first call runs the full way, later ones replay it (a new layout is kept too)."""
    import lamina
    import lamina.backends.compiled.replay as replay

    m = fused(REPLAYED.format(t=t))
    assert [o.fusion_kind for o in m.walk() if isinstance(o, FusedOp)] == ["matmul", "loop"]
    func = find_entry(m, None)
    exe = lamina.compile(m, backend="compiled")
    gen = np.random.default_rng(11)
    full = count_calls(monkeypatch, replay, "run_full")
    layouts = [False, False, False, True, False, True, True, False]
    for i, strided in enumerate(layouts):
        xs = _replay_inputs(gen, t, strided)
        before = len(full)
        got = list(exe(xs).outputs.values())
        ran_full = len(full) - before
        want = run_function(func, xs, runners=COMPILED).outputs
        assert ran_full == (2 if strided and strided not in layouts[:i] else 0), i
        for a, b in zip(got, want, strict=True):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), i
        assert 0 < np.count_nonzero(got[0] == 0) < got[0].size


def test_a_program_plans_and_generates_each_kernel_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over 100 calls of a compiled program, each fused kernel is planned, traced and looked up
    in the kernel cache once (at the checked call `lamina.compile` makes on zeros), and the
    statistics are that call's."""
    import lamina

    m = fused(REPLAYED.format(t="f32"))
    plans = count_calls(monkeypatch, compiled_exec, "plan_fused")
    gets = count_calls(monkeypatch, KERNELS, "get")
    exe = lamina.compile(m, backend="compiled")
    assert (len(plans), len(gets)) == (2, 2)
    gen = np.random.default_rng(2)
    first = stats = exe(_replay_inputs(gen, "f32", False)).stats
    for _ in range(99):
        stats = exe(_replay_inputs(gen, "f32", False)).stats
    assert (len(plans), len(gets)) == (2, 2)
    assert stats is not first
    first.pop("run_seconds")
    stats.pop("run_seconds")
    assert stats == first and first["kernels"] >= 2


def test_a_program_call_with_flagged_rows_runs_them_the_full_way(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A later call whose kernel flags a row (its squares overflow) is run again the full way,
    which recomputes that row with the interpreter: the full run's bits."""
    import lamina
    import lamina.backends.compiled.replay as replay

    m = fused(LAYERNORM)
    func = find_entry(m, None)
    exe = lamina.compile(m, backend="compiled")
    gen = np.random.default_rng(4)
    full = count_calls(monkeypatch, replay, "run_full")
    for huge in (False, False, True, False):
        before = len(full)
        x = gen.standard_normal((6, 32)).astype(np.float32)
        if huge:
            x[2, ::2], x[2, 1::2] = 3e30, -3e30
        xs = [x, gen.standard_normal(32).astype(np.float32)]
        got = exe(xs).outputs["out0"]
        ran_full = len(full) - before
        want = run_function(func, xs, runners=COMPILED).outputs[0]
        assert ran_full == (1 if huge else 0)   # the layout was planned at compile time
        assert got.tobytes() == want.tobytes()
        assert np.isfinite(got).all()


ROPE = """
func.func @f(%x: tensor<4x16x8xT>, %pos: tensor<16x8xT>) -> tensor<4x16x8xT> {
  %c = lamina.cos %pos : tensor<16x8xT>
  %s = lamina.sin %pos : tensor<16x8xT>
  %xc = lamina.mul %x, %c : (tensor<4x16x8xT>, tensor<16x8xT>) -> tensor<4x16x8xT>
  %xs = lamina.mul %x, %s : (tensor<4x16x8xT>, tensor<16x8xT>) -> tensor<4x16x8xT>
  %r = lamina.add %xc, %xs : tensor<4x16x8xT>
  func.return %r : tensor<4x16x8xT>
}
"""


@pytest.mark.parametrize("t", ["f32", "f64"])
def test_rope_sin_cos_fuse_and_compile(t: str) -> None:
    """RoPE's x cos(p) + x sin(p) is one elementwise group whose kernel calls sin and cos (their
    rows' scalar forms): it compiles without a fallback and matches the interpreter."""
    m = fused(ROPE.replace("xT>", f"x{t}>"))
    assert sum(isinstance(op, FusedOp) for op in find_entry(m, None).walk()) == 1, str(m)
    gen = np.random.default_rng(5)
    npdt = np.float32 if t == "f32" else np.float64
    x = gen.standard_normal((4, 16, 8)).astype(npdt)
    pos = (gen.standard_normal((16, 8)) * 20).astype(npdt)
    want, got = run_both(m, [x, pos])
    assert got.stats["compiled"]["fallbacks"] == [], got.explain
    assert_close(m, got, want)
