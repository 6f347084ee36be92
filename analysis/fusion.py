"""The fusion-group model: which rows a reduction reduces, a fused op's working set, and building a
`lamina.fused` op from a group of ops.

`fuse-elementwise` forms groups, `propagate-sharding` re-forms the groups a reshard splits, the
fused executors run them tile by tile and the tier planner charges their working set to SRAM; all
of them read these definitions, so they cannot disagree on what a group is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from lamina.analysis.sizes import local_bytes
from lamina.ir.buffers.memory import FreeOp
from lamina.ir.mesh.placement import PlaceAttr
from lamina.ir.mesh.sharding import Reduction
from lamina.ir.mesh.target import Target
from lamina.ir.ops.attention import is_matmul
from lamina.ir.ops.formulas import Call
from lamina.ir.ops.fused import FusedOp, YieldOp, make_body
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from lamina.ir.ops.optable import Fusion
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, OpResult, SSAValue


def _shape(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def row_split(op: LaminaOp) -> int | None:
    """k when `op` is a row-wise reduction over its input's trailing k dims, else None.

    A reduce_* is row-wise when its `axes` are the trailing dims; a composite (layernorm,
    softmax, ...) when its `axis` starts them: it needs every dim from `axis` on whole."""
    x = op.operand_slots()[0]
    if x is None:
        return None
    rank = len(_shape(x))
    attrs = op.attr_values()
    if isinstance(op.info.sharding, Reduction) and "axes" in attrs:
        axes = sorted({a % rank for a in attrs["axes"]}) if rank else []
        k = len(axes)
        return k if axes == list(range(rank - k, rank)) else None
    if "axis" in attrs:
        if rank == 0:
            return None
        return rank - attrs["axis"] % rank
    return None


def iteration_domain(op: LaminaOp) -> tuple[int, ...]:
    """The shape an op iterates over inside a group: a reduction's input, else its result."""
    if op.info.fusion == Fusion.REDUCTION:
        x = op.operand_slots()[0]
        assert x is not None
        return _shape(x)
    return _shape(op.results[0])


def least_tiles(lead: tuple[int, ...], reduced: bool) -> int:
    """How many tiles a kernel over rows `lead` (`reduced`: a row-reduction group, whose rows
    stay whole) or over the loop domain `lead` can be cut into at most: one per row, or for a
    loop its innermost rows (single elements when it is one-dimensional). A kernel's least
    working set is one such tile's share of its intermediates."""
    if reduced:
        return max(1, math.prod(lead))
    return max(1, math.prod(lead if len(lead) <= 1 else lead[:-1]))


def fused_least_tiles(op: FusedOp) -> int:
    """`least_tiles` of a built fused op, from its members' iteration domains.

    An attention kernel's least tile is one query row against one key block: its online softmax
    keeps a running max, sum and accumulator per row instead of the row's scores, so a row of
    scores [..., Tq, Tk] splits into Tk tiles of one key each (the smallest block), not one
    whole row as its softmax alone would need."""
    members = body_ops(op)
    if op.fusion_kind == "attention":
        scores = next(m for m in members if is_matmul(m)).results[0]
        return max(1, math.prod(_shape(scores)))
    for m in members:
        k = row_split(m) if m.info.fusion == Fusion.REDUCTION else None
        if k is not None:
            s = iteration_domain(m)
            return least_tiles(s[: len(s) - k], True)
    full = max((iteration_domain(m) for m in members), key=math.prod, default=())
    return least_tiles(full, False)


def body_ops(op: FusedOp) -> list[LaminaOp]:
    """The op-table ops of a fused body, in order (its `lamina.free`s and yield left out)."""
    return [o for o in op.body.block.ops if isinstance(o, LaminaOp)]


def fused_kind(members: Sequence[Operation]) -> str:
    """"attention" when a group holds two matmuls (only fuse-attention makes such groups, and a
    pass that rebuilds groups, such as propagate-sharding, must keep their kind), "matmul" when
    it has one row-tiled opaque root (fuse-elementwise's rule 9), else "row_reduction" when it
    holds a reduction, else "loop" (see `lamina.ir.ops.fused`)."""
    if sum(1 for m in members if is_matmul(m)) >= 2:
        return "attention"
    fusions = {m.info.fusion for m in members if isinstance(m, LaminaOp)}
    if Fusion.OPAQUE in fusions:
        return "matmul"
    return "row_reduction" if Fusion.REDUCTION in fusions else "loop"


def intermediate_bytes(op: FusedOp) -> int:
    """Peak bytes per device of the values computed inside a fused op that are not its results.

    Without `lamina.free` in the body every intermediate lives to the kernel's end (their sum);
    a free inside the body (annotate-lifetimes) releases its intermediate's bytes."""
    yielded = set(op.yield_op.operands)
    live = peak = 0
    for o in op.body.block.ops:
        if isinstance(o, FreeOp):
            if isinstance(o.value, OpResult) and o.value not in yielded:
                live -= local_bytes(o.value, op)
            continue
        live += sum(local_bytes(r, op) for r in o.results if r not in yielded)
        peak = max(peak, live)
    return peak


def sram_bytes(op: FusedOp, target: Target | None) -> int:
    """The SRAM a fused op compiled for `target` holds while it runs: its intermediates, at most
    the target's SRAM (a kernel sizes its tiles to fit). This is the model assign-memory-tiers
    plans with and checked execution charges under a target; without one, checked execution
    charges what the interpreter's executor really allocates (`lamina.backends.numpy.memory`),
    since a kernel with no SRAM to fit has no tile size this model could derive."""
    total = intermediate_bytes(op)
    if target is not None and any(t.name == "sram" for t in target.tiers):
        total = min(total, int(target.tier("sram").capacity))
    return total


