"""The static memory plan of a compiled NumPy program: intermediates at fixed offsets in arenas.

A compiled program (`lamina.backends.numpy.program`) knows every value's lifetime before it
runs, so it allocates, once, one arena per memory tier and gives every intermediate computed by
an op-table kernel a fixed place in it (`lamina.analysis.arena.plan`: best fit over the live
intervals, an elementwise result written over an operand that dies there). A steady-state call
then allocates only:
- its returned outputs (the caller keeps them, so they never live in the arena);
- the temporaries of kernels that have no `out=` form: such a kernel computes its result as
  usual and the step copies it into its slot (the temporary is freed at once); `temporaries`
  lists them by op;
- the results of ops that are not op-table kernels (`lamina.fused`, moves, placement ops), which
  their runners allocate (`kernel_results` lists them).
Values of attributes alone (constants, iotas) that the caller never receives are computed once,
at compile time, into read-only arrays of their own (`precomputed`).

Kernels with an `out=` form write straight into their slot: an elementwise row whose formula is a
NumPy ufunc (`OpInfo.ufunc`), on operands of the result's own native float type, and a matmul of
one native float type (`np.matmul(out=)`, the formula's own call).

Aliasing: a view op (a layout row that launches no kernel, such as a reshape) reads its operand's
bytes, and an op that is not an op-table kernel may return (a view of) an operand, so their
results keep every buffer they may alias alive until their own last use; a returned value that
may alias a buffer keeps that buffer out of the arena (the caller receives those bytes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from lamina.analysis.arena import Buffer, plan
from lamina.analysis.naming import Namer
from lamina.backends.numpy.kernels import kernel
from lamina.backends.numpy.runner import make_call
from lamina.backends.numpy.specialized import forms
from lamina.ir.buffers.memory import effective_tier
from lamina.ir.core.dtypes import STORAGE
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from lamina.ir.ops.optable import Fusion
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, SSAValue

StepFn = Callable[[list[np.ndarray | None]], list[np.ndarray]]
_NATIVE = ("f32", "f64")
ALIGNMENT = 64


def _is_view(op: LaminaOp) -> bool:
    return op.info.fusion is Fusion.LAYOUT and not op.info.launches_kernel


def _may_view(op: LaminaOp) -> bool:
    """Whether `op`'s kernel may return a view of an operand's bytes (NumPy's permute_dims,
    basic slicing and broadcast_to do) rather than an array of its own."""
    return op.info.fusion in (Fusion.LAYOUT, Fusion.BROADCAST)


def native_type(op: LaminaOp) -> str | None:
    """The one native float type every operand of `op` has (where its kernel's storage rule
    converts nothing), else None."""
    infos = op.operand_infos()
    dtypes = {t.dtype for t in infos if t is not None}
    if len(dtypes) != 1 or None in infos:
        return None
    (dt,) = dtypes
    return dt if dt in _NATIVE else None


def native_ufunc(op: LaminaOp, results: tuple[str, ...] = ()) -> np.ufunc | None:
    """The ufunc an elementwise `op` on one native float type is (its row's registered form,
    checked bit for bit against the formula), when its result is of that type (or `results`)."""
    dt = native_type(op)
    ufunc = forms(op.info).ufunc
    res = tensor_info(op.results[0].type).dtype
    if dt is None or ufunc is None or op.info.fusion is not Fusion.ELEMENTWISE or \
            res not in (dt, *results):
        return None
    return ufunc


def out_form(op: LaminaOp) -> Callable[[list[Any], np.ndarray], Any] | None:
    """How `op` writes its result into a given array (`out=`), or None when its kernel has no
    such form (the same bits as its kernel: the formula's own ufunc or matmul call)."""
    ufunc = native_ufunc(op, ("i1",))
    if ufunc is not None:
        return lambda xs, out: ufunc(*xs, out=out)
    dt = native_type(op)
    if dt is not None and op.info.fusion is Fusion.OPAQUE and op.info.row_tiled and \
            tensor_info(op.results[0].type).dtype == dt:   # matmul
        return lambda xs, out: np.matmul(xs[0], xs[1], out=out)
    return None


def storage_bytes(v: SSAValue) -> int:
    """Bytes the NumPy interpreter stores for `v` (bf16 in 4 bytes)."""
    t = tensor_info(v.type)
    return math.prod(t.shape) * np.dtype(STORAGE[t.dtype]).itemsize


@dataclass
class Arena:
    """The arenas of one program and what the plan found (`report`)."""

    arenas: dict[str, np.ndarray] = field(default_factory=dict)
    arena_bytes: dict[str, int] = field(default_factory=dict)
    peak_live_bytes: dict[str, int] = field(default_factory=dict)
    values: int = 0
    in_place: int = 0
    precomputed: int = 0
    temporaries: list[dict[str, Any]] = field(default_factory=list)
    kernel_results: list[dict[str, Any]] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        """The `arena` statistic: sizes per tier, against the peak of live bytes, and every
        allocation a steady-state call still makes besides its outputs."""
        return {"arena_bytes": dict(self.arena_bytes),
                "peak_live_bytes": dict(self.peak_live_bytes), "values": self.values,
                "in_place": self.in_place, "precomputed": self.precomputed,
                "temporaries": list(self.temporaries), "kernel_results": list(self.kernel_results)}


@dataclass
class _Lifetimes:
    """Which buffers each value may alias, and the last point each buffer is read."""

    ops: Sequence[Operation]
    returned: Sequence[SSAValue]
    roots: dict[SSAValue, frozenset[SSAValue]] = field(default_factory=dict)
    first: dict[SSAValue, int] = field(default_factory=dict)
    last: dict[SSAValue, int] = field(default_factory=dict)
    escaping: set[SSAValue] = field(default_factory=set)

    def __post_init__(self) -> None:
        for i, op in enumerate(self.ops):
            for v in op.operands:
                for r in self.roots.get(v, ()):
                    self.last[r] = i
            aliases = frozenset(r for v in op.operands for r in self.roots.get(v, ()))
            if isinstance(op, LaminaOp) and not _is_view(op) and \
                    math.prod(tensor_info(op.results[0].type).shape) > 0:
                r = op.results[0]
                # a layout or broadcast kernel (transpose, slice, broadcast_in_dim) returns a
                # view of its operand when its step is not given a slot to copy into, which an
                # escaping result is not: its operand's buffer must then outlive it, and escape
                # with it, or a later kernel (or the next call) writes over the caller's result
                self.roots[r] = frozenset({r}) | (aliases if _may_view(op) else frozenset())
                self.first[r] = self.last[r] = i
            else:   # a view, or a runner that may hand back what it was given
                for r in op.results:
                    self.roots[r] = aliases
        for v in self.returned:
            self.escaping |= self.roots.get(v, frozenset())


def plan_steps(func: FuncOp, ops: Sequence[Operation], returned: Sequence[SSAValue],
               steps: Sequence[Any]) -> Arena:
    """Place the intermediates of `ops` (a block's ops, aligned with `steps`) in arenas and
    rewrite their steps to write into their slots; the plan's report."""
    life = _Lifetimes(ops, returned)
    names = Namer(func)
    out = Arena()
    for v in precompute(ops, steps, life):
        del life.first[v]
        out.precomputed += 1
    buffers = [v for v in life.first if v not in life.escaping]
    index = {v: k for k, v in enumerate(buffers)}
    out.values = len(buffers)
    by_tier: dict[str, list[SSAValue]] = {}
    for v in buffers:
        by_tier.setdefault(effective_tier(v.type), []).append(v)
    views: dict[SSAValue, np.ndarray] = {}
    for tier, vs in by_tier.items():
        pos = {v: k for k, v in enumerate(vs)}
        layout = plan([Buffer(storage_bytes(v), life.first[v], life.last[v], ALIGNMENT,
                              _in_place(v, life, pos)) for v in vs])
        arena = np.empty(max(layout.arena_bytes, 1), np.uint8)
        out.arenas[tier] = arena
        out.arena_bytes[tier] = layout.arena_bytes
        out.peak_live_bytes[tier] = layout.peak_live_bytes
        out.in_place += len(layout.shared)
        for v, off in zip(vs, layout.offsets, strict=True):
            t = tensor_info(v.type)
            views[v] = arena[off: off + storage_bytes(v)].view(STORAGE[t.dtype]).reshape(t.shape)
    for i, op in enumerate(ops):
        if op.results and op.results[0] in index:
            steps[i].run = _into_slot(op, views[op.results[0]], out, names)  # type: ignore[arg-type]
        elif not isinstance(op, LaminaOp) and op.results:
            out.kernel_results += [{"op": op.name, "value": names(r), "bytes": storage_bytes(r)}
                                   for r in op.results if r not in returned]
    return out


def precompute(ops: Sequence[Operation], steps: Sequence[Any], life: _Lifetimes | None = None,
               returned: Sequence[SSAValue] = ()) -> list[SSAValue]:
    """Make every step whose result depends on attributes alone (a constant, an iota) and never
    reaches the block's results hand out one array computed now; the values so computed."""
    life = life or _Lifetimes(ops, returned)
    done: list[SSAValue] = []
    for i, op in enumerate(ops):
        if isinstance(op, LaminaOp) and not op.operands and op.results[0] in life.first \
                and op.results[0] not in life.escaping:
            steps[i].run = _precomputed(op, steps[i].run)
            done.append(op.results[0])
    return done


def _precomputed(op: LaminaOp, run: StepFn) -> StepFn:
    """A step whose result depends on its attributes alone (a constant, an iota): computed at
    compile time, read-only (no step writes over it: it is in no arena), handed out every call."""
    (value,) = run([])
    value.flags.writeable = False
    return lambda xs: [value]


def _in_place(v: SSAValue, life: _Lifetimes, pos: dict[SSAValue, int]) -> int | None:
    """The buffer `v` may be written over: an operand's only buffer, dying where `v` is made,
    of `v`'s shape and element type (its kernel reads every element before it writes it, or
    computes its result whole before the step copies it in)."""
    op = v.owner
    assert isinstance(op, Operation)
    i = life.first[v]
    for x in op.operands:
        rs = life.roots.get(x, frozenset())
        if len(rs) != 1:
            continue
        (r,) = rs
        if r in pos and life.last[r] == i and x.type == v.type and r.type == v.type:
            return pos[r]
    return None


def _into_slot(op: Operation, slot: np.ndarray, arena: Arena, names: Namer) -> StepFn:
    """`op`'s step writing its result into `slot`: through its `out=` form, else by copying its
    kernel's result in (a temporary the report lists)."""
    assert isinstance(op, LaminaOp)
    form = out_form(op)
    if form is not None:
        def write(xs: list[np.ndarray | None]) -> list[np.ndarray]:
            form(xs, slot)
            return [slot]

        return write
    arena.temporaries.append({"op": op.name, "value": names(op.results[0]),
                              "bytes": int(slot.nbytes)})
    k = kernel(op.info)
    call = make_call(op)

    def copy(xs: list[np.ndarray | None]) -> list[np.ndarray]:
        np.copyto(slot, k(xs, call))
        return [slot]

    return copy
