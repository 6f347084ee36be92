"""Running a `lamina.fused` op the way a fused kernel runs: tile by tile, the whole body per tile.

The group's iteration space is split into rows L (all leading dims, flattened) and a tail T:
- "row_reduction" groups: T are the dims their reductions reduce, so every tile holds whole rows;
- "loop" groups: T is the shortest tail such that every input is either constant along the rows
  or has the rows' full extent (so broadcast inputs like a bias [4096] are never materialized).

Per tile, every body op runs on tile-sized arrays, preallocated once and reused for every tile:
op-table ufunc formulas run in place (`out=`), everything else through the op's table kernel on
the tile (reductions see their axes renumbered to the tile). Ops that do not vary along the rows
(broadcasts of inputs, masks built from constants, ...) run once per kernel on whole arrays, and
inputs are sliced per tile (a [rows, 1] value takes its rows; a [T] value is used whole).

Position-dependent ops (dropout) receive the tile's place in the global tensor (`Call.block`), so
masks are the global ones bit for bit. The optional in-place fast paths are the rows' own NumPy
specializations (their `ufunc` and `tile` forms, registered against the rows in
`lamina.backends.numpy.specialized`, each checked bit for bit against the row's formula); any op
without one runs its row's kernel on the tile, so correctness never depends on them. Fast paths
share a worker's scratch buffers (`TileScratch`), so a tile's working set is its tile buffers
plus two scratch tiles.

Tiles run on one thread per core (`thread_count`), each thread with its own tile buffers and
scratch, on a long-lived pool; a tile is computed the same way on any thread, so results never
depend on the thread count (the property test checks 1 against 2 threads bit for bit).

Statistics: one fused op is one kernel; its bytes are its inputs' plus its results' bytes.

Plans kept (`TilePlan`): the plan depends on the op and its arguments' layouts (shape, strides,
dtype, which are the same array: `layout_key`), not their values, so a compiled program keeps
each layout's plan in its memo at the first call with it (its checked call) and a later call
that counts no statistics only binds its arrays (the per-kernel ops, the operands' views, fresh
results) and runs the tiles: the same kernels on arrays laid out the same way, so the same bits.

A backend that runs the tiles its own way (the compiled backend) shares the plan: `plan_fused`
(iteration space, per-tile steps, per-kernel values, the results' arrays), `run_tiles` (this tile
loop, also for a chosen set of one-row tiles), `fused_results` and `record_fused_stats`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from lamina.analysis.fusion import iteration_domain, row_split
from lamina.backends.numpy import result_pool
from lamina.backends.numpy.fused_views import (
    BoxTiling,
    ViewPath,
    box_tiling,
    output_paths,
    static_kept,
    write_paths,
)
from lamina.backends.numpy.kernels import kernel
from lamina.backends.numpy.options import NumpyOptions
from lamina.backends.numpy.runner import (
    RunContext,
    RunStats,
    device_nbytes,
    distinct_nbytes,
    make_call,
    register_op_runner,
    run_kernel,
)
from lamina.backends.numpy.specialized import TileRun, forms
from lamina.backends.numpy.tile_threads import TileScratch, run_workers, tile_threads
from lamina.ir.buffers.memory import FreeOp
from lamina.ir.core.dtypes import STORAGE
from lamina.ir.core.shapes import TensorInfo
from lamina.ir.ops.formulas import Block, Call
from lamina.ir.ops.fused import FusedOp
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from lamina.ir.ops.optable import Fusion
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, SSAValue

# Target bytes of one tile-sized buffer, per group kind, chosen by measurement on f32[8192,4096]
# (benchmarks/bench_fusion.py; 2-core EPYC, 1 MiB L2 per core, 32 MiB L3): NumPy's per-call cost
# (~1 us) has to be spread over enough elements, and the few live tile buffers (reused through a
# free list, in place) should stay in L2/L3. 512 KiB (32 rows of f32[4096]) measured best for W1
# with 1 and 2 threads; smaller tiles pay NumPy's per-call cost and, with threads, a GIL hand-off
# per call, more often. `NumpyOptions.tile_bytes` overrides both (tests use tiny tiles to exercise
# the tile loop). Tile row counts are rounded down to a power of two so that dropout tiles start
# at aligned global indices (see `_dropout_fast`).
ROW_TILE_BYTES = 512 * 1024
LOOP_TILE_BYTES = 512 * 1024
# A matmul kernel's tile is one BLAS call on a block of result rows, which packs the whole weight
# matrix again: on the GPT-2 block's projections (f32 [2048, 1024] @ [1024, 3072], 2 cores)
# blocks of 512 rows spent ~30% more time in BLAS than one call, so blocks are up to 32 MiB of
# result (the whole result at those sizes; more rows make more blocks), at the price of epilogue
# tiles that live in memory rather than in cache.
MATMUL_TILE_BYTES = 32 * 1024 * 1024


_NATIVE = {"f32": np.float32, "f64": np.float64}


def _shape(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def _prod(s: tuple[int, ...]) -> int:
    return math.prod(s)


@dataclass
class Space:
    """The tile loop's iteration space: `rows` = prod(`lead`) rows, each a `tail`-shaped slice.

    A tile is a run of whole rows, so a value the tile loop computes has one of three forms over
    the rows: "full" (lead + tail), "rowscalar" (lead + 1s, a keepdims reduction) or "rowvec"
    (lead). Any other shape does not line up with the rows and is computed once per kernel."""

    lead: tuple[int, ...]
    tail: tuple[int, ...]
    row_group: bool                       # the group holds reductions: tiles need whole rows
    forms: dict[tuple[int, ...], str] = field(init=False)

    def __post_init__(self) -> None:
        lead, tail = self.lead, self.tail
        # "full" last: with an empty tail the three shapes coincide and the value is a full tile
        self.forms = {lead: "rowvec", lead + (1,) * len(tail): "rowscalar", lead + tail: "full"}

    @property
    def nl(self) -> int:
        """How many leading dims the rows flatten."""
        return len(self.lead)

    @property
    def rows(self) -> int:
        return _prod(self.lead)

    def form(self, shape: tuple[int, ...]) -> str | None:
        return self.forms.get(shape)


@dataclass
class Step:
    """A body op that runs once per tile, with where its operands come from and its result goes.

    `sources[j]` says how operand j is found per tile: ("tile", slot) the value an earlier step
    computed for this tile, ("rows", 2d array) this tile's rows of an outside value, ("rep", array)
    a row-invariant value repeated to a full tile, ("inv", array) a row-invariant value used
    whole, ("whole", array) an array passed as is, ("none", None) an absent optional operand.
    The result goes to `out2d` (the global result, when the value leaves the group) or else to
    the worker's tile buffer number `buffer`."""

    op: LaminaOp
    tail: tuple[int, ...]                 # tile shape after the row dim
    call: Call
    sources: list[tuple[str, Any]] = field(default_factory=list)
    out2d: np.ndarray | None = None
    buffer: int | None = None


