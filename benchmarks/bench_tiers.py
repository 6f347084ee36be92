"""Greedy vs ILP for assign-memory-tiers on random instances of the tier model.

    .venv/bin/python benchmarks/bench_tiers.py [--sizes 50 100 200] [--seeds 5] [--time-limit 120]

Each instance: n values over n program points (a chain of definitions, each value read 1-3 times
at random later points, 4-32 KiB per device), compute 0.2-3 us per point, host/nvme transfer
bandwidths of the `tiny` target, and an HBM capacity between the largest single-step need and
the sum of all values (pressure 0.15-0.5 of the way), so offload is needed and prefetches compete
with capacity. Both solvers solve the same `Problem` (passes/tier_plan/problem.py); the ILP
(scipy.optimize.milp / HiGHS) is the optimum reference. Reported per size: mean modeled exposed
transfer time of each, the mean relative gap (greedy - ILP) / ILP over the instances whose ILP
cost is above ZERO_COST, solve times and the speed-up. Where the ILP hides every transfer (its
cost below ZERO_COST) a relative gap would divide by about 0 and say nothing; those instances are
counted under "ILP cost 0" with the greedy's own largest cost next to them instead.
The ILP runs under `--time-limit`: "ILP optimal" counts the instances it proved optimal; a run
stopped at the limit with a solution is compared against that solution (its own gap to the
best bound is shown as "ILP bound gap"); a run with no solution within the limit is left out of
the gap columns and counted under "no ILP solution".
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
from lamina.ir.core.diagnostics import LaminaError
from lamina.passes.tier_plan.greedy import solve_greedy
from lamina.passes.tier_plan.ilp import solve_ilp
from lamina.passes.tier_plan.problem import Problem, check_plan

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from strategies.tiers import need_and_live, random_values  # noqa: E402

# seconds: a modeled cost below this (under a thousandth of the least compute step, 0.2 us) is 0
ZERO_COST = 1e-10


def relative_gap(greedy: float, ilp: float) -> float | None:
    """(greedy - ILP) / ILP, 0 where the greedy is no worse (an ILP stopped at its time limit may
    be); None where the ILP cost is below ZERO_COST, which no ratio can be taken against."""
    if ilp < ZERO_COST:
        return None
    return max(0.0, greedy - ilp) / ilp


def instance(n: int, seed: int) -> Problem:
    rng = np.random.default_rng(seed)
    values = random_values(rng, n, max_span=n // 3)
    need, live = need_and_live(values, n)
    lo, hi = max(need), max(live)
    cap = lo + float(rng.uniform(0.15, 0.5)) * (hi - lo)
    compute = [float(x) for x in rng.uniform(0.2e-6, 3e-6, size=n)]
    return Problem(n, compute, values, {"hbm": cap, "host": 16 * 2**20, "nvme": 2**30},
                   {"host": 20e9, "nvme": 2e9})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 200])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=120.0)
    args = ap.parse_args()
    print("| values | instances | ILP optimal | no ILP solution | greedy exposed (us) | "
          "ILP exposed (us) | mean gap | max gap | ILP cost 0 (greedy max, us) | "
          "ILP bound gap (max) | greedy time (ms) | ILP time (s) | speed-up |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        gaps, gc, ic, gt, it, bound_gaps = [], [], [], [], [], []
        zero_ilp: list[float] = []   # the greedy's cost where the ILP's is 0
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
            gap = relative_gap(g.cost, o.cost)
            if gap is None:
                zero_ilp.append(g.cost)
            else:
                gaps.append(gap)

        def mean(xs: list[float], k: float = 1.0, fmt: str = ".3f") -> str:
            return format(statistics.mean(xs) * k, fmt) if xs else "-"

        print(f"| {n} | {args.seeds} | {optimal} | {missing} | {mean(gc, 1e6)} | {mean(ic, 1e6)} | "
              f"{mean(gaps, 100, '.2f')}% | {max(gaps, default=0) * 100:.2f}% | "
              f"{len(zero_ilp)} ({max(zero_ilp, default=0) * 1e6:.3f}) | "
              f"{max(bound_gaps, default=0) * 100:.2f}% | {mean(gt, 1e3, '.2f')} | "
              f"{mean(it, 1, '.2f')} | {statistics.mean(it) / statistics.mean(gt):.0f}x |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
