"""A compiled program's fused kernels, compiled once: later calls only run the kernel.

The full way (`fused.run_full`) plans the op from its IR at every call: the iteration space and
steps (`plan_fused`), the matmul root's split, the trace's cache key (the body's text and every
array's layout), the inputs' layouts, numba's argument types, the kernel cache's source hash and
the statistics' walk over the body. On a small kernel that is ~300 us of Python around a few
microseconds of machine code. None of it depends on the arrays' values, only on the op (which
never changes during a program's life) and the arguments' layouts, so the first call with a
layout keeps what it found in the program's memo (`RunContext.memo`) as a `Replay`, and a later
call with the same layout (shape, strides, dtype, and which arguments are the same array:
`lamina.backends.numpy.fused.layout_key`, which the interpreter's kept tile plans share) only:
runs the body's per-kernel ops (broadcasts, constants) as plain kernel calls with their `Call`
built once, the matmul root's BLAS call, lays out the inputs (`Compaction`, views and at most one
copy each), allocates the outputs (`result_pool`) and runs the numba entry over its rows. These
are the same kernels on the same arrays as the full way, so the bits are the same.

A kernel the generator did not compile (it writes outputs through layout ops, say) ran on the
NumPy tile loop; its tile plan is kept instead (`lamina.backends.numpy.fused.TilePlan`, the
tile loop's own kept plan, after the split-off matmul root's BLAS call when it has one), and
later calls run the tiles without planning them.

A call with another layout takes the full way and keeps that layout's replay too. A call whose
kernel flags rows (`require` failed, dropout indices crossing 2**32) is run again the full way,
which recomputes them with the interpreter: rare, and simpler than replaying the rescue.
Replays are used only in runs that do not count statistics (a program's later calls, which reuse its checked
call's), and, like the full way, run inside the caller's `np.errstate(all="ignore")` (both the
program's steps and `run_function` set it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from lamina.backends.compiled.fused import (
    Compaction,
    CompiledCall,
    FullRun,
    _run_chunks,
    own_runner,
    run_full,
)
from lamina.backends.numpy import result_pool
from lamina.backends.numpy.fused import (
    LAYOUTS_MAX,
    FusedPlan,
    Once,
    TilePlan,
    layout_key,
    once_ops,
)
from lamina.backends.numpy.options import NumpyOptions
from lamina.backends.numpy.runner import RunContext, run_kernel
from lamina.backends.numpy.specialized import forms
from lamina.backends.numpy.tile_threads import TileScratch
from lamina.ir.core.dtypes import STORAGE
from lamina.ir.ops.formulas import Call
from lamina.ir.ops.fused import FusedOp
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from xdsl.ir import Operation, SSAValue

_MEMO = "compiled.replay"

Values = list[Any]   # a call's env: block arguments, then per-kernel values, then the root's


@dataclass(frozen=True)
class _Root:
    """The matmul root's call over every row, as `matmul_root.split_root` makes it."""

    op: LaminaOp
    call: Call
    x: int
    w: int
    out: int
    rows: int
    nl: int
    alloc: tuple[int, ...]        # [rows, *tail], from the result pool
    dtype: np.dtype
    shape: tuple[int, ...]        # the matmul's result
    # the row's in-place tile form (a native BLAS call), made once: the matmul tile keeps no
    # state between calls and uses no scratch, so one made here serves every call
    tile: Any

    def run(self, vals: Values) -> None:
        x, w = vals[self.x], vals[self.w]
        out = result_pool.empty(self.alloc, self.dtype)
        tile = self.tile
        if tile is not None:
            tile([x.reshape((self.rows,) + x.shape[self.nl:]), w], out, 0, self.rows)
        else:
            out[...] = run_kernel(self.op.info, [x, w], self.call).reshape(out.shape)
        vals[self.out] = out.reshape(self.shape)


def _root(planned: FusedPlan, pos: dict[SSAValue, int]) -> _Root:
    root, space = planned.steps[0], planned.space
    o = root.op
    x, w = (pos[v] for v in o.operand_slots() if v is not None)
    dtype = np.dtype(STORAGE[root.call.result.dtype])
    native = {t.dtype for t in root.call.operands if t is not None} == {root.call.result.dtype} \
        and dtype in (np.float32, np.float64)
    make_tile = forms(o.info).tile
    tile = make_tile(root.call, dtype, TileScratch()) if native and make_tile is not None \
        else None
    res = o.results[0]
    return _Root(o, root.call, x, w, pos[res], space.rows, space.nl, (space.rows,) + root.tail,
                 dtype, tensor_info(res.type).shape, tile)


@dataclass(frozen=True)
class _Output:
    """A kernel output: the result array (`out2d`'s shape) and the kernel's view of it."""

    alloc: tuple[int, ...]
    dtype: np.dtype
    view: tuple[int, ...]         # [rows, T] for whole rows, else [rows]


