"""`assign-memory-tiers`: a memory tier for every value, and the moves between tiers.

    -p 'assign-memory-tiers{target=tiny solver=greedy hbm-capacity=0 explain=false}'

Run it after `annotate-lifetimes` (without frees every value lives to the end of the function).
`target` is a built-in target name; `hbm-capacity` (bytes, 0 = the target's) overrides the HBM
capacity, e.g. to test a plan under pressure. `solver=ilp` solves the same model exactly with
`scipy.optimize.milp` (HiGHS; `pip install 'lamina[ilp]'`) and is meant for small programs.

This module is the IR side of the pass: it builds a numbers-only model of the function
(`build_model`), has a solver plan it and rewrites the function from the plan (`rewrite`). The
model, what a plan costs and when it fits are in `lamina.passes.tier_plan.problem`; the solvers
are `tier_plan.greedy` (the default) and `tier_plan.ilp` (the exact reference). Both minimize the
modeled exposed transfer time: the time transfers between tiers are not hidden behind compute.

From the function to the model
------------------------------
Program points are the function's top-level ops other than `lamina.free` ("steps" 0..K-1; the
`func.return` is step K). Each step has a compute time from a roofline over the target:
max(flops / target.flops, bytes read and written / HBM bandwidth), per device (a fused op counts
the flops of its body and only its external bytes). Each value has a size (bytes per device: its
local shard), a definition step (-1 for arguments), the steps that read it ("needs": every op
that is not a free, the return or a move to HBM or SRAM, which reads its operand where it is) and
an end (the step of its last use when it has a `lamina.free`, else K: live until the return).
A value the program already put in a tier (the result of an explicit `lamina.move` to host or
nvme, or declared in SRAM) stays where it is and only takes room; SRAM holds only values
declared in SRAM and the intermediates of the `lamina.fused` op that runs at that step.

From the plan to the function
-----------------------------
Compute reads and writes only HBM, so a value is in HBM at its definition and at every use. An
offloaded value is copied to its tier T (host or nvme) by `lamina.move %v to T` right after its
definition; its HBM copy is freed after the last use before it leaves HBM, and a prefetch
`lamina.move ... to hbm {prefetch = N}`, issued N ops before the next use, brings it back for
the uses up to the next time it leaves. An argument may start in any tier (the plan gives the
function's signature its tiers); an argument declared `tier = host` (ZeRO-Offload style) stays
there and is prefetched before each use. A result either stays in HBM after its last use or is
returned from its offload copy. The frees of the planned values are redone for their copies.

When no assignment fits (the bytes a step's own operands and results need exceed the capacity,
or the offload tiers are full) the pass stops with a diagnostic at that op naming the tier, the
bytes needed and the largest values live there. The ILP reports a run stopped at its time limit
without a feasible point as "no solution within the time limit" (not infeasibility). With
`explain=true` the pass says why each move was inserted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

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
from lamina.passes.tier_plan.greedy import solve_greedy
from lamina.passes.tier_plan.ilp import solve_ilp
from lamina.passes.tier_plan.problem import (
    OFFLOAD_TIERS,
    Infeasible,
    Plan,
    Problem,
    Value,
    gaps_of,
)
from xdsl.context import Context
from xdsl.dialects.builtin import FunctionType, ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Operation, SSAValue

# ---- from IR to the model ----------------------------------------------------------------------


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
    """A function and its model: `values[i]` is the SSA value of `problem.values[i]`, `steps[k]`
    the op at step k."""

    func: FuncOp
    steps: list[Operation]
    ret: ReturnOp
    values: list[SSAValue]
    problem: Problem


def build_model(func: FuncOp, target: Target, hbm_capacity: float = 0) -> _FuncModel:
    """The model of `func` on `target` (see the module docstring), HBM capacity overridden by
    `hbm_capacity` when it is not 0."""
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
    placed: dict[str, list[int]] = {}   # per tier, the changes of its placed bytes per step
    for v, d in [*((a, -1) for a in block.args),
                 *((r, i) for i, o in enumerate(steps) for r in o.results)]:
        size = local_bytes(v, func)
        needs, end = _needs_and_end(v, d, block, ret, index)
        tier = tier_of(v.type)
        declared_off = tier in OFFLOAD_TIERS or tier == "sram"
        if declared_off and (d >= 0 and (isinstance(v.owner, MoveOp) or tier == "sram")):
            # a value the program already put in a tier (an explicit move, or sram): fixed
            assert tier is not None
            # added up at the end from differences: a value that lives to the return would
            # cost O(K) here, O(K^2) over a program of them
            spans = placed.setdefault(tier, [0] * (K + 2))
            spans[d] += size
            spans[min(end, K) + 1] -= size
            continue
        if tier in OFFLOAD_TIERS and tier not in bandwidth:
            raise error_at(func, f"assign-memory-tiers: {names(v)} is in tier '{tier}', which "
                           f"target '{target.name}' does not have")
        values.append(v)
        model.append(Value(names(v), size, d, sorted(n for n in needs if n > d), end,
                           home=tier if d < 0 and tier in OFFLOAD_TIERS else None))
    for tier, spans in placed.items():
        ys = fixed.setdefault(tier, [0.0] * (K + 1))
        run = 0
        for k in range(K + 1):
            run += spans[k]
            if run:
                ys[k] += run
    compute = [step_time(o, target, func) for o in steps]
    prob = Problem(K, compute, model, capacity, bandwidth, fixed)
    return _FuncModel(func, steps, ret, values, prob)


def _needs_and_end(v: SSAValue, d: int, block: Block, ret: ReturnOp,
                   index: dict[Operation, int]) -> tuple[set[int], int]:
    """The steps that read `v` (defined at step `d`) in HBM, and its end: the step of its last
    use when it is freed, else K (the return)."""
    K = len(index)
    needs: set[int] = set()
    end = d
    freed = False
    for use in v.uses:
        u = ancestor_in(use.operation, block)
        assert u is not None, "a use outside the function it is defined in"
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
    return needs, end


def _infeasible_error(fm: _FuncModel, e: Infeasible, target: Target) -> LaminaError:
    """The diagnostic for a model no plan fits, at the op of the step that overflows."""
    at: Operation = fm.steps[e.step] if e.step < len(fm.steps) else fm.ret
    what = f"{at.name}" if not at.results else f"{value_label(at.results[0])} = {at.name}"
    own = sum(local_bytes(v, fm.func) for v in {*at.operands, *at.results}
              if isinstance(v.type, TensorType))
    live = ", ".join(f"{fm.problem.values[vi].name} ({n} B)" for n, vi in e.live[:4])
    return error_at(at, f"assign-memory-tiers: no assignment fits tier '{e.tier}' at program point "
                    f"{e.step} ({what}): {int(e.need)} bytes per device needed, capacity "
                    f"{int(e.capacity)} (target '{target.name}'); the op's own operands and result "
                    f"take {own} bytes" + (f"; largest live values: {live}" if live else ""))


# ---- from the plan back to IR ------------------------------------------------------------------

# steps lo..hi read the value from `copy` (lo, hi, copy)
_Segment = tuple[int, int, SSAValue | None]


def rewrite(fm: _FuncModel, plan: Plan, log: ExplainLog | None) -> int:
    """Apply `plan` to the function: types get tiers, moves and frees are inserted. Returns the
    number of moves."""
    func = fm.func
    block: Block = func.body.block
    planned = set(fm.values)
    for o in list(block.ops):
        if isinstance(o, FreeOp) and o.value in planned:
            o.detach()
            o.erase()
    rw = _Rewrite(fm, plan, log)
    for vi in range(len(fm.values)):
        rw.value(vi)
    rw.insert()
    _fix_fused(func)
    func.function_type = FunctionType.from_lists([a.type for a in block.args],
                                                 [r.type for r in fm.ret.operands])
    return rw.moves


class _Rewrite:
    """The ops a plan puts around the steps, made value by value and inserted at the end (so the
    steps' positions stay put while the values are rerouted)."""

    def __init__(self, fm: _FuncModel, plan: Plan, log: ExplainLog | None) -> None:
        self.fm, self.plan, self.log = fm, plan, log
        self.K = len(fm.steps)
        self.pos = {o: i for i, o in enumerate(fm.steps)}
        self.pre: dict[int, list[Operation]] = {}     # before step k
        self.post: dict[int, list[Operation]] = {}    # after step k (-1: before step 0)
        self.frees: dict[int, list[Operation]] = {}   # after step k, after `post`
        self.moves = 0

    def value(self, vi: int) -> None:
        """One value's copy out, prefetches, uses rerouted to the copy live at each, and frees."""
        v, mv = self.fm.values[vi], self.fm.problem.values[vi]
        copy_off, starts_off = self._copy_out(vi)
        segments, cur = self._prefetches(vi, None if starts_off else v, copy_off)
        self._reroute_uses(vi, copy_off, segments)
        if mv.end < self.K:
            if cur is not None:
                self.frees.setdefault(mv.end, []).append(FreeOp(cur))
            if copy_off is not None and copy_off is not cur:
                self.frees.setdefault(mv.end, []).append(FreeOp(copy_off))

    def _copy_out(self, vi: int) -> tuple[SSAValue | None, bool]:
        """Give the value its tier and make its offload copy (an argument that starts offloaded
        is its own). Returns the copy (None: never offloaded) and whether the value starts
        offloaded."""
        fm, plan, log = self.fm, self.plan, self.log
        func, steps, prob = fm.func, fm.steps, fm.problem
        v, mv = fm.values[vi], prob.values[vi]
        tier = plan.tier[vi]
        gs = gaps_of(mv, vi)
        ps = plan.prefetch[vi]
        starts_off = bool(mv.is_arg and gs and gs[0].a < 0 and ps[0] is not None)
        _set_type(v, with_tier(v.type, tier if starts_off else "hbm"))
        copy_off: SSAValue | None = v if starts_off else None
        if tier is not None and not starts_off:
            m = MoveOp(v, tier)
            self.post.setdefault(mv.define, []).append(m)
            copy_off = m.result
            self.moves += 1
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
        return copy_off, starts_off

    def _prefetches(self, vi: int, cur: SSAValue | None,
                    copy_off: SSAValue | None) -> tuple[list[_Segment], SSAValue | None]:
        """Free the HBM copy `cur` where each offloaded gap starts and prefetch a new one from
        `copy_off` for the gap's end. Returns the segments of steps that read each HBM copy, and
        the copy in HBM at the end (None: returned from the offload copy)."""
        fm, plan, log, K = self.fm, self.plan, self.log, self.K
        steps, prob = fm.steps, fm.problem
        mv = prob.values[vi]
        tier = plan.tier[vi]
        segments: list[_Segment] = []
        start = mv.define
        for gi, (g, p) in enumerate(zip(gaps_of(mv, vi), plan.prefetch[vi], strict=True)):
            if p is None:
                continue
            if cur is not None:
                segments.append((start, g.a, cur))
                self.frees.setdefault(g.a, []).append(FreeOp(cur))
                cur = None
            if g.tail:
                if log is not None:
                    log.add(fm.ret, f"{mv.name} is returned from {tier}: HBM is over capacity at "
                            f"{plan.reasons.get((vi, gi), 'a point')} after its last use")
                start = K + 1
                continue
            assert copy_off is not None
            m = MoveOp(copy_off, "hbm", prefetch=g.b - p)
            self.pre.setdefault(p, []).append(m)
            self.moves += 1
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
        return segments, cur

    def _reroute_uses(self, vi: int, copy_off: SSAValue | None, segments: list[_Segment]) -> None:
        """Make every use of the value read the copy live at its step (the offload copy where no
        HBM copy is)."""
        fm, K = self.fm, self.K
        block = fm.func.body.block
        v, mv = fm.values[vi], fm.problem.values[vi]
        for use in list(v.uses):
            u = use.operation
            if u.parent_block() is None:
                continue  # a move/free this rewrite made (inserted by `insert`)
            anc = ancestor_in(u, block)
            assert anc is not None, "a use outside the function it is defined in"
            k = K if anc is fm.ret else self.pos[anc]
            copy = copy_off
            for lo, hi, c in segments:
                if lo <= k <= hi:
                    copy = c
            assert copy is not None, f"no copy of {mv.name} at point {k}"
            if copy is not v:
                ops = list(use.operation.operands)
                ops[use.index] = copy
                use.operation.operands = ops

    def insert(self) -> None:
        """Put the planned ops in the block: `pre[k]` before step k, `post[k]` then `frees[k]`
        after it (k = -1: before step 0; k = K: before the return)."""
        fm, K = self.fm, self.K
        block, steps = fm.func.body.block, fm.steps
        first_op = steps[0] if steps else fm.ret
        head = self.post.get(-1, []) + self.frees.get(-1, [])
        if head:
            block.insert_ops_before(head, first_op)
        for k, o in enumerate(steps):
            if self.pre.get(k):
                block.insert_ops_before(self.pre[k], o)
            tail = self.post.get(k, []) + self.frees.get(k, [])
            if tail:
                nxt = o.next_op
                assert nxt is not None
                block.insert_ops_before(tail, nxt)
        if self.pre.get(K):
            block.insert_ops_before(self.pre[K], fm.ret)


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
        yielded: dict[SSAValue, Attribute] = {}
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
    """Plan `func`'s tiers on `target` with `solver` and rewrite it; returns the plan."""
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
