"""Lamina's own list of a placed function's collectives, and what XLA's compiled program must hold.

`planned(func, mesh)` lists every placement op as the NumPy SPMD runner's statistics do (kind,
axes, algorithm, group size, payload and ring bytes sent per device, `comm_cost.sent_bytes`), with
sizes at device width (`lamina.analysis.sizes.local_bytes`: a bf16 is 2 bytes) and the replica
groups the op communicates in (`Mesh.groups`, device numbers row-major).

`expected_hlo(func, mesh)` is what the compiled HLO must then contain, one (kind, groups) per
collective instruction, in program order. It differs from the plan only where the lowering or XLA
must differ:
- all_slice is a local slice (no collective); a bucketed all_reduce of mixed element types is one
  all-reduce per type it sums in (f16 and bf16 sum as f32); reduce_scatter with kind = max is a pmax (an
  all-reduce) followed by a local slice; an unlowered reshard is a reduction of its pending axes
  and one all-gather per split dimension (`lamina.backends.jax.collectives.reshard`);
- a collective whose groups hold one device each moves nothing and is not emitted;
- a collective whose results reach no function result is dead code (jax and XLA drop it).

`compare` then splits the difference between the plan and a compiled HLO into what XLA added
(`extra`: never seen; it would be GSPMD or XLA communicating on its own) and what it removed
(`missing`: seen only where XLA's algebraic simplifier proves a collective's result unneeded,
e.g. `select(c, x, x)` with `c` computed from gathered data; the program then communicates less
than planned). The HLO jax hands to XLA, before XLA's optimizations, always equals the plan.

XLA's common-subexpression pass also merges two collectives it can prove compute the same data
(two all_gathers of values that simplify to one, like `select(c, x, x)` and `x`). That would send
less than Lamina planned; `could_merge` says when a program holds two collectives alike enough for
it (same op, attributes and operand types), and the backend then compiles with that pass off.
"""

from __future__ import annotations

from typing import Any

from lamina.analysis.comm_cost import sent_bytes
from lamina.analysis.sizes import local_bytes
from lamina.ir.core.dtypes import tensor_dtype
from lamina.ir.mesh.collective_kinds import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    COLLECTIVE_PERMUTE,
    REDUCE_KINDS,
    REDUCE_SCATTER,
    SUM,
)
from lamina.ir.mesh.collectives import (
    AllGatherOp,
    AllReduceOp,
    AllToAllOp,
    PlacementOp,
    ReduceScatterOp,
    ReshardOp,
)
from lamina.ir.mesh.placement import Mesh, spec_or_replicated, stage_devices, stage_of
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, SSAValue

Groups = tuple[tuple[int, ...], ...]


def groups(mesh: Mesh, axes: tuple[str, ...]) -> Groups:
    """The replica groups of a collective over `axes`, sorted by their first device."""
    return tuple(sorted(tuple(g) for g in mesh.groups(axes)))


def planned(func: FuncOp, mesh: Mesh) -> list[dict[str, Any]]:
    """Every collective Lamina placed in `func` (all_slice moves no data and is left out)."""
    out: list[dict[str, Any]] = []
    for op in func.walk():
        if not isinstance(op, PlacementOp) or not op.COLLECTIVE.communicates:
            continue
        axes = op.axis_names() if op.COLLECTIVE.needs_axes else tuple(mesh.axes)
        n = mesh.size(axes)
        local = float(sum(local_bytes(v, op) for v in op.inputs))
        payload = local * n if op.COLLECTIVE.payload_is_result else local
        alg = op.algorithm_name()
        out.append({"kind": op.short, "axes": list(axes), "algorithm": alg or op.COLLECTIVE.default_algorithm,
                    "devices": n, "replica_groups": [list(g) for g in groups(mesh, axes)],
                    "payload_bytes": int(payload),
                    "bytes_per_device": int(sent_bytes(op.short, alg, n, payload,
                                                       op.inner_group()))})
    return out


def _live_ops(func: FuncOp) -> set[Operation]:
    """The top-level ops of `func` whose results reach its return."""
    block = func.body.block
    ops = list(block.ops)
    live_values: set[SSAValue] = set()
    live: set[Operation] = set()
    for op in reversed(ops):
        if op is block.last_op or any(r in live_values for r in op.results):
            live.add(op)
            live_values.update(op.operands)
    return live


