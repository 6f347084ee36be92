"""fuse-attention benchmark: one causal attention with dropout, unfused vs fused, in the interpreter.

    .venv/bin/python benchmarks/bench_attention.py [--b 2 --h 16 --t 1024 --dh 64] [--repeats 3]
        [--tile-bytes N] [--threads N]

The program (f32): s = q @ kt; x = select(causal, s * 1/sqrt(Dh), -1e9); p = dropout(softmax(x),
0.1); o = p @ v, q and v [B, H, T, Dh], kt [B, H, Dh, T], the causal mask built in the program
from two index constants. "unfused" runs it as parsed (one whole-array kernel per op), "fused"
after `fuse-attention` (one kernel, the online softmax over key blocks of
`lamina.backends.numpy.attention`). Each time is the median of `--repeats` runs after a warm-up,
with the range after it (the machine may be shared: the spread says how far a figure can be
trusted). Kernels, bytes_moved (distinct operands + results per kernel, summed) and
peak_live_bytes are the runs' own statistics; the last line compares the outputs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
from lamina.backends.compare import compare
from lamina.backends.interface import RunResult, find_entry
from lamina.backends.numpy.options import NumpyOptions
from lamina.backends.numpy.runner import run_function
from lamina.ir.text.source import make_context, parse_text, verify
from lamina.passes.pipeline import build_pipeline, run_pipeline


def program(b: int, h: int, t: int, dh: int) -> str:
    lead = f"{b}x{h}x"
    s = f"tensor<{lead}{t}x{t}xf32>"
    rows = ", ".join(f"[{i}]" for i in range(t))
    cols = ", ".join(str(j) for j in range(t))
    return f"""
func.func @attn(%q: tensor<{lead}{t}x{dh}xf32>, %kt: tensor<{lead}{dh}x{t}xf32>,
                %v: tensor<{lead}{t}x{dh}xf32>) -> tensor<{lead}{t}x{dh}xf32> {{
  %s = lamina.matmul %q, %kt : (tensor<{lead}{t}x{dh}xf32>, tensor<{lead}{dh}x{t}xf32>) -> {s}
  %c = lamina.constant dense<{1 / dh ** 0.5}> : tensor<f32>
  %scaled = lamina.mul %s, %c : ({s}, tensor<f32>) -> {s}
  %rows = lamina.constant dense<[{rows}]> : tensor<{t}x1xi64>
  %cols = lamina.constant dense<[{cols}]> : tensor<{t}xi64>
  %mask = lamina.ge %rows, %cols : (tensor<{t}x1xi64>, tensor<{t}xi64>) -> tensor<{t}x{t}xi1>
  %neg = lamina.constant dense<-1.0e+09> : tensor<f32>
  %masked = lamina.select %mask, %scaled, %neg : (tensor<{t}x{t}xi1>, {s}, tensor<f32>) -> {s}
  %p = lamina.softmax %masked {{axis = -1 : i64}} : {s}
  %pd = lamina.dropout %p {{rate = 0.1 : f64, seed = 3 : i64}} : {s}
  %o = lamina.matmul %pd, %v : ({s}, tensor<{lead}{t}x{dh}xf32>) -> tensor<{lead}{t}x{dh}xf32>
  func.return %o : tensor<{lead}{t}x{dh}xf32>
}}
"""


def timed(fn: Callable[[], RunResult], repeats: int) -> tuple[list[float], RunResult]:
    out = fn()   # warm-up
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return ts, out


def main() -> None:
    ap = argparse.ArgumentParser(description="fuse-attention benchmark (see the docstring)")
    ap.add_argument("--b", type=int, default=2)
    ap.add_argument("--h", type=int, default=16)
    ap.add_argument("--t", type=int, default=1024)
    ap.add_argument("--dh", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tile-bytes", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    text = program(a.b, a.h, a.t, a.dh)
    ctx = make_context()
    ref = parse_text(text, "attn.mlir", ctx)
    verify(ref)
    fused = parse_text(text, "attn.mlir", ctx)
    run_pipeline(ctx, fused, build_pipeline("fuse-attention"))
    verify(fused)
    rng = np.random.default_rng(0)
    shapes = [(a.b, a.h, a.t, a.dh), (a.b, a.h, a.dh, a.t), (a.b, a.h, a.t, a.dh)]
    inputs = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    opts = NumpyOptions(tile_bytes=a.tile_bytes, threads=a.threads)
    print(f"attention B={a.b} H={a.h} T={a.t} Dh={a.dh} f32, causal, dropout 0.1; "
          f"median of {a.repeats}")
    results: dict[str, RunResult] = {}
    for name, m in (("unfused", ref), ("fused", fused)):
        ts, res = timed(lambda m=m: run_function(find_entry(m, None), inputs, options=opts),
                        a.repeats)
        results[name] = res
        st = res.stats
        print(f"  {name:8s} {statistics.median(ts):8.3f} s  ({min(ts):.3f}-{max(ts):.3f})  "
              f"kernels {st['kernels']:3d}  bytes_moved {st['bytes_moved'] / 2**20:9.1f} MiB  "
              f"peak_live {st['peak_live_bytes'] / 2**20:8.1f} MiB")
    got, want = results["fused"].outputs[0], results["unfused"].outputs[0]
    print("  " + compare("out0", "f32", got, want).line())


if __name__ == "__main__":
    main()
