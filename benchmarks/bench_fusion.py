"""fuse-elementwise benchmark: unfused vs fused (NumPy tiles, compiled, IREE) vs jax.jit vs the floors.

    .venv/bin/python benchmarks/bench_fusion.py [--repeats 5] [--quick] [--only W1,GPT2]

Workloads (f32): W1 the seed example y = dropout(gelu_tanh(layernorm(x) * g + b), 0.1) at
[8192, 4096]; W2 an 8-op elementwise chain of the same size; W3 the GPT-2 MLP block
h = gelu_tanh(x @ W1 + b1) @ W2 + b2 (2048 x 1024 x 4096); GPT2 a whole pre-LN GPT-2 block at
the anchor sizes of `shared/references.md` (B=2, T=1024, D=1024, 16 heads, MLP 4096; the causal
mask built in the program, the two residual dropouts as 0/1 mask inputs). jax.jit runs the same
math, dropout included (the same counter-based hash, in uint32 jnp ops). Two floors, and the
larger is the floor the ratios use: the memory floor, compulsory bytes (each input read once, each
output written once) / copy bandwidth measured with np.copyto on 256 MiB; the compute floor, the
workload's FLOPs as the op table counts them (`OpInfo.flops`, the cost model's count: the unfused
run's `flops` stat, every matmul included, attention's two) / the BLAS rate, a 2048^3 f32
np.matmul timed in the same run (NumPy's BLAS, not the machine's peak: jax.jit's own matmuls may
beat it). W1 and W2 sit on the memory floor; W3 and the GPT-2 block are matmuls, whose compute
floor is about 100x their memory floor. Then the pass's own time on generated 10k / 50k-op
programs next to xDSL's parse time.

Each cell is the median of `--repeats` runs with their range (min-max) after it: the machine is
shared, so the spread says how far one figure can be trusted. "fused" (after
`fuse-attention,fuse-elementwise`: only the GPT-2 block has an attention) is the interpreter's
default: the tile loop on one thread per core (`fused.thread_count()`), as jax.jit uses every
core; "fused x1" is the same loop on one thread, "unfused" whole-array NumPy (one thread) and
"compiled" the fused program on `--backend compiled` (every fused kernel one numba loop, on the
same threads as "fused"; its kernels are compiled, or loaded from the disk cache, in the warm-up
run, and "compile" is that run's `compile_seconds`). The memory floor uses the faster of the
1-thread and all-thread copy bandwidths; the BLAS rate is NumPy's BLAS on its own threads (all
cores). Ratios are of medians. Every timed run of a workload calls the same function on the same
inputs, so from the second run on its fused kernels' large results come back from
`backends/numpy/result_pool.py` already paged in: the figures are a steady state a first call
does not see (a fresh f32[8192,4096] result costs 23-29 ms of page faults on the 2-core
machine). W1 and W2 also check that the fused outputs equal the unfused ones bit for bit, and
every workload that the compiled outputs are within `lamina.backends.compare`'s tolerances of the
fused NumPy ones. "iree" is the same fused program on `--backend iree` (the `-t linalg` export
compiled by IREE for the host CPU, on IREE's own threads; "iree compile" is its compile, or disk
cache load, in `lamina.compile`, untimed in the cells), checked against the fused NumPy outputs
the same way; "n/a" with the reason when IREE is not installed or the export refuses a workload.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from lamina.backends.compare import compare  # noqa: E402
from lamina.backends.compiled.backend import CompiledBackend  # noqa: E402
from lamina.backends.interface import find_entry  # noqa: E402
from lamina.backends.numpy.options import NumpyOptions  # noqa: E402
from lamina.backends.numpy.runner import run_function  # noqa: E402
from lamina.backends.numpy.tile_threads import thread_count  # noqa: E402
from lamina.ir.core.diagnostics import LaminaError  # noqa: E402
from lamina.ir.core.dtypes import tensor_dtype  # noqa: E402
from lamina.ir.ops import rng  # noqa: E402
from lamina.ir.text.source import make_context, parse_text, verify  # noqa: E402
from lamina.passes.pipeline import build_pipeline, run_pipeline  # noqa: E402


def timings(fn: Callable[[], object], repeats: int) -> list[float]:
    """Seconds of `repeats` runs of fn after one warm-up run (jit compile, page faults); the one
    timing loop of the benchmarks that import this module."""
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return ts


def median_time(fn, repeats: int) -> float:
    return statistics.median(timings(fn, repeats))


def t(shape) -> str:
    return "tensor<" + "x".join(map(str, shape)) + "xf32>"


def seed_program(r: int, c: int) -> str:
    T, V = t((r, c)), t((c,))
    return f"""
