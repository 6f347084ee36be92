"""The IR side of a memory-tier plan: a function's model, and the rewrite a plan asks for.

`assign-memory-tiers` (`lamina.passes.assign_memory_tiers`) builds a `FuncModel` of a function,
has a solver plan it (`lamina.passes.tier_plan`) and calls `rewrite`: values get their tiers,
and the moves, recomputes and frees of the plan are inserted around the function's steps. What
each inserted op means is in the pass's module docstring.
"""

from __future__ import annotations

from dataclasses import dataclass

from lamina.analysis.recompute import chain_of, defining_op
from lamina.ir.buffers.memory import FreeOp, MoveOp, ancestor_in, value_label, with_tier
from lamina.ir.buffers.updates import UPDATES_ATTR, updates_of
from lamina.ir.mesh.placement import tier_of
from lamina.ir.ops.fused import FusedOp
from lamina.passes.explain import ExplainLog
from lamina.passes.tier_plan.problem import RECOMPUTE, Plan, Problem, gaps_of
from xdsl.dialects.builtin import FunctionType, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Operation, SSAValue


@dataclass
class FuncModel:
    """A function and its model: `values[i]` is the SSA value of `problem.values[i]`, `steps[k]`
    the op at step k."""

    func: FuncOp
    steps: list[Operation]
    ret: ReturnOp
    values: list[SSAValue]
    problem: Problem
    chains: dict[SSAValue, int]   # value computed from constants alone -> depth of its chain
    depth: int                    # the recompute-depth bound


# steps lo..hi read the value from `copy` (lo, hi, copy)
_Segment = tuple[int, int, SSAValue | None]


def rewrite(fm: FuncModel, plan: Plan, log: ExplainLog | None) -> tuple[int, int]:
    """Apply `plan` to the function: types get tiers, moves, recomputes and frees are inserted.
    Returns the number of moves and of recomputes."""
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
    rw.wire_recomputes()
    rw.insert()
    _fix_fused(func)
    rw.moves += _keep_updates(fm, log)
    func.function_type = FunctionType.from_lists([a.type for a in block.args],
                                                 [r.type for r in fm.ret.operands])
    return rw.moves, rw.recomputes


def _keep_updates(fm: FuncModel, log: ExplainLog | None) -> int:
    """A result that replaces an argument (`lamina.updates`, e.g. a training step's new
    parameter or moment) leaves in the tier the argument arrives in, since the next call takes it
    there: where the plan put the two apart, a `lamina.move` before the return brings the result
    there (a transfer the plan's cost does not model). Returns the number of moves."""
    func, ret = fm.func, fm.ret
    args = func.body.block.args
    operands = list(ret.operands)
    moves = 0
    for r, a in sorted(updates_of(func).items()):
        v, arg = operands[r], args[a]
        want = tier_of(arg.type)
        if want is None or tier_of(v.type) == want or with_tier(v.type, want) != arg.type:
            continue  # the same tier, or types that differ in more than the tier
        m = MoveOp(v, want)
        func.body.block.insert_op_before(m, ret)
        operands[r] = m.result
        moves += 1
        if log is not None:
            log.add(ret, f"move result #{r} ({value_label(v)}) to {want} before the return: it "
                    f"replaces argument {value_label(arg)} ({UPDATES_ATTR}), which arrives there")
    if moves:
        ret.operands = operands
    return moves


