"""The greedy tier planner (`solver=greedy`, the default): sweep, polish, local search.

It solves the `Problem` of `problem` for the same objective as the ILP (`plan_cost`), in time
close to linear in the program, so it is the solver for real programs; the ILP measures how far
from the optimum it lands (benchmarks/bench_tiers.py).

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

Recompute (a gap's option RECOMPUTE, see `problem`) is one more kind of victim in the sweep: the
gap leaves HBM from a+1 to b-1 and costs the recompute's time. It is offered when the value's
inputs are in HBM at b now and its transient bytes fit in the moment before b next to the values
b reads (else the sweep, which fixes steps in order, took a recompute at an earlier step that no
later choice could fit at b, and reported an overflow there that keeping the value avoids);
the inputs are then pinned there (no later change may take them out of HBM at b, `_pin_ok`)
until the recompute is undone. A value that is never moved has only
recompute victims. The local search also tries recomputing an offloaded gap instead (3a).

Pipeline stages: the HBM bytes per step are kept per stage (a device of each), and a step fits
when it fits on every stage. At a step that overflows on stage s the victims are the gaps of
the values stage s holds (its own, and those without a stage: one `Covering` per stage), so a
value moves only for its own stage's overflow, and the reason names that stage; a prefetch is
issued earlier only where every stage holding the value has room. A staged value updates one
stage's bytes, an unstaged one all P: the work is at most P times the unstaged bound.

Cost: a sweep is O(K + sum over overflowing steps of the gaps live there, log); a local-search try
is O(the gap's span x the gaps live there), with costs per value cached and HBM bytes updated
incrementally (`_State`).
"""

from __future__ import annotations

import time

from lamina.passes.tier_plan.covering import Covering
from lamina.passes.tier_plan.problem import (
    RECOMPUTE,
    Infeasible,
    Plan,
    Problem,
    can_recompute,
    defined_bytes,
    gaps_of,
    hbm_peak,
    hbm_start,
    live_at,
    offload_cost,
    plan_cost,
)

RULES = ("cost", "belady", "reach")

# one undo record: (value, gap or -1 for the value's tier, prefetch point before, tier before)
_Undo = tuple[int, int, int | None, str | None]
# one victim candidate at an overflowing step: (rank key, value, gap, new prefetch point, bytes,
# extra cost)
_Candidate = tuple[tuple[float, float, float], int, int, int, int, float]


