"""Running `lamina.fused` as one compiled kernel: plan, trace, generate, compile once, run.

The plan is the NumPy interpreter's (`lamina.backends.numpy.fused.plan_fused`): the same iteration
space, the same split into per-tile steps and per-kernel values (computed by the interpreter), the
same result arrays. The steps are traced through their rows' scalar forms (`trace`), scheduled
and written as a numba kernel (`emit`), compiled once per source text (`cache`) and run over
chunks of rows on the interpreter's thread pool; a chunk is rows, each computed whole, so no
result bit depends on the thread count. Rows the kernel flags (a form's `require` failed, dropout
indices crossing 2**32) are recomputed by the interpreter's tile loop, one row per tile.

A kernel rooted at a matmul is split first (`matmul_root`): one BLAS call over every row, then
its epilogue compiled as above.

A body the generator cannot compile runs on the interpreter's tile loop instead, with one line
in `RunResult.explain` naming the op and the reason; `--stats-json` has the counts under
`compiled` (`kernels_compiled` in this process, `kernels_loaded` from the disk cache,
`kernels_reused` in memory, `compile_seconds`, `fallbacks`, `rows_to_interpreter`).

This module is the full way, at every call (`run_full`). A compiled program (`lamina.compile`)
keeps what its first call with an argument layout found and later calls only run the kernel
(`lamina.backends.compiled.replay`, the backend's runner).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from io import StringIO
from typing import Any

import numpy as np
from lamina.analysis.fusion import iteration_domain
from lamina.backends.compiled.cache import KERNELS, Kernel
from lamina.backends.compiled.emit import Generated, Layout, Output, generate
from lamina.backends.compiled.matmul_root import split_root
from lamina.backends.compiled.trace import CannotCompile, Domain, Sym, Tracer
from lamina.backends.numpy import fused as tiles
from lamina.backends.numpy.fused import FusedPlan, Space, plan_fused, run_tiles
from lamina.backends.numpy.options import NumpyOptions
from lamina.backends.numpy.runner import OpRunner, RunContext
from lamina.backends.numpy.tile_threads import PARALLEL_MIN_ELEMENTS, run_workers, tile_threads
from lamina.ir.core.diagnostics import op_loc
from lamina.ir.core.dtypes import STORAGE
from lamina.ir.ops.formulas import Call
from lamina.ir.ops.fused import FusedOp
from lamina.ir.ops.opbase import tensor_info
from numba import types as nbt
from numba.np.numpy_support import from_dtype
from xdsl.ir import Operation
from xdsl.printer import Printer

CHUNK_ELEMENTS = 1 << 16    # elements per chunk of rows a worker takes (>= 1 row)
ROW_MIN = 1024              # elements a kernel row of a group without reductions gets, at least


def kernel_domain(space: Space) -> Domain:
    """The kernel's rows: the interpreter's, except in a group without reductions whose
    interpreter rows are single elements (every input spans the whole domain, so the tile loop
    needs no tail). There a row is trailing dims until it holds ROW_MIN elements (one lead dim
    kept, for the threads), so that the inner loop is long enough to vectorize. With an empty
    tail every step is "full" (`Space.form`), so the trace reads the same."""
    if space.tail or space.row_group or len(space.lead) < 2:
        return Domain(space.lead, space.tail)
    lead, tail = list(space.lead), []
    while len(lead) > 1 and math.prod(tail) < ROW_MIN:
        tail.insert(0, lead.pop())
    return Domain(tuple(lead), tuple(tail))


@dataclass
class _Traced:
    """A plan's steps as one graph, with what the runner must feed the kernel."""

    domain: Domain
    outputs: list[Output]
    out_steps: list[int]
    requires: list[Sym]
    loads: list[Sym] = field(default_factory=list)          # by input slot
    arrays: list[np.ndarray] = field(default_factory=list)  # by input slot, as the op sees it
    frames: list[int] = field(default_factory=list)         # rank each input is aligned to
    splits_index: bool = False


def _forms(plan: FusedPlan, op: Any) -> tuple[str, str]:
    """The forms (full, rowscalar, rowvec: `Space.form`) of a step's operands and of its result."""
    space = plan.space
    res = tuple(op.results[0].type.get_shape())
    dom, out = space.form(iteration_domain(op)), space.form(res)
    if dom is None or out is None:
        raise CannotCompile(f"shape {list(res)} does not line up with the loop")
    return dom, out