class _Rewrite:
    """The ops a plan puts around the steps, made value by value and inserted at the end (so the
    steps' positions stay put while the values are rerouted)."""

    def __init__(self, fm: FuncModel, plan: Plan, log: ExplainLog | None) -> None:
        self.fm, self.plan, self.log = fm, plan, log
        self.K = len(fm.steps)
        self.pos = {o: i for i, o in enumerate(fm.steps)}
        self.pre: dict[int, list[Operation]] = {}     # before step k
        self.post: dict[int, list[Operation]] = {}    # after step k (-1: before step 0)
        self.frees: dict[int, list[Operation]] = {}   # after step k, after `post`
        # before step k, after `pre`: (definition step, value, the op's copy) per recompute
        self.recomputed: dict[int, list[tuple[int, int, Operation]]] = {}
        self.segments: dict[int, list[_Segment]] = {}
        self.rc_ops: dict[int, list[Operation]] = {}   # before step k: recomputes, in order
        self.moves = 0
        self.recomputes = 0
        # each planned value's operands before any use is rerouted: a recompute and the chain it
        # rebuilds read these (a value rewritten earlier may have had its uses rerouted to a
        # recompute's clone, which is neither a planned value nor in a chain)
        self.operands: dict[SSAValue, list[SSAValue]] = {
            v: list(v.owner.operands) for v in fm.values if isinstance(v.owner, Operation)}

    def value(self, vi: int) -> None:
        """One value's copy out, prefetches, uses rerouted to the copy live at each, and frees."""
        v, mv = self.fm.values[vi], self.fm.problem.values[vi]
        copy_off, starts_off = self._copy_out(vi)
        segments, cur = self._prefetches(vi, None if starts_off else v, copy_off)
        self.segments[vi] = segments
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
                first = next(g for g, p in zip(gs, ps, strict=True)
                             if p is not None and p != RECOMPUTE)
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
            if p == RECOMPUTE:
                again = defining_op(fm.values[vi]).clone()
                self.recomputed.setdefault(g.b, []).append((mv.define, vi, again))
                self.recomputes += 1
                if log is not None:
                    log.add(steps[g.b] if g.b < K else fm.ret, self._why_recompute(vi, gi))
                cur, start = again.results[0], g.b
                continue
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

    def _why_recompute(self, vi: int, gi: int) -> str:
        """The explain line of a recompute: its modeled time against moving the value out after
        its previous use and back for this one (the same HBM room)."""
        prob, plan = self.fm.problem, self.plan
        mv, g = prob.values[vi], gaps_of(prob.values[vi], vi)[gi]
        assert mv.recompute is not None
        op = defining_op(self.fm.values[vi]).name
        why = f"HBM is over capacity at {plan.reasons.get((vi, gi), 'a point')} since its " \
              f"previous use"
        tiers = prob.tiers()
        if not tiers:
            return f"recompute {mv.name} ({mv.size} B, {op}) before this use: {why}; recompute " \
                   f"{mv.recompute * 1e6:.3g} us, no offload tier to move it to"
        t = plan.tier[vi] or tiers[0]
        move = prob.out_cost(mv, t, g.a) + prob.in_cost(mv, t, g.b, g.b)
        never = " (computed from constants alone: never moved)" if mv.never_moved else ""
        return f"recompute {mv.name} ({mv.size} B, {op}) before this use{never}: {why}; " \
               f"recompute {mv.recompute * 1e6:.3g} us beats moving it to {t} and back " \
               f"{move * 1e6:.3g} us"

    def wire_recomputes(self) -> None:
        """Give each recompute its operands: the copy of each input in HBM at its step, and a
        fresh copy of each constant-derived input's chain (freed right after it)."""
        fm = self.fm
        index = {v: i for i, v in enumerate(fm.values)}
        for k, group in self.recomputed.items():
            ops: list[Operation] = []
            for _d, vi, again in sorted(group, key=lambda x: (x[0], x[1])):
                built: dict[SSAValue, SSAValue] = {}
                chain = chain_of(fm.values[vi], fm.chains, self.operands)
                for x in chain:
                    c = defining_op(x).clone()
                    c.operands = [built[y] for y in self.operands[x]]
                    built[x] = c.results[0]
                    ops.append(c)
                again.operands = [built[x] if x in built else
                                  self._copy_at(index[_origin(x, index)], k)
                                  for x in self.operands[fm.values[vi]]]
                ops.append(again)
                ops.extend(FreeOp(built[x]) for x in chain)
            self.rc_ops[k] = ops

    def _copy_at(self, vi: int, k: int) -> SSAValue:
        """The HBM copy of value vi that step k reads."""
        for lo, hi, c in self.segments[vi]:
            if lo <= k <= hi and c is not None:
                return c
        raise AssertionError(f"no HBM copy of {self.fm.problem.values[vi].name} at point {k}")

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
            if self.rc_ops.get(k):
                block.insert_ops_before(self.rc_ops[k], o)
            tail = self.post.get(k, []) + self.frees.get(k, [])
            if tail:
                nxt = o.next_op
                assert nxt is not None
                block.insert_ops_before(tail, nxt)
        if self.pre.get(K):
            block.insert_ops_before(self.pre[K], fm.ret)
        if self.rc_ops.get(K):
            block.insert_ops_before(self.rc_ops[K], fm.ret)


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


def _origin(x: SSAValue, index: dict[SSAValue, int]) -> SSAValue:
    """The planned value that `x` is a copy of: an operand of a recomputed op's clone may already
    read a move's result (an earlier use was redirected to the value's HBM copy)."""
    while x not in index and isinstance(x.owner, MoveOp):
        x = x.owner.operands[0]
    return x
