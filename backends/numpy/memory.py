"""Memory tiers in the NumPy interpreter: running `lamina.move`/`lamina.free`, and checked execution.

Importing this module makes the runner able to execute `lamina.move` (a copy: values are
immutable, so the copy equals its source) and `lamina.free` (no result; the runner drops the
array after its last use, which is the free).

`MemoryChecker` is an `ExecutionObserver` (see `lamina.backends.numpy.runner`): it watches a run
through the runner's hooks only, so the same layer works under any runner that calls them (the
single-device runner, or an SPMD runner that calls the same hooks). It tracks, at every op, the
bytes live in each memory tier *per device*: a value's bytes are its local shard size (placement
`lamina.analysis.sizes.local_bytes`), identical on every device of a
mesh because splits are even (`whole_arrays`: the global size, for a program run on one device
with its placements ignored). Lifetimes are the IR's: a value is live from its definition to its
`lamina.free` (or to the function's return when it is never freed); the runner's own early drops
do not count, so a program without frees keeps every value. A value without a tier counts as `hbm`.

What a `lamina.fused` op holds while it runs is charged to `sram`:
- with a target, what a kernel compiled for it would hold: its intermediates, at most the
  target's SRAM (its tiles are sized to fit), the model `assign-memory-tiers` plans with
  (`lamina.analysis.fusion.sram_bytes`), so a plan that fits also runs;
- without one, what the interpreter's fused executor allocated for it, as its runner reports
  (`on_working_set`): one worker's tile buffers and scratch plus the kernel's repeated and
  once-computed operands (`lamina.backends.numpy.fused`), or its intermediates under the SPMD
  runner, which runs fused bodies op by op.

It stops the run with a `LaminaError` at the op (the drivers print one line and exit 1) on
- a capacity overflow: the tier, its bytes and capacity, and the largest values live in it;
- a compute op reading or writing a value in `host`/`nvme`;
- a use of a value after its `lamina.free`, or a second free.

Statistics (`stats()`): `peak_bytes` per tier, `moved_bytes` per tier pair ("hbm->host"); and
`trace()`, the timeline for `--memory-plot` (bytes per tier after every op, and the moves).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from lamina.analysis.fusion import sram_bytes
from lamina.analysis.naming import Namer
from lamina.analysis.sizes import fmt_bytes, local_bytes
from lamina.backends.interface import MemoryTrace, TierOverflow
from lamina.backends.numpy.runner import ExecutionObserver, RunContext, register_op_runner
from lamina.ir.buffers.memory import FreeOp, MoveOp, effective_tier
from lamina.ir.core.diagnostics import error_at, op_loc
from lamina.ir.core.dtypes import nbytes as type_bytes
from lamina.ir.mesh.placement import COMPUTE_TIERS, TIERS
from lamina.ir.mesh.target import Target
from lamina.ir.ops.fused import FusedOp
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation, SSAValue


def run_move(op: Operation, args: list[np.ndarray | None], ctx: RunContext) -> list[np.ndarray]:
    x = args[0]
    assert x is not None
    return [x.copy()]


def run_free(op: Operation, args: list[np.ndarray | None], ctx: RunContext) -> list[np.ndarray]:
    return []


register_op_runner(MoveOp, run_move)
register_op_runner(FreeOp, run_free)


@dataclass
class Move:
    index: int
    src: str
    dst: str
    nbytes: int


@dataclass
class MemoryChecker(ExecutionObserver):
    """Checked execution: per-tier, per-device bytes at every op (see the module docstring)."""

    target: Target | None = None
    whole_arrays: bool = False
    top_live: int = 4
    bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIERS, 0))
    peak: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIERS, 0))
    moved: dict[str, int] = field(default_factory=dict)
    timeline: list[dict[str, int]] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.live: dict[SSAValue, tuple[str, int]] = {}
        self.freed: set[SSAValue] = set()
        self.func: FuncOp | None = None
        self.op: Operation | None = None
        self.name: Namer | None = None
        self.transient = 0

    # -- helpers --
    def _capacity(self, tier: str) -> float | None:
        if self.target is None:
            return None
        for t in self.target.tiers:
            if t.name == tier:
                return t.capacity
        return None

    def _add(self, v: SSAValue, where: Operation) -> None:
        assert self.func is not None
        tier = effective_tier(v.type)
        n = type_bytes(v.type) if self.whole_arrays else local_bytes(v, self.func)
        self.live[v] = (tier, n)
        self.bytes[tier] += n
        self._check(tier, where)

    def _check(self, tier: str, where: Operation) -> None:
        cur = self.bytes[tier] + (self.transient if tier == "sram" else 0)
        self.peak[tier] = max(self.peak[tier], cur)
        cap = self._capacity(tier)
        if self.target is not None and cap is None and cur > 0:
            raise error_at(where, f"checked execution: {self._where(where)} puts a value in tier "
                           f"'{tier}', which target '{self.target.name}' does not have")
        if cap is not None and cur > cap:
            assert self.name is not None and self.target is not None
            vals = sorted(((n, v) for v, (t, n) in self.live.items() if t == tier),
                          key=lambda p: -p[0])
            listed = ", ".join(f"{self.name(v)} ({fmt_bytes(n)})" for n, v in vals[: self.top_live])
            more = f" and {len(vals) - self.top_live} more" if len(vals) > self.top_live else ""
            extra = f"; fused intermediates {fmt_bytes(self.transient)}" if tier == "sram" and \
                self.transient else ""
            raise TierOverflow(f"checked execution: capacity overflow in tier '{tier}' at "
                               f"{self._where(where)}: {cur} bytes per device live, capacity "
                               f"{int(cap)} (target '{self.target.name}'); live: "
                               f"{listed or 'none'}{more}{extra}", op_loc(where), tier, cur,
                               int(cap), self.target.name)

    def _where(self, op: Operation) -> str:
        if isinstance(op, FuncOp):
            return f"the entry of @{op.sym_name.data}"
        if op.results and self.name is not None:
            return f"{self.name(op.results[0])} = {op.name}"
        return op.name

    def _record(self, label: str) -> None:
        self.timeline.append({t: self.bytes[t] + (self.transient if t == "sram" else 0)
                              for t in TIERS})
        self.labels.append(label)

    # -- hooks --
    def on_start(self, func: FuncOp, args: Sequence[SSAValue]) -> None:
        self.func = func
        self.name = Namer(func)
        for a in args:
            self._add(a, func)
        self._record("entry")

    def on_op(self, op: Operation, index: int) -> None:
        self.op = op
        assert self.name is not None
        for v in op.operands:
            if v in self.freed:
                raise error_at(op, f"checked execution: {op.name} uses {self.name(v)} after its "
                               "lamina.free" if not isinstance(op, FreeOp) else
                               f"checked execution: {self.name(v)} is freed twice")
        if isinstance(op, FreeOp):
            v = op.value
            self.freed.add(v)
            entry = self.live.pop(v, None)
            if entry is not None:
                self.bytes[entry[0]] -= entry[1]
            self._record(f"free {self.name(v)}")
            return
        if isinstance(op, (MoveOp, ReturnOp)):
            return
        for v in op.operands:
            tier = effective_tier(v.type)
            if tier not in COMPUTE_TIERS:
                raise error_at(op, f"checked execution: compute op {self._where(op)} reads "
                               f"{self.name(v)} in tier '{tier}' (compute reads only "
                               f"{'/'.join(COMPUTE_TIERS)}; move it to hbm first)")
        if isinstance(op, FusedOp) and self.target is not None:
            self.transient = sram_bytes(op, self.target)
            self._check("sram", op)

    def on_working_set(self, op: Operation, nbytes: int) -> None:
        if self.target is None:   # with a target, the model of on_op stands
            self.transient = nbytes
            self._check("sram", op)

    def on_result(self, value: SSAValue, index: int) -> None:
        op = self.op
        assert op is not None
        tier = effective_tier(value.type)
        if not isinstance(op, MoveOp) and tier not in COMPUTE_TIERS:
            raise error_at(op, f"checked execution: compute op {self._where(op)} writes its "
                           f"result to tier '{tier}' (compute writes only "
                           f"{'/'.join(COMPUTE_TIERS)})")
        self._add(value, op)
        if isinstance(op, MoveOp):
            src = effective_tier(op.source.type)
            n = self.live[value][1]
            key = f"{src}->{tier}"
            self.moved[key] = self.moved.get(key, 0) + n
            self.moves.append(Move(len(self.timeline), src, tier, n))
        if value is op.results[-1]:
            self.transient = 0
            self._record(self._where(op))

    def on_free(self, value: SSAValue, index: int) -> None:
        pass  # lifetimes are the IR's (lamina.free), not the runner's early drops

    def on_return(self, index: int) -> None:
        self._record("return")

    def stats(self) -> dict[str, Any]:
        return {"peak_bytes": {t: self.peak[t] for t in TIERS},
                "moved_bytes": dict(sorted(self.moved.items()))}

    def trace(self) -> MemoryTrace:
        caps = {t.name: t.capacity for t in self.target.tiers} if self.target is not None else {}
        return MemoryTrace(list(self.timeline), list(self.labels),
                           [(m.index, m.src, m.dst, m.nbytes) for m in self.moves], caps)