def _load(tr: Tracer, t: _Traced, slots: dict[tuple[int, int], int], w: np.ndarray,
          rank: int, dtype: str) -> Sym:
    """An outside value as a load: which domain dims it runs along (strides 0 do not)."""
    key = (id(w), rank)
    slot = slots.get(key)
    if slot is not None:
        return t.loads[slot]
    if w.ndim > rank:
        raise CannotCompile(f"an operand of rank {w.ndim} in a loop of rank {rank}")
    dims = t.domain.dims
    dmap: list[int | None] = []
    for i, (n, st) in enumerate(zip(w.shape, w.strides, strict=True)):
        d = i + rank - w.ndim
        dmap.append(d if n > 1 and st != 0 else None)
        if n > 1 and n != dims[d]:
            raise CannotCompile(f"an operand of shape {list(w.shape)} in a loop over {list(dims)}")
    compute = np.float32 if dtype in ("f16", "bf16") else w.dtype
    sym = tr.load(len(t.loads), tuple(w.shape), compute, tuple(dmap))
    slots[key] = len(t.loads)
    t.loads.append(sym)
    t.arrays.append(w)
    t.frames.append(rank)
    return sym


def _trace_step(tr: Tracer, t: _Traced, plan: FusedPlan, st: Any, val: dict[Any, Sym],
                slots: dict[tuple[int, int], int]) -> Sym:
    o = st.op
    info = o.info
    if info.scalar is None:
        raise CannotCompile("its row has no scalar form")
    d = t.domain
    dom, form = _forms(plan, o)
    rank = d.nl if dom == "rowvec" else d.nd
    args: list[Sym | None] = []
    for v, ti in zip(o.operand_slots(), o.operand_infos(), strict=True):
        if v is None or ti is None:
            args.append(None)
        elif v in val:
            args.append(val[v])
        else:
            args.append(_load(tr, t, slots, plan.env[v], rank, ti.dtype))
    res = o.results[0]
    result = tensor_info(res.type)
    tr.index_form = "full" if form == "full" else "row"
    out = info.scalar(tr, args, Call(o.attr_values(), o.operand_infos(), result))
    tr.index_form = None
    if not isinstance(out, Sym):
        out = tr.asarray(out)
    shape = result.shape
    if out.shape != shape:
        out = tr.broadcast_to(out, shape)
    offset = (d.nl if form == "rowvec" else d.nd) - len(shape)
    if any(m is not None and m != i + offset for i, m in enumerate(out.dmap)):
        raise CannotCompile("its result does not line up with the loop")
    compute = np.dtype(np.float32) if result.dtype in ("f16", "bf16") else STORAGE[result.dtype]
    if out.dtype != compute:
        out = tr.astype(out, compute)
    if info.arith and result.dtype in ("f16", "bf16"):
        out = tr.node("fn", (out,), np.float32, out.shape, out.dmap, f"round_{result.dtype}")
    return out


def _trace(plan: FusedPlan) -> _Traced:
    if plan.paths:
        raise CannotCompile("it writes outputs through layout ops (the generator has no index "
                            "maps yet)")
    space = plan.space
    t = _Traced(kernel_domain(space), [], [], [])
    tr = Tracer(t.domain)
    val: dict[Any, Sym] = {}
    slots: dict[tuple[int, int], int] = {}
    for i, st in enumerate(plan.steps):
        try:
            val[st.op.results[0]] = _trace_step(tr, t, plan, st, val, slots)
        except CannotCompile as e:
            raise CannotCompile(f"{st.op.name}: {e}") from None
        if st.out2d is not None:
            full = _forms(plan, st.op)[1] == "full"
            t.outputs.append(Output(val[st.op.results[0]], full, st.call.result.dtype))
            t.out_steps.append(i)
    t.requires = tr.requires
    t.splits_index = tr.splits_index
    return t


def body_text(op: FusedOp) -> str:
    """The body's text: what a kernel's source and its caches are keyed by."""
    out = StringIO()
    Printer(stream=out).print_region(op.body)
    return out.getvalue()


