"""Foundation benchmark: how fast Lamina parses, verifies, prints and interprets large programs,
and whether the interpreter frees intermediates.

    python benchmarks/bench_foundation.py [--ops 10000] [--repeats 3] [--chain-ops 300]
                                          [--chain-elems 1048576] [--no-chain]

Part 1 generates one program of `--ops` lamina ops (a DAG of elementwise, reduction, matmul and
layout ops on [64, 64] f32 tensors, each binary op reading one of the last few values) and reports
the median over `--repeats` runs of: parse (custom form), parse (generic form), verify, print
(custom form), and an interpreter run (ops/s, `peak_live_bytes` against the bytes of all
intermediates together, which is what a runner that never frees would hold).

Part 2 runs a chain of `--chain-ops` elementwise ops on `--chain-elems`-element f32 arrays and
reports `peak_live_bytes` and the tracemalloc peak: both should be a few arrays, not the chain.

The generator is linear-time and takes its ops from the op table by their facts (cheap unary ops
that never grow a value, binary ops defined everywhere, the reductions) and, for its fixed groups,
through the ops' typed classes; timings are wall-clock (`time.perf_counter`).
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import run_function
from lamina.ir.core import shapes
from lamina.ir.core.shapes import TensorInfo
from lamina.ir.mesh.sharding import Reduction
from lamina.ir.ops.formulas import Call
from lamina.ir.ops.intervals import DomainKind
from lamina.ir.ops.lamina import (
    AbsOp,
    AddOp,
    LayernormOp,
    MatmulOp,
    NegOp,
    ReshapeOp,
    SoftmaxOp,
    SubOp,
    TanhOp,
    TransposeOp,
)
from lamina.ir.ops.optable import OPS, Fusion, OpInfo
from lamina.ir.text.source import make_context, parse_text, verify
from xdsl.dialects.builtin import ModuleOp
from xdsl.printer import Printer

N = 64
T = f"tensor<{N}x{N}xf32>"
ROW = f"tensor<{N}x1xf32>"
FLAT = f"tensor<{N * N}xf32>"
SCALAR = TensorInfo((), "f32")
CHEAP = 6.0      # flops per element: the mix measures per-op overhead, not transcendental math


def _defined_everywhere(info: OpInfo) -> bool:
    rule = info.interval
    return rule is not None and all(d.kind is DomainKind.ANY for d in rule.domains)


def _non_expanding(info: OpInfo) -> bool:
    """Maps [-1000, 1000] into itself: a chain of such ops stays bounded."""
    assert info.interval is not None
    call = Call({a.name: a.default for a in info.attrs}, [SCALAR], SCALAR)
    lo, hi = info.interval.image([(-1000.0, 1000.0)], call)
    return -1000.0 <= lo and hi <= 1000.0


def _elementwise(*shape_rules: object) -> list[OpInfo]:
    return [i for i in OPS.values() if i.fusion is Fusion.ELEMENTWISE and i.shape in shape_rules
            and _defined_everywhere(i) and i.flops([SCALAR], SCALAR, {}) <= CHEAP]


UNARY = tuple(i.full_name for i in _elementwise(shapes.unary, shapes.unary_numeric)
              if _non_expanding(i))
BINARY = tuple(i.full_name for i in _elementwise(shapes.binary, shapes.binary_numeric))
REDUCE = tuple(i.full_name for i in OPS.values() if isinstance(i.sharding, Reduction))


def generate(n_ops: int, seed: int = 0) -> str:
    """A function of exactly `n_ops` lamina ops on [N, N] f32 values, bounded (no inf/NaN).

    Each step appends one op, or a short fixed group (reduction + broadcast subtract, matmul +
    tanh, reshape + reshape back), reading the latest value and, for binary ops, one of the last
    eight, so values die soon after they are made.
    """
    rng = random.Random(seed)
    lines = [f"func.func @main(%x: {T}, %w: {T}) -> {T} {{"]
    recent = ["%x"]
    count = 0

    def emit(text: str) -> str:
        nonlocal count
        name = f"%v{count}"
        lines.append(f"  {name} = {text}")
        count += 1
        return name

    while count < n_ops:
        cur = recent[-1]
        other = rng.choice(recent[-8:])
        left = n_ops - count
        k = rng.random()
        if k < 0.35 or left < 2:
            v = emit(f"{rng.choice(UNARY)} {cur} : {T}")
        elif k < 0.65:
            v = emit(f"{rng.choice(BINARY)} {cur}, {other} : {T}")
        elif k < 0.75:
            r = emit(f"{rng.choice(REDUCE)} {cur} "
                     f"{{axes = array<i64: 1>, keepdims = true}} : ({T}) -> {ROW}")
            v = emit(f"{SubOp.INFO.full_name} {cur}, {r} : ({T}, {ROW}) -> {T}")
        elif k < 0.82:
            m = emit(f"{MatmulOp.INFO.full_name} {cur}, %w : {T}")
            v = emit(f"{TanhOp.INFO.full_name} {m} : {T}")
        elif k < 0.88:
            v = emit(f"{TransposeOp.INFO.full_name} {cur} {{permutation = array<i64: 1, 0>}} : "
                     f"({T}) -> {T}")
        elif k < 0.93:
            f = emit(f"{ReshapeOp.INFO.full_name} {cur} : ({T}) -> {FLAT}")
            v = emit(f"{ReshapeOp.INFO.full_name} {f} : ({FLAT}) -> {T}")
        elif k < 0.97:
            v = emit(f"{SoftmaxOp.INFO.full_name} {cur} {{axis = -1 : i64}} : {T}")
        else:
            v = emit(f"{LayernormOp.INFO.full_name} {cur} "
                     f"{{axis = -1 : i64, eps = 1.000000e-05 : f64}} : {T}")
        recent.append(v)
        if len(recent) > 16:
            del recent[0]
    lines.append(f"  func.return {recent[-1]} : {T}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def chain(n_ops: int, elems: int) -> str:
    """`n_ops` elementwise ops in a line on [elems] f32; only %x and the latest value are live."""
    t = f"tensor<{elems}xf32>"
    lines = [f"func.func @chain(%x: {t}) -> {t} {{"]
    prev = "%x"
    for i in range(n_ops):
        op = (f"{AddOp.INFO.full_name} {prev}, %x" if i % 3 == 2 else
              f"{(NegOp, AbsOp)[i % 3].INFO.full_name} {prev}")
        lines.append(f"  %c{i} = {op} : {t}")
        prev = f"%c{i}"
    lines.append(f"  func.return {prev} : {t}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def print_module(module: ModuleOp, generic: bool = False) -> str:
    buf = io.StringIO()
    Printer(stream=buf, print_generic_format=generic).print_op(module)
    return buf.getvalue()


def median_time(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def intermediate_bytes(module: ModuleOp) -> int:
    """Bytes of every op result in the entry function: what a never-freeing runner would hold."""
    total = 0
    for op in find_entry(module, None).body.block.ops:
        for r in op.results:
            shape = r.type.get_shape()  # type: ignore[attr-defined]
            total += int(np.prod(shape, dtype=np.int64)) * 4
    return total


def mb(n: float) -> str:
    return f"{n / 2**20:,.2f} MiB"


def bench_program(n_ops: int, repeats: int) -> list[tuple[str, str, str]]:
    text = generate(n_ops)
    ctx = make_context()
    t_custom, module = median_time(lambda: parse_text(text, "bench.mlir", ctx), repeats)
    generic = print_module(module, generic=True)
    t_generic, _ = median_time(lambda: parse_text(generic, "bench.mlir", ctx), repeats)
    t_verify, _ = median_time(lambda: verify(module), repeats)
    t_print, printed = median_time(lambda: print_module(module), repeats)
    func = find_entry(module, None)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((N, N), dtype=np.float32) for _ in range(2)]

    def run() -> dict[str, Any]:
        result = run_function(func, inputs)
        assert np.all(np.isfinite(result.outputs[0])), "benchmark program overflowed"
        return result.stats

    t_run, stats = median_time(run, repeats)
    assert stats["ops_executed"] == n_ops, (stats["ops_executed"], n_ops)
    all_bytes = intermediate_bytes(module)
    kib = len(text) / 1024
    return [
        (f"parse custom form ({kib:,.0f} KiB)", f"{t_custom:8.3f} s", f"{n_ops / t_custom:10,.0f} ops/s"),
        (f"parse generic form ({len(generic) / 1024:,.0f} KiB)", f"{t_generic:8.3f} s",
         f"{n_ops / t_generic:10,.0f} ops/s"),
        ("verify", f"{t_verify:8.3f} s", f"{n_ops / t_verify:10,.0f} ops/s"),
        (f"print custom form ({len(printed) / 1024:,.0f} KiB)", f"{t_print:8.3f} s",
         f"{n_ops / t_print:10,.0f} ops/s"),
        ("interpreter run", f"{t_run:8.3f} s", f"{n_ops / t_run:10,.0f} ops/s"),
        ("  peak_live_bytes", mb(stats["peak_live_bytes"]), ""),
        ("  all intermediates", mb(all_bytes),
         f"{all_bytes / max(stats['peak_live_bytes'], 1):,.0f}x the peak"),
    ]


def bench_chain(n_ops: int, elems: int) -> list[tuple[str, str, str]]:
    module = parse_text(chain(n_ops, elems), "chain.mlir")
    verify(module)
    func = find_entry(module, None)
    x = np.random.default_rng(0).standard_normal(elems, dtype=np.float32)
    array = elems * 4
    run_function(func, [x])  # warm-up, so tracemalloc sees the steady state
    tracemalloc.start()
    tracemalloc.reset_peak()
    t0 = time.perf_counter()
    result = run_function(func, [x])
    stats = result.stats
    elapsed = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del result
    return [
        (f"chain run ({n_ops} ops on {elems:,} f32)", f"{elapsed:8.3f} s",
         f"{n_ops / elapsed:10,.0f} ops/s"),
        ("  peak_live_bytes", mb(stats["peak_live_bytes"]),
         f"{stats['peak_live_bytes'] / array:.1f} arrays"),
        ("  tracemalloc peak", mb(peak), f"{peak / array:.1f} arrays"),
        ("  all intermediates", mb(n_ops * array), f"{n_ops} arrays"),
    ]


def table(title: str, rows: list[tuple[str, str, str]]) -> str:
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    out = [title, "-" * len(title)]
    out += [f"{a:<{w0}}  {b:>{w1}}  {c}".rstrip() for a, b, c in rows]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--ops", type=int, default=10000, help="ops in the generated program")
    p.add_argument("--repeats", type=int, default=3, help="runs per measurement (median)")
    p.add_argument("--chain-ops", type=int, default=300, help="ops in the long chain")
    p.add_argument("--chain-elems", type=int, default=1 << 20, help="elements per chain array")
    p.add_argument("--no-chain", action="store_true", help="skip the long-chain memory case")
    args = p.parse_args(argv)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, median of {args.repeats}")
    print()
    print(table(f"{args.ops:,} ops on [{N}, {N}] f32", bench_program(args.ops, args.repeats)))
    if not args.no_chain:
        print()
        print(table("long chain (memory)", bench_chain(args.chain_ops, args.chain_elems)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