def _reshard_parts(op: ReshardOp, mesh: Mesh) -> list[tuple[str, tuple[str, ...]]]:
    src = spec_or_replicated(op.inputs[0].type)
    if src == spec_or_replicated(op.outputs[0].type):
        return []   # only the stage changes (`stage_moves`)
    parts: list[tuple[str, tuple[str, ...]]] = []
    if src.partial:
        parts.append((ALL_REDUCE.kind, tuple(src.partial)))
    parts += [(ALL_GATHER.kind, tuple(axes)) for axes in src.splits if axes]
    return parts


def expected_hlo(func: FuncOp, mesh: Mesh) -> list[tuple[str, Groups]]:
    """The (kind, replica groups) of every collective the compiled HLO must hold, in order."""
    live = _live_ops(func)
    out: list[tuple[str, Groups]] = []
    for op in func.body.block.ops:
        if not isinstance(op, PlacementOp) or op not in live:
            continue
        parts: list[tuple[str, tuple[str, ...]]] = []
        axes = op.axis_names()
        if isinstance(op, AllReduceOp):   # one flat buffer per element type it sums in
            wide = {"f16": "f32", "bf16": "f32"} if REDUCE_KINDS[op.reduce_kind()].widens else {}
            types = {wide.get(d, d) for d in (tensor_dtype(v.type) for v in op.inputs)}
            parts = [(ALL_REDUCE.kind, axes)] * len(types)
        elif isinstance(op, ReduceScatterOp):   # a max is a pmax and a local slice
            rs = op.reduce_kind() == SUM.name
            parts = [(REDUCE_SCATTER.kind if rs else ALL_REDUCE.kind, axes)]
        elif isinstance(op, AllGatherOp):
            parts = [(ALL_GATHER.kind, axes)]
        elif isinstance(op, AllToAllOp):
            parts = [(ALL_TO_ALL.kind, axes)]
        elif isinstance(op, ReshardOp):
            parts = _reshard_parts(op, mesh)
        out += [(kind, groups(mesh, ax)) for kind, ax in parts if mesh.size(ax) > 1]
        out += stage_moves(op, mesh)
    return out


def stage_moves(op: PlacementOp, mesh: Mesh) -> list[tuple[str, Groups]]:
    """The collective-permutes a placement op's move to another pipeline stage lowers to (one per
    result that changes stage: `lamina.backends.jax.collectives.to_stage`), with its
    (source, target) device pairs as the groups, as the HLO states them."""
    out: list[tuple[str, Groups]] = []
    for v, r in zip(op.inputs, op.outputs, strict=True):
        src, dst = stage_of(v.type), stage_of(r.type)
        if src is None or dst is None or src == dst:
            continue
        pairs = tuple(sorted((d, _on_stage(mesh, d, dst)) for d in stage_devices(mesh, src)))
        out.append((COLLECTIVE_PERMUTE.kind, pairs))
    return out


def _on_stage(mesh: Mesh, device: int, stage: tuple[str, int]) -> int:
    coords = mesh.coords(device)
    coords[stage[0]] = stage[1]
    return mesh.index(coords, mesh.axes)


def could_merge(func: FuncOp) -> bool:
    """Whether two placement ops of `func` have the same op, attributes and operand types (the
    only ones XLA's CSE could fold into one)."""
    seen: set[tuple[object, ...]] = set()
    for op in func.walk():
        if not isinstance(op, PlacementOp) or not op.COLLECTIVE.communicates:
            continue
        key = (op.name, tuple(sorted((k, str(v)) for k, v in op.properties.items())),
               tuple(str(v.type) for v in op.inputs))
        if key in seen:
            return True
        seen.add(key)
    return False


def _counted(items: list[tuple[str, Groups]]) -> dict[tuple[str, Groups], int]:
    out: dict[tuple[str, Groups], int] = {}
    for kind, gs in items:
        key = (kind, tuple(sorted(gs)))
        out[key] = out.get(key, 0) + 1
    return out


def difference(have: list[tuple[str, Groups]], want: list[tuple[str, Groups]]
               ) -> list[dict[str, Any]]:
    """The (kind, groups) of `have` beyond `want`, counted as multisets."""
    h, w = _counted(have), _counted(want)
    return [{"kind": k, "replica_groups": [list(g) for g in gs]}
            for (k, gs), n in h.items() for _ in range(n - w.get((k, gs), 0))]
