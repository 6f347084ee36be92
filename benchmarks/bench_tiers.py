"""Greedy vs ILP for assign-memory-tiers on random instances of the tier model.

    .venv/bin/python benchmarks/bench_tiers.py [--sizes 50 100 200] [--seeds 5] [--time-limit 120]

Each instance: n values over n program points (a chain of definitions, each value read 1-3 times
at random later points, 4-32 KiB per device), compute 0.2-3 us per point, host/nvme transfer
bandwidths of the `tiny` target, and an HBM capacity between the largest single-step need and
the sum of all values (pressure 0.15-0.5 of the way), so offload is needed and prefetches compete
with capacity. Both solvers solve the same `Problem` (passes/assign_memory_tiers.py); the ILP
(scipy.optimize.milp / HiGHS) is the optimum reference. Reported per size: mean modeled exposed
transfer time of each, the mean relative gap (greedy - ILP) / ILP over instances where the ILP
cost is > 0 (instances with cost 0 for both count as gap 0), solve times and the speed-up.
The ILP runs under `--time-limit`: "ILP optimal" counts the instances it proved optimal; a run
stopped at the limit with a solution is compared against that solution (its own gap to the
best bound is shown as "ILP bound gap"); a run with no solution within the limit is left out of
the gap columns and counted under "no ILP solution".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from lamina.ir.diagnostics import LaminaError
from lamina.passes.assign_memory_tiers import Problem, Value, check_plan, solve_greedy, solve_ilp


def instance(n: int, seed: int) -> Problem:
    rng = np.random.default_rng(seed)
    steps = n
    values = []
    for i in range(n):
        d = i - 1 if i else -1
        k = int(rng.integers(1, 4))
        span = int(rng.integers(2, max(3, n // 3)))
        needs = sorted({int(x) for x in rng.integers(d + 1, min(steps, d + 1 + span), size=k)})
        needs = [x for x in needs if x > d] or [min(d + 1, steps - 1)]
        values.append(Value(f"v{i}", int(rng.integers(1, 9)) * 4096, d, needs, needs[-1]))
    need = [0] * (steps + 1)
    for v in values:
        for k in {*v.needs, *([v.define] if v.define >= 0 else [])}:
            need[k] += v.size
    live = [0] * (steps + 1)
    for v in values:
        for k in range(max(v.define, 0), v.end + 1):
            live[k] += v.size
    lo, hi = max(need), max(live)
    cap = lo + float(rng.uniform(0.15, 0.5)) * (hi - lo)
    compute = [float(x) for x in rng.uniform(0.2e-6, 3e-6, size=steps)]
    return Problem(steps, compute, values, {"hbm": cap, "host": 16 * 2**20, "nvme": 2**30},
                   {"host": 20e9, "nvme": 2e9})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 200])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=120.0)
    args = ap.parse_args()
    print("| values | instances | ILP optimal | no ILP solution | greedy exposed (us) | "
          "ILP exposed (us) | mean gap | max gap | ILP bound gap (max) | greedy time (ms) | "
          "ILP time (s) | speed-up |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        gaps, gc, ic, gt, it, bound_gaps = [], [], [], [], [], []
        optimal = missing = 0
        for seed in range(args.seeds):
            prob = instance(n, 1000 * n + seed)
            t0 = time.perf_counter()
            g = solve_greedy(prob)
            gt.append(time.perf_counter() - t0)
            check_plan(prob, g)
            t0 = time.perf_counter()
            try:
                o = solve_ilp(prob, time_limit=args.time_limit)
            except LaminaError:
                it.append(time.perf_counter() - t0)
                missing += 1
                continue
            it.append(time.perf_counter() - t0)
            check_plan(prob, o)
            optimal += o.optimal
            bound_gaps.append(o.gap if o.gap is not None else float("nan"))
            gc.append(g.cost)
            ic.append(o.cost)
            gaps.append(0.0 if g.cost <= o.cost + 1e-15 else (g.cost - o.cost) / max(o.cost, 1e-12))

        def mean(xs: list[float], k: float = 1.0, fmt: str = ".3f") -> str:
            return format(statistics.mean(xs) * k, fmt) if xs else "-"

        print(f"| {n} | {args.seeds} | {optimal} | {missing} | {mean(gc, 1e6)} | {mean(ic, 1e6)} | "
              f"{mean(gaps, 100, '.2f')}% | {max(gaps, default=0) * 100:.2f}% | "
              f"{max(bound_gaps, default=0) * 100:.2f}% | {mean(gt, 1e3, '.2f')} | "
              f"{mean(it, 1, '.2f')} | {statistics.mean(it) / statistics.mean(gt):.0f}x |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
