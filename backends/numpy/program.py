"""A function compiled for the NumPy interpreter: a flat list of prepared steps, run many times.

`NumpyProgram(func, options, runners)` does once what depends only on the program, its types and
the options: it finds the function's mesh, checks the options, and turns the body into `Steps`,
a flat list of (kernel, operand slots, result slots, slots dropped after it). A call then only
indexes a list of arrays and calls kernels: no IR is read, no attribute is decoded, no shape rule
is evaluated. An op-table op's step is its row's kernel with its `Call` built once; a
`lamina.fused` op whose whole iteration space fits one tile (what the tile loop would run as a
single tile, so the same ops on the same arrays) is a nested `Steps` of its body, run over whole
arrays with no planning per call (on the NumPy backend only: the compiled backend compiles every
kernel); every other op calls its runner (`runner.op_runner`, or the backend's own, as the
compiled backend's fused runner). A runner keeps what it planned at the op's first call in the
program's memo (`RunContext.memo`): the tile loop's plan per argument layout
(`fused.TilePlan`), an attention kernel's plan (`attention.AttentionPlan`, the compiled
backend's `_Plan`), a compiled kernel's replay; a later call binds its arrays and runs.

Memory: the intermediates of op-table kernels live at offsets fixed at compile time in one arena
per tier (`arena_steps`), so a steady-state call allocates only its outputs, the temporaries of
kernels without an `out=` form and the results of other runners, which the `arena` statistic
lists. Calls of one program are serialized (they share its arena).

The first call is the *checked* call: it runs exactly as `runner.run_function` (or the SPMD
runner, for a placed function) always did, with checked execution (`memory.MemoryChecker`: use
after free, tiers compute cannot read, capacity overflow with a target) and every statistic
counted. With `warm` (the compiled backend's choice) it is made at compile time, on zeros of the
argument types, so the kernels it compiles or loads, its plans and its statistics are ready
before the first real call (statistics that depend on the data, such as the rows a compiled
kernel left to the interpreter, are then the warm-up's).
The statistics depend only on the program and the options, so later calls reuse them and run the
steps alone, bit for bit the same kernels on the same arrays. A placed function runs on every
device of its simulated mesh at every call (the SPMD runner is the reference for placed programs,
not a fast path).

Donation (`donate`: argument index -> the result that updates it, `lamina.ir.buffers.updates`): the
result is written into the argument's array, which is then returned as that result, so a
training loop's parameters stay in the same arrays. A donated array must be C-contiguous,
writeable, of the argument's storage dtype and share no memory with another input.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from lamina.analysis.placed import first_unplaced, partly_placed_note, placed_mesh
from lamina.backends.arrays import check_inputs
from lamina.backends.interface import RunResult, arg_names
from lamina.backends.numpy.arena_steps import Arena, native_ufunc, plan_steps, precompute
from lamina.backends.numpy.fused import KIND_RUNNERS, one_tile
from lamina.backends.numpy.kernels import kernel, native_kernel
from lamina.backends.numpy.memory import MemoryChecker
from lamina.backends.numpy.options import NumpyOptions
from lamina.backends.numpy.runner import (
    KernelTimer,
    OpRunner,
    RunContext,
    RunStats,
    last_uses,
    make_call,
    op_runner,
    run_function,
)
from lamina.backends.numpy.spmd import run_spmd
from lamina.backends.numpy.tile_threads import thread_count
from lamina.ir.buffers.memory import FreeOp
from lamina.ir.core.diagnostics import LaminaError, error_at, with_article
from lamina.ir.core.dtypes import STORAGE
from lamina.ir.ops.fused import FusedOp
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from numpy.lib.array_utils import byte_bounds
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, SSAValue

StepFn = Callable[[list[np.ndarray | None]], list[np.ndarray]]


@dataclass
class Step:
    """One prepared op: `run(operands) -> results`; operand slots (-1: an absent optional operand),
    result slots, and the slots whose values are dead after it."""

    run: StepFn
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    drops: tuple[int, ...]


@dataclass
class Steps:
    """A block compiled to steps: its arguments fill slots 0..n-1, `result_slots` are what its
    terminator returns."""

    n_args: int
    n_slots: int
    steps: list[Step]
    result_slots: tuple[int, ...]

    def run(self, args: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        # one slot more than the block has, never written: an absent operand's slot -1 reads
        # it as None, so gathering operands is one plain list comprehension per step
        env: list[Any] = [None] * (self.n_slots + 1)
        env[: self.n_args] = args
        for st in self.steps:
            results = st.run([env[k] for k in st.ins])
            outs = st.outs
            if len(outs) == 1:
                env[outs[0]] = results[0]
            else:
                for k, r in zip(outs, results, strict=True):
                    env[k] = r
            for k in st.drops:
                env[k] = None
        return [env[k] for k in self.result_slots]


def _table_step(op: LaminaOp) -> StepFn:
    """An op-table op on whole arrays: its row's kernel with the op's `Call`, built once; an
    elementwise row whose operands and result share one native float type calls its ufunc
    (`arena_steps.native_ufunc`: the function its formula is, checked bit for bit against it)
    directly, without the storage rule's conversions, which are the identity there."""
    call = make_call(op)
    if math.prod(call.result.shape) == 0:   # as run_kernel: nothing to compute
        shape, dtype = call.result.shape, STORAGE[call.result.dtype]
        return lambda xs: [np.zeros(shape, dtype)]
    ufunc = native_ufunc(op)
    if ufunc is not None:
        return lambda xs: [ufunc(*xs)]
    k = native_kernel(op.info, call) or kernel(op.info)
    return lambda xs: [k(xs, call)]


