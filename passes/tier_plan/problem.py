"""The tier-assignment model: steps, values, gaps, a plan, and what a plan costs and occupies.

Both solvers (`greedy`, `ilp`) optimize this very `Problem` and this very objective (`plan_cost`),
so the ILP is an exact reference for the greedy solver. It is numbers only: the pass
(`lamina.passes.assign_memory_tiers`) builds it from a function and rewrites the function from the
`Plan` a solver returns.

Steps and values
----------------
Program points are steps 0..K-1 (step K is the return), each with a compute time in seconds.
A value has a size (bytes per device), a definition step (-1 for an argument), the steps that
read it in HBM ("needs", after its definition) and an end (the last step it is live; K: it lives
until the return). An argument may have a "home", the offload tier it is declared in (ZeRO-Offload
style): it stays there and is prefetched before each use. Bytes the solver does not place (values
the program already put in a tier, SRAM intermediates of fused ops) are `Problem.fixed`, per tier
and step.

Pipeline stages
---------------
Capacities are per device. In a pipeline-staged program (`Problem.stage_names`, one per stage)
a value on stage s (`Value.stage`) is held by the devices of stage s only, and a value without a
stage by every device; the devices of one stage hold the same values, so one device stands for
each stage. Every tier must fit at every step on each stage's device, counting the values of that
stage and the unstaged ones (`stage_occupancy`; the fixed bytes of one stage are
`Problem.staged_fixed`). Without stages there is one group of devices and nothing changes. The
windows that hide a transfer are still steps of the one program order, whatever their stage (a
simplification: a stage's copy engine also overlaps the other stages' compute, which runs on other
devices, and its own idle time in the pipeline's bubble).

Gaps and plans
--------------
Compute reads and writes only HBM, so a value must be in HBM at its definition and at every need.
Between two consecutive needs a < b (a `Gap`) it either stays in HBM (KEEP: HBM bytes on a+1..b)
or is offloaded (OFF p: HBM on p..b only; a prefetch to HBM issued before step p, a + 1 < p <= b,
as p = a + 1 would free the HBM copy and fetch it back at once; an argument's first gap, a = -1,
may take any p from 0).
An offloaded value has one copy in an offload tier T (host or nvme), made right after its
definition (it occupies T from then to its end), and its HBM copy is freed after the first
offloaded gap starts. An argument may start in any tier at no cost. After its last need, a value
that lives on to the return (a result) has a tail gap: it either stays in HBM or is returned from
its offload copy. A `Plan` holds per value its offload tier and per gap its prefetch point. At
every step and in every tier the bytes live (`occupancy`) must fit the capacity (`check_plan`).

Cost
----
Transfers run on a copy engine concurrently with compute. A prefetch of gap (a, b] issued before
step p is hidden by the compute of steps p..b-1; its exposed time is
max(0, bytes / bw(T, hbm) - compute(p..b-1)). The copy out to T is issued right after the
definition d and must be done when the HBM copy is freed after step a (the first offloaded gap):
exposed max(0, bytes / bw(hbm, T) - compute(d+1..a)). Transfers are assumed not to slow each
other down (one copy engine per transfer; a documented simplification). The objective is the sum
of exposed times (`offload_cost` per value, `plan_cost` in all).

Recompute
---------
A gap (a, b] (not a tail, unless it runs to the return) may also be RECOMPUTE (the prefetch point
`RECOMPUTE`): the HBM copy is freed after step a and the value's defining op runs again right
before step b, so the value is in HBM at b only (like a prefetch issued at b). On the way it
needs `Value.extra` transient bytes (the constants its recompute rebuilds), freed before step b
runs: they share HBM with what is live just before b (everything in HBM at b but b's own
results), not with b's results. So HBM at b must fit twice: the step itself, and the moment
before it, which is the step less the bytes of the values defined at b (`defined_bytes`) plus the
extras of the recomputes for b (summed: a conservative bound on the rewrite, which rebuilds one
chain at a time). Counting the extras on top of b's results, as the model once did, refused
plans that run within the capacity. It costs
`Value.recompute` seconds of compute (the op's modeled time), counted as fully exposed: a
recompute runs on the compute stream, and the time it adds is not credited to the windows that
hide transfers (a conservative simplification). Its inputs (`Value.inputs`) must be in HBM at b
under the plan: kept there, or prefetched or recomputed for b in turn (`in_hbm`); inputs computed
from constants alone are rebuilt with it and are not listed. A value computed from constants alone
(`Value.never_moved`) has no offload copy: each of its gaps is kept or recomputed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

# the tiers a value can be offloaded to, in the order the greedy solver tries them (host first:
# the faster link)
OFFLOAD_TIERS = ("host", "nvme")
# the prefetch point of a gap whose value is recomputed before its next need (see Recompute)
RECOMPUTE = -1


@dataclass
class Value:
    """One value the solver places (sizes are bytes per device: the local shard)."""

    name: str
    size: int
    define: int                 # -1: an argument
    needs: list[int]            # sorted steps that read it in HBM (after `define`)
    end: int                    # last step it is live (K: to the return)
    home: str | None = None     # an argument's declared offload tier (must start there)
    recompute: float | None = None   # seconds one recompute takes (None: cannot be recomputed)
    inputs: list[int] = field(default_factory=list)  # values that must be in HBM to recompute it
    extra: int = 0              # transient bytes a recompute needs besides the value itself
    never_moved: bool = False   # computed from constants alone: kept or recomputed, never moved
    stage: int | None = None    # the pipeline stage whose devices hold it (None: every device)

    @property
    def is_arg(self) -> bool:
        return self.define < 0


@dataclass
class Problem:
    """Steps, values, and per tier the capacity and the bandwidth to and from HBM."""

    steps: int                          # K
    compute: list[float]                # seconds per step (len K)
    values: list[Value]
    capacity: dict[str, float]          # per tier (bytes per device)
    bandwidth: dict[str, float]         # offload tier -> bytes/s between it and hbm
    fixed: dict[str, list[float]] = field(default_factory=dict)  # bytes per step (len K+1) per tier
    # one name per pipeline stage ([""]: a program without stages, one group of devices)
    stage_names: list[str] = field(default_factory=lambda: [""])
    # bytes per step the solver does not place that only one stage's devices hold: (tier, stage)
    staged_fixed: dict[tuple[str, int], list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # prefix sums of the compute times: every cost asks for the compute of a window of steps
        self.prefix = [0.0]
        for c in self.compute:
            self.prefix.append(self.prefix[-1] + c)

    @property
    def stages(self) -> int:
        """How many groups of devices hold different values (1 without pipeline stages)."""
        return len(self.stage_names)

    def stages_of(self, v: Value) -> range:
        """The stages whose devices hold `v`: its own, or all of them for an unstaged value."""
        return range(self.stages) if v.stage is None else range(v.stage, v.stage + 1)

    def fixed_at(self, tier: str, s: int) -> list[float]:
        """The bytes per step (0..K) in `tier` on one device of stage `s` that no plan moves."""
        ys = list(self.fixed.get(tier, [0.0] * (self.steps + 1)))
        for k, y in enumerate(self.staged_fixed.get((tier, s), ())):
            ys[k] += y
        return ys

    def on_stage(self, s: int | None) -> str:
        """' on stage NAME' for messages about a staged program, '' without stages."""
        return "" if s is None or self.stages == 1 else f" on stage {self.stage_names[s]}"

    def window(self, lo: int, hi: int) -> float:
        """Compute time of steps lo..hi-1 (empty when hi <= lo)."""
        lo, hi = max(lo, 0), min(hi, self.steps)
        return self.prefix[hi] - self.prefix[lo] if hi > lo else 0.0

    def tiers(self) -> list[str]:
        """The offload tiers this problem can use: those with a capacity and a bandwidth."""
        return [t for t in OFFLOAD_TIERS if t in self.capacity and t in self.bandwidth]

    def in_cost(self, v: Value, tier: str, p: int, b: int) -> float:
        """Exposed time of the prefetch from `tier` issued before step `p` for the need at `b`."""
        return max(0.0, v.size / self.bandwidth[tier] - self.window(p, b))

    def out_cost(self, v: Value, tier: str, a: int) -> float:
        """Exposed time of the copy out to `tier` when the first offloaded gap starts at `a`
        (an argument offloaded from the start begins in `tier`: no copy)."""
        if a < 0:
            return 0.0
        return max(0.0, v.size / self.bandwidth[tier] - self.window(v.define + 1, a + 1))


@dataclass
class Gap:
    """A stretch (a, b] of one value between two points that need it in HBM (its definition
    counts as one; a tail runs from the last need to the value's end)."""

    value: int
    a: int
    b: int          # the next need; for a tail: the value's end
    tail: bool = False


def gaps_of(v: Value, vi: int) -> list[Gap]:
    """The value's gaps in order: one per need, then the tail when it lives past its last need."""
    out: list[Gap] = []
    prev = v.define
    for n in v.needs:
        out.append(Gap(vi, prev, n))
        prev = n
    if v.end > prev:
        out.append(Gap(vi, prev, v.end, tail=True))
    return out


def hbm_start(g: Gap, p: int | None) -> int:
    """First step of gap `g` at which the value is in HBM under prefetch point `p` (steps
    g.a+1..g.b; > g.b: never; a recompute: g.b)."""
    if p is None:
        return g.a + 1
    return g.b if p == RECOMPUTE else p


def can_recompute(prob: Problem, g: Gap) -> bool:
    """Whether gap `g` may be RECOMPUTE: long enough to free a step, not a tail unless it runs to
    the return (recomputed for it), and every input of the value alive at the need (defined
    before it, not yet freed)."""
    v = prob.values[g.value]
    if v.recompute is None or g.b - g.a < 2 or g.b > prob.steps \
            or (g.tail and g.b != prob.steps):
        return False
    return all(prob.values[u].define < g.b <= prob.values[u].end for u in v.inputs)


def in_hbm(prob: Problem, plan: Plan, ui: int, k: int) -> bool:
    """Whether value `ui` is in HBM at step k under `plan` (at its definition, or inside the HBM
    part of the gap that holds k)."""
    u = prob.values[ui]
    if u.define == k:
        return True
    for g, p in zip(gaps_of(u, ui), plan.prefetch[ui], strict=True):
        if g.a < k <= g.b:
            return hbm_start(g, p) <= k
    return False


@dataclass
class Plan:
    """A solution: per value the offload tier (or None) and per gap its prefetch point (None: keep;
    for a tail, b + 1: returned from the offload copy)."""

    tier: list[str | None]
    prefetch: list[list[int | None]]   # per value, per gap
    cost: float = 0.0
    solve_seconds: float = 0.0
    reasons: dict[tuple[int, int], str] = field(default_factory=dict)  # (value, gap) -> why
    optimal: bool = True        # the ILP: proven optimal (False: stopped at its time limit)
    gap: float | None = 0.0     # the ILP: relative gap to its best bound (None: unknown)


class Infeasible(Exception):
    """No plan fits: `tier` needs `need` bytes at `step` on a device of `stage` (None: the only
    group of devices, or not known), over its capacity. `live` is (bytes, value index) of the
    values in HBM there, largest first, for the pass's diagnostic."""

    def __init__(self, step: int, tier: str, need: float, capacity: float,
                 live: list[tuple[int, int]], stage: int | None = None) -> None:
        super().__init__(f"step {step}: tier {tier} needs {need} > {capacity}")
        self.step, self.tier, self.need, self.capacity, self.live = step, tier, need, capacity, live
        self.stage = stage


def defined_bytes(prob: Problem, s: int = 0) -> list[int]:
    """Per step (0..K), the bytes of the planned values defined there that a device of stage `s`
    holds: what HBM holds at the step but not yet in the moment before it, where recomputes for
    the step run."""
    out = [0] * (prob.steps + 1)
    for v in prob.values:
        if not v.is_arg and v.stage in (None, s):
            out[v.define] += v.size
    return out


def hbm_peak(step: float, extra: float, defined: float) -> float:
    """The HBM bytes step k must fit: the larger of the step (`step` bytes) and the moment
    before it (less its `defined` results, plus the recomputes' `extra` transients)."""
    return step + max(0.0, extra - defined)


def stage_occupancy(prob: Problem, plan: Plan) -> list[dict[str, list[float]]]:
    """Per stage, bytes per tier per step (0..K) on one of its devices under `plan` (a value
    counts on the stages that hold it, `Problem.stages_of`); HBM's is the peak around the step
    (`hbm_peak`: the step, or the moment before it when recomputes run there)."""
    K, S = prob.steps, prob.stages
    occ = [{t: prob.fixed_at(t, s) for t in prob.capacity} for s in range(S)]
    for o in occ:
        o.setdefault("hbm", [0.0] * (K + 1))
    extra = [[0.0] * (K + 1) for _ in range(S)]
    for vi, v in enumerate(prob.values):
        on = prob.stages_of(v)
        hbm = [0.0] * (K + 2)   # the value's HBM bytes per step, from differences
        if not v.is_arg:
            hbm[v.define] += v.size
            hbm[v.define + 1] -= v.size
        for g, p in zip(gaps_of(v, vi), plan.prefetch[vi], strict=True):
            lo, hi = hbm_start(g, p), min(g.b, K)
            if lo <= hi:
                hbm[lo] += v.size
                hbm[hi + 1] -= v.size
            if p == RECOMPUTE:
                for s in on:
                    extra[s][g.b] += v.extra
        run = 0.0
        for k in range(K + 1):
            run += hbm[k]
            if run:
                for s in on:
                    occ[s]["hbm"][k] += run
        t = plan.tier[vi]
        if t is not None:
            lo = 0 if v.is_arg else v.define + 1
            for s in on:
                ys = occ[s][t]
                for k in range(lo, min(v.end, K) + 1):
                    ys[k] += v.size
    for s in range(S):
        defined = defined_bytes(prob, s)
        occ[s]["hbm"] = [hbm_peak(y, extra[s][k], defined[k]) for k, y in enumerate(occ[s]["hbm"])]
    return occ


def occupancy(prob: Problem, plan: Plan) -> dict[str, list[float]]:
    """Bytes per tier per step (0..K) under `plan` on the fullest device: per step the largest
    over the stages of `stage_occupancy` (without stages, the one device every device is)."""
    per = stage_occupancy(prob, plan)
    return {t: [max(o[t][k] for o in per) for k in range(prob.steps + 1)] for t in per[0]}


def peaks(prob: Problem, plan: Plan, tier: str = "hbm") -> list[float]:
    """Per stage, the most bytes one of its devices holds in `tier` at a step under `plan`."""
    return [max(o[tier]) for o in stage_occupancy(prob, plan)]


def offload_cost(prob: Problem, v: Value, tier: str, gaps: Sequence[Gap],
                 prefetch: Sequence[int | None]) -> float:
    """One value's exposed transfer time: the copy out before its first offloaded gap, plus each
    offloaded gap's prefetch (a gap that runs to the end of the program has none), plus the
    compute of each recompute. The objective both solvers minimize, summed over values."""
    total, first = 0.0, True
    for g, p in zip(gaps, prefetch, strict=True):
        if p is None:
            continue
        if p == RECOMPUTE:
            assert v.recompute is not None
            total += v.recompute
            continue
        if first:
            total += prob.out_cost(v, tier, g.a)
            first = False
        if not g.tail:
            total += prob.in_cost(v, tier, p, g.b)
    return total


def plan_cost(prob: Problem, plan: Plan) -> float:
    """The objective: the exposed transfer time of every offloaded value and the time of every
    recompute."""
    total = 0.0
    for vi, v in enumerate(prob.values):
        t = plan.tier[vi]
        if t is None:
            assert all(p is None or p == RECOMPUTE for p in plan.prefetch[vi])
        total += offload_cost(prob, v, t or "host", gaps_of(v, vi), plan.prefetch[vi])
    return total


def live_at(prob: Problem, plan: Plan, k: int, s: int | None = None) -> list[tuple[int, int]]:
    """(bytes, value index) of the values in HBM at step k under `plan` (on a device of stage
    `s`; None: on any device), largest first: what an Infeasible at k names."""
    out: list[tuple[int, int]] = []
    for vi, v in enumerate(prob.values):
        if s is not None and v.stage not in (None, s):
            continue
        inside = v.define == k
        for g, p in zip(gaps_of(v, vi), plan.prefetch[vi], strict=True):
            inside |= hbm_start(g, p) <= k <= g.b
        if inside:
            out.append((int(v.size), vi))
    return sorted(out, reverse=True)


def check_plan(prob: Problem, plan: Plan, eps: float = 1e-6) -> None:
    """Raise AssertionError when `plan` overflows a tier at some step (for tests and benchmarks:
    a solver's own result is feasible by construction), or recomputes a value whose inputs are
    not in HBM where it runs, or moves a value that must not be moved."""
    for vi, v in enumerate(prob.values):
        assert not (v.never_moved and plan.tier[vi] is not None), f"{v.name} is moved"
        for g, p in zip(gaps_of(v, vi), plan.prefetch[vi], strict=True):
            if p == RECOMPUTE:
                assert can_recompute(prob, g), f"{v.name} cannot be recomputed at {g.b}"
                for u in v.inputs:
                    assert in_hbm(prob, plan, u, g.b), \
                        f"{v.name} recomputed at {g.b} without {prob.values[u].name} in HBM"
    for s, occ in enumerate(stage_occupancy(prob, plan)):
        for t, ys in occ.items():
            for k, y in enumerate(ys):
                if y > prob.capacity.get(t, math.inf) + eps:
                    raise AssertionError(f"plan overflows {t} at step {k}{prob.on_stage(s)}: "
                                         f"{y} > {prob.capacity[t]}")