func.func @main(%x: {T}, %g: {V}, %b: {V}) -> {T} {{
  %ln = lamina.layernorm %x {{axis = -1 : i64, eps = 1.0e-05 : f64}} : {T}
  %s = lamina.mul %ln, %g : ({T}, {V}) -> {T}
  %h = lamina.add %s, %b : ({T}, {V}) -> {T}
  %a = lamina.gelu %h {{approximate = "tanh"}} : {T}
  %y = lamina.dropout %a {{rate = 1.0e-01 : f64, seed = 42 : i64}} : {T}
  func.return %y : {T}
}}"""


def chain_program(r: int, c: int) -> str:
    T = t((r, c))
    return f"""
func.func @main(%x: {T}, %y: {T}) -> {T} {{
  %0 = lamina.mul %x, %y : {T}
  %1 = lamina.add %0, %x : {T}
  %2 = lamina.tanh %1 : {T}
  %3 = lamina.mul %2, %y : {T}
  %4 = lamina.sub %3, %x : {T}
  %5 = lamina.exp %4 : {T}
  %6 = lamina.add %5, %2 : {T}
  %7 = lamina.mul %6, %6 : {T}
  func.return %7 : {T}
}}"""


def mlp_program(m: int, d: int, f: int) -> str:
    X, W1, B1, W2, B2, H, Y = t((m, d)), t((d, f)), t((f,)), t((f, d)), t((d,)), t((m, f)), \
        t((m, d))
    return f"""
func.func @main(%x: {X}, %w1: {W1}, %b1: {B1}, %w2: {W2}, %b2: {B2}) -> {Y} {{
  %fc = lamina.matmul %x, %w1 : ({X}, {W1}) -> {H}
  %fb = lamina.add %fc, %b1 : ({H}, {B1}) -> {H}
  %h = lamina.gelu %fb {{approximate = "tanh"}} : {H}
  %p = lamina.matmul %h, %w2 : ({H}, {W2}) -> {Y}
  %y = lamina.add %p, %b2 : ({Y}, {B2}) -> {Y}
  func.return %y : {Y}
}}"""


def attention_text(b: int, n: int, d: int, h: int) -> str:
    """The block's attention from the head split (%q4, %k4, %v4 [B, T, H, Dh]) to the merged
    heads (%merged [B, T, D]): the part the one-device and the placed GPT-2 blocks share."""
    dh = d // h
    X, X4, HD = t((b, n, d)), t((b, n, h, dh)), t((b, h, n, dh))
    KT, S = t((b, h, dh, n)), t((b, h, n, n))
    rows = ", ".join(f"[{i}]" for i in range(n))
    cols = ", ".join(str(i) for i in range(n))
    return f"""\
  %qh = lamina.transpose %q4 {{permutation = array<i64: 0, 2, 1, 3>}} : ({X4}) -> {HD}
  %kt = lamina.transpose %k4 {{permutation = array<i64: 0, 2, 3, 1>}} : ({X4}) -> {KT}
  %vh = lamina.transpose %v4 {{permutation = array<i64: 0, 2, 1, 3>}} : ({X4}) -> {HD}
  %scores = lamina.matmul %qh, %kt : ({HD}, {KT}) -> {S}
  %inv_sqrt_dh = lamina.constant dense<{1 / np.sqrt(dh):e}> : tensor<f32>
  %scaled = lamina.mul %scores, %inv_sqrt_dh : ({S}, tensor<f32>) -> {S}
  %rows = lamina.constant dense<[{rows}]> : tensor<{n}x1xi32>
  %cols = lamina.constant dense<[{cols}]> : tensor<{n}xi32>
  %causal = lamina.ge %rows, %cols : (tensor<{n}x1xi32>, tensor<{n}xi32>) -> tensor<{n}x{n}xi1>
  %neg_big = lamina.constant dense<-1.0e+09> : tensor<f32>
  %masked = lamina.select %causal, %scaled, %neg_big : (tensor<{n}x{n}xi1>, {S}, tensor<f32>) -> {S}
  %probs = lamina.softmax %masked {{axis = -1 : i64}} : {S}
  %ctx = lamina.matmul %probs, %vh : ({S}, {HD}) -> {HD}
  %ctx_t = lamina.transpose %ctx {{permutation = array<i64: 0, 2, 1, 3>}} : ({HD}) -> {X4}
  %merged = lamina.reshape %ctx_t : ({X4}) -> {X}
