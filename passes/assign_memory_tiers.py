"""`assign-memory-tiers`: a memory tier for every value, and the moves between tiers.

    -p 'assign-memory-tiers{target=tiny solver=greedy hbm-capacity=0 explain=false}'

Run it after `annotate-lifetimes` (without frees every value lives to the end of the function).
`target` is a built-in target name; `hbm-capacity` (bytes, 0 = the target's) overrides the HBM
capacity, e.g. to test a plan under pressure. `solver=ilp` solves the same model exactly with
`scipy.optimize.milp` (HiGHS; `pip install 'lamina[ilp]'`) and is meant for small programs.

The model (`Problem`)
---------------------
Program points are the function's top-level ops other than `lamina.free` ("steps" 0..K-1; the
`func.return` is step K). Each step has a compute time from a roofline over the target:
max(flops / target.flops, bytes read and written / HBM bandwidth), per device (a fused op counts
the flops of its body and only its external bytes). Each value has a size (bytes per device: its
local shard), a definition step (-1 for arguments), the steps that read it ("needs": every op
that is not a free or the return) and an end (the step of its last use when it has a
`lamina.free`, else K: live until the return).

Compute reads and writes only HBM, so a value must be in HBM at its definition and at every need.
Between two consecutive needs a < b (a "gap") it either stays in HBM (KEEP: HBM bytes on
a+1..b) or is offloaded (OFF p: HBM on p..b only; a prefetch `lamina.move` to HBM issued before
step p, a < p <= b). An offloaded value has one copy in an offload tier T (host or nvme), made
right after its definition by `lamina.move %v to T` (it occupies T from then to its end), and
its HBM copy is freed after the first offloaded gap starts. An argument may start in any tier at
no cost (the plan gives the function's signature its tiers); an argument declared `tier = host`
(ZeRO-Offload style) stays there and is prefetched before each use. After its last need, a value
that lives on to the return (a result) either stays in HBM or is returned from its offload copy.
At every step and in every tier the bytes live must fit the capacity; SRAM holds only values
declared in SRAM and the intermediates of the `lamina.fused` op that runs at that step.

Cost: transfers run on a copy engine concurrently with compute. A prefetch of gap (a, b] issued
before step p is hidden by the compute of steps p..b-1; its exposed time is
max(0, bytes / bw(T, hbm) - compute(p..b-1)). The copy out to T is issued right after the
definition d and must be done when the HBM copy is freed after step a (the first offloaded gap):
exposed max(0, bytes / bw(hbm, T) - compute(d+1..a)). Transfers are assumed not to slow each
other down (one copy engine per transfer; a documented simplification). The objective is the sum
of exposed times.

The greedy solver (default)
---------------------------
Start with everything in HBM (arguments declared in host prefetched as early as possible).
1. Sweep the steps in order; at a step k whose HBM bytes exceed the capacity, offload gaps that
   hold a value in HBM at k without needing it there (a < k < b, a prefetch already issued at
   p <= k, or a result's tail): set their prefetch point to k + 1 (the latest point that keeps k
   free; a later overflow pushes it further) until k fits. Victims are ranked by one of three
   rules: "cost" (extra exposed time per byte), "belady" (furthest next use first) and "reach"
   (extra exposed time per byte per step until the next use: Belady weighted by exposed time per
   byte); a single value that covers the excess alone is taken first when it costs less than
   the fill. The offload tier is host when host has room over the value's lifetime, else nvme.
2. Polish: issue each offloaded gap's prefetch as early as HBM allows (all the way: keep it),
   costliest first, until stable; this never raises the cost. The sweep runs once per rule and
   the cheapest polished plan is kept.
3. Local search while it improves (at most 3 passes): (a) take an offloaded gap back into HBM,
   or issue its prefetch halfway to its previous need, repair the overflow that makes by the
   sweep's rule without that gap, polish what the repair touched, and keep it when the total
   cost fell (else undo from a log); (b) offload a kept gap with its prefetch at the latest
   point that still hides the transfer, polish the offloaded gaps over the room it frees, keep
   it when the total cost fell.
Greedy and ILP optimize the very same `Problem` and objective (`plan_cost`). Cost: a sweep is
O(K + sum over overflowing steps of the gaps live there, log); a local-search try is O(the gap's
span x the gaps live there), with costs per value cached and HBM bytes updated incrementally.

The ILP (`solver=ilp`) reports a run stopped at its time limit without a feasible point as "no
solution within the time limit" (a LaminaError, not infeasibility); with a point it returns it
with `optimal = False` and `gap` (relative to HiGHS's best bound).

When no assignment fits (the bytes a step's own operands and results need exceed the capacity,
or the offload tiers are full) the pass stops with a diagnostic at that op naming the tier, the
bytes needed and the largest values live there. With `explain=true` the pass says why each move
was inserted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

from lamina.analysis.fusion import sram_bytes
from lamina.analysis.naming import Namer
from lamina.analysis.sizes import local_bytes
from lamina.ir.diagnostics import LaminaError, error_at
from lamina.ir.dtypes import ITEMSIZE, tensor_dtype
from lamina.ir.fused import FusedOp
from lamina.ir.memory import FreeOp, MoveOp, ancestor_in, value_label, with_tier
from lamina.ir.opbase import LaminaOp, tensor_info
from lamina.ir.placement import tier_of
from lamina.ir.target import Target, load_target
from lamina.passes.explain import ExplainLog, LaminaPass
from xdsl.context import Context
from xdsl.dialects.builtin import FunctionType, ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Operation, SSAValue

OFFLOAD_TIERS = ("host", "nvme")


# ---- the model ---------------------------------------------------------------------------------

@dataclass
class Value:
    name: str
    size: int
    define: int                 # -1: an argument
    needs: list[int]            # sorted steps that read it in HBM (after `define`)
    end: int                    # last step it is live (K: to the return)
    home: str | None = None     # an argument's declared offload tier (must start there)

    @property
    def is_arg(self) -> bool:
        return self.define < 0


@dataclass
class Problem:
    steps: int                          # K
    compute: list[float]                # seconds per step (len K)
    values: list[Value]
    capacity: dict[str, float]          # per tier (bytes per device)
    bandwidth: dict[str, float]         # offload tier -> bytes/s between it and hbm
    fixed: dict[str, list[float]] = field(default_factory=dict)  # bytes per step (len K+1) per tier

    def __post_init__(self) -> None:
        self.prefix = [0.0]
        for c in self.compute:
            self.prefix.append(self.prefix[-1] + c)

    def window(self, lo: int, hi: int) -> float:
        """Compute time of steps lo..hi-1 (empty when hi <= lo)."""
        lo, hi = max(lo, 0), min(hi, self.steps)
        return self.prefix[hi] - self.prefix[lo] if hi > lo else 0.0

    def tiers(self) -> list[str]:
        return [t for t in OFFLOAD_TIERS if t in self.capacity and t in self.bandwidth]

    def in_cost(self, v: Value, tier: str, p: int, b: int) -> float:
        return max(0.0, v.size / self.bandwidth[tier] - self.window(p, b))

    def out_cost(self, v: Value, tier: str, a: int) -> float:
        """Exposed time of the copy out to `tier` when the first offloaded gap starts at `a`
        (an argument offloaded from the start begins in `tier`: no copy)."""
        if a < 0:
            return 0.0
        return max(0.0, v.size / self.bandwidth[tier] - self.window(v.define + 1, a + 1))


@dataclass
class Gap:
    """A stretch (a, b] of one value between two points that need it in HBM (b = -1: the tail)."""

    value: int
    a: int
    b: int          # the next need; for a tail: the value's end
    tail: bool = False


def gaps_of(v: Value, vi: int) -> list[Gap]:
    out: list[Gap] = []
    prev = v.define
    for n in v.needs:
        out.append(Gap(vi, prev, n))
        prev = n
    if v.end > prev:
        out.append(Gap(vi, prev, v.end, tail=True))
    return out


@dataclass
class Plan:
    """A solution: per value the offload tier (or None) and per gap its prefetch point (None: keep;
    for a tail, b + 1: returned from the offload copy)."""

    tier: list[str | None]
    prefetch: list[list[int | None]]   # per value, per gap
    cost: float = 0.0
    solve_seconds: float = 0.0
    reasons: dict[tuple[int, int], str] = field(default_factory=dict)
    optimal: bool = True        # the ILP: proven optimal (False: stopped at its time limit)
    gap: float | None = 0.0     # the ILP: relative gap to its best bound (None: unknown)


class Infeasible(Exception):
    def __init__(self, step: int, tier: str, need: float, capacity: float,
                 live: list[tuple[int, int]]):
        super().__init__(f"step {step}: tier {tier} needs {need} > {capacity}")
        self.step, self.tier, self.need, self.capacity, self.live = step, tier, need, capacity, live


def _hbm_start(v: Value, g: Gap, p: int | None) -> int:
    """First step of gap `g` at which the value is in HBM (steps g.a+1..g.b; > g.b: never)."""
    return g.a + 1 if p is None else p


def occupancy(prob: Problem, plan: Plan) -> dict[str, list[float]]:
    """Bytes per tier per step (0..K) under `plan`."""
    K = prob.steps
    occ = {t: list(prob.fixed.get(t, [0.0] * (K + 1))) for t in prob.capacity}
    occ.setdefault("hbm", [0.0] * (K + 1))
    for vi, v in enumerate(prob.values):
        if not v.is_arg:
            occ["hbm"][v.define] += v.size
        for g, p in zip(gaps_of(v, vi), plan.prefetch[vi], strict=True):
            lo = _hbm_start(v, g, p)
            for k in range(lo, min(g.b, K) + 1):
                occ["hbm"][k] += v.size
        t = plan.tier[vi]
        if t is not None:
            lo = 0 if v.is_arg else v.define + 1
            for k in range(lo, min(v.end, K) + 1):
                occ[t][k] += v.size
    return occ


def offload_cost(prob: Problem, v: Value, tier: str, gaps: Sequence[Gap],
                 prefetch: Sequence[int | None]) -> float:
    """One value's exposed transfer time: the copy out before its first offloaded gap, plus each
    offloaded gap's prefetch (a gap that runs to the end of the program has none). The objective
    both solvers minimize, summed over values."""
    total, first = 0.0, True
    for g, p in zip(gaps, prefetch, strict=True):
        if p is None:
            continue
        if first:
            total += prob.out_cost(v, tier, g.a)
            first = False
        if not g.tail:
            total += prob.in_cost(v, tier, p, g.b)
    return total


def plan_cost(prob: Problem, plan: Plan) -> float:
    total = 0.0
    for vi, v in enumerate(prob.values):
        t = plan.tier[vi]
        if t is None:
            assert all(p is None for p in plan.prefetch[vi])
            continue
        total += offload_cost(prob, v, t, gaps_of(v, vi), plan.prefetch[vi])
    return total


def live_at(prob: Problem, plan: Plan, k: int) -> list[tuple[int, int]]:
    """(bytes, value index) of the values in HBM at step k under `plan`, largest first."""
    out = []
    for vi, v in enumerate(prob.values):
        inside = v.define == k
        for g, p in zip(gaps_of(v, vi), plan.prefetch[vi], strict=True):
            inside |= _hbm_start(v, g, p) <= k <= g.b
        if inside:
            out.append((int(v.size), vi))
    return sorted(out, reverse=True)


def check_plan(prob: Problem, plan: Plan, eps: float = 1e-6) -> None:
    occ = occupancy(prob, plan)
    for t, ys in occ.items():
        for k, y in enumerate(ys):
            if y > prob.capacity.get(t, math.inf) + eps:
                raise AssertionError(f"plan overflows {t} at step {k}: {y} > {prob.capacity[t]}")


# ---- greedy ------------------------------------------------------------------------------------

class _State:
    """A greedy plan under construction: per gap its prefetch point, per value its offload tier,
    and the bytes per step in HBM and in each offload tier, all updated incrementally."""

    def __init__(self, prob: Problem):
        self.prob = prob
        K = self.K = prob.steps
        self.cap = prob.capacity["hbm"]
        self.gaps = [gaps_of(v, vi) for vi, v in enumerate(prob.values)]
        self.pre: list[list[int | None]] = [[None] * len(g) for g in self.gaps]
        self.tier: list[str | None] = [None] * len(prob.values)
        self.hbm = list(prob.fixed.get("hbm", [0.0] * (K + 1)))
        self.off = {t: list(prob.fixed.get(t, [0.0] * (K + 1))) for t in prob.tiers()}
        self.reasons: dict[tuple[int, int], str] = {}
        self.log: list[tuple] | None = None     # undo log while a local-search try runs
        self.touched: set[tuple[int, int]] = set()
        self.vcost = [0.0] * len(prob.values)
        self.covering: list[list[tuple[int, int]]] = [[] for _ in range(K + 1)]
        for vi, v in enumerate(prob.values):
            if not v.is_arg:
                self.hbm[v.define] += v.size
            for gi, g in enumerate(self.gaps[vi]):
                for k in range(g.a + 1, min(g.b, K) + 1):
                    self.hbm[k] += v.size
                    if k < g.b or g.tail:
                        self.covering[k].append((vi, gi))
            if v.home is not None and self.gaps[vi]:
                self.tier[vi] = v.home
                self._occupy(vi, v.home, 1)
                g = self.gaps[vi][0]
                self._set(vi, 0, g.b + 1 if g.tail else 0)
                self.vcost[vi] = self.value_cost(vi)

    # -- bookkeeping --
    def _span(self, vi: int) -> range:
        v = self.prob.values[vi]
        return range(0 if v.is_arg else v.define + 1, min(v.end, self.K) + 1)

    def _occupy(self, vi: int, t: str, sign: int) -> None:
        n = sign * self.prob.values[vi].size
        ys = self.off[t]
        for k in self._span(vi):
            ys[k] += n

    def _fits(self, vi: int, t: str) -> bool:
        n, cap, ys = self.prob.values[vi].size, self.prob.capacity[t], self.off[t]
        return all(ys[k] + n <= cap + 1e-9 for k in self._span(vi))

    def _set(self, vi: int, gi: int, p: int | None) -> None:
        """Set gap gi's prefetch point (HBM bytes only; the tier is the caller's business)."""
        v, g = self.prob.values[vi], self.gaps[vi][gi]
        old = _hbm_start(v, g, self.pre[vi][gi])
        new = _hbm_start(v, g, p)
        hi = min(g.b, self.K) + 1
        n = v.size
        if new > old:
            for k in range(old, min(new, hi)):
                self.hbm[k] -= n
        else:
            for k in range(new, min(old, hi)):
                self.hbm[k] += n
        if self.log is not None:
            self.log.append((vi, gi, self.pre[vi][gi], self.tier[vi]))
        self.pre[vi][gi] = p
        self.touched.add((vi, gi))
        self.vcost[vi] = self.value_cost(vi)

    def _retier(self, vi: int, t: str | None) -> None:
        had = self.tier[vi]
        if had == t:
            return
        if self.log is not None:
            self.log.append((vi, -1, None, had))
        if had is not None:
            self._occupy(vi, had, -1)
        if t is not None:
            self._occupy(vi, t, 1)
        self.tier[vi] = t
        self.vcost[vi] = self.value_cost(vi)

    def begin(self) -> None:
        self.log = []
        self.touched = set()

    def commit(self) -> None:
        self.log = None

    def rollback(self) -> None:
        log, self.log = self.log, None
        assert log is not None
        for vi, gi, p, t in reversed(log):
            if gi < 0:
                self._retier(vi, t)
            else:
                self._set(vi, gi, p)

    def change(self, vi: int, gi: int, p: int | None) -> bool:
        """Set a prefetch point, taking or releasing the value's offload tier; False (and no
        change) when the value needs an offload copy and no offload tier has room for it."""
        had = self.tier[vi]
        self._set(vi, gi, p)
        if p is not None and had is None:
            for t in self.prob.tiers():
                if self._fits(vi, t):
                    self._retier(vi, t)
                    return True
            self._set(vi, gi, None)
            return False
        if p is None and had is not None and self.prob.values[vi].home is None \
                and all(q is None for q in self.pre[vi]):
            self._retier(vi, None)
        return True

    def value_cost(self, vi: int, override: tuple[int, int | None] | None = None) -> float:
        """The value's exposed transfer time (plan_cost's terms), with gap override[0] set to
        override[1] when given."""
        prob = self.prob
        pre = list(self.pre[vi])
        if override is not None:
            pre[override[0]] = override[1]
        return offload_cost(prob, prob.values[vi], self.tier[vi] or prob.tiers()[0],
                            self.gaps[vi], pre)

    def cost(self) -> float:
        return sum(self.vcost)

    def lowest_p(self, vi: int, gi: int) -> int:
        g = self.gaps[vi][gi]
        return g.a + 2 if g.a >= 0 else 0

    # -- the sweep --
    def repair(self, lo: int, hi: int, rule: str, banned: tuple[int, int] | None = None) -> None:
        """Fix every HBM overflow at steps lo..hi in order: at an overflowing step k, offload
        (prefetch point k + 1; a tail: returned from the copy) the gaps in HBM at k that do not
        need it there, best first by `rule`, until k fits. Raises Infeasible."""
        prob, cap = self.prob, self.cap
        for k in range(max(lo, 0), min(hi, self.K) + 1):
            if self.hbm[k] <= cap + 1e-9:
                continue
            cands = []
            for vi, gi in self.covering[k]:
                if (vi, gi) == banned:
                    continue
                v, g = prob.values[vi], self.gaps[vi][gi]
                if _hbm_start(v, g, self.pre[vi][gi]) > k:
                    continue
                q = g.b + 1 if g.tail else k + 1
                delta = self.value_cost(vi, (gi, q)) - self.vcost[vi]
                per_byte = delta / max(v.size, 1)
                if rule == "cost":
                    key = (per_byte, -g.b, -v.size)
                elif rule == "belady":
                    key = (-g.b if not g.tail else -self.K - 1, per_byte, -v.size)
                else:  # "reach": exposed time per byte and per step of relief it can give
                    key = (per_byte / max(1, min(g.b, self.K + 1) - k), -g.b, -v.size)
                cands.append((key, vi, gi, q, v.size, delta))
            cands.sort()
            excess = self.hbm[k] - cap
            # knapsack fix: one value that covers the excess alone, cheaper than the fill
            fill = got = 0.0
            for c in cands:
                if got >= excess:
                    break
                fill += c[5]
                got += c[4]
            single = [c for c in cands if c[4] >= excess]
            if single:
                best = min(single, key=lambda c: (c[5], -c[4]))
                if best[5] < fill - 1e-15:
                    cands = [best] + [c for c in cands if c is not best]
            for _key, vi, gi, q, _n, _d in cands:
                if self.hbm[k] <= cap + 1e-9:
                    break
                if self.change(vi, gi, q):
                    self.reasons[(vi, gi)] = f"step {k}"
            if self.hbm[k] > cap + 1e-9:
                live = [(int(prob.values[vi].size), vi) for vi in range(len(self.gaps))
                        if prob.values[vi].define == k or any(
                            _hbm_start(prob.values[vi], g, p) <= k <= g.b
                            for g, p in zip(self.gaps[vi], self.pre[vi], strict=True))]
                raise Infeasible(k, "hbm", self.hbm[k], cap, sorted(live, reverse=True))

    def earlier(self, vi: int, gi: int) -> bool:
        """Issue an offloaded gap's prefetch as early as HBM allows (all the way: keep it in HBM).
        Never raises the cost (a larger window hides more; keeping drops the transfers)."""
        p = self.pre[vi][gi]
        g, v = self.gaps[vi][gi], self.prob.values[vi]
        if p is None:
            return False
        j = min(p, self.K + 1)
        lo = g.a + 1
        while j > lo and self.hbm[j - 1] + v.size <= self.cap + 1e-9:
            j -= 1
        if j == lo and (v.home is None or gi > 0):
            if self.value_cost(vi, (gi, None)) <= self.vcost[vi] + 1e-15:
                self.change(vi, gi, None)
                return True
        j = max(j, self.lowest_p(vi, gi))
        if not g.tail and j < p:
            self._set(vi, gi, j)
            return True
        return False

    def plan(self) -> Plan:
        return Plan(list(self.tier), [list(x) for x in self.pre], reasons=dict(self.reasons))


def _sweep(prob: Problem, rule: str) -> _State:
    st = _State(prob)
    st.repair(0, prob.steps, rule)
    _polish(st)
    return st


def _polish(st: _State) -> None:
    """Move every offloaded gap's prefetch as early as HBM allows, costliest first, until stable."""
    for _ in range(4):
        order = sorted(((-(st.value_cost(vi)), vi, gi) for vi, ps in enumerate(st.pre)
                        for gi, p in enumerate(ps) if p is not None))
        changed = False
        for _c, vi, gi in order:
            changed |= st.earlier(vi, gi)
        if not changed:
            break


