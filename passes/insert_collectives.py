"""`insert-collectives`: lower every `lamina.reshard` to the cheapest collectives for a target.

    -p 'propagate-sharding,insert-collectives{target=h100-cluster bucket=true bucket-bytes=26214400}'

`target` is a built-in target name or a TOML file (`lamina.ir.mesh.target`); mesh axes map onto its link
levels by `Target.axis_level`, and every cost comes from `lamina.analysis.comm_cost`.

A reshard from placement S to D (one mesh, one shape) becomes the sequence of collectives with the
smallest estimated time on the target (`lamina.analysis.reshard_plan`, a shortest path over
placements; ties to fewer collectives): all_gathers of the splits D does not keep, all_to_alls that
move axes between dimensions ((n-1)/n of the local block sent, against (n-1) blocks for all_gather +
all_slice; reordering a dimension's axes goes through another dimension rather than gathering it
whole), reduce_scatters of the pending axes D splits next (a + b(n-1)/n B, against a + 2b(n-1)/n B
for all_reduce + all_slice), all_reduces of the rest, and all_slices (local, free) wherever they make
a later collective's payload smaller. "all_reduce followed by a local slice" is folded too: a
reshard whose operand is an all_reduce used only there is lowered from the all_reduce's operand.
A reshard between two pipeline stages (`stage = pp[i]` -> `pp[j]`) becomes that sequence plus one
`lamina.collective_permute` over the stage axis where the local block is smallest
(`reshard_plan.plan_stage_move`); the collectives before it run on stage i, those after on j.
Each collective gets `algorithm` = ring | tree | hierarchical (a point-to-point one: direct), the
cheapest by the model for the link levels its axes span. Finally, all_reduces whose time is
mostly latency (`latency_dominated`) over the same axes and kind are merged into one bucketed
all_reduce (one latency) placed right before the first op that uses any of them, at most
`bucket-bytes` per device per bucket (default 25 MiB, PyTorch DDP's bucket_cap_mb; 0 = no cap);
one walk, so the pass stays linear.
With `--explain` each collective is printed with its payload, bytes sent per device, estimated
time, the algorithms it beat and why the sequence was chosen.

What differs between the collectives it emits (their attributes, what they reduce, which side is
the payload, whether they communicate) is read from each kind's record in
`lamina.ir.mesh.collective_kinds`; the op class is `lamina.ir.mesh.collectives.OP_CLASS[kind]`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lamina.analysis.comm_cost import Estimate, estimate, latency_dominated, levels_of
from lamina.analysis.reshard_plan import Plan, Step, plan_reshard, plan_stage_move
from lamina.analysis.sizes import fmt_bytes, spec_local_bytes, type_bytes
from lamina.ir.buffers.memory import FreeOp
from lamina.ir.core.diagnostics import error_at
from lamina.ir.mesh.collective_kinds import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_SLICE,
    ALL_TO_ALL,
    COLLECTIVE_PERMUTE,
    REDUCE_SCATTER,
)
from lamina.ir.mesh.collectives import OP_CLASS, AllReduceOp, PlacementOp, ReshardOp, with_spec, with_stage
from lamina.ir.mesh.collectives import build as build_placement
from lamina.ir.mesh.placement import Mesh, find_mesh, spec_of, stage_of
from lamina.ir.mesh.sharding import Spec
from lamina.ir.mesh.target import Target, load_target
from lamina.passes.explain import ExplainLog, LaminaPass
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, SSAValue


class _Ctx:
    def __init__(self, target: Target, mesh: Mesh, log: ExplainLog | None):
        self.target = target
        self.mesh = mesh
        self.sizes = mesh.axis_sizes
        self.log = log

    def local_bytes(self, v: SSAValue, s: Spec) -> float:
        return spec_local_bytes(v.type, s, self.sizes)

    def cost(self, kind: str, axes: tuple[str, ...], payload: float) -> Estimate:
        return estimate(kind, payload, levels_of(self.target, self.mesh, axes), self.target)


def _emit(cx: _Ctx, step: Step, v: SSAValue, mesh: str, before: Operation, why: str,
          to_stage: tuple[str, int] | None = None) -> SSAValue:
    c, axes, src, dst = step.collective, step.axes, step.src, step.dst
    kind = c.kind
    alg = None
    inner = None
    if c.communicates:
        payload = cx.local_bytes(v, dst) if c.payload_is_result else cx.local_bytes(v, src)
        est = cx.cost(kind, axes, payload)
        alg, inner = est.algorithm, est.inner
        if cx.log is not None:
            cx.log.add(before, f"{kind} over [{', '.join(axes)}] of {v.type}: {est.describe()}; "
                       f"{why}")
    elif cx.log is not None:
        cx.log.add(before, f"{kind} over [{', '.join(axes)}]: local, nothing sent; {why}")
    ints = {key: getattr(step, key) for key in c.int_attrs}   # Step's fields are named so
    rt = with_spec(v.type, mesh, dst)
    op = build_placement(OP_CLASS[kind], [v], [with_stage(rt, to_stage) if c.moves_stage else rt],
                         axes=axes,
                         algorithm=alg, inner=inner, **ints,
                         kind=src.partial_kind if c.reduces else None)
    op.location = before.location
    block = before.parent_block()
    assert block is not None
    block.insert_op_before(op, before)
    return op.outputs[0]


def plan_for(cx: _Ctx, v: SSAValue, S: Spec, D: Spec, allow_a2a: bool = True,
             stage_axis: str | None = None) -> Plan | None:
    """The cheapest collectives from S to D for `v` on this target (`analysis.reshard_plan`),
    with a move along `stage_axis` when given."""
    t = v.type
    assert isinstance(t, TensorType)
    if stage_axis is not None:
        return plan_stage_move(S, D, t.get_shape(), type_bytes(t), cx.sizes,
                               lambda kind, axes, b: _time_and_sent(cx.cost(kind, axes, b)),
                               stage_axis)
    return plan_reshard(S, D, t.get_shape(), type_bytes(t), cx.sizes,
                        lambda kind, axes, b: _time_and_sent(cx.cost(kind, axes, b)), allow_a2a)


def _time_and_sent(e: Estimate) -> tuple[float, float]:
    return e.seconds, e.sent


def _why(cx: _Ctx, v: SSAValue, step: Step) -> str:
    """The explain line's reason for one step, with the alternative it beat where there is one."""
    d = step.dim
    c = step.collective
    if c is ALL_GATHER:
        return f"dimension {d} must not be split over [{', '.join(step.axes)}] here"
    if c is ALL_SLICE:
        return f"dimension {d} is needed split over [{', '.join(step.axes)}]"
    if c is COLLECTIVE_PERMUTE:
        return "the consumer runs on another pipeline stage (sent where the block is smallest)"
    if c is ALL_REDUCE:
        return "the consumer needs these axes reduced and not split"
    if c is ALL_TO_ALL:
        e, d = step.split_dim, step.concat_dim
        a2a = cx.cost(ALL_TO_ALL.kind, step.axes, cx.local_bytes(v, step.src))
        splits = list(step.src.splits)
        splits[d] = step.dst.splits[d]
        ag = cx.cost(ALL_GATHER.kind, step.axes, cx.local_bytes(v, Spec(tuple(splits))))
        return (f"moves [{', '.join(step.axes)}] from dimension {d} to {e}: all_to_all "
                f"{a2a.seconds * 1e6:.1f} us, {fmt_bytes(a2a.sent)} sent (all_gather + all_slice: "
                f"{ag.seconds * 1e6:.1f} us, {fmt_bytes(ag.sent)} sent)")
    b = cx.local_bytes(v, step.src)
    rs, ar = cx.cost(REDUCE_SCATTER.kind, step.axes, b), cx.cost(ALL_REDUCE.kind, step.axes, b)
    return (f"the consumer takes dimension {d} split: reduce_scatter {rs.seconds * 1e6:.1f} us, "
            f"{fmt_bytes(rs.sent)} sent, beats all_reduce + all_slice {ar.seconds * 1e6:.1f} us, "
            f"{fmt_bytes(ar.sent)} sent")