"""


def gpt2_program(b: int, n: int, d: int, h: int, f: int) -> str:
    """The pre-LN GPT-2 block of `samples/gpt2_block.mlir` at any size, with the residual
    dropouts as 0/1 masks (inputs %m1, %m2) and no attention dropout, as in the anchor."""
    dh = d // h
    X, V, D3, DD, FF = t((b, n, d)), t((d,)), t((3 * d,)), t((d, d)), t((f,))
    QKV, X4, H4 = t((b, n, 3 * d)), t((b, n, h, dh)), t((b, n, f))
    eps = "{axis = -1 : i64, eps = 1.0e-05 : f64}"

    def sl(name: str, k: int) -> str:
        return (f"  %{name} = lamina.slice %qkv {{start = array<i64: 0, 0, {k * d}>, limit = "
                f"array<i64: {b}, {n}, {(k + 1) * d}>}} : ({QKV}) -> {X}\n"
                f"  %{name}4 = lamina.reshape %{name} : ({X}) -> {X4}\n")

    return f"""
func.func @main(%x: {X}, %ln1_g: {V}, %ln1_b: {V}, %w_attn: {t((d, 3 * d))}, %b_attn: {D3},
                %w_proj: {DD}, %b_proj: {V}, %ln2_g: {V}, %ln2_b: {V}, %w_fc: {t((d, f))},
                %b_fc: {FF}, %w_out: {t((f, d))}, %b_out: {V}, %m1: {X}, %m2: {X}) -> {X} {{
  %a = lamina.layernorm %x scale %ln1_g bias %ln1_b {eps} : ({X}, {V}, {V}) -> {X}
  %qkv0 = lamina.matmul %a, %w_attn : ({X}, {t((d, 3 * d))}) -> {QKV}
  %qkv = lamina.add %qkv0, %b_attn : ({QKV}, {D3}) -> {QKV}
{sl("q", 0)}{sl("k", 1)}{sl("v", 2)}\
{attention_text(b, n, d, h)}  %proj0 = lamina.matmul %merged, %w_proj : ({X}, {DD}) -> {X}
  %proj = lamina.add %proj0, %b_proj : ({X}, {V}) -> {X}
  %keep = lamina.constant dense<{1 / 0.9:e}> : tensor<f32>
  %proj_m = lamina.mul %proj, %m1 : {X}
  %proj_d = lamina.mul %proj_m, %keep : ({X}, tensor<f32>) -> {X}
  %h = lamina.add %x, %proj_d : {X}
  %m = lamina.layernorm %h scale %ln2_g bias %ln2_b {eps} : ({X}, {V}, {V}) -> {X}
  %fc0 = lamina.matmul %m, %w_fc : ({X}, {t((d, f))}) -> {H4}
  %fc = lamina.add %fc0, %b_fc : ({H4}, {FF}) -> {H4}
  %act = lamina.gelu %fc {{approximate = "tanh"}} : {H4}
  %out0 = lamina.matmul %act, %w_out : ({H4}, {t((f, d))}) -> {X}
  %out = lamina.add %out0, %b_out : ({X}, {V}) -> {X}
  %out_m = lamina.mul %out, %m2 : {X}
  %out_d = lamina.mul %out_m, %keep : ({X}, tensor<f32>) -> {X}
  %y = lamina.add %h, %out_d : {X}
  func.return %y : {X}
}}"""


def gpt2_inputs(gen: np.random.Generator, b: int, n: int, d: int, f: int) -> list[np.ndarray]:
    def w(*shape: int, s: float = 0.02) -> np.ndarray:
        return gen.standard_normal(shape, dtype=np.float32) * np.float32(s)

    def mask() -> np.ndarray:
        return (gen.random((b, n, d), dtype=np.float32) >= 0.1).astype(np.float32)

    one, zero = np.ones(d, np.float32), np.zeros(d, np.float32)
    return [gen.standard_normal((b, n, d), dtype=np.float32), one, zero, w(d, 3 * d),
            w(3 * d), w(d, d), w(d), one, zero, w(d, f), w(f), w(f, d), w(d), mask(), mask()]


# ---- jax versions of the same math -------------------------------------------------------------

def jax_fns():
    try:  # the optional [bench] extra: without it the jax column says n/a
        import jax  # pyright: ignore[reportMissingImports]
        import jax.numpy as jnp  # pyright: ignore[reportMissingImports]
    except ImportError:
        return None
    jax.config.update("jax_platforms", "cpu")

    def mix(x):
        x = x ^ (x >> 16)
        x = x * jnp.uint32(0x7FEB352D)
        x = x ^ (x >> 15)
        x = x * jnp.uint32(0x846CA68B)
        return x ^ (x >> 16)

    def dropout(a, seed, rate):
        n = a.size  # < 2**32 here: one key
        idx = jnp.arange(n, dtype=jnp.uint32).reshape(a.shape)
        bits = mix(idx ^ jnp.uint32(rng.key(seed, 0)))
        keep = bits >= jnp.uint32(rng.threshold(rate))
        return jnp.where(keep, a * jnp.float32(1.0 / (1.0 - rate)), jnp.float32(0))

    def gelu(x):
        return 0.5 * x * (1.0 + jnp.tanh(jnp.float32(np.sqrt(2 / np.pi)) * (x + 0.044715 * x * x * x)))

    def seed_fn(x, g, b):
        m = x.mean(-1, keepdims=True)
        c = x - m
        v = (c * c).mean(-1, keepdims=True)
        y = c / jnp.sqrt(v + 1e-5) * g + b
        return dropout(gelu(y), 42, 0.1)

    def chain_fn(x, y):
        a0 = x * y
        a1 = a0 + x
        a2 = jnp.tanh(a1)
        a3 = a2 * y
        a4 = a3 - x
        a5 = jnp.exp(a4)
        a6 = a5 + a2
        return a6 * a6

    def mlp_fn(x, w1, b1, w2, b2):
        return gelu(x @ w1 + b1) @ w2 + b2

    def layernorm(x, g, b):
        m = x.mean(-1, keepdims=True)
        c = x - m
        return c / jnp.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * g + b

    def gpt2_fn(x, ln1_g, ln1_b, w_attn, b_attn, w_proj, b_proj, ln2_g, ln2_b, w_fc, b_fc,
                w_out, b_out, m1, m2):
        b, n, d = x.shape
        h = 16
        qkv = layernorm(x, ln1_g, ln1_b) @ w_attn + b_attn
        q, k, v = (qkv[..., i * d:(i + 1) * d].reshape(b, n, h, d // h) for i in range(3))
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * jnp.float32(1 / np.sqrt(d // h))
        causal = jnp.arange(n)[:, None] >= jnp.arange(n)[None, :]
        p = jax.nn.softmax(jnp.where(causal, s, jnp.float32(-1e9)), axis=-1)
        ctx = jnp.einsum("bhqk,bkhd->bqhd", p, v).reshape(b, n, d)
        keep = jnp.float32(1 / 0.9)
        hh = x + (ctx @ w_proj + b_proj) * m1 * keep
        mlp = gelu(layernorm(hh, ln2_g, ln2_b) @ w_fc + b_fc) @ w_out + b_out
        return hh + mlp * m2 * keep

    def wrap(f):
        jf = jax.jit(f)
        return lambda *a: jf(*a).block_until_ready()

    return {"seed": wrap(seed_fn), "chain": wrap(chain_fn), "mlp": wrap(mlp_fn),
            "gpt2": wrap(gpt2_fn)}, jax


def copy_bandwidth(threads: int = 1) -> float:
    """Bytes read + written per second by np.copyto of 256 MiB, split over `threads` threads."""
    a = np.ones(64 * 1024 * 1024, dtype=np.float32)
    b = np.empty_like(a)
    if threads <= 1:
        s = median_time(lambda: np.copyto(b, a), 5)
    else:
        from concurrent.futures import ThreadPoolExecutor

        parts = np.array_split(np.arange(a.size), threads)
        bounds = [(int(p[0]), int(p[-1]) + 1) for p in parts]
        with ThreadPoolExecutor(threads) as ex:
            def run() -> None:
                list(ex.map(lambda ij: np.copyto(b[ij[0]:ij[1]], a[ij[0]:ij[1]]), bounds))
            s = median_time(run, 5)
    return 2 * a.nbytes / s


def blas_rate(n: int = 2048) -> float:
    """FLOP per second of an f32 [n, n] @ [n, n] np.matmul (2 n^3 FLOP, the op table's count) on
    NumPy's BLAS with its own threads, the fastest of 5 runs (a floor takes the stricter figure):
    the compute floor's rate, measured in the same run as the workloads."""
    gen = np.random.default_rng(1)
    a = gen.standard_normal((n, n), dtype=np.float32)
    b = gen.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), np.float32)
    return 2.0 * n ** 3 / min(timings(lambda: np.matmul(a, b, out=out), 5))


