"""The NumPy interpreter's core: run a function's ops in order, each by its op-table kernel.

Unlike xDSL's stock region runner, which keeps every SSA value alive until the function returns,
this runner computes each value's last use once, up front, and drops the value right after it, so
a long chain of ops on large tensors holds only what is live (see `peak_live_bytes` in its stats).

Ops outside the op table (fused regions, collectives, moves, added by later layers) register a
runner with `register_op_runner`; the op table stays the only place that knows per-op semantics.
Every runner gets the run's `RunContext`: its statistics and the backend options it was started
with (`lamina.backends.numpy.options.NumpyOptions`), so no setting lives in a module global. A backend
built on this interpreter may run some op types its own way for one run (`RunContext.runners`,
`run_function(runners=...)`): the compiled backend runs `lamina.fused` so and everything else here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from lamina.backends.arrays import check_inputs
from lamina.backends.interface import RunResult
from lamina.backends.numpy.kernels import kernel
from lamina.backends.numpy.options import NumpyOptions
from lamina.ir.core.diagnostics import error_at
from lamina.ir.core.dtypes import ITEMSIZE, STORAGE
from lamina.ir.ops.formulas import Call
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from lamina.ir.ops.optable import OpInfo
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation, SSAValue

OpRunner = Callable[[Operation, list[np.ndarray | None], "RunContext"], list[np.ndarray]]
_RUNNERS: dict[type[Operation], OpRunner] = {}


def register_op_runner(op_type: type[Operation], runner: OpRunner) -> None:
    """Make ops of `op_type` (matched exactly) runnable; used by layers above the kernels."""
    _RUNNERS[op_type] = runner


@dataclass
class RunStats:
    ops_executed: int = 0
    kernels: int = 0
    flops: float = 0.0
    bytes_accessed: int = 0
    bytes_moved: int = 0
    peak_live_bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ops_executed": self.ops_executed,
            "kernels": self.kernels,
            "flops": self.flops,
            "bytes_accessed": self.bytes_accessed,
            "bytes_moved": self.bytes_moved,
            "peak_live_bytes": self.peak_live_bytes,
            **self.extra,
        }


@dataclass
class RunContext:
    """What every op runner of one run shares: the counters, the options, the run's observer
    (an op runner that allocates memory of its own reports it there: `on_working_set`), this
    run's own runners for some op types (they take precedence over the registered ones), the
    lines a runner explains its choices with (`RunResult.explain`) and the program's memo."""

    stats: RunStats
    options: NumpyOptions = field(default_factory=NumpyOptions)
    observer: ExecutionObserver | None = None
    runners: dict[type[Operation], OpRunner] = field(default_factory=dict)
    explain: list[str] = field(default_factory=list)
    # what a runner derives from an op alone (a kernel's cache key), kept for one compiled
    # program's calls (`lamina.backends.numpy.program`): the program's ops never change
    memo: dict[Any, Any] = field(default_factory=dict)
    # whether this run counts statistics: a compiled program's later calls reuse its checked
    # call's (`lamina.backends.numpy.program`), so a runner may skip what only counting needs
    counting: bool = True


def device_nbytes(a: np.ndarray, dtype: str) -> int:
    return int(a.size) * ITEMSIZE[dtype]


def distinct_nbytes(values: Sequence[SSAValue | None],
                    arrays: Sequence[np.ndarray | None]) -> int:
    """Bytes of a kernel's distinct operands (or results): a value passed twice (`mul %x, %x`)
    is read once by a real kernel, so `bytes_moved` counts it once, unlike `bytes_accessed`."""
    seen: dict[SSAValue, int] = {}
    for v, a in zip(values, arrays, strict=True):
        if v is not None and a is not None:
            seen[v] = device_nbytes(a, tensor_info(v.type).dtype)
    return sum(seen.values())


def make_call(op: LaminaOp) -> Call:
    return Call(op.attr_values(), op.operand_infos(), tensor_info(op.results[0].type))