def _local_search(st: _State, rounds: int = 3, rule: str = "cost") -> None:
    """Swap moves, while they improve (at most `rounds` passes): take an offloaded gap back into
    HBM (or issue its prefetch halfway to its previous need), repair the overflow this makes with
    the sweep's rule but without that gap, issue the prefetches that repair made as early as HBM
    allows, and keep the result when the total cost fell (else undo it from the log). A try costs
    O(the gap's span x the values live there)."""
    cost = st.cost()
    for _ in range(rounds):
        improved = False
        order = sorted(((-st.value_cost(vi), vi, gi) for vi, ps in enumerate(st.pre)
                        for gi, p in enumerate(ps) if p is not None))
        for negc, vi, gi in order:
            p = st.pre[vi][gi]
            if -negc <= 1e-15 or p is None:
                continue
            v, g = st.prob.values[vi], st.gaps[vi][gi]
            if v.home is not None and gi == 0:
                continue
            for target in (None, max(st.lowest_p(vi, gi), (g.a + 1 + p) // 2)):
                if target is not None and (g.tail or target >= p):
                    continue
                st.begin()
                try:
                    st.change(vi, gi, target)
                    st.repair(g.a + 1, min(p, st.K + 1) - 1, rule, banned=(vi, gi))
                    for key in sorted(st.touched):
                        if key != (vi, gi):
                            st.earlier(*key)
                except Infeasible:
                    st.rollback()
                    continue
                new = st.cost()
                if new < cost - 1e-12 * max(1.0, cost):
                    st.commit()
                    cost = new
                    improved = True
                    break
                st.rollback()
        improved |= _offload_moves(st)
        cost = st.cost()
        if not improved:
            break


def _offload_moves(st: _State) -> bool:
    """The other half of a swap: offload a gap kept in HBM with its prefetch issued where the
    transfer is just hidden, then issue the prefetches of the offloaded gaps over the room it
    freed as early as HBM allows; keep it when the total cost fell."""
    prob, K = st.prob, st.K
    cost = st.cost()
    improved = False
    for vi, v in enumerate(prob.values):
        if v.size <= 0 or not prob.tiers():
            continue
        bw = prob.bandwidth[st.tier[vi] or prob.tiers()[0]]
        for gi, g in enumerate(st.gaps[vi]):
            if st.pre[vi][gi] is not None or g.tail or g.b - g.a < 3:
                continue
            lo = st.lowest_p(vi, gi)
            q = lo
            while q + 1 <= g.b and prob.window(q + 1, g.b) >= v.size / bw:
                q += 1
            if q <= g.a + 1 or q > g.b:
                continue
            st.begin()
            if not st.change(vi, gi, q):
                st.rollback()
                continue
            seen = set()
            for k in range(g.a + 1, min(q, K + 1)):
                for key in st.covering[k]:
                    if key not in seen and key != (vi, gi) and st.pre[key[0]][key[1]] is not None:
                        seen.add(key)
                        st.earlier(*key)
            new = st.cost()
            if new < cost - 1e-12 * max(1.0, cost):
                st.commit()
                cost = new
                improved = True
            else:
                st.rollback()
    return improved


def _ok(st: _State) -> bool:
    return all(y <= st.cap + 1e-9 for y in st.hbm) and all(
        y <= st.prob.capacity[t] + 1e-9 for t, ys in st.off.items() for y in ys)


def solve_greedy(prob: Problem) -> Plan:
    t0 = time.perf_counter()
    best: _State | None = None
    best_rule = "cost"
    err: Infeasible | None = None
    for rule in ("cost", "belady", "reach"):
        try:
            st = _sweep(prob, rule)
        except Infeasible as e:
            err = err or e
            continue
        if best is None or st.cost() < best.cost() - 1e-15:
            best, best_rule = st, rule
    if best is None:
        assert err is not None
        raise err
    _local_search(best, rule=best_rule)
    assert _ok(best)
    for t, ys in best.off.items():
        for k, y in enumerate(ys):
            if y > prob.capacity[t] + 1e-9:
                raise Infeasible(k, t, y, prob.capacity[t], [])
    sram = prob.fixed.get("sram")
    if sram is not None and "sram" in prob.capacity:
        for k, y in enumerate(sram):
            if y > prob.capacity["sram"]:
                raise Infeasible(k, "sram", y, prob.capacity["sram"], [])
    plan = best.plan()
    plan.cost = plan_cost(prob, plan)
    plan.solve_seconds = time.perf_counter() - t0
    return plan


# ---- ILP ---------------------------------------------------------------------------------------

def solve_ilp(prob: Problem, time_limit: float = 120.0) -> Plan:
    """The same model solved exactly with scipy.optimize.milp (HiGHS)."""
    try:
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_array
    except ImportError:
        raise LaminaError("assign-memory-tiers{solver=ilp} needs scipy: pip install "
                          "'lamina[ilp]'") from None
    t0 = time.perf_counter()
    K = prob.steps
    vals = prob.values
    tiers = prob.tiers()
    cost: list[float] = []
    rows: list[int] = []
    cols: list[int] = []
    data: list[float] = []
    lb: list[float] = []
    ub: list[float] = []
    nrow = 0

    def var(c: float) -> int:
        cost.append(c)
        return len(cost) - 1

    def row(entries: list[tuple[int, float]], lo: float, hi: float) -> None:
        nonlocal nrow
        for j, a in entries:
            rows.append(nrow)
            cols.append(j)
            data.append(a)
        lb.append(lo)
        ub.append(hi)
        nrow += 1

    hbm_rows: list[list[tuple[int, float]]] = [[] for _ in range(K + 1)]
    off_rows = {t: [[] for _ in range(K + 1)] for t in tiers}
    hbm_fixed = list(prob.fixed.get("hbm", [0.0] * (K + 1)))
    decode: list[tuple[int, list[tuple[int, list[tuple[int, str | None, int | None]]]],
                       dict[str, int]]] = []
    for vi, v in enumerate(vals):
        if not v.is_arg:
            hbm_fixed[v.define] += v.size
        gs = gaps_of(v, vi)
        y = {t: var(0.0) for t in tiers}
        row([(y[t], 1.0) for t in tiers], 0, 1)
        if v.home is not None:
            row([(y[v.home], 1.0)], 1, 1)
        lo_t = 0 if v.is_arg else v.define + 1
        for t in tiers:
            for k in range(lo_t, min(v.end, K) + 1):
                off_rows[t][k].append((y[t], v.size))
        firsts: dict[str, list[int]] = {t: [] for t in tiers}
        gap_vars = []
        for gi, g in enumerate(gs):
            opts: list[tuple[int, str | None, int | None]] = []
            if v.home is None or gi > 0:
                kv = var(0.0)
                opts.append((kv, None, None))
                for k in range(g.a + 1, min(g.b, K) + 1):
                    hbm_rows[k].append((kv, v.size))
            for t in tiers:
                if v.home is not None and t != v.home:
                    continue
                f = var(prob.out_cost(v, t, g.a))
                firsts[t].append(f)
                if g.tail:
                    ps = [g.b + 1]
                elif g.a < 0:
                    ps = list(range(0, g.b + 1))
                else:
                    ps = list(range(g.a + 2, g.b + 1))
                for p in ps:
                    xv = var(0.0 if g.tail else prob.in_cost(v, t, p, g.b))
                    opts.append((xv, t, p))
                    for k in range(p, min(g.b, K) + 1):
                        hbm_rows[k].append((xv, v.size))
                    # offloading gap gi needs the copy, made at or before it
                    row([(xv, 1.0)] + [(f2, -1.0) for f2 in firsts[t]], -np.inf, 0)
            row([(o[0], 1.0) for o in opts], 1, 1)
            gap_vars.append((gi, opts))
        for t in tiers:
            row([(y[t], 1.0)] + [(f, -1.0) for f in firsts[t]], 0, 0)
        decode.append((vi, gap_vars, y))
    # Capacity rows are divided by the capacity (bytes ~1e9 would swamp HiGHS's absolute
    # feasibility tolerance) and the objective is scaled so its largest coefficient is 1e3:
    # exposed times are ~1e-6 s, below HiGHS's absolute MIP gap (1e-6), which would otherwise
    # accept the first feasible point as "optimal".
    def cap_row(entries: list[tuple[int, float]], room: float, capacity: float) -> None:
        s = 1.0 / max(capacity, 1.0)
        row([(j, a * s) for j, a in entries], -np.inf, room * s)

    for k in range(K + 1):
        if hbm_rows[k]:
            cap_row(hbm_rows[k], prob.capacity["hbm"] - hbm_fixed[k], prob.capacity["hbm"])
        elif hbm_fixed[k] > prob.capacity["hbm"]:
            raise Infeasible(k, "hbm", hbm_fixed[k], prob.capacity["hbm"], [])
        for t in tiers:
            if off_rows[t][k]:
                fixed = prob.fixed.get(t, [0.0] * (K + 1))[k]
                cap_row(off_rows[t][k], prob.capacity[t] - fixed, prob.capacity[t])
    n = len(cost)
    A = coo_array((data, (rows, cols)), shape=(nrow, n)).tocsr()
    c = np.array(cost)
    scale = 1e3 / float(c.max()) if n and c.max() > 0 else 1.0
    # scipy annotates lb/ub as float; they are array_like (one bound per row)
    res = milp(c * scale, constraints=LinearConstraint(A, cast(Any, lb), cast(Any, ub)),
               integrality=np.ones(n), bounds=Bounds(0, 1),
               options={"time_limit": time_limit, "mip_rel_gap": 1e-6})
    if res.x is None:
        if res.status == 1:  # the time limit (or node limit) hit before any feasible point
            raise LaminaError(f"assign-memory-tiers{{solver=ilp}}: no solution within the time "
                              f"limit of {time_limit:g} s ({K} program points, {len(vals)} "
                              f"values, {n} variables); use solver=greedy or a larger limit")
        k = max(range(K + 1), key=lambda j: hbm_fixed[j])
        raise Infeasible(k, "hbm", hbm_fixed[k], prob.capacity["hbm"], [])
    x = res.x
    plan = Plan([None] * len(vals), [[None] * len(gaps_of(v, i)) for i, v in enumerate(vals)])
    for vi, gap_vars, _y in decode:
        for gi, opts in gap_vars:
            for j, t, p in opts:
                if x[j] > 0.5:
                    plan.prefetch[vi][gi] = p
                    if t is not None:
                        plan.tier[vi] = t
                        plan.reasons[(vi, gi)] = "the ILP optimum"
    plan.cost = plan_cost(prob, plan)
    plan.solve_seconds = time.perf_counter() - t0
    plan.optimal = res.status == 0
    bound = getattr(res, "mip_dual_bound", None)
    if bound is not None and np.isfinite(bound):
        bound = float(bound) / scale
        plan.gap = max(0.0, plan.cost - bound) / max(plan.cost, 1e-300) if plan.cost > 0 else 0.0
    else:
        plan.gap = 0.0 if plan.optimal else None
    return plan


# ---- from IR to the model and back -------------------------------------------------------------

def step_time(op: Operation, target: Target, func: FuncOp) -> float:
    """Roofline seconds of one step per device."""
    hbm_bw = target.tier("hbm").bandwidth if any(t.name == "hbm" for t in target.tiers) else 1e12
    moved = sum(local_bytes(v, func) for v in (*op.operands, *op.results)
                if isinstance(v.type, TensorType))
    if isinstance(op, MoveOp):
        return 0.0
    flops = 0.0
    ops = [op] if isinstance(op, LaminaOp) else \
        [o for o in op.body.block.ops if isinstance(o, LaminaOp)] if isinstance(op, FusedOp) else []
    for o in ops:
        info = o.info
        res = o.results[0]
        glob = tensor_info(res.type)
        numel = max(1, math.prod(glob.shape))
        local = local_bytes(res, func) / max(1, numel * 1.0)
        scale = local / (_itemsize(res))
        flops += info.flops(o.operand_infos(), glob, o.attr_values()) * scale
    return max(flops / target.flops, moved / hbm_bw)


def _itemsize(v: SSAValue) -> float:
    return float(ITEMSIZE[tensor_dtype(v.type)])


@dataclass
class _FuncModel:
    func: FuncOp
    steps: list[Operation]
    ret: ReturnOp
    values: list[SSAValue]
    problem: Problem


def build_model(func: FuncOp, target: Target, hbm_capacity: float = 0) -> _FuncModel:
    block = func.body.block
    ops = list(block.ops)
    ret = ops[-1]
    if not isinstance(ret, ReturnOp):
        raise error_at(func, "assign-memory-tiers: the function must end in func.return")
    steps = [o for o in ops[:-1] if not isinstance(o, FreeOp)]
    index = {o: i for i, o in enumerate(steps)}
    K = len(steps)
    names = Namer(func)
    capacity = {t.name: t.capacity for t in target.tiers}
    if "hbm" not in capacity:
        raise LaminaError(f"target '{target.name}' has no hbm tier to compute from")
    if hbm_capacity:
        capacity["hbm"] = float(hbm_capacity)
    bandwidth = {t: target.transfer_bandwidth("hbm", t) for t in OFFLOAD_TIERS if t in capacity}
    fixed = {t: [0.0] * (K + 1) for t in capacity}
    for i, o in enumerate(steps):
        if isinstance(o, FusedOp) and "sram" in fixed:
            fixed["sram"][i] += sram_bytes(o, target)
    values: list[SSAValue] = []
    model: list[Value] = []
    for v, d in [*((a, -1) for a in block.args),
                 *((r, i) for i, o in enumerate(steps) for r in o.results)]:
        size = local_bytes(v, func)
        needs: set[int] = set()
        end = d
        freed = False
        for use in v.uses:
            u = use.operation
            while u.parent_block() is not block:
                u = u.parent_op()
            if isinstance(u, FreeOp):
                freed = True
                continue
            if u is ret:
                end = K
                continue
            if not (isinstance(u, MoveOp) and u.tier not in OFFLOAD_TIERS):
                needs.add(index[u])  # a move to hbm reads its operand where it is
            end = max(end, index[u])
        if not freed:
            end = K
        if d < 0:
            end = max(end, 0)  # an argument is somewhere at the entry: count it at step 0
        tier = tier_of(v.type)
        declared_off = tier in OFFLOAD_TIERS or tier == "sram"
        if declared_off and (d >= 0 and (isinstance(v.owner, MoveOp) or tier == "sram")):
            # a value the program already put in a tier (an explicit move, or sram): fixed
            assert tier is not None
            lo = d
            for k in range(lo, min(end, K) + 1):
                fixed.setdefault(tier, [0.0] * (K + 1))[k] += size
            continue
        if tier in OFFLOAD_TIERS and tier not in bandwidth:
            raise error_at(func, f"assign-memory-tiers: {names(v)} is in tier '{tier}', which "
                           f"target '{target.name}' does not have")
        values.append(v)
        model.append(Value(names(v), size, d, sorted(n for n in needs if n > d), end,
                           home=tier if d < 0 and tier in OFFLOAD_TIERS else None))
    compute = [step_time(o, target, func) for o in steps]
    prob = Problem(K, compute, model, capacity, bandwidth, fixed)
    return _FuncModel(func, steps, ret, values, prob)


def _infeasible_error(fm: _FuncModel, e: Infeasible, target: Target) -> LaminaError:
    at: Operation = fm.steps[e.step] if e.step < len(fm.steps) else fm.ret
    what = f"{at.name}" if not at.results else f"{value_label(at.results[0])} = {at.name}"
    own = sum(local_bytes(v, fm.func) for v in {*at.operands, *at.results}
              if isinstance(v.type, TensorType))
    live = ", ".join(f"{fm.problem.values[vi].name} ({n} B)" for n, vi in e.live[:4])
    return error_at(at, f"assign-memory-tiers: no assignment fits tier '{e.tier}' at program point "
                    f"{e.step} ({what}): {int(e.need)} bytes per device needed, capacity "
                    f"{int(e.capacity)} (target '{target.name}'); the op's own operands and result "
                    f"take {own} bytes" + (f"; largest live values: {live}" if live else ""))


def rewrite(fm: _FuncModel, plan: Plan, log: ExplainLog | None) -> int:
    """Apply `plan` to the function: types get tiers, moves and frees are inserted."""
    func, steps, prob = fm.func, fm.steps, fm.problem
    block: Block = func.body.block
    K = len(steps)
    pos = {o: i for i, o in enumerate(steps)}
    planned = set(fm.values)
    for o in list(block.ops):
        if isinstance(o, FreeOp) and o.value in planned:
            o.detach()
            o.erase()
    pre: dict[int, list[Operation]] = {}     # before step k
    post: dict[int, list[Operation]] = {}    # after step k (-1: before step 0)
    frees: dict[int, list[Operation]] = {}   # after step k, after `post`
    moves = 0
    for vi, (v, mv) in enumerate(zip(fm.values, prob.values, strict=True)):
        tier = plan.tier[vi]
        gs = gaps_of(mv, vi)
        ps = plan.prefetch[vi]
        starts_off = bool(mv.is_arg and gs and gs[0].a < 0 and ps[0] is not None)
        _set_type(v, with_tier(v.type, tier if starts_off else "hbm"))
        copy_off: SSAValue | None = v if starts_off else None
        if tier is not None and not starts_off:
            m = MoveOp(v, tier)
            post.setdefault(mv.define, []).append(m)
            copy_off = m.result
            moves += 1
            if log is not None:
                first = next(g for g, p in zip(gs, ps, strict=True) if p is not None)
                where = steps[mv.define] if mv.define >= 0 else func
                log.add(where, f"copy {mv.name} ({mv.size} B) to {tier} as soon as it exists: "
                        f"HBM is over capacity after point {first.a} "
                        f"({plan.reasons.get((vi, gs.index(first)), 'planned')}), before its "
                        f"next use; exposed {prob.out_cost(mv, tier, first.a) * 1e6:.3g} us")
        elif starts_off and log is not None:
            log.add(func, f"argument {mv.name} ({mv.size} B) starts in {tier}"
                    + ("" if mv.home else f": HBM is over capacity at "
                       f"{plan.reasons.get((vi, 0), 'a point')} before its first use"))
        cur: SSAValue | None = None if starts_off else v
        segments: list[tuple[int, int, SSAValue | None]] = []  # steps lo..hi read copy
        start = mv.define
        for gi, (g, p) in enumerate(zip(gs, ps, strict=True)):
            if p is None:
                continue
            if cur is not None:
                segments.append((start, g.a, cur))
                frees.setdefault(g.a, []).append(FreeOp(cur))
                cur = None
            if g.tail:
                if log is not None:
                    log.add(fm.ret, f"{mv.name} is returned from {tier}: HBM is over capacity at "
                            f"{plan.reasons.get((vi, gi), 'a point')} after its last use")
                start = K + 1
                continue
            assert copy_off is not None
            m = MoveOp(copy_off, "hbm", prefetch=g.b - p)
            pre.setdefault(p, []).append(m)
            moves += 1
            if log is not None:
                at = steps[g.b] if g.b < K else fm.ret
                log.add(at, f"prefetch {mv.name} ({mv.size} B) from {tier}, issued {g.b - p} "
                        f"op(s) before this use: HBM is over capacity at "
                        f"{plan.reasons.get((vi, gi), 'a point')} since its previous use; exposed "
                        f"{prob.in_cost(mv, tier or 'host', p, g.b) * 1e6:.3g} us")
            cur = m.result
            start = p
        if cur is not None:
            segments.append((start, K, cur))
        for use in list(v.uses):
            u = use.operation
            if u.parent_block() is None:
                continue  # a move/free this rewrite made (inserted below)
            anc = ancestor_in(u, block)
            assert anc is not None, "a use outside the function it is defined in"
            k = K if anc is fm.ret else pos[anc]
            copy = copy_off
            for lo, hi, c in segments:
                if lo <= k <= hi:
                    copy = c
            assert copy is not None, f"no copy of {mv.name} at point {k}"
            if copy is not v:
                ops = list(use.operation.operands)
                ops[use.index] = copy
                use.operation.operands = ops
        if mv.end < K:
            if cur is not None:
                frees.setdefault(mv.end, []).append(FreeOp(cur))
            if copy_off is not None and copy_off is not cur:
                frees.setdefault(mv.end, []).append(FreeOp(copy_off))
    first_op = steps[0] if steps else fm.ret
    head = post.get(-1, []) + frees.get(-1, [])
    if head:
        block.insert_ops_before(head, first_op)
    for k, o in enumerate(steps):
        if pre.get(k):
            block.insert_ops_before(pre[k], o)
        tail = post.get(k, []) + frees.get(k, [])
        if tail:
            nxt = o.next_op
            assert nxt is not None
            block.insert_ops_before(tail, nxt)
    if pre.get(K):
        block.insert_ops_before(pre[K], fm.ret)
    _fix_fused(func)
    func.function_type = FunctionType.from_lists([a.type for a in block.args],
                                                 [r.type for r in fm.ret.operands])
    return moves


def _first(gs: list[Gap], ps: list[int | None]) -> int:
    for g, p in zip(gs, ps, strict=True):
        if p is not None:
            return g.a
    return 0


def _set_type(v: SSAValue, t: Attribute) -> None:
    v._type = t  # xDSL 0.74 keeps the type in `_type`; values are retyped in place


def _fix_fused(func: FuncOp) -> None:
    """Inside fused ops: block arguments take the operand types, yielded values the result types,
    and the other intermediates are marked sram."""
    for op in func.body.block.ops:
        if not isinstance(op, FusedOp):
            continue
        body = op.body.block
        for a, v in zip(body.args, op.inputs, strict=True):
            _set_type(a, v.type)
        yielded = {}
        for y, r in zip(op.yield_op.operands, op.outputs, strict=True):
            yielded[y] = r.type
        for o in body.ops:
            for r in o.results:
                if r in yielded:
                    _set_type(r, yielded[r])
                elif isinstance(r.type, TensorType):
                    _set_type(r, with_tier(r.type, "sram"))


# ---- the pass ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class AssignMemoryTiers(LaminaPass):
    """Choose tiers and insert moves so every step fits (see the module docstring)."""

    name: ClassVar[str] = "assign-memory-tiers"
    minimums: ClassVar[dict[str, int]] = {"hbm_capacity": 0}
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"solver": ("greedy", "ilp")}
    target: str = "h100-node"
    solver: str = "greedy"
    hbm_capacity: int = 0

    def run(self, ctx: Context, module: ModuleOp, log: ExplainLog | None) -> None:
        target = load_target(self.target)
        for op in list(module.walk()):
            if isinstance(op, FuncOp) and op.body.blocks:
                assign_function(op, target, self.solver, log, self.hbm_capacity)


def assign_function(func: FuncOp, target: Target, solver: str = "greedy",
                    log: ExplainLog | None = None, hbm_capacity: float = 0) -> Plan:
    fm = build_model(func, target, hbm_capacity)
    try:
        plan = solve_greedy(fm.problem) if solver == "greedy" else solve_ilp(fm.problem)
    except Infeasible as e:
        raise _infeasible_error(fm, e, target) from None
    n = rewrite(fm, plan, log)
    if log is not None:
        log.add(func, f"@{func.sym_name.data}: {n} move(s), modeled exposed transfer time "
                f"{plan.cost * 1e6:.3g} us ({solver}, target '{target.name}', hbm capacity "
                f"{int(fm.problem.capacity['hbm'])} B per device)")
    return plan