def _cell(ts: list[float] | None) -> str:
    """A median with its range, in ms: '25.9 (24.1-31.0)'."""
    if not ts:
        return "n/a"
    return f"{statistics.median(ts) * 1e3:.1f} ({min(ts) * 1e3:.1f}-{max(ts) * 1e3:.1f})"


def _close(func, got: list[np.ndarray], want: list[np.ndarray]) -> bool:
    return all(compare("out", tensor_dtype(ty), a, b).ok for a, b, ty in
               zip(got, want, func.function_type.outputs.data, strict=True))


def _workloads(quick: bool) -> list[tuple[str, str, str, list[np.ndarray], str, int]]:
    """(name, shape, program, inputs, jax key, compulsory bytes) of every workload."""
    r, c = (2048, 4096) if quick else (8192, 4096)
    m, d, f = (512, 1024, 4096) if quick else (2048, 1024, 4096)
    gb, gn = (1, 512) if quick else (2, 1024)     # the GPT-2 block: batch, tokens (D=1024, F=4096)
    gen = np.random.default_rng(0)
    x = gen.standard_normal((r, c), dtype=np.float32)
    y = gen.standard_normal((r, c), dtype=np.float32)
    g = gen.standard_normal(c, dtype=np.float32)
    b = gen.standard_normal(c, dtype=np.float32)
    mx = gen.standard_normal((m, d), dtype=np.float32)
    w1 = gen.standard_normal((d, f), dtype=np.float32) * 0.03
    b1 = gen.standard_normal(f, dtype=np.float32)
    w2 = gen.standard_normal((f, d), dtype=np.float32) * 0.03
    b2 = gen.standard_normal(d, dtype=np.float32)
    gi = gpt2_inputs(gen, gb, gn, 1024, 4096)
    return [
        ("W1 LN+GeLU+Dropout", f"f32[{r},{c}]", seed_program(r, c), [x, g, b], "seed",
         x.nbytes * 2 + g.nbytes + b.nbytes),
        ("W2 8-op elementwise chain", f"f32[{r},{c}]", chain_program(r, c), [x, y], "chain",
         x.nbytes * 3),
        ("W3 MLP block", f"{m}x{d}x{f}", mlp_program(m, d, f), [mx, w1, b1, w2, b2], "mlp",
         mx.nbytes * 2 + w1.nbytes + w2.nbytes + b1.nbytes + b2.nbytes),
        ("GPT2 block", f"B{gb} T{gn} D1024 H16", gpt2_program(gb, gn, 1024, 16, 4096), gi, "gpt2",
         sum(a.nbytes for a in gi) + gi[0].nbytes),
    ]