@dataclass(frozen=True)
class Compaction:
    """How one input is laid out for the kernel ([rows?] + [present groups], C-contiguous),
    decided from its shape alone: a compiled program's later calls apply the same views and at
    most one copy without deciding anything again (`replay`)."""

    pad: tuple[int, ...]                 # the input aligned to the loop's rank and domain
    index: tuple[slice, ...]             # the dims it does not run along, cut to one element
    broadcast: tuple[int, ...] | None    # repeated along the rows (`Layout.rows`)
    shape: tuple[int, ...]               # what the kernel reads
    f16: bool                            # read as its bits (uint16)
    direct: bool                         # every element kept in order: a reshape is the layout

    def apply(self, w: np.ndarray) -> np.ndarray:
        """`w` laid out: the same values, in the same order, whichever way is taken."""
        if self.direct:
            a = np.ascontiguousarray(w.reshape(self.shape))
        else:
            v = w.reshape(self.pad)[self.index]
            if self.broadcast is not None:
                v = np.broadcast_to(v, self.broadcast)
            a = np.ascontiguousarray(v.reshape(self.shape))
        return a.view(np.uint16) if self.f16 else a


def compaction(shape: tuple[int, ...], rank: int, lay: Layout, groups: tuple[tuple[int, ...], ...],
               domain: Domain, f16: bool) -> Compaction:
    """The layout of an input of `shape` seen at rank `rank` (see `Compaction`)."""
    pad = (1,) * (rank - len(shape)) + shape + (1,) * (domain.nd - rank)
    present = {d for g, p in zip(groups, lay.groups, strict=True) if p for d in g}
    keep = [d in present or (d < domain.nl and lay.rows) for d in range(domain.nd)]
    index = tuple(slice(None) if k else slice(0, 1) for k in keep)
    cut = tuple(n if k else min(n, 1) for n, k in zip(pad, keep, strict=True))
    broadcast = domain.lead + cut[domain.nl:] if lay.rows else None
    rows = math.prod(domain.lead)
    out = ([rows] if lay.rows else []) + \
        [math.prod(domain.dims[d] for d in g) for g, p in zip(groups, lay.groups, strict=True) if p]
    if lay.full:
        out = [rows, math.prod(out[1:])]
    size = math.prod(broadcast if broadcast is not None else cut)
    direct = math.prod(shape) == math.prod(cut) == size
    return Compaction(pad, index, broadcast, tuple(out) or (1,), f16, direct)


def _compact(w: np.ndarray, rank: int, lay: Layout, groups: tuple[tuple[int, ...], ...],
             domain: Domain, f16: bool) -> np.ndarray:
    """Input `w` as the kernel reads it: [rows?] + [present groups], C-contiguous."""
    return compaction(tuple(w.shape), rank, lay, groups, domain, f16).apply(w)


def _arg_type(a: np.ndarray, readonly: bool) -> Any:
    return nbt.Array(from_dtype(a.dtype), a.ndim, "C", readonly=readonly)


def _stats(ctx: RunContext) -> dict[str, Any]:
    return ctx.stats.extra.setdefault("compiled", {
        "kernels_compiled": 0, "kernels_loaded": 0, "kernels_reused": 0, "compile_seconds": 0.0,
        "load_seconds": 0.0, "fallbacks": [], "rows_to_interpreter": 0})


@dataclass
class CompiledCall:
    """A plan's kernel with its arguments laid out, ready to run over the plan's rows."""

    kernel: Kernel
    reused: bool                  # this process already had the kernel
    rows: int
    T: int                        # elements per row
    arrays: list[np.ndarray]      # the kernel's inputs, then its outputs (the plan's out2d)
    per_row: int = 1              # the interpreter's rows in one kernel row (`kernel_domain`)
    recipe: _Recipe | None = None             # what the plan's trace found (`replay` keeps it)
    compactions: list[Compaction] = field(default_factory=list)   # by input slot

    def run(self, options: NumpyOptions, index_base: int = 0) -> np.ndarray:
        """Run every row; return the flags of rows left to the interpreter. `index_base` is the
        global flat index of the rows' first element (0 for a whole tensor)."""
        flags = np.zeros(self.rows, dtype=np.uint8)
        _run_chunks(self.kernel.entry, self.rows, self.T, index_base, flags, self.arrays, options)
        return flags


