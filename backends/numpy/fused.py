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
masks are the global ones bit for bit; dropout's fast path computes the same `rng` bits for the
tile's contiguous global index range. The optional in-place fast paths below are keyed on the
op table's own kernel/formula objects and mirror their arithmetic order exactly; any op without one
runs its table kernel, so correctness never depends on them. Fast paths share a worker's scratch
buffers (`_Scratch`), so a tile's working set is its tile buffers plus two scratch tiles.

Tiles run on one thread per core (`thread_count`), each thread with its own tile buffers and
scratch, on a long-lived pool; a tile is computed the same way on any thread, so results never
depend on the thread count (the property test checks 1 against 2 threads bit for bit).

Statistics: one fused op is one kernel; its bytes are its inputs' plus its results' bytes.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from lamina.analysis.fusion import iteration_domain, row_split
from lamina.backends.interface import RunOptions
from lamina.backends.numpy.kernels import kernel
from lamina.backends.numpy.runner import (
    RunContext,
    device_nbytes,
    register_op_runner,
    run_kernel,
)
from lamina.ir.diagnostics import LaminaError
from lamina.ir.dtypes import STORAGE
from lamina.ir.formulas import Block, Call
from lamina.ir.fused import FusedOp
from lamina.ir.memory import FreeOp
from lamina.ir.numpy_kernels import TileRun
from lamina.ir.opbase import LaminaOp, tensor_info
from lamina.ir.optable import Fusion
from lamina.ir.shapes import TensorInfo
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, SSAValue

# Target bytes of one tile-sized buffer, per group kind, chosen by measurement on f32[8192,4096]
# (benchmarks/bench_fusion.py; 2-core EPYC, 1 MiB L2 per core, 32 MiB L3): NumPy's per-call cost
# (~1 us) has to be spread over enough elements, and the few live tile buffers (reused through a
# free list, in place) should stay in L2/L3. 512 KiB (32 rows of f32[4096]) measured best for W1
# with 1 and 2 threads; smaller tiles pay NumPy's per-call cost and, with threads, a GIL hand-off
# per call, more often. `RunOptions.tile_bytes` overrides both (tests use tiny tiles to exercise
# the tile loop). Tile row counts are rounded down to a power of two so that dropout tiles start
# at aligned global indices (see `_dropout_fast`).
ROW_TILE_BYTES = 512 * 1024
LOOP_TILE_BYTES = 512 * 1024
# Tiles are independent and NumPy drops the GIL inside its loops, so a fused kernel runs its tiles
# on every core, as XLA:CPU's thread pool does (`thread_count`). Which thread runs a tile never
# changes a result bit: each tile is computed the same way wherever it runs. Only kernels of at
# least PARALLEL_MIN_ELEMENTS elements with 4 tiles per thread use more than one (below that,
# handing tiles out costs more than it saves).
PARALLEL_MIN_ELEMENTS = 1 << 20