def _is_source(op: Operation) -> bool:
    return isinstance(op, LaminaOp) and op.info.fusion == Fusion.SOURCE


def build_fused(members: Sequence[Operation]) -> FusedOp:
    """One `lamina.fused` op computing `members` (in this order), not yet inserted anywhere.

    Its inputs are the values members read from outside the group (first use first); constants
    they read are cloned into the body (a constant costs no kernel); its results are the member
    results used outside the group, and those uses are redirected to the fused op's results.
    Members are moved into the body (detached from their block if they were in one)."""
    mset = set(members)
    inputs: list[SSAValue] = []
    seen_in: set[SSAValue] = set()
    consts: list[Operation] = []
    for m in members:
        for v in m.operands:
            p = v.owner
            if isinstance(p, Operation) and p in mset:
                continue
            if isinstance(p, Operation) and _is_source(p):
                if p not in consts:
                    consts.append(p)
                continue
            if v not in seen_in:
                seen_in.add(v)
                inputs.append(v)
    outputs = [r for m in members for r in m.results
               if any(u.operation not in mset for u in r.uses)]
    region, body = make_body([v.type for v in inputs])
    for a, v in zip(body.args, inputs, strict=True):
        a.name_hint = v.name_hint
        v.replace_uses_with_if(a, lambda u: u.operation in mset)
    for c in consts:
        clone = c.clone()
        body.add_op(clone)
        for old, new in zip(c.results, clone.results, strict=True):
            old.replace_uses_with_if(new, lambda u: u.operation in mset)
    for m in members:
        if m.parent is not None:
            m.detach()
        body.add_op(m)
    yield_op = YieldOp(outputs)
    body.add_op(yield_op)
    fused = FusedOp(fused_kind(members), inputs, [r.type for r in outputs], region)
    fused.location = members[0].location
    for old, new in zip(outputs, fused.results, strict=True):
        new.name_hint = old.name_hint
        old.replace_uses_with_if(new, lambda u: u.operation is not yield_op
                                 and u.operation not in mset)
    return fused


Positions = tuple[int | None, ...]   # per domain dim of a kernel: its dim in a value, or None


def view_positions(op: LaminaOp, operand_pos: Sequence[Positions]) -> Positions | None:
    """Where a group's domain dims land in `op`'s result, given where they are in each operand;
    None when the operands disagree (a concat of values whose rows lie differently)."""
    rule = op.info.view
    assert rule is not None
    call = Call(op.attr_values(), op.operand_infos(), tensor_info(op.results[0].type))
    out: Positions | None = None
    for j, pos in enumerate(operand_pos):
        m = rule.dims(call, j)
        res = tuple(None if p is None else m[p] for p in pos)
        if out is None:
            out = res
        elif out != res:
            return None
    return out


def kept_prefix(pos: Positions, domain: Sequence[int]) -> int:
    """How many leading domain dims an output view keeps one to one (a dim of extent 1 always
    counts: a tile covers it whole)."""
    k = 0
    for p, d in zip(pos, domain, strict=True):
        if p is None and d != 1:
            break
        k += 1
    return k



def placement_key(op: Operation) -> tuple[object, None] | tuple[None, str]:
    """What every member of `op`'s kernel must share (the key), or why `op` must stay alone.

    A kernel computes in one memory tier, and on a mesh it is one body that every device runs on
    its own shards, exactly as the ops would run one by one. That needs no agreement beyond what
    the verifier already enforces: a fully placed op satisfies its sharding rule, so its operands'
    placements agree with its result's on every dimension they share after broadcasting, and any
    communication a value needs is an explicit collective or reshard op, never a group member.
    So a bias `[[model]]` fuses with the `[[data], [model]]` activations it is added to, and a
    pending sum flows through linear members just as through the unfused ops. What must match:
    the tier of every value (one kernel, one memory) and the mesh, with either every value placed
    or none (a half-placed op has not been checked against its rule yet)."""
    encs = {getattr(v.type, "encoding", None) for v in (*op.operands, *op.results)}
    encs = {None if e is None or type(e).__name__ == "NoneAttr" else e for e in encs}
    if len(encs) == 1:
        enc = next(iter(encs))
        return (("encoding", enc) if not isinstance(enc, PlaceAttr) else _key(enc)), None
    if any(e is not None and not isinstance(e, PlaceAttr) for e in encs):
        return None, "mixes type encodings Lamina does not know"
    places: list[PlaceAttr | None] = [e if isinstance(e, PlaceAttr) else None for e in encs]
    tiers = {p.tier_name if p is not None else None for p in places}
    if len(tiers) > 1:
        return None, f"mixes memory tiers in its types ({_names(tiers)})"
    meshes = {p.mesh_name if p is not None else None for p in places}
    if len(meshes) > 1:
        return None, (f"mixes placed and unplaced values ({_names(meshes)}); "
                      "run propagate-sharding first")
    return ("place", next(iter(meshes)), next(iter(tiers))), None


def _key(enc: PlaceAttr) -> tuple[object, ...]:
    return ("place", enc.mesh_name, enc.tier_name)


def _names(items: set[str | None]) -> str:
    return ", ".join(sorted("none" if i is None else i for i in items))
