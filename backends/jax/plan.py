"""Lamina's own list of a placed function's collectives, and what XLA's compiled program must hold.

`planned(func, mesh)` lists every placement op as the NumPy SPMD runner's statistics do (kind,
axes, algorithm, group size, payload and ring bytes sent per device, `comm_cost.sent_bytes`), with
sizes at device width (`lamina.analysis.sizes.local_bytes`: a bf16 is 2 bytes) and the replica
groups the op communicates in (`Mesh.groups`, device numbers row-major).

`expected_hlo(func, mesh)` is what the compiled HLO must then contain, one (kind, groups) per
collective instruction, in program order. It differs from the plan only where the lowering or XLA
must differ:
- all_slice is a local slice (no collective); reduce_scatter with kind = max is a pmax (an
  all-reduce) followed by a local slice; an unlowered reshard is a reduction of its pending axes
  and one all-gather per split dimension (`lamina.backends.jax.collectives.reshard`);
- a collective whose groups hold one device each moves nothing and XLA removes it;
- a collective whose results reach no function result is dead code and XLA removes it.
"""

from __future__ import annotations

from typing import Any

from lamina.analysis.comm_cost import sent_bytes
from lamina.analysis.sizes import local_bytes
from lamina.backends.numpy.spmd import spec_or_replicated
from lamina.ir.collectives import (
    AllGatherOp,
    AllReduceOp,
    AllSliceOp,
    AllToAllOp,
    PlacementOp,
    ReduceScatterOp,
    ReshardOp,
)
from lamina.ir.placement import Mesh
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
        if not isinstance(op, PlacementOp) or isinstance(op, AllSliceOp):
            continue
        axes = op.axis_names() if not isinstance(op, ReshardOp) else tuple(mesh.axes)
        n = mesh.size(axes)
        local = float(sum(local_bytes(v, op) for v in op.inputs))
        payload = local * n if isinstance(op, AllGatherOp) else local
        alg = op.algorithm_name()
        out.append({"kind": op.short, "axes": list(axes), "algorithm": alg or "ring",
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
    parts: list[tuple[str, tuple[str, ...]]] = []
    if src.partial:
        parts.append(("all_reduce", tuple(src.partial)))
    parts += [("all_gather", tuple(axes)) for axes in src.splits if axes]
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
        if isinstance(op, AllReduceOp):
            parts = [("all_reduce", axes)]
        elif isinstance(op, ReduceScatterOp):
            parts = [("reduce_scatter" if op.reduce_kind() == "sum" else "all_reduce", axes)]
        elif isinstance(op, AllGatherOp):
            parts = [("all_gather", axes)]
        elif isinstance(op, AllToAllOp):
            parts = [("all_to_all", axes)]
        elif isinstance(op, ReshardOp):
            parts = _reshard_parts(op, mesh)
        out += [(kind, groups(mesh, ax)) for kind, ax in parts if mesh.size(ax) > 1]
    return out