def thread_count(options: RunOptions) -> int:
    """Tile-loop threads: `options.threads`, else LAMINA_FUSED_THREADS, else the core count."""
    if options.threads is not None:
        return max(1, options.threads)
    env = os.environ.get("LAMINA_FUSED_THREADS", "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise LaminaError(f"LAMINA_FUSED_THREADS must be a positive integer, got '{env}'")
        return int(env)
    return os.cpu_count() or 1


_NATIVE = {"f32": np.float32, "f64": np.float64}


class _Scratch:
    """Per-worker scratch shared by every fast path of a kernel.

    Fast paths run one after another on a tile, and none keeps scratch contents from one call to
    the next, so they can all use the same few buffers: the tile's working set (tile buffers plus
    scratch) then stays small enough for the core's L2 instead of every step owning its own
    temporaries. Slot `i` is raw bytes, viewed as whatever dtype and size the caller asks for.
    """

    def __init__(self) -> None:
        self._raw: dict[int, np.ndarray] = {}
        self._views: dict[tuple[int, tuple[int, ...], Any], np.ndarray] = {}

    def get(self, slot: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """Slot `slot` viewed as an array of `shape` and `dtype` (the same view object for the
        same request: every full tile asks for the same one, and the tile loop is hot)."""
        key = (slot, shape, dtype)
        view = self._views.get(key)
        if view is not None:
            return view
        dt = np.dtype(dtype)
        need = math.prod(shape) * dt.itemsize
        raw = self._raw.get(slot)
        if raw is None or raw.size < need:
            raw = self._raw[slot] = np.empty(max(need, 64), dtype=np.uint8)
            self._views = {k: v for k, v in self._views.items() if k[0] != slot}
        view = self._views[key] = raw[:need].view(dt).reshape(shape)
        return view


_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_POOL_PID = 0


def _pool(n: int) -> ThreadPoolExecutor:
    """One long-lived pool for every fused kernel (starting threads per kernel costs ~0.1 ms).

    A forked child (multiprocessing's default start method on Linux) inherits the pool object but
    not its threads, and would wait forever on it: a new process gets a new pool."""
    global _POOL, _POOL_SIZE, _POOL_PID
    if _POOL is None or _POOL_SIZE < n or _POOL_PID != os.getpid():
        if _POOL is not None and _POOL_PID == os.getpid():
            _POOL.shutdown(wait=True)
        _POOL, _POOL_SIZE = ThreadPoolExecutor(n, thread_name_prefix="lamina-tile"), n
        _POOL_PID = os.getpid()
    return _POOL


def _shape(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def _prod(s: tuple[int, ...]) -> int:
    return math.prod(s)


@dataclass
class _Step:
    op: LaminaOp
    tail: tuple[int, ...]                 # tile shape after the row dim
    call: Call
    sources: list[tuple[str, Any]]        # ("tile", value) / ("inv", array) / ("rows", 2d array)
    fast: Callable[..., None] | None = None
    buf: np.ndarray | None = None
    out2d: np.ndarray | None = None       # the global result, when the value leaves the group
    extra: dict[str, Any] = field(default_factory=dict)


def _reduction_attrs(op: LaminaOp, k: int) -> dict[str, Any]:
    attrs = dict(op.attr_values())
    if "axes" in attrs:
        attrs["axes"] = tuple(range(1, k + 1))
    if "axis" in attrs:
        attrs["axis"] = 1
    return attrs


def run_fused(op: Operation, args: list[np.ndarray | None], ctx: RunContext) -> list[np.ndarray]:
    assert isinstance(op, FusedOp)
    stats = ctx.stats
    block = op.body.block
    # lamina.free in a body (annotate-lifetimes) ends a tile buffer's lifetime: nothing to run
    body = [o for o in block.ops if o is not op.yield_op and not isinstance(o, FreeOp)]
    env: dict[SSAValue, np.ndarray] = {}
    for a, x in zip(block.args, args, strict=True):
        assert x is not None
        env[a] = x

    # the iteration space
    reductions = [o for o in body if isinstance(o, LaminaOp) and o.info.fusion == Fusion.REDUCTION]
    if reductions:
        d = iteration_domain(reductions[0])
        k = row_split(reductions[0])
        assert k is not None, "a fused reduction is row-wise (fuse-elementwise's rule)"
        lead, tail = d[: len(d) - k], d[len(d) - k:]
    else:
        try:
            d = np.broadcast_shapes(*(_shape(o.results[0]) for o in body))
        except ValueError:   # e.g. [3] -> broadcast_in_dim -> [3, 2]: no common loop; run whole
            d = ()
        n = len(d)
        k = n
        for cand in range(n + 1):
            ok = True
            for a in block.args:
                s = (1,) * (n - len(_shape(a))) + _shape(a)
                if len(s) != n:
                    ok = False
                    break
                ls = s[: n - cand]
                if not (all(x == 1 for x in ls) or ls == d[: n - cand]):
                    ok = False
                    break
            if ok:
                k = cand
                break
        lead, tail = tuple(d[: n - k]), tuple(d[n - k:])
    nl = len(lead)
    rows = _prod(lead)
    # "full" last: with an empty tail the three shapes coincide and the value is a full tile
    forms = {lead: "rowvec", lead + (1,) * len(tail): "rowscalar", lead + tail: "full"}

    def tail_of(shape: tuple[int, ...]) -> tuple[int, ...] | None:
        f = forms.get(shape)
        if f is None:
            return None
        return shape[nl:]

    results_out = list(op.yield_op.values)
    leaving = set(results_out)
    tiled: set[SSAValue] = set()
    steps: list[_Step] = []
    whole_ops: list[LaminaOp] = []
    with np.errstate(all="ignore"):
        for o in body:
            assert isinstance(o, LaminaOp)
            slots = o.operand_slots()
            any_tiled = any(v is not None and v in tiled for v in slots)
            dom = iteration_domain(o)
            is_red = o.info.fusion == Fusion.REDUCTION
            t = tail_of(dom)
            if rows > 1 and t is not None and (is_red or any_tiled or (
                    forms[dom] == "full" and o.info.fusion == Fusion.ELEMENTWISE)):
                tiled.add(o.results[0])
                steps.append(_Step(o, _shape(o.results[0])[nl:], Call({}, [], tensor_info(
                    o.results[0].type)), []))
            else:
                # whole: runs once per kernel
                call = Call(o.attr_values(), o.operand_infos(), tensor_info(o.results[0].type))
                env[o.results[0]] = run_kernel(o.info, [None if v is None else env[v]
                                                        for v in slots], call)
                whole_ops.append(o)
                steps.append(_Step(o, (), call, [("whole", None)]))

        tile_rows = _choose_rows(rows, [s for s in steps if s.sources != [("whole", None)]],
                                 bool(reductions), ctx.options.tile_bytes)
        tiled_steps = [st for st in steps if st.sources != [("whole", None)]]
        # last use of every tiled value (index into tiled_steps), for buffer reuse
        last_use: dict[SSAValue, int] = {}
        for i, st in enumerate(tiled_steps):
            for v in st.op.operand_slots():
                if v is not None and v in tiled:
                    last_use[v] = i
        # tile buffers are named by id (shape, dtype) and allocated per worker thread below
        buf_specs: list[tuple[tuple[int, ...], Any]] = []
        buf_of: dict[SSAValue, int] = {}       # tiled value -> buffer id (not for out2d values)
        pool: dict[tuple[tuple[int, ...], Any], list[int]] = {}
        slot_of: dict[SSAValue, int] = {}
        bid: dict[int, int] = {}               # step index -> buffer id of its result
        # prepare the tiled steps
        for i, st in enumerate(tiled_steps):
            o = st.op
            dom = iteration_domain(o)
            dom_tail = dom[nl:]
            srcs: list[tuple[str, Any]] = []
            for j, v in enumerate(o.operand_slots()):
                if v is None:
                    srcs.append(("none", None))
                elif v in tiled:
                    srcs.append(("tile", slot_of[v]))
                else:
                    w = env[v]
                    if o.info.fusion == Fusion.BROADCAST or w.ndim == 0:
                        srcs.append(("whole", w))
                        continue
                    b = np.broadcast_to(w, (1,) * (len(dom) - w.ndim) + w.shape
                                        if w.ndim <= len(dom) else w.shape)
                    b = np.broadcast_to(b, dom)
                    if all(s == 0 for s in b.strides[:nl]):
                        inv = b[(0,) * nl + (Ellipsis,)]
                        if inv.shape == dom_tail and (j == 0 or inv.size > 1 and o.info.fusion
                                                      != Fusion.REDUCTION):
                            # a row-invariant operand (a bias [T]) repeated once into a full
                            # tile: the op then runs on same-shape contiguous operands, which
                            # NumPy does ~1.5x faster than a broadcast over rows; a reduction's
                            # reduced operand must be a full tile anyway (its axes are the tile's)
                            rep = np.empty((tile_rows,) + dom_tail, dtype=inv.dtype)
                            rep[...] = inv
                            srcs.append(("rep", rep))
                        else:
                            srcs.append(("inv", inv))
                    else:
                        srcs.append(("rows", b.reshape((rows,) + dom_tail)))
            st.sources = srcs
            infos = o.operand_infos()
            attrs = _reduction_attrs(o, len(tail)) if o.info.fusion == Fusion.REDUCTION \
                else o.attr_values()
            st.call = Call(attrs, infos, tensor_info(o.results[0].type))
            res = o.results[0]
            dt = STORAGE[st.call.result.dtype]
            # operands used for the last time here give their buffers back first: the op may
            # then write in place over one of them (every runner reads an operand element
            # before writing the same element, or computes its whole result before storing)
            for v in {v for v in o.operand_slots() if v is not None and v in tiled}:
                if last_use.get(v) == i and v in buf_of:
                    pool.setdefault(buf_specs[buf_of[v]], []).append(buf_of[v])
            slot_of[res] = len(slot_of)
            if res in leaving:
                st.out2d = np.empty((rows,) + st.tail, dtype=dt)
            else:
                key = ((tile_rows,) + st.tail, np.dtype(dt))
                free = pool.get(key)
                if free:
                    buf_of[res] = free.pop()
                else:
                    buf_of[res] = len(buf_specs)
                    buf_specs.append(key)
                bid[i] = buf_of[res]
                if res not in last_use:   # dead value: its buffer is free again
                    pool.setdefault(key, []).append(buf_of[res])

        # the tile loop
        if tiled_steps:
            n_tiles = -(-rows // tile_rows)
            nthreads = max(1, min(thread_count(ctx.options), n_tiles // 4))
            if rows * max(1, _prod(tail)) < PARALLEL_MIN_ELEMENTS:
                nthreads = 1

            # tiles are handed out one at a time from a shared counter (next() on it is atomic
            # under the GIL): a thread slowed by the OS or a noisy neighbour simply takes fewer
            # tiles, where a fixed split would leave the other core idle at the end
            tiles = itertools.count()

            def worker() -> None:
                # own buffers and own fast-path scratch per worker; tiles write disjoint rows
                bufs = [np.empty(shape, dtype=dt) for shape, dt in buf_specs]
                scratch = _Scratch()
                plan = [(st, st.op, _fast_path(st.op, st.call.operands, st.call, scratch),
                         st.sources,
                         st.out2d, bufs[bid[i]] if i in bid else None, slot_of[st.op.results[0]])
                        for i, st in enumerate(tiled_steps)]
                vals: list[np.ndarray | None] = [None] * len(slot_of)
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

            if nthreads == 1:
                worker()
            else:
                # NumPy releases the GIL inside ufunc loops: tiles run on all cores, like
                # XLA:CPU's thread pool (the benchmark reports 1 thread and all threads)
                ex = _pool(nthreads)
                for f in [ex.submit(worker) for _ in range(nthreads)]:
                    f.result()

    # results
    outs: list[np.ndarray] = []
    for v in results_out:
        if v in tiled:
            st = next(s for s in steps if s.op.results[0] is v)
            assert st.out2d is not None
            outs.append(st.out2d.reshape(_shape(v)))
        else:
            outs.append(env[v])
    stats.kernels += 1
    stats.bytes_accessed += sum(device_nbytes(a, tensor_info(v.type).dtype)
                                for a, v in zip(args, op.inputs, strict=True) if a is not None)
    stats.bytes_accessed += sum(device_nbytes(a, tensor_info(v.type).dtype)
                                for a, v in zip(outs, op.outputs, strict=True))
    for o in body:
        if isinstance(o, LaminaOp):
            stats.flops += o.info.flops(o.operand_infos(), tensor_info(o.results[0].type),
                                        o.attr_values())
    stats.extra["fused_ops_executed"] = stats.extra.get("fused_ops_executed", 0) + len(body)
    return outs


def _choose_rows(rows: int, steps: list[_Step], row_group: bool, tile_bytes: int | None) -> int:
    widest = max((_prod(st.op.results[0].type.get_shape()) // max(rows, 1)  # type: ignore
                  for st in steps), default=1)
    per_row = max(1, widest) * 4
    target = tile_bytes if tile_bytes is not None else (ROW_TILE_BYTES if row_group
                                                        else LOOP_TILE_BYTES)
    n = max(1, min(rows, target // per_row))
    return n if n >= rows else 1 << (n.bit_length() - 1)   # a power of two (aligned tiles)


def _generic(o: LaminaOp, st: _Step, xs: list[np.ndarray | None], r0: int, tr: int,
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
               scratch: _Scratch) -> TileRun | None:
    """The row's in-place tile form (`OpInfo.ufunc` / `OpInfo.tile`), when its operands share one
    native float type; None runs the row's kernel on the tile instead."""
    info = o.info
    dts = {t.dtype for t in infos if t is not None}
    res = call.result.dtype
    if len(dts) != 1:
        return None
    (dt,) = dts
    if dt not in _NATIVE:
        return None
    ufunc = info.ufunc
    if ufunc is not None and info.fusion == Fusion.ELEMENTWISE and (res == dt or res == "i1"):
        def run(xs: list[Any], out: np.ndarray, r0: int, tr: int, fn: np.ufunc = ufunc) -> None:
            fn(*xs, out=out)

        return run
    if info.tile is not None and res == dt:
        return info.tile(call, np.dtype(_NATIVE[dt]), scratch)
    return None


register_op_runner(FusedOp, run_fused)