def _reduction_attrs(op: LaminaOp, k: int) -> dict[str, Any]:
    attrs = dict(op.attr_values())
    if "axes" in attrs:
        attrs["axes"] = tuple(range(1, k + 1))
    if "axis" in attrs:
        attrs["axis"] = 1
    return attrs


@dataclass
class FusedPlan:
    """A fused op planned for one call, before any tile runs (`plan_fused`).

    `steps` run per tile in body order (`slot_of`: a per-tile value's step), `env` holds the block
    arguments and every per-kernel value, already computed; a step whose result leaves the group
    writes it into its `out2d`, a [rows, *tail] array allocated here."""

    op: FusedOp
    body: list[Operation]
    space: Space
    steps: list[Step]
    slot_of: dict[SSAValue, int]
    env: dict[SSAValue, np.ndarray]
    results: list[SSAValue]
    paths: list[ViewPath] = field(default_factory=list)   # outputs written through layout ops
    written: dict[SSAValue, np.ndarray] = field(default_factory=dict)   # ... and their arrays


class _Whole(Exception):
    """A body the tile loop cannot run by tiles (an op reads a value the kernel writes through a
    layout op, which `fuse-elementwise` never forms): it runs op by op on whole arrays."""


def plan_fused(op: FusedOp, args: Sequence[np.ndarray | None], min_rows: int = 2) -> FusedPlan:
    """Plan a `lamina.fused` call: iteration space, per-tile steps, per-kernel values (run now),
    the arrays of the values that leave the group. Costs O(body); no tile has run.

    Groups of fewer than `min_rows` rows run every op once on whole arrays (no steps): the
    NumPy tile loop gains nothing on one row; a compiled kernel asks for 1."""
    block = op.body.block
    # lamina.free in a body (annotate-lifetimes) ends a tile buffer's lifetime: nothing to run
    body = [o for o in block.ops if o is not op.yield_op and not isinstance(o, FreeOp)]
    env: dict[SSAValue, np.ndarray] = {}
    for a, x in zip(block.args, args, strict=True):
        assert x is not None
        env[a] = x
    space = _iteration_space(body, block.args)
    results = list(op.yield_op.values)
    with np.errstate(all="ignore"):
        given = dict(env)
        try:
            steps, slot_of, views = _plan_steps(body, env, space, min_rows)
        except _Whole:
            env = given
            steps, slot_of, views = _plan_steps(body, env, space, 1 << 62)
    leaving = set(results)
    for st in steps:
        if st.op.results[0] in leaving:
            st.out2d = result_pool.empty((space.rows,) + st.tail, STORAGE[st.call.result.dtype])
    paths, written = output_paths(results, views, slot_of)
    return FusedPlan(op, body, space, steps, slot_of, env, results, paths, written)


def run_tiles(plan: FusedPlan, options: NumpyOptions, only_rows: Iterable[int] | None = None) -> int:
    """Run the plan's steps tile by tile (the interpreter's tile loop), writing every step that
    leaves the group into its `out2d`; with `only_rows`, just those rows, one row per tile.
    Returns the largest tile working set of a worker (its tile buffers and scratch, bytes)."""
    if not plan.steps:
        return 0
    with np.errstate(all="ignore"):
        return _run_tiling(plan, _tiling(plan, options, only_rows is not None), options, only_rows)


@dataclass(frozen=True)
class _Tiling:
    """What the tile loop decides beyond the plan: rows per tile, the box tiling of a kernel
    writing through layout ops, the tile buffers' (shape, dtype) by id (`Step.buffer`) and how
    each step finds its operands."""

    rows: int
    box: BoxTiling | None
    buffers: list[tuple[tuple[int, ...], np.dtype]]
    sources: list[list[_Source]]