@dataclass(frozen=True)
class _Recipe:
    """What tracing and generating a plan's kernel found, in terms any plan of the same body and
    argument layout shares: input slot k is `list(plan.env.values())[env_index[k]]` seen at rank
    `frames[k]`; output k is the `out2d` of step `out_steps[k]`, whole rows or not (`full`)."""

    gen: Generated
    env_index: tuple[int, ...]
    frames: tuple[int, ...]
    out_steps: tuple[int, ...]
    full: tuple[bool, ...]
    f16_slots: frozenset[int]


_RECIPES: dict[tuple[Any, ...], _Recipe] = {}
_RECIPES_MAX = 256      # a long-running process with many bodies regenerates the oldest


def _recipe_key(plan: FusedPlan, memo: dict[Any, Any] | None = None) -> tuple[Any, ...]:
    """The body's text and every env array's layout (shape, strides, dtype, and which earlier
    array it is, since one array passed twice is one kernel input): what the trace depends on.
    A compiled program's `memo` keeps the text of its ops, which never change (printing a body
    costs more than a small kernel's run)."""
    first: dict[int, int] = {}
    layout = tuple((w.shape, w.strides, w.dtype.str, first.setdefault(id(w), k))
                   for k, w in enumerate(plan.env.values()))
    if memo is None:
        return (body_text(plan.op), layout)
    text = memo.get(plan.op)
    if text is None:
        text = memo[plan.op] = body_text(plan.op)
    return (text, layout)


def _recipe(plan: FusedPlan, memo: dict[Any, Any] | None = None) -> _Recipe:
    """Trace and generate the plan's kernel, once per body text and argument layout (tracing
    and generating cost milliseconds, as much as a kernel's run on a mid-sized tensor)."""
    key = _recipe_key(plan, memo)
    r = _RECIPES.get(key)
    if r is not None:
        return r
    t = _trace(plan)
    f16_slots = frozenset(k for k, w in enumerate(t.arrays) if w.dtype == np.float16)
    gen = generate(t.domain, t.outputs, t.requires, t.loads, set(f16_slots), t.splits_index,
                   key[0])
    where = {id(w): k for k, w in reversed(list(enumerate(plan.env.values())))}
    r = _Recipe(gen, tuple(where[id(w)] for w in t.arrays), tuple(t.frames), tuple(t.out_steps),
                tuple(o.full for o in t.outputs), f16_slots)
    if len(_RECIPES) >= _RECIPES_MAX:
        _RECIPES.pop(next(iter(_RECIPES)))
    _RECIPES[key] = r
    return r


