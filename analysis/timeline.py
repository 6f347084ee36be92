"""The modeled timeline of one step: every kernel and collective as a bar on a device's lane.

`schedule(func, target)` list-schedules the ops of `step_costs` (`lamina.analysis.step_cost`):
each device has a compute lane, which runs its kernels in program order, and a comm lane, which
runs its collectives and tier moves (NCCL's own stream and the copy engines), so communication
overlaps compute wherever the dependencies allow. An op runs on the devices `step_costs` gives it
(a pipeline stage's, the whole mesh, or device 0); it starts when its lane is free on every one of
those devices and every operand is ready, i.e. the op that produced it has ended (a view or
constant, which launches nothing, passes its operands' readiness on). The op ends `seconds`
later on all of its devices: the modeled time, or the measured one `seconds` gives for its index
(`lamina-run --timeline`).

A device's busy time is the time its compute lane runs; the step time is the end of the last bar
and the bubble fraction the idle share of the compute lanes, 1 - sum(busy) / (devices x step).
For a GPipe or 1F1B schedule of M micro-batches over P equal stages with free transfers
(and backwards as long as forwards) that is (P - 1) / (M + P - 1), for Megatron's interleaved
one with V chunks per stage (P - 1) / (V M + P - 1). One pass over the ops: linear in the
program size times the devices per op.
The same function always gives the same timeline (nothing depends on hashing or timing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lamina.analysis.placed import placed_mesh
from lamina.analysis.step_cost import COMPUTE, KernelCost, step_costs
from lamina.ir.mesh.placement import Mesh
from lamina.ir.mesh.target import Target
from xdsl.dialects.func import FuncOp
from xdsl.ir import SSAValue

LANES = ("compute", "comm")


@dataclass(frozen=True)
class Bar:
    """One op on one device's lane, from `start` to `end` seconds after the step begins."""

    name: str
    kind: str
    device: int
    lane: str       # "compute" | "comm"
    start: float
    end: float
    index: int      # the op's position in the function body


@dataclass
class Timeline:
    """A scheduled step (see the module docstring)."""

    bars: list[Bar]
    devices: int
    lane_labels: dict[int, str]
    step_time: float
    busy: dict[int, float]          # compute seconds per device
    bubble_fraction: float
    costs: list[KernelCost] = field(default_factory=list)   # what was scheduled, program order


def lane_labels(mesh: Mesh | None) -> dict[int, str]:
    """`device 3 (data=1, pp=1)` per device of `mesh` (`device 0` for a program on none)."""
    if mesh is None:
        return {0: "device 0"}
    labels: dict[int, str] = {}
    for d in range(mesh.devices):
        c = mesh.coords(d)
        labels[d] = f"device {d} ({', '.join(f'{a}={c[a]}' for a in mesh.axes)})"
    return labels


def _ready(v: SSAValue, ready: dict[SSAValue, float]) -> float:
    return ready.get(v, 0.0)   # a function argument is ready at the start


def schedule(func: FuncOp, target: Target, seconds: Mapping[int, float] | None = None) -> Timeline:
    """The list schedule of `func`'s step on `target` (see the module docstring)."""
    mesh_op = placed_mesh(func)
    mesh = mesh_op.mesh if mesh_op is not None else None
    labels = lane_labels(mesh)
    costs = step_costs(func, target)
    by_index = {c.index: c for c in costs}
    free: dict[tuple[int, str], float] = {}
    ready: dict[SSAValue, float] = {}
    bars: list[Bar] = []
    for i, op in enumerate(func.body.block.ops):
        at = max((_ready(v, ready) for v in op.operands), default=0.0)
        cost = by_index.get(i)
        if cost is None:            # launches nothing: its results are ready with its operands
            ready.update(dict.fromkeys(op.results, at))
            continue
        lane = "compute" if cost.kind == COMPUTE else "comm"
        start = max([at, *(free.get((d, lane), 0.0) for d in cost.devices)])
        end = start + (seconds[i] if seconds is not None and i in seconds else cost.seconds)
        for d in cost.devices:
            free[(d, lane)] = end
            bars.append(Bar(cost.name, cost.kind, d, lane, start, end, i))
        ready.update(dict.fromkeys(op.results, end))
    return _timeline(bars, labels, costs)


def _timeline(bars: list[Bar], labels: dict[int, str], costs: list[KernelCost]) -> Timeline:
    """The totals of a schedule: step time, busy compute time per device, bubble fraction."""
    step = max((b.end for b in bars), default=0.0)
    busy = dict.fromkeys(labels, 0.0)
    for b in bars:
        if b.lane == "compute":
            busy[b.device] += b.end - b.start
    n = len(labels)
    bubble = 1.0 - sum(busy.values()) / (n * step) if step > 0 else 0.0
    return Timeline(bars, n, labels, step, busy, max(0.0, bubble), costs)