def _tiling(plan: FusedPlan, options: NumpyOptions, one_row: bool) -> _Tiling:
    """Choose the tiles of `plan` (setting each step's `buffer` and bound `sources`)."""
    steps, space = plan.steps, plan.space
    tile_rows = 1 if one_row else _choose_rows(space.rows, steps, space.row_group,
                                               options.tile_bytes)
    box = None
    if plan.paths:
        box = box_tiling(space.lead, min(p.kept for p in plan.paths), tile_rows)
        tile_rows = box.rows
    buffers = _assign_buffers(steps, plan.slot_of, set(plan.results), tile_rows,
                              {p.source for p in plan.paths})
    pos = {v: k for k, v in enumerate(plan.env)}
    sources = [_source_kinds(st.op, plan.env, pos, plan.slot_of, space) for st in steps]
    vals = list(plan.env.values())
    for st, srcs in zip(steps, sources, strict=True):
        st.sources = [s.bind(vals, space, tile_rows) for s in srcs]
    return _Tiling(tile_rows, box, buffers, sources)


def _run_tiling(plan: FusedPlan, tiling: _Tiling, options: NumpyOptions,
                only_rows: Iterable[int] | None = None) -> int:
    """The tile loop over the plan's steps as `tiling` lays them out (see `run_tiles`)."""
    steps, space = plan.steps, plan.space
    job = _Job(steps, tiling.buffers, tiling.rows, space.rows, space.nl, plan.paths, tiling.box,
               [st.sources for st in steps], [st.out2d for st in steps])
    if only_rows is None:
        return _tile_loop(job, space, options)
    assert not plan.paths, "one-row tiles of a kernel writing through layout ops"
    return _worker(job, itertools.chain(only_rows, [space.rows]), space.rows)


# kinds with an executor of their own (`lamina.backends.numpy.attention` adds "attention")
KIND_RUNNERS: dict[str, Callable[[Operation, list[np.ndarray | None], RunContext],
                                 list[np.ndarray]]] = {}


def run_fused(op: Operation, args: list[np.ndarray | None], ctx: RunContext) -> list[np.ndarray]:
    """Run a `lamina.fused` op as one kernel: plan its steps once, then run the tiles.

    Planning (iteration space, per-kernel vs per-tile ops, operand sources, tile buffers) costs
    O(body) and is done before any tile runs, so the tile loop only indexes prepared arrays. A
    compiled program keeps the plan of each argument layout in its memo (`TilePlan`): a call
    that counts no statistics with a layout seen before only binds its arrays and runs tiles."""
    assert isinstance(op, FusedOp)
    if (own := KIND_RUNNERS.get(op.fusion_kind)) is not None:
        return own(op, args, ctx)
    kept = ctx.memo.setdefault((_MEMO, op), {})
    key = layout_key(args)
    if not ctx.counting and ctx.observer is None and (tp := kept.get(key)) is not None:
        return tp.run(args, ctx.options)
    plan = plan_fused(op, args)
    tiling = None
    tile_set = 0
    if plan.steps:
        with np.errstate(all="ignore"):
            tiling = _tiling(plan, ctx.options, False)
            tile_set = _run_tiling(plan, tiling, ctx.options)
    outs = fused_results(plan)
    if ctx.counting:
        record_fused_stats(ctx.stats, plan, args, outs)
    if ctx.observer is not None:
        ctx.observer.on_working_set(op, working_set(plan, tile_set))
    if key not in kept:
        if len(kept) >= LAYOUTS_MAX:
            kept.pop(next(iter(kept)))
        kept[key] = TilePlan.of(plan, tiling)
    return outs


# ---- plans kept per argument layout ------------------------------------------------------------

LAYOUTS_MAX = 8     # plans kept per op; a program called with ever new layouts drops the oldest
_MEMO = "numpy.tiles"

LayoutKey = tuple[Any, ...]


def layout_key(args: Sequence[np.ndarray | None]) -> LayoutKey:
    """What a kept plan depends on in the arguments: each one's shape, strides and dtype, and
    the first argument that is the same array (one array passed twice is one kernel input)."""
    first: dict[int, int] = {}
    return tuple(None if a is None else (a.shape, a.strides, a.dtype, first.setdefault(id(a), k))
                 for k, a in enumerate(args))


@dataclass(frozen=True)
class Once:
    """A body op a kept plan runs once per kernel (a broadcast of an input, a constant): its
    kernel with its `Call`, built once; operand and result positions in the call's values (the
    block arguments, then the per-kernel values in body order: `FusedPlan.env`'s order)."""

    fn: Callable[[list[np.ndarray | None], Call], np.ndarray]
    call: Call
    ins: tuple[int, ...]     # -1: an absent optional operand
    out: int
    # a value that reads no block argument (a constant, a mask built from constants) and is not
    # one of the kernel's results: the same array every call, so it is computed at the first
    # run and kept (`kept`); the kernels only read per-kernel values, never write them
    fixed: bool = False
    kept: list[np.ndarray] = field(default_factory=list, compare=False, hash=False)

    @staticmethod
    def of(o: LaminaOp, pos: dict[SSAValue, int], fixed: bool = False) -> Once:
        call = make_call(o)
        fn = _empty_result if _prod(call.result.shape) == 0 else kernel(o.info)
        return Once(fn, call, tuple(-1 if v is None else pos[v] for v in o.operand_slots()),
                    pos[o.results[0]], fixed)

    def run(self, vals: list[Any]) -> None:
        if self.kept:
            vals[self.out] = self.kept[0]
            return
        v = vals[self.out] = self.fn([vals[k] if k >= 0 else None for k in self.ins], self.call)
        if self.fixed:
            self.kept.append(v)


