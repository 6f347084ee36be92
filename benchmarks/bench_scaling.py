"""How parse, verify and every pass grow with program size: the growth exponent per stage.

    .venv/bin/python benchmarks/bench_scaling.py [--sizes 1000 10000 100000] [--repeats 1] [--clock wall]

Programs come from the test suite's linear-time generator (`strategies.programs.
random_program_text`: a DAG of elementwise, broadcast, reduction, composite, matmul, layout,
dropout, constant and select ops on small tensors). For each size the script times, in one
process: parsing the text, verifying the module, then each pass on its own fresh copy of the
module (`fuse-elementwise`, `annotate-lifetimes`, `assign-memory-tiers{target=h100-node}` after
`annotate-lifetimes`, and the verifier on the annotated module), and the whole README pipeline
`fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=h100-node}` (each pass followed
by the verifier, as lamina-opt runs it). It prints seconds per stage and size, and the growth
exponent between consecutive sizes, log(t2 / t1) / log(n2 / n1): 1 is linear, 2 quadratic.
Targets: every exponent <= 1.15, and the whole pipeline on the largest size in less than 3x the
time to parse it. Pass times exclude the verifier that a pipeline runs after each pass, except
in the "README pipeline" row. Times are the process's CPU seconds by default (`--clock cpu`,
`time.process_time`): on a machine shared with other jobs, wall time mostly measures the others;
`--clock wall` times with `time.perf_counter`. Each timed stage starts after a full collection
with the heap frozen (`gc.freeze`), so it pays for collecting only the objects it makes. Each
size's times are printed (stderr) as soon as they are measured, so a run stopped early still
reports the sizes it finished.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import sys
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from lamina.ir.text.source import make_context, parse_text, verify  # noqa: E402
from lamina.passes.pipeline import build_pipeline, run_pipeline  # noqa: E402
from strategies.programs import random_program_text  # noqa: E402
from xdsl.context import Context  # noqa: E402
from xdsl.dialects.builtin import ModuleOp  # noqa: E402

PIPELINE = "fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=h100-node}"


CLOCK: Callable[[], float] = time.process_time


def _start() -> float:
    """Collect, then freeze what the script holds (texts and modules for the other stages) out of
    the collector's sight: else whichever stage happens to trigger a full collection pays for
    traversing all of it, a jump in one cell that says nothing about that stage."""
    gc.collect()
    gc.freeze()
    return CLOCK()


def _stop(t0: float) -> float:
    dt = CLOCK() - t0
    gc.unfreeze()
    return dt


def _timed(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = _start()
        fn()
        times.append(_stop(t0))
    return statistics.median(times)


def _apply_unverified(ctx: Context, module: ModuleOp, spec: str) -> None:
    for p in build_pipeline(spec):
        p.apply(ctx, module)


def measure(n: int, repeats: int) -> dict[str, float]:
    text = random_program_text(n, n, max_rank=2, max_dim=8)
    ctx = make_context()
    out: dict[str, float] = {}
    out["parse"] = _timed(lambda: parse_text(text, "gen.mlir", ctx), repeats)
    module = parse_text(text, "gen.mlir", ctx)
    out["verify"] = _timed(lambda: verify(module), repeats)

    def fresh() -> ModuleOp:
        return module.clone()

    for name, spec, before in (("fuse-elementwise", "fuse-elementwise", ""),
                               ("annotate-lifetimes", "annotate-lifetimes", ""),
                               ("assign-memory-tiers", "assign-memory-tiers{target=h100-node}",
                                "annotate-lifetimes")):
        times = []
        for _ in range(repeats):
            m = fresh()
            if before:
                _apply_unverified(ctx, m, before)
            t0 = _start()
            _apply_unverified(ctx, m, spec)
            times.append(_stop(t0))
        out[name] = statistics.median(times)
    annotated = fresh()
    _apply_unverified(ctx, annotated, "annotate-lifetimes")
    out["verify (with frees)"] = _timed(lambda: verify(annotated), repeats)

    def whole() -> None:
        m = fresh()
        run_pipeline(ctx, m, build_pipeline(PIPELINE))

    out["README pipeline"] = _timed(whole, repeats)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description="Growth exponents of parse, verify and every pass.")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = ap.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    rows: dict[int, dict[str, float]] = {}
    for n in args.sizes:
        rows[n] = measure(n, args.repeats)
        print(f"measured {n} ops ({args.clock}): " +
              ", ".join(f"{k} {v:.3f} s" for k, v in rows[n].items()), file=sys.stderr, flush=True)
    stages = list(next(iter(rows.values())))
    sizes = args.sizes
    head = "| stage | " + " | ".join(f"{n:,} ops" for n in sizes) + " | " + \
        " | ".join(f"exp {a:,}->{b:,}" for a, b in zip(sizes, sizes[1:], strict=False)) + " |"
    print(head)
    print("|" + "---|" * (1 + len(sizes) + len(sizes) - 1))
    for s in stages:
        ts = [rows[n][s] for n in sizes]
        exps = [math.log(t2 / t1) / math.log(n2 / n1) if t1 > 0 else float("nan")
                for t1, t2, n1, n2 in zip(ts, ts[1:], sizes, sizes[1:], strict=False)]
        print(f"| {s} | " + " | ".join(f"{t:.3f} s" for t in ts) + " | " +
              " | ".join(f"{e:.2f}" for e in exps) + " |")
    big = rows[sizes[-1]]
    print(f"\nREADME pipeline / parse at {sizes[-1]:,} ops: "
          f"{big['README pipeline'] / big['parse']:.2f}x (target < 3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