# the fusion pipeline of every "fused" column (fuse-attention changes only the GPT-2 block)
FUSE = "fuse-attention,fuse-elementwise"


def _interpreter_row(work: tuple[str, str, str, list[np.ndarray], str, int], repeats: int,
                     nt: int) -> dict:
    """Time one workload unfused, fused (1 and nt threads) and compiled."""
    name, shape, text, inputs, key, compulsory = work
    ctx = make_context()
    ref = parse_text(text, "bench.mlir", ctx)
    verify(ref)
    fm = ref.clone()
    run_pipeline(ctx, fm, build_pipeline(FUSE))
    fref, ffused = find_entry(ref, None), find_entry(fm, None)
    one, all_ = NumpyOptions(threads=1), NumpyOptions(threads=nt)
    comp = CompiledBackend.op_runners
    res_u = run_function(fref, inputs)
    res_f = run_function(ffused, inputs, options=all_)
    res_c = run_function(ffused, inputs, options=all_, runners=comp)
    notes = []
    if key in ("seed", "chain") and not all(np.array_equal(u, f_) for u, f_ in
                                            zip(res_u.outputs, res_f.outputs, strict=True)):
        notes.append("fused differs!")
    if not _close(ffused, res_c.outputs, res_f.outputs):
        notes.append("compiled differs!")
    cstats = res_c.stats.get("compiled", {})
    if cstats.get("fallbacks"):
        notes.append(f"{len(cstats['fallbacks'])} kernels not compiled")
    return {
        "name": name + "".join(f" ({n})" for n in notes), "shape": shape, "key": key,
        "inputs": inputs, "compulsory": compulsory, "out": res_f.outputs[0], "func": ffused,
        "module": fm, "fused_outputs": res_f.outputs,
        "unfused": timings(lambda: run_function(fref, inputs), repeats),
        "fx1": timings(lambda: run_function(ffused, inputs, options=one), repeats),
        "fused": timings(lambda: run_function(ffused, inputs, options=all_), repeats),
        "compiled": timings(lambda: run_function(ffused, inputs, options=all_, runners=comp),
                            repeats),
        "compile_s": cstats.get("compile_seconds", 0.0) + cstats.get("load_seconds", 0.0),
        "flops": float(res_u.stats["flops"]),
        "kernels": f"{res_u.stats['kernels']} -> {res_f.stats['kernels']}",
    }