def _empty_result(xs: list[np.ndarray | None], call: Call) -> np.ndarray:
    """A result with no elements, as `run_kernel` gives it (NumPy's reductions fail on one)."""
    return np.zeros(call.result.shape, STORAGE[call.result.dtype])


def once_ops(plan: FusedPlan, pos: dict[SSAValue, int], skip: Operation | None = None
             ) -> tuple[Once, ...]:
    """The plan's per-kernel ops (but `skip`), in body order, as `plan_fused` ran them."""
    n = len(plan.op.body.block.args)
    results = {pos[v] for v in plan.results if v in pos}
    fixed: set[int] = set()     # positions of per-kernel values that read no block argument
    out: list[Once] = []
    for o in plan.body:
        if not isinstance(o, LaminaOp) or o is skip or pos.get(o.results[0], -1) < n:
            continue
        once = Once.of(o, pos)
        if all(k < 0 or k in fixed for k in once.ins):
            fixed.add(once.out)
            if once.out not in results:
                once = replace(once, fixed=True)
        out.append(once)
    return tuple(out)


# a kept plan's output views hold no array: each call's result is bound into them
_UNBOUND = np.empty((0,), dtype=np.uint8)


@dataclass(frozen=True)
class TilePlan:
    """What one call of a fused op with one argument layout planned (`plan_fused` and the tile
    loop's choices), holding none of that call's arrays: a later call with the same layout runs
    the same kernels on arrays laid out the same way, so its bits are the full way's.

    `run` binds the call's arguments, runs the per-kernel ops, allocates the results (from
    `result_pool`, as `plan_fused` does), makes each step's operand views and runs the tiles.
    `results[j]` is ("out", step) a step's global result, ("view", k) the array of `views[k]`'s
    result, or ("val", p) value p (an argument or a per-kernel value)."""

    n_values: int
    once: tuple[Once, ...]
    space: Space
    steps: list[Step]                    # `buffer` set; no `sources` or `out2d`
    sources: list[list[_Source]]
    out2d: list[tuple[tuple[int, ...], np.dtype] | None]
    tiling: _Tiling | None
    paths: list[tuple[int, ViewPath]]    # (index of its result in `views`, path)
    views: list[tuple[tuple[int, ...], np.dtype]]
    results: list[tuple[str, int]]
    shapes: list[tuple[int, ...]]

    @staticmethod
    def of(plan: FusedPlan, tiling: _Tiling | None, skip: Operation | None = None) -> TilePlan:
        """`plan`'s kept form; `skip`: a body op whose value the caller of `run` computes (the
        compiled backend's matmul root, split off)."""
        pos = {v: k for k, v in enumerate(plan.env)}
        steps = [replace(st, sources=[], out2d=None) for st in plan.steps]
        out2d = [None if st.out2d is None else (st.out2d.shape, st.out2d.dtype)
                 for st in plan.steps]
        views = list(plan.written)
        where = {id(plan.written[v]): k for k, v in enumerate(views)}
        paths = [(where[id(p.dest)], replace(p, dest=_UNBOUND)) for p in plan.paths]
        step_of: dict[SSAValue, int] = {st.op.results[0]: i for i, st in enumerate(plan.steps)}
        results = [("view", views.index(v)) if v in plan.written else
                   ("out", step_of[v]) if v in step_of else ("val", pos[v])
                   for v in plan.results]
        return TilePlan(len(pos), once_ops(plan, pos, skip), plan.space, steps,
                        [] if tiling is None else tiling.sources, out2d, tiling, paths,
                        [(_shape(v), np.dtype(STORAGE[tensor_info(v.type).dtype]))
                         for v in views],
                        results, [_shape(v) for v in plan.results])

    @staticmethod
    def after(plan: FusedPlan, options: NumpyOptions, skip: Operation | None = None) -> TilePlan:
        """The plan of a call that ran `run_tiles(plan, options)` (the compiled backend's
        kernels left to the tile loop): the same tiling, decided again from the plan and the
        options alone."""
        with np.errstate(all="ignore"):
            return TilePlan.of(plan, _tiling(plan, options, False) if plan.steps else None, skip)

    def run(self, args: Sequence[np.ndarray | None], options: NumpyOptions,
            before: Callable[[list[Any]], None] | None = None) -> list[np.ndarray]:
        """The op's results on `args` (inside the caller's `np.errstate(all="ignore")`, as the
        program's steps run); `before` computes the skipped op's value after the per-kernel ops."""
        vals: list[Any] = [*args, *(None,) * (self.n_values - len(args))]
        for o in self.once:
            o.run(vals)
        if before is not None:
            before(vals)
        out2d = [None if a is None else result_pool.empty(*a) for a in self.out2d]
        views = [np.empty(shape, dtype=dt) for shape, dt in self.views]
        t = self.tiling
        if t is not None:
            space = self.space
            sources = [[s.bind(vals, space, t.rows) for s in srcs] for srcs in self.sources]
            paths = [replace(p, dest=views[k]) for k, p in self.paths]
            _tile_loop(_Job(self.steps, t.buffers, t.rows, space.rows, space.nl, paths, t.box,
                            sources, out2d), space, options)
        outs: list[np.ndarray] = []
        for (kind, k), shape in zip(self.results, self.shapes, strict=True):
            if kind == "view":
                outs.append(views[k])
            elif kind == "out":
                a = out2d[k]
                assert a is not None
                outs.append(a.reshape(shape))
            else:
                outs.append(vals[k])
        return outs