@dataclass(frozen=True)
class _Arg:
    """What a call checks of one argument on its fast path (everything else: `check_inputs`)."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @staticmethod
    def of(func: FuncOp) -> list[_Arg | None]:
        """Per argument, its fast check, or None where every input is converted (bf16)."""
        out: list[_Arg | None] = []
        for t in func.function_type.inputs.data:
            info = tensor_info(t)
            out.append(None if info.dtype == "bf16" else
                       _Arg(info.shape, np.dtype(STORAGE[info.dtype])))
        return out


@dataclass
class _Builder:
    """Compiles blocks to `Steps` for one program (the choices every step shares)."""

    options: NumpyOptions
    runners: Mapping[type[Operation], OpRunner]
    whole_small_fused: bool
    context: Callable[[], RunContext]
    memo: dict[Any, Any] = field(default_factory=dict)

    def block(self, args: Sequence[SSAValue], ops: Sequence[Operation],
              returned: Sequence[SSAValue], arena: Callable[[list[Operation], list[Step]], None]
              | None = None) -> Steps:
        """`ops` as steps; with `arena`, the steps are also handed to it to place their results
        (the function's top level: `arena_steps.plan_steps`)."""
        slot: dict[SSAValue, int] = {a: i for i, a in enumerate(args)}
        body = [o for o in ops if not isinstance(o, FreeOp)]  # a free is the last use's drop
        last = last_uses(body)
        keep = set(returned)
        steps: list[Step] = []
        for i, op in enumerate(body):
            ins = tuple(-1 if v is None else slot[v] for v in
                        (op.operand_slots() if isinstance(op, LaminaOp) else op.operands))
            outs = []
            for r in op.results:
                slot[r] = len(slot)
                outs.append(slot[r])
            dead = {v for v in op.operands if last.get(v) == i and v not in keep}
            dead |= {r for r in op.results if r not in last and r not in keep}
            steps.append(Step(self.step(op), ins, tuple(outs), tuple(sorted(slot[v] for v in dead))))
        if arena is not None:
            arena(body, steps)
        else:
            precompute(body, steps, returned=returned)
        return Steps(len(args), len(slot), steps, tuple(slot[v] for v in returned))

    def step(self, op: Operation) -> StepFn:
        if isinstance(op, LaminaOp):
            return _table_step(op)
        if isinstance(op, FusedOp) and self.whole_small_fused and \
                op.fusion_kind not in KIND_RUNNERS and one_tile(op, self.options):
            body = self.block(list(op.body.block.args), [o for o in op.body.block.ops
                                                        if o is not op.yield_op],
                              list(op.yield_op.values))
            return body.run
        runner = self.runners.get(type(op)) or op_runner(op)
        if runner is None:
            raise error_at(op, f"the NumPy backend cannot run '{op.name}'")
        context = self.context
        return lambda xs: runner(op, xs, context())


class NumpyProgram:
    """`func` compiled for the NumPy interpreter (see the module docstring)."""

    def __init__(self, func: FuncOp, options: NumpyOptions,
                 runners: Mapping[type[Operation], OpRunner], donate: Mapping[int, int],
                 whole_small_fused: bool = True, warm: bool = False):
        thread_count(options)   # a bad LAMINA_FUSED_THREADS is reported before any work
        self.func = func
        self.options = options
        self.runners = dict(runners)
        self.donate = dict(donate)
        self.names = arg_names(func)
        mesh = placed_mesh(func)
        self.gap = first_unplaced(func) if mesh is not None else None
        self.mesh = mesh if mesh is not None and self.gap is None else None
        self.memo: dict[Any, Any] = {}
        self.lock = threading.Lock()
        self.args = _Arg.of(func)
        self.checked: RunResult | None = None   # the first call's result: stats, trace, notes
        # the context every later call's op runners share: it counts nothing, and what a runner
        # explains there is dropped after each call (the checked call's lines are the ones kept)
        self._context = RunContext(RunStats(), options, None, self.runners, [], self.memo,
                                   counting=False)
        self.steps: Steps | None = None
        self.arena: Arena | None = None
        if self.mesh is None:
            builder = _Builder(options, self.runners, whole_small_fused, self.context, self.memo)
            block = func.body.block
            ret = block.last_op
            assert ret is not None
            returned = list(ret.operands)

            def place(ops: list[Operation], steps: list[Step]) -> None:
                self.arena = plan_steps(func, ops, returned, steps)

            self.steps = builder.block(list(block.args), list(block.ops)[:-1], returned, place)
            if warm:
                self.checked = self._first(self._zeros())

    def _zeros(self) -> list[np.ndarray]:
        """Zeros of every argument type (the warm-up call's inputs)."""
        out = []
        for t in self.func.function_type.inputs.data:
            info = tensor_info(t)
            out.append(np.zeros(info.shape, STORAGE[info.dtype]))
        return out

    def _first(self, arrays: list[np.ndarray]) -> RunResult:
        """The checked call, with the program's static memory plan in its statistics."""
        result = self._checked_run(arrays)
        if self.arena is not None:
            result.stats["arena"] = self.arena.report()
        return result

    def context(self) -> RunContext:
        """The run context of an op runner's call in a later call (its counters are the checked
        call's): one per program, made at compile time, since nothing in it depends on a call."""
        return self._context

    def _inputs(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        """The inputs as the kernels take them: as given where each already is an array of its
        argument's shape and storage dtype, else converted and checked by `check_inputs`."""
        if len(inputs) == len(self.args) and all(
                type(a) is np.ndarray and spec is not None and a.shape == spec.shape and
                a.dtype == spec.dtype for a, spec in zip(inputs, self.args, strict=True)):
            return list(inputs)
        return check_inputs(self.func, inputs)

    def __call__(self, inputs: Sequence[Any]) -> RunResult:
        arrays = self._inputs(inputs)
        if self.donate:
            owners = _Owners(arrays)
            for i in self.donate:
                arrays[i] = self._donated(i, inputs[i], arrays, owners)
        start = time.perf_counter()
        if self.checked is None or self.steps is None:
            result = self._first(arrays)
            if self.steps is not None:
                self.checked = result
        else:
            c = self.checked
            with self.lock, np.errstate(all="ignore"):   # one call at a time: one arena
                outs = self.steps.run(arrays)
                if self._context.explain:
                    self._context.explain.clear()
            result = RunResult(outs, dict(c.stats), c.memory, list(c.notes), list(c.explain))
        if self.donate:
            self._write_donated(arrays, result.outputs)
        result.stats["run_seconds"] = time.perf_counter() - start
        return result

    def _checked_run(self, arrays: list[np.ndarray]) -> RunResult:
        """Today's instrumented run: checked execution and every statistic counted."""
        func = self.func
        checker = MemoryChecker(self.options.target, whole_arrays=self.gap is not None)
        timer = KernelTimer(checker) if self.options.kernel_times else None
        observer = timer or checker
        if self.mesh is not None:
            result = run_spmd(func, arrays, self.mesh, observer=observer, options=self.options)
        else:
            result = run_function(func, arrays, observer=observer, options=self.options,
                                  runners=self.runners, memo=self.memo)
        if timer is not None:
            result.stats["kernel_seconds"] = timer.seconds
        if self.gap is not None:
            result.notes.append(partly_placed_note(func, self.gap))
        result.stats.update(checker.stats())
        result.memory = checker.trace()
        return result

    def _donated(self, i: int, given: Any, arrays: list[np.ndarray], owners: _Owners
                 ) -> np.ndarray:
        """The caller's array for donated argument `i`, checked to be updatable in place."""
        name = self.names[i]
        spec = self.args[i]
        want = spec.dtype if spec is not None else np.dtype(np.float32)   # bf16: in float32
        why = None
        if not isinstance(given, np.ndarray):
            why = f"it is {with_article(type(given).__name__)}, not a NumPy array"
        elif given.dtype != want:
            why = f"its dtype is {given.dtype}, the argument stores {np.dtype(want)}"
        elif not given.flags.c_contiguous:
            why = "it is not C-contiguous"
        elif not given.flags.writeable:
            why = "it is read-only"
        elif (j := owners.overlapping(given, i)) is not None:
            why = f"it shares memory with input '{self.names[j]}'"
        if why is not None:
            raise LaminaError(f"donated input '{name}' of @{self.func.sym_name.data} cannot be "
                              f"updated in place: {why}")
        return given

    def _write_donated(self, arrays: list[np.ndarray], outs: list[np.ndarray]) -> None:
        """Each donated argument's array takes the result that updates it, and is returned."""
        owners = _Owners(outs)
        for i, j in self.donate.items():
            buf = arrays[i]
            if outs[j] is buf:
                continue
            while (k := owners.overlapping(buf, j)) is not None:   # a result viewing the
                outs[k] = outs[k].copy()                           # buffer keeps its value
                owners = _Owners(outs)
            np.copyto(buf, outs[j])
            outs[j] = buf


def _owner(a: Any) -> np.ndarray | None:
    """The array that owns `a`'s memory (None when a foreign buffer does: bytes, an mmap)."""
    if not isinstance(a, np.ndarray):
        return None
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a if a.base is None else None


class _Owners:
    """Which arrays of a list may share memory with a given one, in O(n): arrays of two
    different owners never do; the rest are compared byte range to byte range."""

    def __init__(self, arrays: Sequence[Any]):
        self.arrays = arrays
        self.owners = [_owner(a) for a in arrays]
        self.count = Counter(id(o) for o in self.owners if o is not None)
        self.foreign = any(isinstance(a, np.ndarray) and o is None
                           for a, o in zip(arrays, self.owners, strict=True))

    def overlapping(self, a: np.ndarray, skip: int) -> int | None:
        """The index of the first array (but `skip`) whose bytes may overlap `a`'s."""
        mine = _owner(a)
        if mine is not None and not self.foreign and self.count[id(mine)] == (
                1 if skip < len(self.owners) and self.owners[skip] is mine else 0):
            return None
        for k, o in enumerate(self.arrays):
            if k == skip or not isinstance(o, np.ndarray) or not o.size or not a.size:
                continue
            theirs = self.owners[k]
            if mine is not None and theirs is not None and mine is not theirs:
                continue
            (lo, hi), (olo, ohi) = byte_bounds(a), byte_bounds(o)
            if olo < hi and lo < ohi:
                return k
        return None