def _iree_times(row: dict, repeats: int) -> tuple[list[float] | None, str]:
    """The fused program's times on the IREE backend and its compile (or cache load) time, or
    None and why not (IREE not installed, the export refusing the workload)."""
    import lamina

    try:
        start = time.perf_counter()
        exe = lamina.compile(row["module"], backend="iree", warmup=False)
        compile_s = time.perf_counter() - start
    except ImportError as e:
        return None, f"iree: {e.name or e} not installed"
    except LaminaError as e:
        return None, f"iree refused: {e.message.splitlines()[0][:80]}"
    got = list(exe(row["inputs"]).outputs.values())
    if not _close(row["func"], got, row["fused_outputs"]):
        row["name"] += " (iree differs!)"
    return timings(lambda: exe(row["inputs"]), repeats), f"{compile_s:.1f} s"


def bench_workloads(repeats: int, quick: bool, only: set[str] | None) -> None:
    nt = thread_count(NumpyOptions())
    bw1 = copy_bandwidth(1)
    bwn = copy_bandwidth(nt)
    bw = max(bw1, bwn)   # the memory floor uses the faster one: the stricter target
    blas = blas_rate()
    jx = jax_fns()
    print(f"copy bandwidth (np.copyto, read+write): {bw1 / 1e9:.1f} GB/s on 1 thread, "
          f"{bwn / 1e9:.1f} GB/s on {nt}; BLAS (f32 2048^3 np.matmul): {blas / 1e9:.1f} GFLOP/s; "
          f"jax: {jx[1].__version__ if jx else 'not installed'}")
    work = [w for w in _workloads(quick) if only is None or w[0].split()[0] in only]
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())} on "
          f"{os.cpu_count()} cores (a shared machine: medians, range in parentheses); fused "
          f"kernels use {nt} threads (`fused`, `compiled`) or 1 (`fused x1`)")
    cols = ["workload", "shape", "unfused", "fused x1", "fused", "compiled", "iree", "jax.jit",
            "GFLOP", "mem floor", "compute floor", "unf/fused", "fused/comp", "jax/fused",
            "jax/comp", "jax/iree", "comp/floor", "iree/floor", "compile", "iree compile",
            "kernels"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "|".join("---" for _ in cols) + "|")
    # phase 1: the interpreter on every workload; phase 2: jax. XLA's thread pool keeps spinning
    # for a while after each call, which would steal a core from the next interpreter run.
    rows = [_interpreter_row(w, repeats, nt) for w in work]
    for row in rows:     # IREE before jax too: its task threads idle once a call returns
        row["iree"], row["iree_compile"] = _iree_times(row, repeats)
    for row in rows:
        tj = None
        if jx is not None:
            fn = jx[0][row["key"]]
            out = np.asarray(fn(*row["inputs"]))
            if not np.allclose(out, row["out"], rtol=1e-3, atol=1e-3):
                row["name"] += " (jax differs!)"
            tj = timings(lambda fn=fn, a=row["inputs"]: fn(*a), repeats)
        med = {k: statistics.median(row[k]) for k in ("unfused", "fused", "compiled")}
        mem_floor, compute_floor = row["compulsory"] / bw, row["flops"] / blas
        floor = max(mem_floor, compute_floor)
        jm = statistics.median(tj) if tj else None
        im = statistics.median(row["iree"]) if row["iree"] else None

        def ratio(a: float | None, b: float | None) -> str:
            return f"{a / b:.2f}x" if a is not None and b is not None else "n/a"

        cells = [row["name"], row["shape"], _cell(row["unfused"]), _cell(row["fx1"]),
                 _cell(row["fused"]), _cell(row["compiled"]), _cell(row["iree"]), _cell(tj),
                 f"{row['flops'] / 1e9:.1f}", f"{mem_floor * 1e3:.1f}", f"{compute_floor * 1e3:.1f}",
                 ratio(med["unfused"], med["fused"]), ratio(med["fused"], med["compiled"]),
                 ratio(jm, med["fused"]), ratio(jm, med["compiled"]), ratio(jm, im),
                 ratio(med["compiled"], floor), ratio(im, floor), f"{row['compile_s']:.1f} s",
                 row["iree_compile"], row["kernels"]]
        print("| " + " | ".join(cells) + " |", flush=True)