def _owned(a: np.ndarray) -> int:
    """Bytes `a` allocated itself (0 for a view: a reshape or broadcast of another array)."""
    return int(a.nbytes) if a.flags.owndata else 0


def working_set(plan: FusedPlan, tile_set: int) -> int:
    """The bytes a fused kernel allocated besides its inputs and results: one worker's tile
    buffers and scratch (`tile_set`, what one tile in flight holds, the same for any thread
    count), the row-invariant operands repeated to a tile, and the values computed once per
    kernel (broadcasts, masks from constants; not the kernel's inputs and results), counted only
    where they own their memory."""
    outside = {*plan.op.body.block.args, *plan.results}
    reps = sum(_owned(src) for st in plan.steps for kind, src in st.sources if kind == "rep")
    once = sum(_owned(a) for v, a in plan.env.items() if v not in outside)
    return tile_set + reps + once


def _iteration_space(body: list[Operation], args: Sequence[SSAValue]) -> Space:
    """Rows x tail for the tile loop (see the module docstring for why each kind splits so).

    A group with reductions tiles over the rows its first reduction keeps (fuse-elementwise makes
    every reduction of a group reduce the same trailing dims). A loop group takes the shortest
    tail that leaves every input either constant along the rows or with the rows' full extent,
    so a broadcast input (a bias [T]) is never materialized to the group's domain."""
    reductions = [o for o in body if isinstance(o, LaminaOp) and o.info.fusion == Fusion.REDUCTION]
    if reductions:
        d = iteration_domain(reductions[0])
        k = row_split(reductions[0])
        assert k is not None, "a fused reduction is row-wise (fuse-elementwise's rule)"
        return Space(d[: len(d) - k], d[len(d) - k:], True)
    compute = [o for o in body if isinstance(o, LaminaOp) and o.info.fusion != Fusion.LAYOUT]
    roots = [o for o in compute if o.info.fusion == Fusion.OPAQUE]
    if roots:   # a matmul root: blocks of its result rows
        d = _shape(roots[0].results[0])
        return Space(d[:-1], d[-1:], False)
    try:
        d = tuple(np.broadcast_shapes(*(_shape(o.results[0]) for o in compute)))
    except ValueError:   # e.g. [3] -> broadcast_in_dim -> [3, 2]: no common loop; run whole
        d = ()
    n = len(d)
    # what the loop reads: block arguments and input views (layout ops read whole, per kernel)
    made = {r for o in compute for r in o.results}
    shapes = [_shape(v) for o in compute for v in o.operands if v not in made]
    k = next((c for c in range(n + 1) if all(_rows_fit(s, d, n - c) for s in shapes)), n)
    nl = min(n - k, static_kept(body))   # tiles must stay boxes the output views keep
    return Space(d[:nl], d[nl:], False)


def _rows_fit(shape: tuple[int, ...], d: tuple[int, ...], nl: int) -> bool:
    """Whether an input of `shape`, aligned to the trailing dims of `d`, is constant along rows
    d[:nl] or spans them whole (so per tile it is either used whole or sliced by rows)."""
    s = (1,) * (len(d) - len(shape)) + shape
    if len(s) != len(d):
        return False
    rows = s[:nl]
    return all(x == 1 for x in rows) or rows == d[:nl]


def _plan_steps(body: list[Operation], env: dict[SSAValue, np.ndarray], space: Space,
                min_rows: int) -> tuple[list[Step], dict[SSAValue, int], dict[SSAValue, LaminaOp]]:
    """Split the body into per-tile steps and per-kernel ops, running the per-kernel ones now.

    An op runs per tile when its domain lines up with the rows and it must: a reduction, an op
    reading a per-tile value, or a full-domain elementwise op. Everything else (broadcasts of
    inputs, masks built from constants, ...) does not vary along the rows and runs once, on
    whole arrays, into `env`, where the steps read it from. A layout op reading a per-tile value
    writes an output (`views`, see `fused_views`); one reading whole arrays runs once. Returns the
    steps in body order, each per-tile value's slot (its step's index) in a worker's per-tile
    values, and the output views by result."""
    steps: list[Step] = []
    slot_of: dict[SSAValue, int] = {}
    views: dict[SSAValue, LaminaOp] = {}
    for o in body:
        assert isinstance(o, LaminaOp)
        slots = o.operand_slots()
        if any(v in views for v in slots if v is not None):
            if o.info.fusion != Fusion.LAYOUT:
                raise _Whole()
            views[o.results[0]] = o
            continue
        any_tiled = any(v is not None and v in slot_of for v in slots)
        if o.info.fusion == Fusion.LAYOUT and any_tiled:
            views[o.results[0]] = o
            continue
        form = space.form(iteration_domain(o))
        is_red = o.info.fusion == Fusion.REDUCTION
        res = o.results[0]
        if space.rows >= min_rows and form is not None and (is_red or any_tiled or (
                form == "full" and o.info.fusion in (Fusion.ELEMENTWISE, Fusion.OPAQUE))):
            attrs = _reduction_attrs(o, len(space.tail)) if is_red else o.attr_values()
            slot_of[res] = len(steps)
            steps.append(Step(o, _shape(res)[space.nl:],
                               Call(attrs, o.operand_infos(), tensor_info(res.type))))
        else:
            env[res] = run_kernel(o.info, [None if v is None else env[v] for v in slots],
                                  make_call(o))
    return steps, slot_of, views