@dataclass(frozen=True)
class Replay:
    """What one op's full call with one argument layout found, to run again (module docstring).
    `results[j]` is (True, k): output k reshaped to `shapes[j]`, or (False, p): value p."""

    blank: tuple[None, ...]                   # the values after the block arguments
    once: tuple[Once, ...]
    root: _Root | None
    inputs: tuple[tuple[int, Compaction], ...]
    outputs: tuple[_Output, ...]
    results: tuple[tuple[bool, int], ...]
    shapes: tuple[tuple[int, ...], ...]
    entry: Any
    rows: int
    T: int

    def run(self, args: Sequence[np.ndarray | None], options: NumpyOptions) -> list[np.ndarray] | None:
        """The op's results on `args`; None when the kernel flagged rows (run it the full way)."""
        vals, arrays, outs = self.lay_out(args)
        flags = np.zeros(self.rows, dtype=np.uint8)
        _run_chunks(self.entry, self.rows, self.T, 0, flags, arrays, options)
        if np.count_nonzero(flags):   # a C count: `flags.any()` is a ufunc reduction, ~5x slower
            return None
        return self.results_of(vals, outs)

    def lay_out(self, args: Sequence[np.ndarray | None]
                ) -> tuple[Values, list[np.ndarray], list[np.ndarray]]:
        """Everything but the kernel's run on `args`: the call's values (per-kernel values and
        the root's computed), the kernel's arrays (its inputs laid out, then its outputs) and
        the outputs' fresh arrays. The compiled attention kernel lays out each worker's block
        buffers so and runs the entry itself, block by block."""
        vals: Values = [*args, *self.blank]
        for st in self.once:
            st.run(vals)
        if self.root is not None:
            self.root.run(vals)
        arrays = [c.apply(vals[p]) for p, c in self.inputs]
        outs = [result_pool.empty(o.alloc, o.dtype) for o in self.outputs]
        for a, o in zip(outs, self.outputs, strict=True):
            v = a.reshape(o.view)
            arrays.append(v.view(np.uint16) if v.dtype == np.float16 else v)
        return vals, arrays, outs

    def results_of(self, vals: Values, outs: list[np.ndarray]) -> list[np.ndarray]:
        """The op's results, once the kernel has written `outs` (`lay_out`'s)."""
        return [outs[k].reshape(s) if out else vals[k]
                for (out, k), s in zip(self.results, self.shapes, strict=True)]


def build_replay(op: FusedOp, full: FullRun) -> Replay | None:
    """The replay of a full call (None: one this module does not replay, see its docstring)."""
    plan, call = full.plan, full.call
    if call is None or call.recipe is None or plan.paths or not plan.steps:
        return None
    pos = {v: k for k, v in enumerate(plan.env)}
    n = len(op.body.block.args)
    split = plan is not full.planned
    once = once_ops(full.planned, pos, full.planned.steps[0].op if split else None)
    return Replay((None,) * (len(pos) - n), once, _root(full.planned, pos) if split else None,
                  tuple(zip(call.recipe.env_index, call.compactions, strict=True)),
                  _outputs(plan, call), _results(plan, call, pos),
                  tuple(tensor_info(v.type).shape for v in plan.results), call.kernel.entry,
                  call.rows, call.T)


def _outputs(plan: FusedPlan, call: CompiledCall) -> tuple[_Output, ...]:
    assert call.recipe is not None
    outs = []
    for step, full in zip(call.recipe.out_steps, call.recipe.full, strict=True):
        st = plan.steps[step]
        outs.append(_Output((plan.space.rows,) + st.tail, np.dtype(STORAGE[st.call.result.dtype]),
                            (call.rows, call.T) if full else (call.rows,)))
    return tuple(outs)


def _results(plan: FusedPlan, call: CompiledCall,
             pos: dict[SSAValue, int]) -> tuple[tuple[bool, int], ...]:
    """Where each result comes from: a kernel output, or a value (an argument, a per-kernel
    value, the root's), as `fused_results` finds it."""
    assert call.recipe is not None
    out_of: dict[SSAValue, int] = {plan.steps[s].op.results[0]: k
                                   for k, s in enumerate(call.recipe.out_steps)}
    return tuple((True, out_of[v]) if v in out_of else (False, pos[v]) for v in plan.results)


def run_fused_replayed(op: Operation, args: list[np.ndarray | None],
                       ctx: RunContext) -> list[np.ndarray]:
    """The compiled backend's runner for `lamina.fused`: a kept replay for these arguments'
    layout when the run counts no statistics, else the full way, kept for the next call."""
    replays = ctx.memo.get((_MEMO, op))
    if replays is None:     # the op's first call in this program (or run): which kind it is
        assert isinstance(op, FusedOp)
        if (own := own_runner(op, ctx)) is not None:
            return own(op, args, ctx)
        replays = ctx.memo[(_MEMO, op)] = {}
    key = layout_key(args)
    r = replays.get(key)
    if r is not None and not ctx.counting:
        outs = r.run(args, ctx.options)
        if outs is not None:
            return outs
    assert isinstance(op, FusedOp)
    full = run_full(op, args, ctx)
    if key not in replays:
        if len(replays) >= LAYOUTS_MAX:
            replays.pop(next(iter(replays)))
        replays[key] = _kept(op, full, ctx.options)
    return full.outs


@dataclass(frozen=True)
class _Tiled:
    """A kernel left to the NumPy tile loop after its matmul root was split off: the root's
    BLAS call over every row, as `matmul_root.split_root` makes it, then the epilogue's tiles."""

    root: _Root
    tiles: TilePlan

    def run(self, args: Sequence[np.ndarray | None], options: NumpyOptions) -> list[np.ndarray]:
        return self.tiles.run(args, options, self.root.run)


def _kept(op: FusedOp, full: FullRun, options: NumpyOptions) -> Replay | TilePlan | _Tiled | None:
    """What a later call with this layout runs: the compiled kernel's replay, or the tile
    loop's kept plan for a kernel the generator did not compile (module docstring)."""
    if full.call is not None:
        return build_replay(op, full)
    if full.plan is full.planned:
        return TilePlan.after(full.plan, options)
    pos = {v: k for k, v in enumerate(full.plan.env)}
    root = full.planned.steps[0].op
    return _Tiled(_root(full.planned, pos), TilePlan.after(full.plan, options, root))
