"""The exact tier planner (`solver=ilp`): the `Problem` of `problem` as a 0-1 program for HiGHS.

It minimizes the same objective as the greedy solver (`plan_cost`) and is the optimum that solver
is measured against (tests, benchmarks/bench_tiers.py). It needs scipy (`scipy.optimize.milp`,
`pip install 'lamina[ilp]'`) and, with a variable per gap and prefetch point and a nonzero per
step each one keeps in HBM, grows with the square of a gap's length: it is meant for small
programs.

The program, per value v (all variables 0-1):
- y[t] per offload tier t: v has its copy in t (at most one tier; an argument's home is forced).
  The copy occupies t over v's lifetime.
- per gap (a, b]: exactly one option. KEEP (HBM on a+1..b; an argument with a home has none for
  its first gap: it starts in its home) or, per tier t and prefetch point p, x[t, p] (HBM on p..b,
  costing the prefetch's exposed time; a tail has the one point b + 1: returned from the copy).
- first[t] per gap: the copy out to t is charged at this gap (out_cost at a). An x[t, p] needs a
  first[t] at or before its gap, and the firsts of t sum to y[t]; as out_cost only falls as a
  grows, an optimum charges the copy at the first offloaded gap, which is what `plan_cost` counts.
  An argument's first gap (a = -1) charges nothing, so its first[t] there requires that gap
  offloaded to t (the argument starts in t); without that row the optimum "started" an argument
  in HBM and copied it out for free later.
- RECOMPUTE per gap that `can_recompute` allows: HBM on b only, costing the recompute's time
  (its transient `extra` counts in the moment before b, see the capacity rows); each input u
  must be in HBM at b: the variable is at most the sum of u's options that hold u in HBM at b.
  A value that is never moved has no tier variables and no offload options.
Capacity rows: per step, HBM and each offload tier (less the fixed bytes there) must fit, once
per pipeline stage on the values its devices hold (an unstaged value in every stage's rows); at a
step where a recompute with transient bytes may run, HBM fits a second time in the moment before
it: the step's row less its own results (a constant) plus those transients.
A value whose copy the optimum makes but never uses decodes as kept (that only frees room).

A run stopped at its time limit without a feasible point is "no solution within the time limit"
(a LaminaError, not infeasibility); with a point it returns it with `optimal = False` and `gap`
(relative to HiGHS's best bound).
"""

from __future__ import annotations

import math
import time
from typing import Any, cast

from lamina.ir.core.diagnostics import LaminaError
from lamina.passes.tier_plan.greedy import solve_greedy
from lamina.passes.tier_plan.problem import (
    RECOMPUTE,
    Gap,
    Infeasible,
    Plan,
    Problem,
    Value,
    can_recompute,
    defined_bytes,
    gaps_of,
    hbm_start,
    plan_cost,
)

# a coefficient of a constraint row: (variable, coefficient)
_Entry = tuple[int, float]
# one option of a gap: (variable, offload tier or None to keep, prefetch point or None to keep)
_Option = tuple[int, str | None, int | None]