def _assign_buffers(steps: list[Step], slot_of: dict[SSAValue, int], leaving: set[SSAValue],
                    tile_rows: int, pinned: set[SSAValue] | None = None
                    ) -> list[tuple[tuple[int, ...], np.dtype]]:
    """Give every step's result a tile buffer, reusing a buffer once its value is last read.

    The few live tile buffers are what keeps a tile's working set in cache, so a buffer whose
    value is dead goes back to a free list (per shape and dtype) before the step's own result is
    placed: the op may then write in place over one of its operands (every runner reads an
    operand element before writing the same element, or computes its whole result before
    storing). A value that leaves the group is written straight into its global result instead
    (`out2d`, allocated by `plan_fused`). Sets each other step's `buffer`; returns the buffers'
    (shape, dtype) by id, which every worker thread allocates for itself. A `pinned` value (one
    an output view carries into a result after the tile's last step) keeps its buffer."""
    last_use: dict[SSAValue, int] = {}
    for i, st in enumerate(steps):
        for v in st.op.operand_slots():
            if v is not None and v in slot_of:
                last_use[v] = i
    for v in pinned or ():
        last_use[v] = len(steps)
    specs: list[tuple[tuple[int, ...], np.dtype]] = []
    buf_of: dict[SSAValue, int] = {}       # per-tile value -> buffer id (not for out2d values)
    free: dict[tuple[tuple[int, ...], np.dtype], list[int]] = {}
    for i, st in enumerate(steps):
        o = st.op
        res = o.results[0]
        dt = STORAGE[st.call.result.dtype]
        for v in {v for v in o.operand_slots() if v is not None and v in slot_of}:
            if last_use.get(v) == i and v in buf_of:
                free.setdefault(specs[buf_of[v]], []).append(buf_of[v])
        if res in leaving:
            continue
        key = ((tile_rows,) + st.tail, np.dtype(dt))
        ids = free.get(key)
        if ids:
            buf_of[res] = ids.pop()
        else:
            buf_of[res] = len(specs)
            specs.append(key)
        st.buffer = buf_of[res]
        if res not in last_use:   # dead value: its buffer is free again
            free.setdefault(key, []).append(buf_of[res])
    return specs


@dataclass(frozen=True)
class _Source:
    """How a per-tile step finds one operand (the kinds listed at `Step`), decided once from the
    layouts of the arrays it reads; `bind` makes it from one call's values (`FusedPlan.env`'s
    arrays in order). `ref`: the step's slot ("tile"), the outside value's position, or -1."""

    kind: str
    ref: int
    dom: tuple[int, ...]     # the op's iteration domain: what an outside value broadcasts to
    by_rows: bool            # the matmul root's left operand: its rows as they are

    def bind(self, vals: Sequence[np.ndarray | None], space: Space, tile_rows: int
             ) -> tuple[str, Any]:
        kind = self.kind
        if kind == "tile":
            return ("tile", self.ref)
        if kind == "none":
            return ("none", None)
        w = vals[self.ref]
        assert w is not None
        nl = space.nl
        if kind == "whole":
            return ("whole", w)
        if self.by_rows:
            return ("rows", w.reshape((space.rows,) + w.shape[nl:]))
        b = _over_domain(w, self.dom)
        if kind == "rows":
            return ("rows", b.reshape((space.rows,) + self.dom[nl:]))
        inv = b[(0,) * nl + (Ellipsis,)]
        if kind == "inv":
            return ("inv", inv)
        # a row-invariant operand (a bias [T]) repeated once into a full tile: the op then runs
        # on same-shape contiguous operands, which NumPy does ~1.5x faster than a broadcast over
        # rows; a reduction's reduced operand must be a full tile anyway (its axes are the tile's)
        rep = np.empty((tile_rows,) + self.dom[nl:], dtype=inv.dtype)
        rep[...] = inv
        return ("rep", rep)


def _over_domain(w: np.ndarray, dom: tuple[int, ...]) -> np.ndarray:
    """`w` broadcast to an op's iteration domain `dom` (aligned to its trailing dims)."""
    b = np.broadcast_to(w, (1,) * (len(dom) - w.ndim) + w.shape if w.ndim <= len(dom) else w.shape)
    return np.broadcast_to(b, dom)