def lower(cx: _Ctx, v: SSAValue, S: Spec, D: Spec, mesh: str, before: Operation,
          to_stage: tuple[str, int] | None = None) -> SSAValue:
    """Emit the cheapest collectives (by the target's model) that turn `v`, placed S, into
    placement D (on stage `to_stage`, when it moves), before `before`; with --explain, a plan
    that uses all_to_all also names the best plan without it (gathers and slices only) and its
    cost."""
    plan = plan_for(cx, v, S, D, stage_axis=to_stage[0] if to_stage is not None else None)
    if plan is None:
        raise error_at(before, f"insert-collectives: cannot lower {S} -> {D}")
    if cx.log is not None and any(s.collective is ALL_TO_ALL for s in plan.steps):
        alt = plan_for(cx, v, S, D, allow_a2a=False)
        if alt is not None:
            cx.log.add(before, f"reshard {S} -> {D}: {len(plan.communicating)} collectives, "
                       f"{plan.seconds * 1e6:.1f} us, {fmt_bytes(plan.sent)} sent per "
                       f"device; without all_to_all {len(alt.communicating)} collectives, "
                       f"{alt.seconds * 1e6:.1f} us, {fmt_bytes(alt.sent)} sent")
    for step in plan.steps:
        why = _why(cx, v, step) if cx.log is not None else ""
        v = _emit(cx, step, v, mesh, before, why, to_stage)
    return v