class _Milp:
    """A 0-1 program under construction: a cost per variable, and rows lo <= A x <= hi with A in
    coordinate form (the order of variables and rows is the order they are made in)."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.data: list[float] = []
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.nrow = 0

    def var(self, c: float) -> int:
        self.cost.append(c)
        return len(self.cost) - 1

    def row(self, entries: list[_Entry], lo: float, hi: float) -> None:
        for j, a in entries:
            self.rows.append(self.nrow)
            self.cols.append(j)
            self.data.append(a)
        self.lb.append(lo)
        self.ub.append(hi)
        self.nrow += 1

    def cap_row(self, entries: list[_Entry], room: float, capacity: float) -> None:
        """sum(entries) <= room, divided by the capacity: bytes ~1e9 would swamp HiGHS's absolute
        feasibility tolerance."""
        s = 1.0 / max(capacity, 1.0)
        self.row([(j, a * s) for j, a in entries], -math.inf, room * s)


class _Model:
    """The program of one Problem: the 0-1 program, and per value per gap the options (to read
    the plan back from a solution)."""

    def __init__(self, prob: Problem) -> None:
        K, S = prob.steps, range(prob.stages)
        self.prob = prob
        self.m = _Milp()
        self.tiers = prob.tiers()
        # per stage and step, one row per capacity (a device of each stage holds its own values)
        self.hbm_rows: list[list[list[_Entry]]] = [[[] for _ in range(K + 1)] for _ in S]
        # per stage and step, the transient bytes of the recomputes that may run before it
        self.extra_rows: list[list[list[_Entry]]] = [[[] for _ in range(K + 1)] for _ in S]
        self.off_rows: dict[str, list[list[list[_Entry]]]] = {
            t: [[[] for _ in range(K + 1)] for _ in S] for t in self.tiers}
        self.hbm_fixed = [prob.fixed_at("hbm", s) for s in S]
        self.options: list[list[list[_Option]]] = []
        self._rc: list[tuple[int, Value, int]] = []   # (variable, value, need step)
        for vi, v in enumerate(prob.values):
            if not v.is_arg:
                for s in prob.stages_of(v):
                    self.hbm_fixed[s][v.define] += v.size
            self.options.append(self._value(vi, v))
        self._input_rows()
        self._capacity_rows()

    def _input_rows(self) -> None:
        """A recompute at b needs each input in HBM at b: r <= the input's options that hold it
        there (none when b is not inside the input's life)."""
        for r, v, b in self._rc:
            for ui in v.inputs:
                u = self.prob.values[ui]
                covering: list[_Entry] = []
                for g, opts in zip(gaps_of(u, ui), self.options[ui], strict=True):
                    if g.a < b <= g.b:
                        covering = [(j, -1.0) for j, _t, p in opts if hbm_start(g, p) <= b]
                self.m.row([(r, 1.0), *covering], -math.inf, 0)

    def _value(self, vi: int, v: Value) -> list[list[_Option]]:
        """The value's tier variables, its gaps' options and the rows that tie them together."""
        m, K = self.m, self.prob.steps
        tiers = [] if v.never_moved else self.tiers
        y = {t: m.var(0.0) for t in tiers}
        m.row([(y[t], 1.0) for t in tiers], 0, 1)
        if v.home is not None:
            m.row([(y[v.home], 1.0)], 1, 1)
        lo_t = 0 if v.is_arg else v.define + 1
        for t in tiers:
            for s in self.prob.stages_of(v):
                for k in range(lo_t, min(v.end, K) + 1):
                    self.off_rows[t][s][k].append((y[t], v.size))
        firsts: dict[str, list[int]] = {t: [] for t in tiers}
        options = [self._gap(v, gi, g, firsts, tiers) for gi, g in enumerate(gaps_of(v, vi))]
        for t in tiers:
            m.row([(y[t], 1.0)] + [(f, -1.0) for f in firsts[t]], 0, 0)
        return options

    def _gap(self, v: Value, gi: int, g: Gap, firsts: dict[str, list[int]],
             tiers: list[str]) -> list[_Option]:
        """One gap's options (exactly one is taken) and its first[t] variables (added to
        `firsts`, the value's firsts so far)."""
        m, K = self.m, self.prob.steps
        on = self.prob.stages_of(v)
        opts: list[_Option] = []
        if v.home is None or gi > 0:
            kv = m.var(0.0)
            opts.append((kv, None, None))
            self._in_hbm(on, kv, v.size, g.a + 1, min(g.b, K))
        if can_recompute(self.prob, g):
            assert v.recompute is not None
            r = m.var(v.recompute)
            opts.append((r, None, RECOMPUTE))
            self._in_hbm(on, r, v.size, g.b, g.b)
            if v.extra:
                for s in on:
                    self.extra_rows[s][g.b].append((r, v.extra))
            self._rc.append((r, v, g.b))
        for t in tiers:
            if v.home is not None and t != v.home:
                continue
            f = m.var(self.prob.out_cost(v, t, g.a))
            firsts[t].append(f)
            if g.tail:
                ps = [g.b + 1]
            elif g.a < 0:
                ps = list(range(0, g.b + 1))
            else:
                ps = list(range(g.a + 2, g.b + 1))
            for p in ps:
                xv = m.var(0.0 if g.tail else self.prob.in_cost(v, t, p, g.b))
                opts.append((xv, t, p))
                self._in_hbm(on, xv, v.size, p, min(g.b, K))
                # offloading gap gi needs the copy, made at or before it
                m.row([(xv, 1.0)] + [(f2, -1.0) for f2 in firsts[t]], -math.inf, 0)
            if g.a < 0:
                # an argument's copy is free only when it starts in t: its first gap offloaded
                # there (else it is copied out later, charged at that gap)
                m.row([(f, 1.0)] + [(o[0], -1.0) for o in opts if o[1] == t], -math.inf, 0)
        m.row([(o[0], 1.0) for o in opts], 1, 1)
        return opts

    def _in_hbm(self, on: range, var: int, size: int, lo: int, hi: int) -> None:
        """Option `var` holds `size` bytes in HBM at steps lo..hi on the devices of stages `on`."""
        for s in on:
            rows = self.hbm_rows[s]
            for k in range(lo, hi + 1):
                rows[k].append((var, size))

    def _capacity_rows(self) -> None:
        """Per stage and step, HBM and each offload tier fit; raises Infeasible when the fixed
        bytes alone overflow HBM at a step no variable touches."""
        for s in range(self.prob.stages):
            self._stage_rows(s)

    def _stage_rows(self, s: int) -> None:
        """The capacity rows of one device of stage `s` (see `_capacity_rows`)."""
        prob = self.prob
        K, hbm_cap = prob.steps, prob.capacity["hbm"]
        defined = defined_bytes(prob, s)
        rows, extra, fixed_hbm = self.hbm_rows[s], self.extra_rows[s], self.hbm_fixed[s]
        fixed = {t: prob.fixed_at(t, s) for t in self.tiers}
        for k in range(K + 1):
            if rows[k]:
                self.m.cap_row(rows[k], hbm_cap - fixed_hbm[k], hbm_cap)
            if extra[k]:
                self.m.cap_row(rows[k] + extra[k], hbm_cap - (fixed_hbm[k] - defined[k]), hbm_cap)
            if not rows[k] and fixed_hbm[k] > hbm_cap:
                raise Infeasible(k, "hbm", fixed_hbm[k], hbm_cap, [], s)
            for t in self.tiers:
                if self.off_rows[t][s][k]:
                    self.m.cap_row(self.off_rows[t][s][k], prob.capacity[t] - fixed[t][k],
                                   prob.capacity[t])

    def plan(self, x: Any) -> Plan:
        """The plan a solution `x` (one value per variable) stands for."""
        vals = self.prob.values
        plan = Plan([None] * len(vals), [[None] * len(gaps_of(v, i)) for i, v in enumerate(vals)])
        for vi, gaps in enumerate(self.options):
            for gi, opts in enumerate(gaps):
                for j, t, p in opts:
                    if x[j] > 0.5:
                        plan.prefetch[vi][gi] = p
                        if t is not None:
                            plan.tier[vi] = t
                        if p is not None:
                            plan.reasons[(vi, gi)] = "the ILP optimum"
        return plan


def solve_ilp(prob: Problem, time_limit: float = 120.0) -> Plan:
    """The same model solved exactly with scipy.optimize.milp (HiGHS). Raises Infeasible when no
    plan fits, LaminaError when scipy is missing or the time limit passes before any plan."""
    try:
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_array
    except ImportError:
        raise LaminaError("assign-memory-tiers{solver=ilp} needs scipy: pip install "
                          "'lamina[ilp]'") from None
    t0 = time.perf_counter()
    model = _Model(prob)
    m = model.m
    n = len(m.cost)
    A = coo_array((m.data, (m.rows, m.cols)), shape=(m.nrow, n)).tocsr()
    c = np.array(m.cost)
    # the objective is scaled so its largest coefficient is 1e3: exposed times are ~1e-6 s, below
    # HiGHS's absolute MIP gap (1e-6), which would otherwise accept the first feasible point as
    # "optimal"
    scale = 1e3 / float(c.max()) if n and c.max() > 0 else 1.0
    # scipy annotates lb/ub as float; they are array_like (one bound per row)
    res = milp(c * scale, constraints=LinearConstraint(A, cast(Any, m.lb), cast(Any, m.ub)),
               integrality=np.ones(n), bounds=Bounds(0, 1),
               options={"time_limit": time_limit, "mip_rel_gap": 1e-6})
    if res.x is None:
        if res.status == 1:  # the time limit (or node limit) hit before any feasible point
            raise LaminaError(f"assign-memory-tiers{{solver=ilp}}: no solution within the time "
                              f"limit of {time_limit:g} s ({prob.steps} program points, "
                              f"{len(prob.values)} values, {n} variables); use solver=greedy or "
                              f"a larger limit")
        raise _where_infeasible(prob)
    plan = model.plan(res.x)
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


def _where_infeasible(prob: Problem) -> Exception:
    """What to raise when HiGHS proves that no plan fits. It does not say where, so the greedy
    solver's first overflow names a step that is over the capacity and the values live there
    (naming the step with the most forced bytes, as this once did, gave a need under the
    capacity: "8 bytes per device needed, capacity 20"). Should the greedy find a plan after
    all, only HiGHS's tolerances can disagree with it, and that is said as such."""
    try:
        solve_greedy(prob)
    except Infeasible as e:
        return e
    return LaminaError("assign-memory-tiers{solver=ilp}: HiGHS finds the model infeasible but "
                       "the greedy solver plans it (a numerical tolerance); use solver=greedy")
