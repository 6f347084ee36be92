"""`insert-collectives`: lower every `lamina.reshard` to the cheapest collectives for a target.

    -p 'propagate-sharding,insert-collectives{target=h100-cluster bucket=true bucket-bytes=26214400}'

`target` is a built-in target name or a TOML file (`lamina.ir.target`); mesh axes map onto its link
levels by `Target.axis_level`, and every cost comes from `lamina.analysis.comm_cost`.

A reshard from placement S to D (one mesh, one shape) becomes, in this order:
1. Splits S has and D does not (the minor end of a dimension's split), from the minor end: the
   longest run of them that D wants as the next splits of another dimension moves there with one
   all_to_all ((n-1)/n B sent) instead of all_gather + all_slice ((n-1) B); an axis that cannot
   move is all_gathered (consecutive ones in one all_gather), which may free the next run to move.
2. Pending axes D does not keep: those D wants as the next splits of a dimension become one
   reduce_scatter onto it (a + b(n-1)/n B, against a + 2b(n-1)/n B for all_reduce + all_slice;
   this is also how "all_reduce followed by a local slice" is folded: a reshard whose operand is
   an all_reduce used only there is lowered from the all_reduce's operand); the rest one all_reduce.
3. Splits D adds that no collective produced: all_slice, a local slice (no communication).
Each collective gets `algorithm` = ring | tree | hierarchical, the cheapest by the model for the
link levels its axes span. Finally, all_reduces whose time is mostly latency (`latency_dominated`)
over the same axes and kind are merged into one bucketed all_reduce (one latency) placed right
before the first op that uses any of them, at most `bucket-bytes` per device per bucket (default
25 MiB, PyTorch DDP's bucket_cap_mb; 0 = no cap); one walk, so the pass stays linear.
With `--explain` each collective is printed with its payload, bytes sent per device, estimated
time, the algorithms it beat and why the sequence was chosen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lamina.analysis.comm_cost import Estimate, estimate, latency_dominated, levels_of
from lamina.analysis.sizes import fmt_bytes, spec_local_bytes
from lamina.ir.collectives import (
    AllGatherOp,
    AllReduceOp,
    AllSliceOp,
    AllToAllOp,
    PlacementOp,
    ReduceScatterOp,
    ReshardOp,
    with_spec,
)
from lamina.ir.collectives import build as build_placement
from lamina.ir.diagnostics import error_at
from lamina.ir.memory import FreeOp
from lamina.ir.placement import Mesh, find_mesh, spec_of
from lamina.ir.sharding import Spec
from lamina.ir.target import Target, load_target
from lamina.passes.explain import ExplainLog, LaminaPass
from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, SSAValue

PAYLOAD_OF = {"all_reduce": "in", "reduce_scatter": "in", "all_to_all": "in", "all_gather": "out"}


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


def _emit(cx: _Ctx, cls: type[PlacementOp], v: SSAValue, src: Spec, dst: Spec, mesh: str,
          before: Operation, why: str, **attrs) -> SSAValue:
    axes = tuple(attrs.pop("axes"))
    kind = cls.name[len("lamina."):]
    alg = None
    inner = None
    if cls is not AllSliceOp:
        payload = cx.local_bytes(v, src) if PAYLOAD_OF[kind] == "in" else cx.local_bytes(v, dst)
        est = cx.cost(kind, axes, payload)
        alg, inner = est.algorithm, est.inner
        if cx.log is not None:
            cx.log.add(before, f"{kind} over [{', '.join(axes)}] of {v.type}: {est.describe()}; "
                       f"{why}")
    elif cx.log is not None:
        cx.log.add(before, f"all_slice over [{', '.join(axes)}]: local, nothing sent; {why}")
    op = build_placement(cls, [v], [with_spec(v.type, mesh, dst)], axes=axes, algorithm=alg,
                         inner=inner, **attrs)
    op.location = before.location
    block = before.parent_block()
    assert block is not None
    block.insert_op_before(op, before)
    return op.outputs[0]


def lower(cx: _Ctx, v: SSAValue, S: Spec, D: Spec, mesh: str, before: Operation) -> SSAValue:
    """Emit the collectives that turn `v` (placed S) into placement D, before `before`."""
    cur = S
    rank = len(S.splits)
    # 1. splits S has and D does not (each dimension's suffix past the prefix D keeps), from the
    # minor end: the longest tail of the suffix that another dimension e wants next moves there
    # with one all_to_all; an axis no tail ending at it can move is gathered first (runs of such
    # axes are one all_gather). So [[data, model], []] -> [[model], [data]] gathers only model and
    # moves data, instead of gathering both.
    for d in range(rank):
        gather: list[str] = []          # axes to gather from dim d, major to minor
        while True:
            have, want = cur.splits[d], D.splits[d]
            p = 0
            while p < min(len(have), len(want)) and have[p] == want[p]:
                p += 1
            suffix = tuple(have[p: len(have) - len(gather)])
            if not suffix:
                break
            move = _find_move(cur, D, d, suffix)
            if move is None:
                gather.insert(0, suffix[-1])
                continue
            if gather:
                v, cur = _gather(cx, v, cur, d, tuple(gather), mesh, before)
                gather = []
            j, e = move
            tail = suffix[j:]
            splits = list(cur.splits)
            splits[d] = tuple(cur.splits[d][: len(cur.splits[d]) - len(tail)])
            splits[e] = tuple(cur.splits[e]) + tail
            nxt = Spec(tuple(splits), cur.partial, cur.partial_kind)
            a2a = cx.cost("all_to_all", tail, cx.local_bytes(v, cur))
            ag = cx.cost("all_gather", tail, cx.local_bytes(v, Spec(
                tuple(splits[d] if q == d else cur.splits[q] for q in range(rank)))))
            v = _emit(cx, AllToAllOp, v, cur, nxt, mesh, before,
                      f"moves [{', '.join(tail)}] from dimension {d} to {e}: all_to_all "
                      f"{a2a.seconds * 1e6:.1f} us, {fmt_bytes(a2a.sent)} sent "
                      f"(all_gather + all_slice: {ag.seconds * 1e6:.1f} us, "
                      f"{fmt_bytes(ag.sent)} sent)",
                      axes=tail, split_dim=e, concat_dim=d)
            cur = nxt
        if gather:
            v, cur = _gather(cx, v, cur, d, tuple(gather), mesh, before)
    # 2. reductions: reduce_scatter where D splits over pending axes next, else all_reduce
    R = [a for a in cur.partial if a not in D.partial]
    for d in range(rank):
        have, want = cur.splits[d], D.splits[d]
        run: list[str] = []
        for a in want[len(have):]:
            if a in R:
                run.append(a)
            else:
                break
        if not run:
            continue
        axes = tuple(run)
        rest = tuple(a for a in cur.partial if a not in axes)
        splits = list(cur.splits)
        splits[d] = tuple(have) + axes
        nxt = Spec(tuple(splits), rest, cur.partial_kind if rest else "sum")
        payload = cx.local_bytes(v, cur)
        rs = cx.cost("reduce_scatter", axes, payload)
        ar = cx.cost("all_reduce", axes, payload)
        v = _emit(cx, ReduceScatterOp, v, cur, nxt, mesh, before,
                  f"the consumer takes dimension {d} split: reduce_scatter {rs.seconds * 1e6:.1f} "
                  f"us, {fmt_bytes(rs.sent)} sent, beats all_reduce + all_slice "
                  f"{ar.seconds * 1e6:.1f} us, {fmt_bytes(ar.sent)} sent",
                  axes=axes, dim=d, kind=cur.partial_kind)
        cur = nxt
        R = [a for a in R if a not in axes]
    if R:
        rest = tuple(a for a in cur.partial if a not in R)
        nxt = Spec(cur.splits, rest, cur.partial_kind if rest else "sum")
        v = _emit(cx, AllReduceOp, v, cur, nxt, mesh, before,
                  "the consumer needs these axes reduced and not split",
                  axes=tuple(R), kind=cur.partial_kind)
        cur = nxt
    # 3. local slices
    for d in range(rank):
        have, want = cur.splits[d], D.splits[d]
        if tuple(want[: len(have)]) != tuple(have):
            raise error_at(before, f"insert-collectives: cannot lower {S} -> {D} (internal)")
        extra = tuple(want[len(have):])
        if extra:
            splits = list(cur.splits)
            splits[d] = tuple(want)
            nxt = Spec(tuple(splits), cur.partial, cur.partial_kind)
            v = _emit(cx, AllSliceOp, v, cur, nxt, mesh, before,
                      f"dimension {d} is needed split over [{', '.join(extra)}]",
                      axes=extra, dim=d)
            cur = nxt
    assert cur == D, (cur, D)
    return v


def _find_move(cur: Spec, D: Spec, d: int, suffix: tuple[str, ...]) -> tuple[int, int] | None:
    """(j, e): the longest tail suffix[j:] that dimension e != d wants next, or None."""
    for j in range(len(suffix)):
        tail = suffix[j:]
        for e in range(len(cur.splits)):
            he, we = tuple(cur.splits[e]), tuple(D.splits[e])
            if e != d and we[: len(he)] == he and we[len(he): len(he) + len(tail)] == tail:
                return j, e
    return None


def _gather(cx: _Ctx, v: SSAValue, cur: Spec, d: int, axes: tuple[str, ...], mesh: str,
            before: Operation) -> tuple[SSAValue, Spec]:
    """all_gather the minor-most `axes` of dimension d."""
    splits = list(cur.splits)
    splits[d] = tuple(cur.splits[d][: len(cur.splits[d]) - len(axes)])
    nxt = Spec(tuple(splits), cur.partial, cur.partial_kind)
    v = _emit(cx, AllGatherOp, v, cur, nxt, mesh, before,
              f"dimension {d} must not be split over [{', '.join(axes)}] here",
              axes=axes, dim=d)
    return v, nxt


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
        est = cx.cost("all_reduce", axes, payload)
        op = build_placement(AllReduceOp, ins, outs, axes=axes, algorithm=est.algorithm,
                             inner=est.inner, kind=kind)
        op.location = members[0].location
        block.insert_op_before(op, before)
        saved = sum(cx.cost("all_reduce", axes, sum(cx.local_bytes(x, spec_of(x.type))  # type: ignore[arg-type]
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
            est = cx.cost("all_reduce", op.axis_names(),
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
                new = lower(cx, src, S, D, mesh_name, op)
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
                if isinstance(op, PlacementOp) and not isinstance(op, (AllSliceOp, ReshardOp)) \
                        and op.algorithm_name() is None:
                    kind = op.short
                    payload = sum(cx.local_bytes(v, spec_of(v.type)) for v in  # type: ignore[arg-type]
                                  (op.inputs if PAYLOAD_OF[kind] == "in" else op.outputs))
                    est = cx.cost(kind, op.axis_names(), payload)
                    op.properties["algorithm"] = StringAttr(est.algorithm)
                    if est.inner is not None:
                        op.properties["inner"] = IntegerAttr(est.inner, i64)
                    if log is not None:
                        log.add(op, f"{kind} over [{', '.join(op.axis_names())}] (written in the "
                                f"program): {est.describe()}")
            if self.bucket:
                _bucket(cx, func, mesh_name, self.bucket_bytes)