def _bucket(cx: _Ctx, func: FuncOp, mesh: str, cap: int) -> None:
    """Merge latency-dominated all_reduces over the same axes (one walk, see module docstring).

    A bucket holds at most `cap` bytes of payload per device (0: no cap): a member that would
    overflow it closes the bucket (emitted before that member) and opens the next one, as
    PyTorch DDP's bucket_cap_mb does, so one bucket never grows into a bandwidth-bound transfer
    that the first consumer has to wait for whole."""
    block = func.body.block
    open_: dict[tuple, list[AllReduceOp]] = {}
    open_bytes: dict[tuple, float] = {}
    member_of: dict[SSAValue, tuple] = {}
    input_of: dict[SSAValue, AllReduceOp] = {}
    deferred: dict[tuple, list[tuple[FreeOp, AllReduceOp]]] = {}

    def flush(key: tuple, before: Operation) -> None:
        open_bytes.pop(key, None)
        members = open_.pop(key, [])
        frees = deferred.pop(key, [])
        for m in members:
            for r in m.outputs:
                member_of.pop(r, None)
            for x in m.inputs:
                input_of.pop(x, None)
        if len(members) < 2:
            for f, m in frees:          # nothing merged: each free goes back after its member
                block.insert_op_after(f, m)
            return
        ins = [x for m in members for x in m.inputs]
        outs = [r.type for m in members for r in m.outputs]
        payload = sum(cx.local_bytes(x, spec_of(x.type)) for x in ins)  # type: ignore[arg-type]
        axes, kind = key
        est = cx.cost(ALL_REDUCE.kind, axes, payload)
        op = build_placement(AllReduceOp, ins, outs, axes=axes, algorithm=est.algorithm,
                             inner=est.inner, kind=kind)
        op.location = members[0].location
        block.insert_op_before(op, before)
        saved = sum(cx.cost(ALL_REDUCE.kind, axes, sum(cx.local_bytes(x, spec_of(x.type))  # type: ignore[arg-type]
                                                    for x in m.inputs)).seconds
                    for m in members) - est.seconds
        if cx.log is not None:
            cx.log.add(members[0], f"bucket of {len(members)} all_reduces over "
                       f"[{', '.join(axes)}]: {est.describe()}; each was latency-bound, one "
                       f"launch saves {saved * 1e6:.1f} us")
        for f, _ in reversed(frees):    # a member's input is freed after the merged op reads it
            block.insert_op_after(f, op)
        results = [r for m in members for r in m.outputs]
        for old, new in zip(results, op.outputs, strict=True):
            old.replace_all_uses_with(new)
        for m in members:
            m.detach()
            m.erase()

    for op in list(block.ops):
        if isinstance(op, FreeOp) and op.operands[0] in input_of:
            # annotate-lifetimes freed a member's input right after the member; the merged
            # all_reduce reads it later, so the free waits for the bucket
            m = input_of[op.operands[0]]
            op.detach()
            deferred.setdefault(member_of[m.outputs[0]], []).append((op, m))
            continue
        deps = {member_of[v] for v in op.operands if v in member_of}
        for key in deps:
            flush(key, op)
        if isinstance(op, AllReduceOp) and len(op.inputs) == 1:
            x = op.inputs[0]
            est = cx.cost(ALL_REDUCE.kind, op.axis_names(),
                          cx.local_bytes(x, spec_of(x.type)))  # type: ignore[arg-type]
            if latency_dominated(est):
                key = (op.axis_names(), op.reduce_kind())
                payload = cx.local_bytes(x, spec_of(x.type))  # type: ignore[arg-type]
                if cap and key in open_ and open_bytes[key] + payload > cap:
                    if cx.log is not None:
                        cx.log.add(op, f"bucket over [{', '.join(key[0])}] closed: adding "
                                   f"{fmt_bytes(payload)} would pass bucket-bytes={cap}")
                    flush(key, op)
                open_.setdefault(key, []).append(op)
                open_bytes[key] = open_bytes.get(key, 0.0) + payload
                member_of[op.outputs[0]] = key
                input_of[x] = op
        if op is block.last_op:
            for key in list(open_):
                flush(key, op)