class _State:
    """A greedy plan under construction: per gap its prefetch point, per value its offload tier,
    and the bytes per step in HBM and in each offload tier, all updated incrementally."""

    def __init__(self, prob: Problem, recompute: bool = True) -> None:
        self.prob = prob
        self.recompute = recompute  # False: only values that are never moved are recomputed
        K = self.K = prob.steps
        S = range(prob.stages)
        self.cap = prob.capacity["hbm"]
        self.gaps = [gaps_of(v, vi) for vi, v in enumerate(prob.values)]
        # per value, the stages whose devices hold it (one capacity per stage, see `problem`)
        self.on = [prob.stages_of(v) for v in prob.values]
        self.pre: list[list[int | None]] = [[None] * len(g) for g in self.gaps]
        self.tier: list[str | None] = [None] * len(prob.values)
        # per stage, the HBM bytes per step on one of its devices
        self.hbm = [prob.fixed_at("hbm", s) for s in S]
        # per stage and step, the recomputes' transient bytes and the bytes defined there (`load`)
        self.extra = [[0.0] * (K + 1) for _ in S]
        self.defined = [defined_bytes(prob, s) for s in S]
        # per stage and step, the bytes in HBM in the moment before it under any plan: the values
        # it reads
        self.floor = [prob.fixed_at("hbm", s) for s in S]
        for vi, v in enumerate(prob.values):
            for s in self.on[vi]:
                for k in v.needs:
                    self.floor[s][k] += v.size
        self.off = {t: [prob.fixed_at(t, s) for s in S] for t in prob.tiers()}
        self.reasons: dict[tuple[int, int], str] = {}
        # per value, the steps where a recompute reads it (step -> how many): it must be in HBM
        self.pins: list[dict[int, int]] = [{} for _ in prob.values]
        self.log: list[_Undo] | None = None     # undo log while a local-search try runs
        self.touched: set[tuple[int, int]] = set()
        self.vcost = [0.0] * len(prob.values)
        self.total = 0.0   # sum of vcost, kept up to date so cost() is O(1)
        self.exposed = 0   # how many values have a nonzero vcost
        # per stage and step, the gaps that hold their value in HBM there without needing it: the
        # victims
        self.covering = [Covering(self.gaps, K, None if prob.stages == 1 else
                                  [vi for vi, v in enumerate(prob.values) if v.stage in (None, s)])
                         for s in S]
        # the HBM bytes per step of everything kept, from the differences at the gaps' ends
        # (O(values + steps), where adding each gap's bytes step by step was O(sum of spans):
        # quadratic in a program whose values live long); sizes are whole bytes, so the sums
        # are exact and equal to adding them one by one
        delta = [[0] * (K + 2) for _ in S]
        for vi, v in enumerate(prob.values):
            for s in self.on[vi]:
                if not v.is_arg:
                    self.hbm[s][v.define] += v.size
                for g in self.gaps[vi]:
                    lo, hi = g.a + 1, min(g.b, K)
                    if lo <= hi:
                        delta[s][lo] += v.size
                        delta[s][hi + 1] -= v.size
        for s in S:
            run = 0
            for k in range(K + 1):
                run += delta[s][k]
                if run:
                    self.hbm[s][k] += run
        for vi, v in enumerate(prob.values):
            if v.home is not None and self.gaps[vi]:
                self.tier[vi] = v.home
                self._occupy(vi, v.home, 1)
                g = self.gaps[vi][0]
                self._set(vi, 0, g.b + 1 if g.tail else 0)
                self._recost(vi)

    # -- bookkeeping --
    def _recost(self, vi: int) -> None:
        new, old = self.value_cost(vi), self.vcost[vi]
        self.total += new - old
        self.exposed += (new != 0.0) - (old != 0.0)
        self.vcost[vi] = new

    def _span(self, vi: int) -> range:
        """The steps the value's offload copy occupies its tier."""
        v = self.prob.values[vi]
        return range(0 if v.is_arg else v.define + 1, min(v.end, self.K) + 1)

    def _occupy(self, vi: int, t: str, sign: int) -> None:
        n = sign * self.prob.values[vi].size
        for s in self.on[vi]:
            ys = self.off[t][s]
            for k in self._span(vi):
                ys[k] += n

    def _fits(self, vi: int, t: str) -> bool:
        n, cap = self.prob.values[vi].size, self.prob.capacity[t]
        return all(ys[k] + n <= cap + 1e-9 for ys in (self.off[t][s] for s in self.on[vi])
                   for k in self._span(vi))

    def _set(self, vi: int, gi: int, p: int | None) -> None:
        """Set gap gi's prefetch point (HBM bytes only; the tier is the caller's business)."""
        v, g = self.prob.values[vi], self.gaps[vi][gi]
        old = hbm_start(g, self.pre[vi][gi])
        new = hbm_start(g, p)
        hi = min(g.b, self.K) + 1
        n = v.size
        for s in self.on[vi]:
            hbm = self.hbm[s]
            if new > old:
                for k in range(old, min(new, hi)):
                    hbm[k] -= n
            else:
                for k in range(new, min(old, hi)):
                    hbm[k] += n
        for q, sign in ((self.pre[vi][gi], -1), (p, 1)):
            if q == RECOMPUTE:
                for s in self.on[vi]:
                    self.extra[s][g.b] += sign * v.extra
                for u in v.inputs:
                    pins = self.pins[u]
                    pins[g.b] = pins.get(g.b, 0) + sign
        if self.log is not None:
            self.log.append((vi, gi, self.pre[vi][gi], self.tier[vi]))
        self.pre[vi][gi] = p
        self.touched.add((vi, gi))
        self._recost(vi)

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
        self._recost(vi)

    def load(self, s: int, k: int) -> float:
        """The HBM bytes step k must fit on a device of stage s (`problem.hbm_peak`)."""
        return hbm_peak(self.hbm[s][k], self.extra[s][k], self.defined[s][k])

    def has_room(self, vi: int, k: int) -> bool:
        """Whether value vi fits in HBM at step k on every device that holds it."""
        n = self.prob.values[vi].size
        return all(self.load(s, k) + n <= self.cap + 1e-9 for s in self.on[vi])

    # -- trial changes: a local-search try runs between begin() and commit() or rollback() --
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
        if not self._pin_ok(vi, gi, p):
            return False
        if p is not None and p != RECOMPUTE and had is None and self.prob.values[vi].never_moved:
            return False
        self._set(vi, gi, p)
        if p is not None and p != RECOMPUTE and had is None:
            for t in self.prob.tiers():
                if self._fits(vi, t):
                    self._retier(vi, t)
                    return True
            self._set(vi, gi, None)
            return False
        if (p is None or p == RECOMPUTE) and had is not None and self.prob.values[vi].home is None \
                and all(q is None or q == RECOMPUTE for q in self.pre[vi]):
            self._retier(vi, None)
        return True

    def _pin_ok(self, vi: int, gi: int, p: int | None) -> bool:
        """Whether gap gi may take prefetch point p: no recompute reads the value at a step of the
        gap it would leave HBM at, and a recompute finds its inputs in HBM and room for its
        transients before its step (next to what that step reads)."""
        g = self.gaps[vi][gi]
        start = hbm_start(g, p)
        if any(g.a < s <= g.b and s < start for s in self.pins[vi] if self.pins[vi][s] > 0):
            return False
        if p != RECOMPUTE:
            return True
        if not can_recompute(self.prob, g):
            return False
        extra = self.prob.values[vi].extra
        if any(self.floor[s][g.b] + self.extra[s][g.b] + extra > self.cap + 1e-9
               for s in self.on[vi]):
            return False  # its transients cannot fit before g.b whatever else leaves HBM there
        return all(self.in_hbm(u, g.b) for u in self.prob.values[vi].inputs)

    def in_hbm(self, ui: int, k: int) -> bool:
        """Whether value ui is in HBM at step k now (`problem.in_hbm` on the state)."""
        if self.prob.values[ui].define == k:
            return True
        for g, p in zip(self.gaps[ui], self.pre[ui], strict=True):
            if g.a < k <= g.b:
                return hbm_start(g, p) <= k
        return False

    # -- costs --
    def value_cost(self, vi: int, override: tuple[int, int | None] | None = None) -> float:
        """The value's exposed transfer time (plan_cost's terms), with gap override[0] set to
        override[1] when given."""
        prob = self.prob
        pre = list(self.pre[vi])
        if override is not None:
            pre[override[0]] = override[1]
        tiers = prob.tiers()
        return offload_cost(prob, prob.values[vi], self.tier[vi] or (tiers[0] if tiers else "host"),
                            self.gaps[vi], pre)

    def cost(self) -> float:
        """The plan's exposed transfer time; exactly 0 when no value's transfer is exposed."""
        return self.total if self.exposed else 0.0

    def lowest_p(self, vi: int, gi: int) -> int:
        """The earliest prefetch point of an offloaded gap (see `problem`: a + 2, or 0 for an
        argument's first gap)."""
        g = self.gaps[vi][gi]
        return g.a + 2 if g.a >= 0 else 0

    # -- the sweep --
    def repair(self, lo: int, hi: int, rule: str, banned: tuple[int, int] | None = None) -> None:
        """Fix every HBM overflow at steps lo..hi in order, each stage's devices against their own
        capacity: at step k overflowing on stage s, offload (prefetch point k + 1; a tail:
        returned from the copy) the gaps held there in HBM at k that do not need it there, best
        first by `rule`, until k fits on s. Raises Infeasible."""
        cap = self.cap
        for k in range(max(lo, 0), min(hi, self.K) + 1):
            for s in range(self.prob.stages):
                if self.load(s, k) > cap + 1e-9:
                    self._relieve(s, k, rule, banned)

    def _relieve(self, s: int, k: int, rule: str, banned: tuple[int, int] | None) -> None:
        """Offload victims at step k on stage s until it fits; raises Infeasible when it cannot."""
        cap = self.cap
        for _key, vi, gi, q, _n, _d in self._victims(s, k, rule, banned):
            if self.load(s, k) <= cap + 1e-9:
                break
            if hbm_start(self.gaps[vi][gi], self.pre[vi][gi]) > k:
                continue  # taken out of HBM at k by the other option of the same gap
            if self.change(vi, gi, q):
                self.reasons[(vi, gi)] = f"step {k}{self.prob.on_stage(s)}"
        if self.load(s, k) > cap + 1e-9:
            raise Infeasible(k, "hbm", self.load(s, k), cap,
                             live_at(self.prob, self.plan(), k, s), s)

    def _victims(self, s: int, k: int, rule: str,
                 banned: tuple[int, int] | None) -> list[_Candidate]:
        """The gaps that could leave HBM at step k on stage s (all but `banned`), best first by
        `rule`; one that covers the excess alone goes first when it costs less than filling it in
        order (the knapsack fix)."""
        prob = self.prob
        cands: list[_Candidate] = []
        if not prob.tiers():
            return cands  # a target without host/nvme: nothing can leave HBM (repair says so)
        for vi, gi in self.covering[s].at(k):
            if (vi, gi) == banned:
                continue
            v, g = prob.values[vi], self.gaps[vi][gi]
            if hbm_start(g, self.pre[vi][gi]) > k:
                continue
            options = [] if v.never_moved or not prob.tiers() else [g.b + 1 if g.tail else k + 1]
            if self.pre[vi][gi] != RECOMPUTE and g.b > k and (self.recompute or v.never_moved):
                options.append(RECOMPUTE)
            for q in options:
                if not self._pin_ok(vi, gi, q):
                    continue
                delta = self.value_cost(vi, (gi, q)) - self.vcost[vi]
                per_byte = delta / max(v.size, 1)
                key: tuple[float, float, float]
                if rule == "cost":
                    key = (per_byte, -g.b, -v.size)
                elif rule == "belady":
                    key = (-g.b if not g.tail else -self.K - 1, per_byte, -v.size)
                else:  # "reach": exposed time per byte and per step of relief it can give
                    key = (per_byte / max(1, min(g.b, self.K + 1) - k), -g.b, -v.size)
                cands.append((key, vi, gi, q, v.size, delta))
        cands.sort()
        excess = self.load(s, k) - self.cap
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
        return cands

    def earlier(self, vi: int, gi: int) -> bool:
        """Issue an offloaded gap's prefetch as early as HBM allows (all the way: keep it in HBM).
        Never raises the cost (a larger window hides more; keeping drops the transfers)."""
        p = self.pre[vi][gi]
        g, v = self.gaps[vi][gi], self.prob.values[vi]
        if p is None:
            return False
        j = min(hbm_start(g, p), self.K + 1)
        lo = g.a + 1
        while j > lo and self.has_room(vi, j - 1):
            j -= 1
        if j == lo and (v.home is None or gi > 0):
            if self.value_cost(vi, (gi, None)) <= self.vcost[vi] + 1e-15:
                self.change(vi, gi, None)
                return True
        if p == RECOMPUTE:
            return False  # a recompute either stays or is kept in HBM all the way
        j = max(j, self.lowest_p(vi, gi))
        if not g.tail and j < p:
            self._set(vi, gi, j)
            return True
        return False

    def fits(self) -> bool:
        """Every step fits in HBM and in every offload tier, on every stage."""
        return all(self.load(s, k) <= self.cap + 1e-9 for s in range(self.prob.stages)
                   for k in range(self.K + 1)) and all(
            y <= self.prob.capacity[t] + 1e-9 for t, per in self.off.items() for ys in per
            for y in ys)

    def plan(self) -> Plan:
        return Plan(list(self.tier), [list(x) for x in self.pre], reasons=dict(self.reasons))