def prepare(plan: FusedPlan, memo: dict[Any, Any] | None = None) -> CompiledCall:
    """Trace, generate and compile (or find) the plan's kernel and lay out its arguments;
    CannotCompile when the generator cannot (the message names the op and says why)."""
    space = plan.space
    if space.rows * math.prod(space.tail) == 0:
        raise CannotCompile("its rows hold no elements")
    r = _recipe(plan, memo)
    gen = r.gen
    domain = kernel_domain(space)
    rows = math.prod(domain.lead)
    env = list(plan.env.values())
    lays = [compaction(tuple(env[e].shape), rank, lay, gen.groups, domain, k in r.f16_slots)
            for k, (e, rank, lay) in enumerate(zip(r.env_index, r.frames, gen.layouts, strict=True))]
    ins = [c.apply(env[e]) for c, e in zip(lays, r.env_index, strict=True)]
    T = math.prod(math.prod(domain.dims[d] for d in g) for g in gen.groups)
    outs: list[np.ndarray] = []
    for step, full in zip(r.out_steps, r.full, strict=True):
        a = plan.steps[step].out2d
        assert a is not None
        a = a.reshape(rows, T) if full else a.reshape(rows)
        outs.append(a.view(np.uint16) if a.dtype == np.float16 else a)
    sig = (nbt.int64, nbt.int64, nbt.int64, nbt.Array(nbt.uint8, 1, "C"),
           *(_arg_type(a, True) for a in ins), *(_arg_type(a, False) for a in outs))
    kernel, reused = KERNELS.get(gen.source, sig)
    return CompiledCall(kernel, reused, rows, T, ins + outs, space.rows // rows, r, lays)


def count_kernel(ctx: RunContext, call: CompiledCall) -> dict[str, Any]:
    """Count `call`'s kernel in the run's `compiled` statistics (compiled, loaded from disk or
    reused in memory, and the seconds it took); returns those statistics."""
    stats = _stats(ctx)
    k = call.kernel
    if call.reused:
        stats["kernels_reused"] += 1
    elif k.compiled:
        stats["kernels_compiled"] += 1
        stats["compile_seconds"] += k.seconds
    else:
        stats["kernels_loaded"] += 1
        stats["load_seconds"] += k.seconds
    return stats


def explain_fallback(ctx: RunContext, op: Operation, reason: str, runs_on: str) -> None:
    """Record a kernel the backend did not compile: the reason in `compiled.fallbacks` and one
    explain line naming the op, the reason and what runs it instead."""
    _stats(ctx)["fallbacks"].append(reason)
    loc = op_loc(op)
    where = f"{loc}: " if loc is not None else ""
    ctx.explain.append(f"[backend compiled] {where}lamina.fused not compiled: {reason}; it runs "
                       f"on {runs_on}")


def run_compiled(plan: FusedPlan, ctx: RunContext) -> CompiledCall | None:
    """Compute the plan's steps with its compiled kernel, and the rows it flags with the
    interpreter's tile loop; CannotCompile when the generator cannot compile the body. Returns
    the kernel's call (None: no steps to run)."""
    if not plan.steps:
        return None
    call = prepare(plan, ctx.memo)
    stats = count_kernel(ctx, call)
    bad = np.flatnonzero(call.run(ctx.options))
    if bad.size:
        rows = (bad[:, None] * call.per_row + np.arange(call.per_row)).ravel()
        stats["rows_to_interpreter"] += int(rows.size)
        run_tiles(plan, ctx.options, only_rows=[int(r) for r in rows])
    return call


def _run_chunks(entry: Any, rows: int, T: int, index_base: int, flags: np.ndarray,
                arrays: list[np.ndarray], options: NumpyOptions) -> None:
    """Rows in chunks of about CHUNK_ELEMENTS elements, taken by the pool's threads from a shared
    counter (a thread slowed by a neighbour takes fewer)."""
    if rows * T < PARALLEL_MIN_ELEMENTS:   # one thread (`tile_threads`): no chunks to hand out
        entry(0, rows, index_base, flags, *arrays)
        return
    chunk = max(1, CHUNK_ELEMENTS // max(T, 1))
    n_chunks = -(-rows // chunk)
    nthreads = tile_threads(options, rows * T, n_chunks)
    counter = itertools.count()

    def worker() -> None:
        while (c := next(counter)) < n_chunks:
            r0 = c * chunk
            entry(r0, min(rows, r0 + chunk), index_base, flags, *arrays)

    run_workers(worker, nthreads)


# kinds this backend runs its own way (`lamina.backends.compiled.attention` adds "attention")
OWN_RUNNERS: dict[str, Callable[[Operation, list[np.ndarray | None], RunContext],
                                list[np.ndarray]]] = {}


@dataclass
class FullRun:
    """One call of a fused op the full way: its results, its plan before and after the matmul
    root's split (the same plan without one), and the kernel's call (None: not compiled)."""

    outs: list[np.ndarray]
    planned: FusedPlan
    plan: FusedPlan
    call: CompiledCall | None


def run_full(op: FusedOp, args: list[np.ndarray | None], ctx: RunContext) -> FullRun:
    """Plan, split, trace (or find the trace), lay out and run the kernel, counting statistics
    when the run counts them (`RunContext.counting`)."""
    planned = plan_fused(op, args, min_rows=1)
    plan = split_root(planned) or planned
    call = None
    try:
        with np.errstate(all="ignore"):
            call = run_compiled(plan, ctx)
    except CannotCompile as e:
        explain_fallback(ctx, op, str(e), "the NumPy tile loop")
        run_tiles(plan, ctx.options)
    outs = tiles.fused_results(plan)
    if ctx.counting:
        tiles.record_fused_stats(ctx.stats, plan, args, outs)
    return FullRun(outs, planned, plan, call)


def own_runner(op: FusedOp, ctx: RunContext) -> OpRunner | None:
    """The runner of a kind this backend or the interpreter runs its own way (an explain line
    for the interpreter's), None for a kind compiled as one row loop."""
    if (own := OWN_RUNNERS.get(op.fusion_kind)) is not None:
        return own
    if (own := tiles.KIND_RUNNERS.get(op.fusion_kind)) is not None:
        explain_fallback(ctx, op, f"the \"{op.fusion_kind}\" kind has no row-loop form",
                         "the NumPy interpreter's own kernel")
        return own
    return None