def _source_kinds(o: LaminaOp, env: dict[SSAValue, np.ndarray], pos: dict[SSAValue, int],
                  slot_of: dict[SSAValue, int], space: Space) -> list[_Source]:
    """Where each operand of a per-tile step comes from (the kinds are listed at `Step`).

    Decided once per kernel from the outside arrays' strides, so a tile only slices: a value
    constant along the rows is never sliced per tile, one that varies is viewed as rows x tail."""
    dom = iteration_domain(o)
    nl = space.nl
    dom_tail = dom[nl:]
    srcs: list[_Source] = []
    for j, v in enumerate(o.operand_slots()):
        if v is None:
            srcs.append(_Source("none", -1, dom, False))
            continue
        if v in slot_of:
            srcs.append(_Source("tile", slot_of[v], dom, False))
            continue
        w = env[v]
        if o.info.fusion == Fusion.OPAQUE:   # the matmul root: its left operand by rows
            srcs.append(_Source("rows" if j == 0 else "whole", pos[v], dom, j == 0))
            continue
        if o.info.fusion == Fusion.BROADCAST or w.ndim == 0:
            srcs.append(_Source("whole", pos[v], dom, False))
            continue
        b = _over_domain(w, dom)
        if not all(s == 0 for s in b.strides[:nl]):
            srcs.append(_Source("rows", pos[v], dom, False))
            continue
        inv = b[(0,) * nl + (Ellipsis,)]
        rep = inv.shape == dom_tail and (j == 0 or inv.size > 1 and o.info.fusion
                                         != Fusion.REDUCTION)
        srcs.append(_Source("rep" if rep else "inv", pos[v], dom, False))
    return srcs


@dataclass
class _Job:
    """What every worker of one kernel's tile loop shares (read only)."""

    steps: list[Step]
    buffers: list[tuple[tuple[int, ...], np.dtype]]
    tile_rows: int
    rows: int
    nl: int
    paths: list[ViewPath]
    tiling: BoxTiling | None
    sources: list[list[tuple[str, Any]]]     # per step, this call's (`Step.sources`)
    out2d: list[np.ndarray | None]           # per step, this call's (`Step.out2d`)