@dataclass(frozen=True)
class InsertCollectives(LaminaPass):
    """Insert the cheapest collectives each placement change needs, bucketing small all_reduces."""

    name: ClassVar[str] = "insert-collectives"
    minimums: ClassVar[dict[str, int]] = {"bucket_bytes": 0}
    target: str = "h100-node"
    bucket: bool = True
    bucket_bytes: int = 25 * 1024 * 1024

    def run(self, ctx: Context, module: ModuleOp, log: ExplainLog | None) -> None:
        target = load_target(self.target)
        for func in [op for op in module.ops if isinstance(op, FuncOp)]:
            reshards = [op for op in func.walk() if isinstance(op, ReshardOp)]
            collectives = [op for op in func.walk() if isinstance(op, PlacementOp)]
            if not collectives:
                continue
            mesh_name = collectives[0].mesh_name()
            mesh_op = find_mesh(func, mesh_name)
            if mesh_op is None:
                raise error_at(func, f"insert-collectives: unknown mesh @{mesh_name}")
            mesh = mesh_op.mesh
            if mesh.devices > target.devices:
                raise error_at(mesh_op, f"insert-collectives: mesh @{mesh_name} has "
                               f"{mesh.devices} devices, target '{target.name}' has "
                               f"{target.devices}")
            cx = _Ctx(target, mesh, log)
            for op in reshards:
                (x,) = op.inputs
                src = x
                folded = None
                owner = x.owner
                frees = [u.operation for u in x.uses if isinstance(u.operation, FreeOp)]
                if isinstance(owner, AllReduceOp) and len(owner.inputs) == 1 and \
                        sum(1 for _ in x.uses) - len(frees) == 1:
                    folded, src = owner, owner.inputs[0]   # fold all_reduce + slice
                S, D = spec_of(src.type), spec_of(op.outputs[0].type)
                assert S is not None and D is not None
                moves = stage_of(src.type) != stage_of(op.outputs[0].type)
                new = lower(cx, src, S, D, mesh_name, op,
                            stage_of(op.outputs[0].type) if moves else None)
                if log is not None and folded is not None:
                    log.add(op, "folded the all_reduce feeding this reshard into the lowering")
                if folded is not None:
                    # lifetimes (annotate-lifetimes): the all_reduce's result is gone, and its
                    # operand is now read here, so a free of it placed earlier moves here
                    for f in frees:
                        f.detach()
                        f.erase()
                    blk = op.parent_block()
                    assert blk is not None
                    for u in list(src.uses):
                        f = u.operation
                        if isinstance(f, FreeOp) and f.parent_block() is blk:
                            f.detach()
                            blk.insert_op_before(f, op)
                op.outputs[0].replace_all_uses_with(new)
                op.detach()
                op.erase()
                if folded is not None:
                    folded.detach()
                    folded.erase()
            # algorithms for collectives the program wrote itself
            for op in func.walk():
                if isinstance(op, PlacementOp) and not isinstance(op, ReshardOp) \
                        and op.COLLECTIVE.communicates and op.algorithm_name() is None:
                    kind = op.short
                    payload = sum(cx.local_bytes(v, spec_of(v.type)) for v in  # type: ignore[arg-type]
                                  (op.outputs if op.COLLECTIVE.payload_is_result else op.inputs))
                    est = cx.cost(kind, op.axis_names(), payload)
                    op.set_algorithm(est.algorithm, est.inner)
                    if log is not None:
                        log.add(op, f"{kind} over [{', '.join(op.axis_names())}] (written in the "
                                f"program): {est.describe()}")
            if self.bucket:
                _bucket(cx, func, mesh_name, self.bucket_bytes)