def run_kernel(info: OpInfo, args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
    """The op's kernel on `args`; a result with no elements is produced without running it
    (nothing to compute, and NumPy's reductions fail on an empty axis: softmax or a norm over
    one)."""
    if math.prod(call.result.shape) == 0:
        return np.zeros(call.result.shape, STORAGE[call.result.dtype])
    return kernel(info)(list(args), call)


def run_table_op(op: LaminaOp, args: list[np.ndarray | None], ctx: RunContext) -> list[np.ndarray]:
    """Run one op-table op on whole arrays."""
    stats = ctx.stats
    call = make_call(op)
    info = op.info
    out = run_kernel(info, args, call)
    if out.shape != call.result.shape:
        raise error_at(op, f"{op.name}: kernel produced shape {out.shape}, type says "
                       f"{call.result.shape} (interpreter bug)")
    if info.launches_kernel:
        stats.kernels += 1
        stats.flops += info.flops(call.operands, call.result, call.attrs)
        stats.bytes_accessed += sum(device_nbytes(a, t.dtype) for a, t in
                                    zip(args, call.operands, strict=True)
                                    if a is not None and t is not None)
        stats.bytes_accessed += device_nbytes(out, call.result.dtype)
        stats.bytes_moved += distinct_nbytes(op.operand_slots(), args) + \
            device_nbytes(out, call.result.dtype)
    return [out]


def last_uses(ops: Sequence[Operation]) -> dict[SSAValue, int]:
    """For each value used in `ops` (top level), the index of the op that uses it last."""
    last: dict[SSAValue, int] = {}
    for i, op in enumerate(ops):
        for v in op.operands:
            last[v] = i
    return last


class ExecutionObserver:
    """Hooks through which a layer above the kernels (tier/lifetime accounting, tracing) watches a
    run without the runner knowing about it. Every method is a no-op here; subclasses override
    what they need. Device-local sizes are the observer's business (it can read placements from
    the values' types); `index` is the op's position in the function body."""

    def on_start(self, func: FuncOp, args: Sequence[SSAValue]) -> None: ...

    def on_op(self, op: Operation, index: int) -> None:
        """Called before `op` runs; its operands are live."""

    def on_result(self, value: SSAValue, index: int) -> None:
        """Called when `value` (a result of the op at `index`) becomes live."""

    def on_free(self, value: SSAValue, index: int) -> None:
        """Called when `value` is dropped after its last use at op `index`."""

    def on_working_set(self, op: Operation, nbytes: int) -> None:
        """Called while `op` runs by an op runner that allocated `nbytes` per device besides
        the op's operands and results (a fused kernel's tile buffers and scratch)."""

    def on_return(self, index: int) -> None: ...


class KernelTimer(ExecutionObserver):
    """Wall seconds each op of one run took, by its index in the function body, measured around
    the hooks of the observer it wraps (`NumpyOptions.kernel_times`, for `lamina-run
    --timeline`): from the op's `on_op` to its first result, or to the next op for one without.
    Only a run that asks for it has one, so other runs pay nothing."""

    def __init__(self, inner: ExecutionObserver) -> None:
        self.inner = inner
        self.seconds: dict[int, float] = {}
        self._open: tuple[int, float] | None = None

    def _stop(self) -> None:
        if self._open is not None:
            index, started = self._open
            self.seconds[index] = time.perf_counter() - started
            self._open = None

    def on_start(self, func: FuncOp, args: Sequence[SSAValue]) -> None:
        self.inner.on_start(func, args)

    def on_op(self, op: Operation, index: int) -> None:
        self._stop()
        self.inner.on_op(op, index)
        self._open = (index, time.perf_counter())

    def on_result(self, value: SSAValue, index: int) -> None:
        self._stop()
        self.inner.on_result(value, index)

    def on_free(self, value: SSAValue, index: int) -> None:
        self.inner.on_free(value, index)

    def on_working_set(self, op: Operation, nbytes: int) -> None:
        self.inner.on_working_set(op, nbytes)

    def on_return(self, index: int) -> None:
        self._open = None
        self.inner.on_return(index)


V = TypeVar("V")
R = TypeVar("R")


def drive(func: FuncOp, args: Sequence[V], execute: Callable[[Operation, list[V | None]], list[V]],
          nbytes: Callable[[V], int], finish: Callable[[ReturnOp, list[V]], R], stats: RunStats,
          observer: ExecutionObserver | None = None) -> R:
    """The op loop every NumPy-backend runner shares: run `func`'s ops in order with `execute`,
    report each step to `observer`, and drop every value after its last use.

    A value is whatever the runner keeps per SSA value (one array here; one array per device under
    the SPMD runner); `nbytes` sizes it for `peak_live_bytes` and `finish` turns the values the
    func.return returns into the run's result.
    """
    obs = observer or ExecutionObserver()
    block = func.body.block
    env: dict[SSAValue, V] = dict(zip(block.args, args, strict=True))
    obs.on_start(func, block.args)
    live = sum(nbytes(a) for a in args)
    stats.peak_live_bytes = max(stats.peak_live_bytes, live)
    ops = list(block.ops)
    last = last_uses(ops)
    with np.errstate(all="ignore"):
        for i, op in enumerate(ops):
            obs.on_op(op, i)
            if isinstance(op, ReturnOp):
                obs.on_return(i)
                return finish(op, [env[v] for v in op.operands])
            operands = [None if v is None else env[v] for v in
                        (op.operand_slots() if isinstance(op, LaminaOp) else op.operands)]
            results = execute(op, operands)
            stats.ops_executed += 1
            for r, a in zip(op.results, results, strict=True):
                obs.on_result(r, i)
                if r in last:
                    env[r] = a
                    live += nbytes(a)
                else:
                    obs.on_free(r, i)
            stats.peak_live_bytes = max(stats.peak_live_bytes, live)
            for v in set(op.operands):
                if last.get(v) == i:
                    dropped = env.pop(v, None)
                    if dropped is not None:
                        live -= nbytes(dropped)
                    obs.on_free(v, i)
    raise error_at(func, f"@{func.sym_name.data} has no func.return")


def op_runner(op: Operation) -> OpRunner | None:
    """The runner registered for ops of `op`'s exact class, if any."""
    return _RUNNERS.get(type(op))


def run_function(func: FuncOp, inputs: Sequence[np.ndarray],
                 observer: ExecutionObserver | None = None,
                 options: NumpyOptions | None = None,
                 runners: dict[type[Operation], OpRunner] | None = None,
                 memo: dict[Any, Any] | None = None) -> RunResult:
    """Run `func` on whole arrays (one device), freeing each intermediate after its last use.

    Placements in the types are not looked at: on whole arrays every collective is the identity,
    which makes this the reference run a placed program is compared with. `runners` replace the
    registered runners of their op types for this run."""
    ctx = RunContext(RunStats(), options or NumpyOptions(), observer, dict(runners or {}),
                     memo={} if memo is None else memo)

    def execute(op: Operation, operands: list[np.ndarray | None]) -> list[np.ndarray]:
        if isinstance(op, LaminaOp):
            return run_table_op(op, operands, ctx)
        if (runner := ctx.runners.get(type(op)) or op_runner(op)) is not None:
            return runner(op, operands, ctx)
        raise error_at(op, f"the NumPy backend cannot run '{op.name}'")

    def finish(ret: ReturnOp, outs: list[np.ndarray]) -> RunResult:
        return RunResult(outs, ctx.stats.as_dict(), explain=ctx.explain)

    return drive(func, check_inputs(func, inputs), execute, lambda a: a.nbytes, finish,
                 ctx.stats, observer)