def bench_pass(sizes: list[int]) -> None:
    try:
        from strategies.programs import random_program_text
    except ImportError:
        print("tests/strategies/programs.py not found: pass timing skipped")
        return
    from lamina.passes.fuse_elementwise import FuseElementwise

    print()
    print("| ops | parse (xDSL) | verify | fuse-elementwise | pass / parse | fused ops |")
    print("|---|---|---|---|---|---|")
    for n in sizes:
        text = random_program_text(1, n)
        ctx = make_context()
        t0 = time.perf_counter()
        m = parse_text(text, "gen.mlir", ctx)
        t1 = time.perf_counter()
        verify(m)
        t2 = time.perf_counter()
        FuseElementwise().apply(ctx, m)
        t3 = time.perf_counter()
        nf = sum(1 for op in m.walk() if op.name == "lamina.fused")
        print(f"| {n} | {t1 - t0:.2f} s | {t2 - t1:.2f} s | {t3 - t2:.2f} s | "
              f"{(t3 - t2) / (t1 - t0):.2f} | {nf} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="smaller shapes, 2k/10k-op programs")
    ap.add_argument("--skip-pass", action="store_true")
    ap.add_argument("--only", default=None, help="comma-separated workloads (W1,W2,W3,GPT2)")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    bench_workloads(args.repeats, args.quick, only)
    if not args.skip_pass:
        bench_pass([2000, 10000] if args.quick else [10000, 50000])


if __name__ == "__main__":
    main()
