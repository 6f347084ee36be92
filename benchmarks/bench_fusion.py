"""fuse-elementwise benchmark: interpreter unfused vs fused vs jax.jit vs the memory-traffic floor.

    .venv/bin/python benchmarks/bench_fusion.py [--repeats 5] [--quick]

Workloads (f32): W1 the seed example y = dropout(gelu_tanh(layernorm(x) * g + b), 0.1) at
[8192, 4096]; W2 an 8-op elementwise chain of the same size; W3 the GPT-2 MLP block
h = gelu_tanh(x @ W1 + b1) @ W2 + b2 (2048 x 1024 x 4096). jax.jit runs the same math, dropout
included (the same counter-based hash, in uint32 jnp ops). Floor = compulsory bytes (each input
read once, each output written once) / copy bandwidth measured with np.copyto on 256 MiB.
Then the pass's own time on generated 10k / 50k-op programs next to xDSL's parse time for them.
Medians of `--repeats` runs; all columns measured in this one process. "fused" is the
interpreter's default: the tile loop on one thread per core (`fused.thread_count()`), as jax.jit
uses every core; "fused x1" is the same loop on one thread, and "unfused" whole-array NumPy (one
thread). unf/fx1 is what fusion alone buys; unf/fused adds the threads. The floor uses the
faster of the 1-thread and all-thread copy bandwidths. Ratios are of medians. W1 and W2 also check
that the fused outputs equal the unfused ones bit for bit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import lamina.backends.numpy.fused as fused_exec  # noqa: E402
from lamina.backends.interface import RunOptions, find_entry  # noqa: E402
from lamina.backends.numpy.runner import run_function  # noqa: E402
from lamina.ir import rng  # noqa: E402
from lamina.ir.source import make_context, parse_text, verify  # noqa: E402
from lamina.passes.pipeline import build_pipeline, run_pipeline  # noqa: E402


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up (and jit compile)
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


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

    def wrap(f):
        jf = jax.jit(f)
        return lambda *a: jf(*a).block_until_ready()

    return {"seed": wrap(seed_fn), "chain": wrap(chain_fn), "mlp": wrap(mlp_fn)}, jax


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


def bench_workloads(repeats: int, quick: bool) -> None:
    r, c = (2048, 4096) if quick else (8192, 4096)
    m, d, f = (512, 1024, 4096) if quick else (2048, 1024, 4096)
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
    nt = fused_exec.thread_count(RunOptions())
    bw1 = copy_bandwidth(1)
    bwn = copy_bandwidth(nt)
    bw = max(bw1, bwn)   # the floor uses the faster one: the stricter target
    jx = jax_fns()
    print(f"copy bandwidth (np.copyto, read+write): {bw1 / 1e9:.1f} GB/s on 1 thread, "
          f"{bwn / 1e9:.1f} GB/s on {nt}; "
          f"jax: {jx[1].__version__ if jx else 'not installed'}")
    work = [
        ("W1 LN+GeLU+Dropout", f"f32[{r},{c}]", seed_program(r, c), [x, g, b], "seed",
         x.nbytes * 2 + g.nbytes + b.nbytes),
        ("W2 8-op elementwise chain", f"f32[{r},{c}]", chain_program(r, c), [x, y], "chain",
         x.nbytes * 3),
        ("W3 MLP block", f"{m}x{d}x{f}", mlp_program(m, d, f), [mx, w1, b1, w2, b2], "mlp",
         mx.nbytes * 2 + w1.nbytes + w2.nbytes + b1.nbytes + b2.nbytes),
    ]
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())} on "
          f"{os.cpu_count()} cores; fused kernels use {nt} threads (`fused`) or 1 (`fused x1`)")
    head = (f"| {'workload':<26} | {'shape':<16} | {'unfused':>9} | {'fused x1':>9} "
            f"| {'fused':>9} | {'jax.jit':>9} | {'floor':>7} | {'unf/fx1':>8} | {'unf/fused':>9} "
            f"| {'jax/fx1':>8} | {'jax/fused':>9} | {'fused/floor':>11} | kernels |")
    print(head)
    print("|" + "|".join("-" * (len(p)) for p in head.split("|")[1:-1]) + "|")
    # phase 1: the interpreter on every workload; phase 2: jax. XLA's thread pool keeps spinning
    # for a while after each call, which would steal a core from the next interpreter run.
    rows = []
    for name, shape, text, inputs, key, compulsory in work:
        ctx = make_context()
        ref = parse_text(text, "bench.mlir", ctx)
        verify(ref)
        fm = ref.clone()
        run_pipeline(ctx, fm, build_pipeline("fuse-elementwise"))
        fref, ffused = find_entry(ref, None), find_entry(fm, None)
        res_u = run_function(fref, inputs)
        res_f = run_function(ffused, inputs)
        if key != "mlp" and not all(np.array_equal(u, f_) for u, f_ in
                                    zip(res_u.outputs, res_f.outputs, strict=True)):
            name += " (fused differs!)"
        tu = median_time(lambda fr=fref, a=inputs: run_function(fr, a), repeats)
        one, all_ = RunOptions(threads=1), RunOptions(threads=nt)
        tf1 = median_time(lambda ff=ffused, a=inputs, o=one: run_function(ff, a, options=o),
                          repeats)
        tf = median_time(lambda ff=ffused, a=inputs, o=all_: run_function(ff, a, options=o),
                         repeats)
        rows.append([name, shape, inputs, key, compulsory, res_f.outputs[0], tu, tf1, tf,
                     f"{res_u.stats['kernels']} -> {res_f.stats['kernels']}"])
    for row in rows:
        name, shape, inputs, key, compulsory, fused_out, tu, tf1, tf, kernels = row
        tj = None
        if jx is not None:
            fn = jx[0][key]
            out = np.asarray(fn(*inputs))
            ok = np.allclose(out, fused_out, rtol=1e-3, atol=1e-3)
            tj = median_time(lambda fn=fn, a=inputs: fn(*a), repeats)
            if not ok:
                name += " (jax differs!)"
        floor = compulsory / bw
        ms = lambda s: f"{s * 1e3:8.1f}ms" if s is not None else "      n/a"  # noqa: E731
        jr = (lambda d, w=9, tj=tj: f"{tj / d:{w - 1}.2f}x" if tj else " " * (w - 3) + "n/a")  # noqa: E731
        print(f"| {name:<26} | {shape:<16} | {ms(tu)} | {ms(tf1)} | {ms(tf)} | {ms(tj)} "
              f"| {floor * 1e3:5.1f}ms | {tu / tf1:7.2f}x | {tu / tf:8.2f}x | {jr(tf1, 8)} "
              f"| {jr(tf)} | {tf / floor:10.1f}x | {kernels} |")


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
    args = ap.parse_args()
    bench_workloads(args.repeats, args.quick)
    if not args.skip_pass:
        bench_pass([2000, 10000] if args.quick else [10000, 50000])


if __name__ == "__main__":
    main()