def _sweep(prob: Problem, rule: str, recompute: bool) -> _State:
    """Steps 1 and 2: the sweep by `rule`, then the polish."""
    st = _State(prob, recompute)
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
    """Step 3, while it improves (at most `rounds` passes): the keep moves (`_keep_moves`), then the
    offload moves (`_offload_moves`)."""
    for _ in range(rounds):
        if st.cost() <= 0.0:   # nothing is exposed: no move can make the plan cheaper
            break
        improved = _keep_moves(st, rule)
        improved |= _offload_moves(st)
        if not improved:
            break


def _keep_moves(st: _State, rule: str) -> bool:
    """Step 3a, costliest gap first: take an offloaded gap back into HBM (or issue its prefetch
    halfway to its previous need), repair the overflow this makes with the sweep's rule but
    without that gap, issue the prefetches that repair made as early as HBM allows, and keep the
    result when the total cost fell (else undo it from the log). A try costs O(the gap's span x
    the values live there)."""
    cost = st.cost()
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
        halfway = max(st.lowest_p(vi, gi), (g.a + 1 + p) // 2)
        for target in (None, halfway, RECOMPUTE):
            if target == RECOMPUTE and (p == RECOMPUTE or not st.recompute):
                continue
            if target is not None and target != RECOMPUTE and (g.tail or p == RECOMPUTE
                                                                or target >= p):
                continue
            st.begin()
            try:
                if not st.change(vi, gi, target):
                    st.rollback()
                    continue
                st.repair(g.a + 1, min(g.b, st.K), rule, banned=(vi, gi))
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
    return improved


def _offload_moves(st: _State) -> bool:
    """Step 3b, the other half of a swap: offload a gap kept in HBM with its prefetch issued where
    the transfer is just hidden, then issue the prefetches of the offloaded gaps over the room it
    freed as early as HBM allows; keep it when the total cost fell."""
    prob, K = st.prob, st.K
    cost = st.cost()
    improved = False
    for vi, v in enumerate(prob.values):
        if v.size <= 0 or not prob.tiers() or v.never_moved:
            continue
        bw = prob.bandwidth[st.tier[vi] or prob.tiers()[0]]
        for gi, g in enumerate(st.gaps[vi]):
            if st.pre[vi][gi] is not None or g.tail or g.b - g.a < 3:
                continue
            q = _latest_hidden(prob, st.lowest_p(vi, gi), g.b, v.size / bw)
            if q <= g.a + 1 or q > g.b:
                continue
            st.begin()
            if not st.change(vi, gi, q):
                st.rollback()
                continue
            seen: set[tuple[int, int]] = set()
            for k, s in ((k, s) for k in range(g.a + 1, min(q, K + 1)) for s in st.on[vi]):
                for key in st.covering[s].at(k):
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


def _latest_hidden(prob: Problem, lo: int, b: int, seconds: float) -> int:
    """The largest q >= lo with q == lo or window(q, b) >= seconds (the latest prefetch point
    that still hides a transfer of `seconds` before step b); the window shrinks as q grows, so
    a binary search finds it in O(log(b - lo))."""
    q, hi = lo, b
    while q < hi:
        mid = (q + hi + 1) // 2
        if prob.window(mid, b) >= seconds:
            q = mid
        else:
            hi = mid - 1
    return q


def solve_greedy(prob: Problem) -> Plan:
    """The plan of the module docstring's steps 1-3: the cheapest of the sweeps, improved by the
    local search; once with recompute offered and once without (the greedy can pin inputs a
    later overflow needs out of HBM), keeping the cheaper, so offering recompute never makes
    its plan dearer. Raises Infeasible (the first sweep's) when no sweep fits."""
    t0 = time.perf_counter()
    modes = [True, False] if any(v.recompute is not None and not v.never_moved
                                 for v in prob.values) else [True]
    best: _State | None = None
    err: Infeasible | None = None
    for recompute in modes:
        try:
            st = _solve(prob, recompute)
        except Infeasible as e:
            err = err or e
            continue
        if best is None or st.cost() < best.cost() - 1e-15:
            best = st
    if best is None:
        assert err is not None
        raise err
    # the sweeps fit HBM; an offload tier can still overflow with arguments declared in it
    for t, per in best.off.items():
        for s, ys in enumerate(per):
            for k, y in enumerate(ys):
                if y > prob.capacity[t] + 1e-9:
                    raise Infeasible(k, t, y, prob.capacity[t], [], s)
    if "sram" in prob.capacity:
        for s in range(prob.stages):
            for k, y in enumerate(prob.fixed_at("sram", s)):
                if y > prob.capacity["sram"]:
                    raise Infeasible(k, "sram", y, prob.capacity["sram"], [], s)
    plan = best.plan()
    plan.cost = plan_cost(prob, plan)
    plan.solve_seconds = time.perf_counter() - t0
    return plan


def _solve(prob: Problem, recompute: bool) -> _State:
    """The cheapest sweep over the rules, improved by the local search."""
    best: _State | None = None
    best_rule = "cost"
    err: Infeasible | None = None
    for rule in RULES:
        try:
            st = _sweep(prob, rule, recompute)
        except Infeasible as e:
            err = err or e
            continue
        if best is None or st.cost() < best.cost() - 1e-15:
            best, best_rule = st, rule
    if best is None:
        assert err is not None
        raise err
    _local_search(best, rule=best_rule)
    return best
