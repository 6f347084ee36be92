"""Random instances of assign-memory-tiers' model, shared by its tests and benchmarks/bench_tiers.py.

A chain of n definitions over n program points: value i is defined at point i - 1 (value 0 is an
argument), 4-32 KiB per device, read 1-3 times at random later points. `max_span=None` lets a read
fall anywhere later (dense: many values live at once, the tests' harder instances); an int draws
each value's span from [2, max_span) and keeps its reads within it (the benchmark's instances).
The callers choose the HBM capacity from the returned per-point need and live bytes.
"""

from __future__ import annotations

import numpy as np
from lamina.passes.tier_plan.problem import Value


def random_values(rng: np.random.Generator, n: int, max_span: int | None = None) -> list[Value]:
    values = []
    for i in range(n):
        d = i - 1 if i else -1
        k = int(rng.integers(1, 4))
        if max_span is None:
            reads = rng.integers(max(d + 1, 0), n, size=k)
        else:
            span = int(rng.integers(2, max(3, max_span)))
            reads = rng.integers(d + 1, min(n, d + 1 + span), size=k)
        needs = [x for x in sorted({int(x) for x in reads}) if x > d] or [min(d + 1, n - 1)]
        values.append(Value(f"v{i}", int(rng.integers(1, 9)) * 4096, d, needs, needs[-1]))
    return values


def need_and_live(values: list[Value], steps: int) -> tuple[list[int], list[int]]:
    """Per program point: bytes the point itself reads or defines, and bytes live across it."""
    need = [0] * (steps + 1)
    live = [0] * (steps + 1)
    for v in values:
        for k in {*v.needs, *([v.define] if v.define >= 0 else [])}:
            need[k] += v.size
        for k in range(max(v.define, 0), v.end + 1):
            live[k] += v.size
    return need, live
