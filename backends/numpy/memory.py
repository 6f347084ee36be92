"""Memory tiers in the NumPy interpreter: running `lamina.move`/`lamina.free`, and checked execution.

Importing this module makes the runner able to execute `lamina.move` (a copy: values are
immutable, so the copy equals its source) and `lamina.free` (no result; the runner drops the
array after its last use, which is the free).

`MemoryChecker` is an `ExecutionObserver` (see `lamina.backends.numpy.runner`): it watches a run
through the runner's hooks only, so the same layer works under any runner that calls them (the
single-device runner, or an SPMD runner that calls the same hooks). It tracks, at every op, the
bytes live in each memory tier *per device*: a value's bytes are its local shard size (placement
`resolve(...).local_shape` times the element size on the device), identical on every device of a
mesh because splits are even. Lifetimes are the IR's: a value is live from its definition to its
`lamina.free` (or to the function's return when it is never freed); the runner's own early drops
do not count, so a program without frees keeps every value. A value without a tier counts as `hbm`.
The intermediates inside a `lamina.fused` op live in `sram` while it runs; the kernel works tile
by tile, so they are charged at most the SRAM capacity (`fused_sram_bytes`).

It stops the run with a `LaminaError` at the op (the drivers print one line and exit 1) on
- a capacity overflow: the tier, its bytes and capacity, and the largest values live in it;
- a compute op reading or writing a value in `host`/`nvme`;
- a use of a value after its `lamina.free`, or a second free.

Statistics (`stats()`): `peak_bytes` per tier, `moved_bytes` per tier pair ("hbm->host"), and
the timeline for `--memory-plot` (bytes per tier after every op, and the moves).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from lamina.backends.numpy.runner import ExecutionObserver, RunStats, register_op_runner
from lamina.ir.diagnostics import LaminaError, error_at
from lamina.ir.dtypes import ITEMSIZE, tensor_dtype, tensor_shape
from lamina.ir.fused import FusedOp
from lamina.ir.memory import COMPUTE_TIERS, FreeOp, MoveOp, effective_tier, value_label
from lamina.ir.placement import TIERS, resolve
from lamina.ir.target import Target
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation, OpResult, SSAValue


def run_move(op: Operation, args: list[np.ndarray | None], stats: RunStats) -> list[np.ndarray]:
    x = args[0]
    assert x is not None
    return [x.copy()]


def run_free(op: Operation, args: list[np.ndarray | None], stats: RunStats) -> list[np.ndarray]:
    return []


register_op_runner(MoveOp, run_move)
register_op_runner(FreeOp, run_free)


def local_nbytes(v: SSAValue, anchor: Operation) -> int:
    """Bytes of `v` on one device: its local shard under its placement."""
    shape = tensor_shape(v.type)
    place = resolve(v.type, anchor)
    if place is not None:
        shape = place.local_shape(shape)
    return int(np.prod(shape, dtype=np.int64)) * ITEMSIZE[tensor_dtype(v.type)]


def fused_intermediate_bytes(op: FusedOp) -> int:
    """Peak bytes of the values computed inside a fused op that are not its results (per device).
    Without `lamina.free` in the body every intermediate lives to the kernel's end (their sum);
    a free inside the body (annotate-lifetimes) releases its intermediate's bytes."""
    yielded = set(op.yield_op.operands)
    live = peak = 0
    for o in op.body.block.ops:
        if isinstance(o, FreeOp):
            if isinstance(o.value, OpResult) and o.value not in yielded:
                live -= local_nbytes(o.value, op)
            continue
        live += sum(local_nbytes(r, op) for r in o.results if r not in yielded)
        peak = max(peak, live)
    return peak


def fused_sram_bytes(op: FusedOp, target: Target | None) -> int:
    total = fused_intermediate_bytes(op)
    if target is not None and any(t.name == "sram" for t in target.tiers):
        total = min(total, int(target.tier("sram").capacity))
    return total


def fmt_bytes(n: float) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{int(n)} B"


class Namer:
    """Printable names of values: the source name, else a number in definition order."""

    def __init__(self, func: FuncOp):
        self.names: dict[SSAValue, str] = {}
        n = 0
        for v in [*func.body.block.args, *(r for op in func.body.walk() for r in op.results)]:
            if v.name_hint:
                self.names[v] = "%" + v.name_hint
            else:
                self.names[v] = f"%{n}"
                n += 1

    def __call__(self, v: SSAValue) -> str:
        return self.names.get(v) or value_label(v)


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
        n = local_nbytes(v, self.func)
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
            raise error_at(where, f"checked execution: capacity overflow in tier '{tier}' at "
                           f"{self._where(where)}: {cur} bytes per device live, capacity "
                           f"{int(cap)} (target '{self.target.name}'); live: {listed or 'none'}"
                           f"{more}{extra}")

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
        if isinstance(op, FusedOp):
            self.transient = fused_sram_bytes(op, self.target)
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


def plot_memory(checker: MemoryChecker, path: str, title: str = "") -> None:
    """Each tier's occupancy over program points, its capacity as a line, moves marked."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise LaminaError("--memory-plot needs matplotlib: pip install 'lamina[plot]'") from None
    target = checker.target
    tiers = [t for t in TIERS if any(p[t] for p in checker.timeline)
             or (target is not None and t in ("hbm",) and any(x.name == t for x in target.tiers))]
    fig, axes = plt.subplots(len(tiers), 1, figsize=(10, 2.2 * len(tiers) + 0.6), sharex=True,
                             squeeze=False)
    xs = list(range(len(checker.timeline)))
    for ax, tier in zip(axes[:, 0], tiers, strict=True):
        ys = [p[tier] for p in checker.timeline]
        ax.step(xs, ys, where="post", label=f"{tier} bytes/device")
        ax.fill_between(xs, ys, step="post", alpha=0.25)
        cap = checker._capacity(tier)
        if cap is not None:
            ax.axhline(cap, color="red", linestyle="--", label=f"capacity {fmt_bytes(cap)}")
        for m in checker.moves:
            if tier in (m.src, m.dst):
                ax.axvline(m.index, color="green" if m.dst == tier else "orange", alpha=0.5,
                           linewidth=1)
        ax.set_ylabel(tier)
        ax.legend(loc="upper right", fontsize="small")
    axes[-1, 0].set_xlabel("program point (green: move into the tier, orange: move out)")
    fig.suptitle(title or "memory per tier per device")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
