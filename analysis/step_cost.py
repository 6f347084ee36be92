"""What each op of a step costs on a target: the one cost model the tier planner, `--report`,
`--timeline` and `--explain` all read.

- `op_seconds(op, target, func)`: the roofline time of one compute op per device,
  max(local flops / target FLOP/s, local bytes read and written / HBM bandwidth). A fused op
  counts the flops of its body and only its external bytes (its intermediates stay in SRAM). A
  `lamina.move` costs its transfer between tiers: local bytes / the target's bandwidth between
  the two tiers. `assign-memory-tiers` builds its steps' compute times from this, except that
  it counts a move step as 0: the moves it plans are costed by its own model on the copy
  engine, beside compute, and a move step counted as compute would hide other transfers behind
  a transfer (see `passes/assign_memory_tiers.py`).
- `step_costs(func, target)`: one `KernelCost` per op that runs something (a kernel, a
  collective, a move), in program order. Collectives are priced by the alpha-beta model of
  `lamina.analysis.comm_cost` over the link levels their axes span (an unlowered reshard, which
  has no axes, over the whole mesh), with the algorithm the op records if it records one.
  Views and constants (`OpInfo.launches_kernel` false) and `lamina.free` launch nothing and get
  no entry; `func.return` neither.

Devices: an op runs on the devices that hold its results (`stage_devices` of the result's
pipeline stage; a collective also on those holding its operands, which send); every device of
the mesh for an unstaged placed op; device 0 alone in a program placed on no mesh.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lamina.analysis.comm_cost import estimate, levels_of, sent_bytes
from lamina.analysis.placed import placed_mesh
from lamina.analysis.sizes import local_bytes
from lamina.ir.buffers.memory import FreeOp, MoveOp
from lamina.ir.core.dtypes import ITEMSIZE, tensor_dtype
from lamina.ir.mesh.collectives import PlacementOp
from lamina.ir.mesh.placement import Mesh, stage_devices, stage_of, tier_of
from lamina.ir.mesh.target import Target
from lamina.ir.ops.fused import FusedOp
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from xdsl.dialects.builtin import TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation, SSAValue

COMPUTE, COLLECTIVE, MOVE = "compute", "collective", "move"
KINDS = (COMPUTE, COLLECTIVE, MOVE)


def _hbm_bandwidth(target: Target) -> float:
    # a target without an hbm tier: 1 TB/s, what the tier planner has always assumed
    return target.tier("hbm").bandwidth if any(t.name == "hbm" for t in target.tiers) else 1e12


def moved_bytes(op: Operation, func: FuncOp) -> float:
    """Bytes one device reads and writes for `op`: its tensor operands and results, local
    shards (a fused op's external ones only)."""
    return float(sum(local_bytes(v, func) for v in (*op.operands, *op.results)
                     if isinstance(v.type, TensorType)))


def local_flops(op: Operation, func: FuncOp) -> float:
    """FLOPs one device performs for `op` (a table op or a fused op's body; others none): the
    table's formula on the global shapes, scaled by the share of the result a device holds."""
    ops = [op] if isinstance(op, LaminaOp) else \
        [o for o in op.body.block.ops if isinstance(o, LaminaOp)] if isinstance(op, FusedOp) else []
    flops = 0.0
    for o in ops:
        res = o.results[0]
        glob = tensor_info(res.type)
        numel = max(1, math.prod(glob.shape))
        share = local_bytes(res, func) / (numel * float(ITEMSIZE[tensor_dtype(res.type)]))
        flops += o.info.flops(o.operand_infos(), glob, o.attr_values()) * share
    return flops


def move_seconds(op: MoveOp, target: Target, func: FuncOp) -> float:
    """A move's transfer time: local bytes over the target's bandwidth between the tiers."""
    src = tier_of(op.source.type) or "hbm"
    names = {t.name for t in target.tiers}
    if src == op.tier or src not in names or op.tier not in names:
        return 0.0
    return local_bytes(op.result, func) / target.transfer_bandwidth(src, op.tier)


def op_seconds(op: Operation, target: Target, func: FuncOp) -> float:
    """Modeled seconds of `op` per device (see the module docstring)."""
    if isinstance(op, MoveOp):
        return move_seconds(op, target, func)
    return max(local_flops(op, func) / target.flops, moved_bytes(op, func) / _hbm_bandwidth(target))


@dataclass(frozen=True)
class KernelCost:
    """The modeled cost of one op of a step (numbers per device)."""

    op: Operation
    index: int               # position in the function body (what lamina-run's timings key on)
    name: str                # "matmul", "fused(layernorm+gelu+dropout)", "all_reduce"
    kind: str                # COMPUTE | COLLECTIVE | MOVE
    devices: tuple[int, ...]
    flops: float
    bytes: float             # bytes moved: operands + results, local shapes
    sent: float              # bytes each device sends (collectives), else 0
    seconds: float


def kernel_name(op: Operation) -> str:
    """The label of an op's kernel: the op name without `lamina.`; a fused op lists the ops of
    its body that compute (not its views and constants), each once."""
    if isinstance(op, FusedOp):
        names = [o.name.removeprefix("lamina.") for o in op.body.block.ops
                 if isinstance(o, LaminaOp) and o.info.launches_kernel]
        return f"fused({'+'.join(dict.fromkeys(names))})"
    return op.name.removeprefix("lamina.")


def value_devices(v: SSAValue, mesh: Mesh | None) -> tuple[int, ...]:
    """The devices holding `v`: its stage's, every device of the mesh, or 0 without a mesh."""
    if mesh is None:
        return (0,)
    return tuple(stage_devices(mesh, stage_of(v.type)))


def op_devices(op: Operation, mesh: Mesh | None) -> tuple[int, ...]:
    """The devices `op` runs on (see the module docstring)."""
    values = list(op.results) or list(op.operands)
    if isinstance(op, PlacementOp):
        values = [*op.operands, *op.results]
    devs: set[int] = set()
    for v in values:
        devs.update(value_devices(v, mesh))
    return tuple(sorted(devs)) or (0,)


def runs_kernel(op: Operation) -> bool:
    """Whether `op` gets a `KernelCost`: not a return, free, view or constant."""
    if isinstance(op, (ReturnOp, FreeOp)):
        return False
    return not isinstance(op, LaminaOp) or op.info.launches_kernel


def collective_cost(op: PlacementOp, target: Target, func: FuncOp, mesh: Mesh) -> tuple[float, float]:
    """(seconds, bytes sent per device) of a collective by `comm_cost`, with the algorithm the
    op records when it records one the model offers."""
    c = op.COLLECTIVE
    if not c.communicates:
        return 0.0, 0.0
    payload = float(sum(local_bytes(r if c.payload_is_result else x, func)
                        for x, r in zip(op.inputs, op.outputs, strict=True)))
    axes = op.axis_names() or mesh.axes
    est = estimate(c.kind, payload, levels_of(target, mesh, axes), target)
    alg = op.algorithm_name() or est.algorithm
    seconds = est.seconds if alg == est.algorithm else dict(est.alternatives).get(alg, est.seconds)
    inner = op.inner_group() if op.algorithm_name() else est.inner
    return seconds, sent_bytes(c.kind, alg, est.n, payload, inner)


def step_costs(func: FuncOp, target: Target) -> list[KernelCost]:
    """One `KernelCost` per op of `func` that runs something, in program order."""
    mesh_op = placed_mesh(func)
    mesh = mesh_op.mesh if mesh_op is not None else None
    out: list[KernelCost] = []
    for i, op in enumerate(func.body.block.ops):
        if not runs_kernel(op):
            continue
        sent = 0.0
        if isinstance(op, PlacementOp):
            kind = COLLECTIVE
            seconds, sent = collective_cost(op, target, func, mesh) if mesh is not None else (0.0, 0.0)
        else:
            kind = MOVE if isinstance(op, MoveOp) else COMPUTE
            seconds = op_seconds(op, target, func)
        out.append(KernelCost(op, i, kernel_name(op), kind, op_devices(op, mesh),
                              local_flops(op, func), moved_bytes(op, func), sent, seconds))
    return out