def _tile_loop(job: _Job, space: Space, options: NumpyOptions) -> int:
    """Run every tile, on one thread or on the shared pool; the largest worker's tile working
    set (bytes).

    Small kernels (below PARALLEL_MIN_ELEMENTS, or under 4 tiles per thread) stay on the calling
    thread: handing tiles out would cost more than it saves. Otherwise NumPy releases the GIL
    inside ufunc loops, so tiles run on all cores, like XLA:CPU's thread pool (the benchmark
    reports 1 thread and all threads). Tiles are handed out one at a time from a shared counter
    (next() on it is atomic under the GIL): a thread slowed by the OS or a noisy neighbour simply
    takes fewer tiles, where a fixed split would leave the other core idle at the end."""
    rows = space.rows
    n_tiles = -(-rows // job.tile_rows)
    nthreads = tile_threads(options, rows * max(1, _prod(space.tail)), n_tiles)
    if any(st.op.info.fusion == Fusion.OPAQUE for st in job.steps):
        nthreads = 1   # the matmul's BLAS call already runs on every core
    tiles = itertools.count()
    return run_workers(lambda: _worker(job, tiles, n_tiles), nthreads)


def _worker(job: _Job, tiles: Iterator[int], n_tiles: int) -> int:
    """Take tiles from `tiles` until none are left and run every step on each.

    Each worker owns its tile buffers and its fast-path scratch, and tiles write disjoint rows of
    the results, so workers share nothing mutable but the counter; a tile is computed the same
    way on any worker, which keeps results independent of the thread count. This loop is the hot
    path: everything it needs is resolved into `plan` before the first tile. A tile of a kernel
    writing outputs through layout ops is a box (`job.tiling`), carried into them last."""
    steps, tile_rows, rows, nl, paths, tiling = (job.steps, job.tile_rows, job.rows, job.nl,
                                                 job.paths, job.tiling)
    bufs = [np.empty(shape, dtype=dt) for shape, dt in job.buffers]
    scratch = TileScratch()
    plan = [(st, st.op, _fast_path(st.op, st.call.operands, st.call, scratch), job.sources[i],
             job.out2d[i], None if st.buffer is None else bufs[st.buffer], i)
            for i, st in enumerate(steps)]
    vals: list[np.ndarray | None] = [None] * len(steps)
    with np.errstate(all="ignore"):
        while (t_ := next(tiles)) < n_tiles:
            r0 = t_ * tile_rows
            r1 = min(rows, r0 + tile_rows)
            tr = r1 - r0
            for st, o, fast, sources, out2d, buf, slot in plan:
                xs: list[np.ndarray | None] = []
                for kind, src in sources:
                    if kind == "tile":
                        xs.append(vals[src])
                    elif kind == "rows":
                        xs.append(src[r0:r1])
                    elif kind == "rep":
                        xs.append(src if tr == tile_rows else src[:tr])
                    elif kind == "none":
                        xs.append(None)
                    else:
                        xs.append(src)
                if out2d is not None:
                    out = out2d[r0:r1]
                else:
                    assert buf is not None
                    out = buf if tr == tile_rows else buf[:tr]
                if fast is not None:
                    fast(xs, out, r0, tr)
                else:
                    out[...] = _generic(o, st, xs, r0, tr, rows, nl)
                vals[slot] = out
            if tiling is not None:
                write_paths(paths, vals, *tiling.box(r0))
    return sum(b.nbytes for b in bufs) + scratch.nbytes()


def fused_results(plan: FusedPlan) -> list[np.ndarray]:
    """The fused op's results: a per-tile value's global array, else the per-kernel value."""
    out2d: dict[SSAValue, np.ndarray | None] = {st.op.results[0]: st.out2d for st in plan.steps}
    outs: list[np.ndarray] = []
    for v in plan.results:
        if v in plan.written:
            outs.append(plan.written[v])
        elif v in out2d:
            a = out2d[v]
            assert a is not None
            outs.append(a.reshape(_shape(v)))
        else:
            outs.append(plan.env[v])
    return outs


def record_fused_stats(stats: RunStats, plan: FusedPlan, args: Sequence[np.ndarray | None],
                       outs: list[np.ndarray]) -> None:
    """Count the fused op as one kernel whose traffic is its inputs and results (what a fused
    kernel reads and writes: its intermediates never leave the tile), with its body's flops."""
    record_kernel_stats(stats, plan.op, args, outs, plan.body)


def record_kernel_stats(stats: RunStats, op: FusedOp, args: Sequence[np.ndarray | None],
                        outs: Sequence[np.ndarray], body: Sequence[Operation]) -> None:
    """One kernel for `op` (any kind: the tile loop's, attention's) whose traffic is its inputs
    and results, with the flops of `body`'s op-table ops, all of `body` counted as executed."""
    stats.kernels += 1
    stats.bytes_accessed += sum(device_nbytes(a, tensor_info(v.type).dtype)
                                for a, v in zip(args, op.inputs, strict=True) if a is not None)
    stats.bytes_accessed += sum(device_nbytes(a, tensor_info(v.type).dtype)
                                for a, v in zip(outs, op.outputs, strict=True))
    stats.bytes_moved += distinct_nbytes(op.inputs, args) + distinct_nbytes(op.outputs, outs)
    for o in body:
        if isinstance(o, LaminaOp):
            stats.flops += o.info.flops(o.operand_infos(), tensor_info(o.results[0].type),
                                        o.attr_values())
    stats.extra["fused_ops_executed"] = stats.extra.get("fused_ops_executed", 0) + len(body)


def one_tile(op: FusedOp, options: NumpyOptions) -> bool:
    """Whether the tile loop would run `op` as one tile: every value of its body fits the
    smallest tile size (then the kernel is its body's ops on whole arrays, with nothing to plan)."""
    budget = options.tile_bytes if options.tile_bytes is not None else \
        min(ROW_TILE_BYTES, LOOP_TILE_BYTES)
    return all(_prod(_shape(r)) * 4 <= budget for o in op.body.block.ops for r in o.results)


def _choose_rows(rows: int, steps: list[Step], row_group: bool, tile_bytes: int | None) -> int:
    widest = max((_prod(st.op.results[0].type.get_shape()) // max(rows, 1)  # type: ignore
                  for st in steps), default=1)
    per_row = max(1, widest) * 4
    target = tile_bytes if tile_bytes is not None else (
        MATMUL_TILE_BYTES if any(st.op.info.fusion == Fusion.OPAQUE for st in steps)
        else ROW_TILE_BYTES if row_group else LOOP_TILE_BYTES)
    n = max(1, min(rows, target // per_row))
    return n if n >= rows else 1 << (n.bit_length() - 1)   # a power of two (aligned tiles)


def _generic(o: LaminaOp, st: Step, xs: list[np.ndarray | None], r0: int, tr: int,
             rows: int, nl: int) -> np.ndarray:
    call = st.call
    tile_shape = (tr,) + st.tail
    if _prod(tile_shape) == 0:  # nothing to compute; NumPy's reductions fail on an empty axis
        return np.zeros(tile_shape, STORAGE[call.result.dtype])
    if o.info.fusion != Fusion.REDUCTION:
        if o.info.fusion == Fusion.BROADCAST:
            x = xs[0]
            assert x is not None
            if x.ndim == 1 and len(tile_shape) > 1 and x.shape[0] == tr:  # a row vector
                x = x.reshape((tr,) + (1,) * (len(tile_shape) - 1))
            return np.broadcast_to(x, tile_shape)
        # position-dependent kernels see where the tile sits in the global tensor
        if xs and xs[0] is not None and _shape(o.operand_slots()[0]) == _shape(o.results[0]):  # type: ignore[arg-type]
            xs = [np.broadcast_to(xs[0], tile_shape)] + xs[1:]
        call = Call(call.attrs, call.operands, call.result,
                    Block((rows,) + st.tail, (r0,) + (0,) * len(st.tail)))
    return kernel(o.info)(xs, call)


# ---- in-place forms of the rows' formulas (f32 / f64 only, same arithmetic order) ---------------

def _fast_path(o: LaminaOp, infos: list[TensorInfo | None], call: Call,
               scratch: TileScratch) -> TileRun | None:
    """The row's in-place tile form (its `ufunc` / `tile` form, `specialized.forms`), when its
    operands share one native float type; None runs the row's kernel on the tile instead."""
    info = o.info
    dts = {t.dtype for t in infos if t is not None}
    res = call.result.dtype
    if len(dts) != 1:
        return None
    (dt,) = dts
    if dt not in _NATIVE:
        return None
    row_forms = forms(info)
    ufunc = row_forms.ufunc
    if ufunc is not None and info.fusion == Fusion.ELEMENTWISE and (res == dt or res == "i1"):
        def run(xs: list[Any], out: np.ndarray, r0: int, tr: int, fn: np.ufunc = ufunc) -> None:
            fn(*xs, out=out)

        return run
    if row_forms.tile is not None and res == dt:
        return row_forms.tile(call, np.dtype(_NATIVE[dt]), scratch)
    return None


register_op_runner(FusedOp, run_fused)
