"""`lamina.fused "attention"` on the compiled backend: BLAS for the two matmuls, the rest compiled.

Per leading index (batch, head) and block of query rows, with every key of those rows at once:

    S = q[rows] @ kt[:, :kmax]           the matmul's formula (BLAS, one thread per worker)
    P = probs(softmax(scores(S)))        ONE compiled kernel: score ops, softmax over the keys and
                                         prob ops, each row whole (the generator of
                                         `lamina.backends.compiled.fused`)
    out[rows] = P[:, :kv] @ v[:kv]       the matmul's formula

A block holds about BLOCK_ELEMENTS scores (128 query rows at 1024 keys: 512 KiB, in L2 with P).
The compiled kernel is an ordinary fused body, built once per kernel shape (`_middle`): the
attention body's score ops, its softmax and its prob ops, cloned onto block-shaped types, with
the chain's block and every side value's block as its arguments. Its row is a query row over
every key, so dropout's element index is the global one (`index_base` = the block's first score's
flat index): masks are the interpreter's bits. Its numerics are the compiled backend's (softmax's
exp and row sum as `lamina.backends.compiled.intrinsics` / `libm` state), not an online softmax:
this form is the unfused program's softmax, computed row by row.

Masked keys, exactly. When the last score op masks with a one-element fill (`masked_fill`: a
causal mask writing -1e9), columns at and after `kmax` (past the last key the block's mask lets
through) hold only the fill whatever S is there, so S is computed only up to `kmax` and is 0 past
it. P @ v then runs over keys up to `kv = kmax` when P is exactly 0 past kmax (checked on the
block: the fill's exp underflowed in every row) and v is finite there (0 * inf is nan); else over
every key. Skipping only drops products that are exactly 0, so the result is the full product's,
up to BLAS's summation order.

Planned once (`_Plan`, in the program's memo at the op's first call): the checks, the middle, the
matmuls' tile forms, the worker count, and the middle's kernel with its arguments' layout (a
`replay.Replay` of the first worker, planned and compiled the full way): a later call computes
its side values, masks' key bounds and views, gives each worker fresh block buffers laid out as
the replay says, and runs the blocks. A refusal is kept too.

Falls back to the interpreter's attention kernel (`lamina.backends.numpy.attention`, one explain
line) for element types other than f32 and f64, rows longer than MAX_KEYS keys, bodies the
generator cannot compile, and rows the compiled kernel flags (whole kernel rerun).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from lamina.backends.compiled.fused import (
    OWN_RUNNERS,
    CompiledCall,
    FullRun,
    count_kernel,
    explain_fallback,
    prepare,
)
from lamina.backends.compiled.replay import Replay, build_replay
from lamina.backends.compiled.trace import CannotCompile
from lamina.backends.numpy import attention as interp
from lamina.backends.numpy.blas import one_blas_thread
from lamina.backends.numpy.fused import fused_results, plan_fused
from lamina.backends.numpy.runner import RunContext
from lamina.backends.numpy.specialized import TileRun, forms
from lamina.backends.numpy.tile_threads import TileScratch, run_workers, tile_threads
from lamina.ir.core.dtypes import STORAGE
from lamina.ir.core.shapes import TensorInfo
from lamina.ir.ops.attention import AttentionParts, attention_parts, masked_fill, shape_of
from lamina.ir.ops.formulas import Call
from lamina.ir.ops.fused import FusedOp, YieldOp
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Block, Operation, Region, SSAValue

# Scores per block: query rows = max(1, BLOCK_ELEMENTS // keys). 128 x 1024 in f32 is 512 KiB, S and
# P together 1 MiB of the 2 MiB L2. Measured on the GPT-2 block's attention alone (B2 H16 T1024
# Dh64, causal, 2 cores, medians of 4): 85.5 / 80.9 / 75.3 ms at 2**16 / 2**17 / 2**18; in the whole
# block (bench_fusion GPT2, compiled): 380 ms at 2**17, 401 at 2**18 (within the run's spread).
BLOCK_ELEMENTS = 1 << 17
MAX_KEYS = 1 << 16         # longer rows: the interpreter's online softmax over key blocks


@dataclass
class _Middle:
    """The compiled middle of one attention kernel shape: its fused op and which whole values
    its block arguments are cut from (`sides`: the attention body's side values, padded to the
    scores' rank)."""

    op: FusedOp
    sides: list[SSAValue]
    fixed: list[bool]          # per side value: one element, the same in every block
    bq: int


def _block_shape(shape: tuple[int, ...], rank: int, bq: int) -> tuple[int, ...]:
    """A value of `shape` (broadcast into scores of `rank` dims) as one block sees it: every
    leading dim 1, the query dim bq where the value has one, every key."""
    s = (1,) * (rank - len(shape)) + shape
    return (1,) * (rank - 2) + (bq if s[-2] > 1 else 1, s[-1])


def _middle(parts: AttentionParts, bq: int) -> _Middle:
    """Score ops, softmax and prob ops cloned onto block types, as one fused body."""
    rank = len(parts.scores_shape)
    chain_ops: list[LaminaOp] = [*parts.scores, parts.softmax, *parts.probs]
    made = {o.results[0] for o in chain_ops} | {parts.qk.results[0]}
    sides: list[SSAValue] = []
    for o in chain_ops:
        for v in o.operand_slots():
            if v is not None and v not in made and v not in sides:
                sides.append(v)

    def block_type(v: SSAValue) -> TensorType[Any]:
        t = v.type
        assert isinstance(t, TensorType)
        return TensorType(t.element_type, _block_shape(tuple(t.get_shape()), rank, bq))

    arg_vals = [parts.qk.results[0], *sides]
    block = Block(arg_types=[block_type(v) for v in arg_vals])
    new: dict[SSAValue, SSAValue] = dict(zip(arg_vals, block.args, strict=True))
    for o in chain_ops:
        operands = [new[v] for v in o.operands]
        clone = type(o).create(operands=operands, result_types=[block_type(o.results[0])],
                               properties=dict(o.properties), attributes=dict(o.attributes))
        block.add_op(clone)
        new[o.results[0]] = clone.results[0]
    last = new[chain_ops[-1].results[0]]
    block.add_op(YieldOp([last]))
    outside = Block(arg_types=[a.type for a in block.args])
    op = FusedOp("row_reduction", list(outside.args), [last.type], Region(block))
    try:
        op.verify()
    except Exception as e:   # a body op whose rules refuse the block types
        raise CannotCompile(f"its middle does not verify on blocks ({e})") from None
    return _Middle(op, sides, [math.prod(shape_of(v)) == 1 for v in sides], bq)


@dataclass
class _Worker:
    """One worker's block buffers and the compiled kernel's entry and arrays laid out on them."""

    s: np.ndarray                   # the chain's block: the scores, [bq, Tk]
    sides: list[np.ndarray]         # per side value: its block buffer
    p: np.ndarray                   # the kernel's result, [bq, Tk]
    entry: Any
    arrays: list[np.ndarray]        # the kernel's inputs, then its outputs


def _buffers(mid: _Middle, env: dict[SSAValue, np.ndarray]) -> list[np.ndarray]:
    """A worker's block buffers (the middle's arguments), the fixed side values filled once."""
    args = [np.empty(tensor_info(a.type).shape, dtype=STORAGE[tensor_info(a.type).dtype])
            for a in mid.op.body.block.args]
    for buf, v, fixed in zip(args[1:], mid.sides, mid.fixed, strict=True):
        if fixed:   # filled once: the same in every block
            buf[...] = env[v].reshape(buf.shape)
    return args


def _worker(args: list[np.ndarray], p: np.ndarray, entry: Any, arrays: list[np.ndarray]
            ) -> _Worker:
    rank = len(args[0].shape)
    return _Worker(args[0].reshape(args[0].shape[rank - 2:]), args[1:],
                   p.reshape(p.shape[rank - 2:]), entry, arrays)


def _first_worker(mid: _Middle, env: dict[SSAValue, np.ndarray]
                  ) -> tuple[_Worker, CompiledCall, Replay | None]:
    """A worker planned the full way (`plan_fused`, `prepare`: the middle's kernel compiled or
    found), with its call and the replay that lays out every later worker the same way."""
    args = _buffers(mid, env)
    plan = plan_fused(mid.op, args, min_rows=1)
    call = prepare(plan)
    ins = call.arrays[:len(call.arrays) - 1]
    for a, fixed in zip(args, [False, *mid.fixed], strict=True):
        # the kernel must read the buffers refilled per block themselves, not copies of them
        if not fixed and not any(np.shares_memory(a, x) for x in ins):
            raise CannotCompile("a block input is laid out anew per call")
    (p,) = fused_results(plan)
    replay = build_replay(mid.op, FullRun([], plan, plan, call))
    return _worker(args, p, call.kernel.entry, call.arrays), call, replay


def _replayed_worker(mid: _Middle, replay: Replay, env: dict[SSAValue, np.ndarray]) -> _Worker:
    """A worker laid out as the first one was (the same layouts: the same views and copies),
    on fresh buffers."""
    args = _buffers(mid, env)
    vals, arrays, outs = replay.lay_out(args)
    (p,) = replay.results_of(vals, outs)
    return _worker(args, p, replay.entry, arrays)


@dataclass
class _Kernel:
    """Everything the blocks of one call share."""

    mid: _Middle
    env: dict[SSAValue, np.ndarray]
    shape: tuple[int, ...]
    q: np.ndarray
    kt: np.ndarray
    v: np.ndarray
    qk: TileRun                      # the matmuls' in-place tile forms, on one block's matrices
    pv: TileRun
    out: np.ndarray
    kmax: np.ndarray                 # per (leading index, broadcast; query block): `_kmaxes`
    v_finite: np.ndarray             # lead + (Tk,): v finite at each key


def _tile_form(op: LaminaOp, dtype: np.dtype) -> TileRun:
    """The matmul row's in-place form (its NumPy `tile` form) for one block's matrices: the formula's
    matmul with `out=`, so a block's scores and context are written where they go."""
    t = [x for x in op.operand_infos() if x is not None]
    res = tensor_info(op.results[0].type)
    call = Call(op.attr_values(), [TensorInfo(x.shape[-2:], x.dtype) for x in t],
                TensorInfo(res.shape[-2:], res.dtype))
    factory = forms(op.info).tile
    run = factory(call, dtype, TileScratch()) if factory is not None else None
    if run is None:
        raise CannotCompile(f"{op.name} has no in-place tile form")
    return run


@dataclass(frozen=True)
class _Static:
    """What depends only on one attention op and the program's options: the interpreter's plan
    (parts, side ops), the compiled middle, the matmuls' tile forms and the worker count. It
    holds no array of any call; `bind` binds one."""

    interp: interp.AttentionPlan
    mid: _Middle
    qk: TileRun
    pv: TileRun
    dtype: np.dtype
    threads: int

    def bind(self, args: list[np.ndarray | None]) -> _Kernel:
        """One call's kernel: the side values, the operands' views, a fresh result."""
        ip = self.interp
        parts, shape = ip.parts, ip.shape
        env = ip.env(args)
        lead = shape[:-2]
        q, kt = (_dense(env[v], lead) for v in parts.qk.operands)
        v = _dense(env[parts.pv.operands[1]], lead)
        return _Kernel(self.mid, env, shape, q, kt, v, self.qk, self.pv,
                       np.empty(ip.result.shape, dtype=self.dtype),
                       _kmaxes(parts, env, shape, self.mid.bq),
                       np.asarray(np.isfinite(v).all(axis=-1)))


@dataclass(frozen=True)
class _Plan:
    """An attention op's plan, made at its first call and kept in the program's memo: its
    `_Static` part, the replay laying out each worker's kernel arguments as the first call's
    first worker was (None: every call plans its workers the full way) and the middle's kernel
    (a `CompiledCall` with no arrays, counted as reused by a later counting call)."""

    static: _Static
    replay: Replay | None
    reused: CompiledCall


def _static(op: FusedOp, ctx: RunContext) -> _Static:
    """The plan's parts that need no call (CannotCompile: the op is not compiled)."""
    parts = attention_parts(op.body.block)
    res = tensor_info(parts.pv.results[0].type)
    if res.dtype not in ("f32", "f64") or {t.dtype for t in parts.qk.operand_infos() + parts.pv.
                                           operand_infos() if t is not None} != {res.dtype}:
        raise CannotCompile(f"the compiled form runs f32 and f64 matmuls, not {res.dtype}")
    shape = tuple(parts.scores_shape)
    tq, tk = shape[-2:]
    if tk > MAX_KEYS or tk == 0 or tq == 0:
        raise CannotCompile(f"rows of {tk} keys (the compiled form takes 1 to {MAX_KEYS})")
    bq = max(1, min(tq, BLOCK_ELEMENTS // tk))
    dt = np.dtype(STORAGE[res.dtype])
    tasks = math.prod(shape[:-2]) * -(-tq // bq)
    threads = tile_threads(ctx.options, math.prod(shape), tasks)
    return _Static(interp.plan_of(op, ctx), _middle(parts, bq), _tile_form(parts.qk, dt),
                   _tile_form(parts.pv, dt), dt, threads)


def _workers(mid: _Middle, replay: Replay | None, env: dict[SSAValue, np.ndarray], n: int
             ) -> list[_Worker]:
    return [_first_worker(mid, env)[0] if replay is None else _replayed_worker(mid, replay, env)
            for _ in range(n)]


def _start(op: FusedOp, args: list[np.ndarray | None], ctx: RunContext
           ) -> tuple[_Kernel, list[_Worker]]:
    """This call's kernel and its workers' states: from the op's kept plan, else planned now
    (the first worker the full way, compiling or finding the middle's kernel) and kept, with the
    reason it cannot be compiled when it cannot (raised again at every call)."""
    kept = ctx.memo.get((_MEMO, op))
    if isinstance(kept, str):
        raise CannotCompile(kept)
    if isinstance(kept, _Plan):
        k = kept.static.bind(args)
        if ctx.counting:
            count_kernel(ctx, kept.reused)
        return k, _workers(k.mid, kept.replay, k.env, kept.static.threads)
    try:
        static = _static(op, ctx)
        k = static.bind(args)
        first, call, replay = _first_worker(static.mid, k.env)
    except CannotCompile as e:
        ctx.memo[(_MEMO, op)] = str(e)
        raise
    count_kernel(ctx, call)
    ctx.memo[(_MEMO, op)] = _Plan(static, replay, replace(call, reused=True, arrays=[],
                                                          recipe=None, compactions=[]))
    return k, [first, *_workers(static.mid, replay, k.env, static.threads - 1)]


_MEMO = "compiled.attention"


def _dense(a: np.ndarray, lead: tuple[int, ...]) -> np.ndarray:
    """`a` broadcast over the scores' leading dims, its matrices' rows contiguous: BLAS takes a
    matrix whose rows are strided but not one whose elements are (kt, k transposed by
    (0, 2, 3, 1), is such a view); that one is copied once (B T D elements) rather than taking
    NumPy's slow path in every block."""
    if a.ndim >= 2 and a.strides[-1] != a.itemsize:
        a = np.ascontiguousarray(a)
    return np.broadcast_to(a, lead + a.shape[-2:])


def _kmaxes(parts: AttentionParts, env: dict[SSAValue, np.ndarray], shape: tuple[int, ...],
            bq: int) -> np.ndarray:
    """Per query block, one past the last key any of its rows keeps: every key without a
    masking fill; the mask's leading dims (1 where it broadcasts) + (query blocks,)."""
    tq, tk = shape[-2:]
    nb = -(-tq // bq)
    mf = masked_fill(parts)
    if mf is None:
        return np.full((1,) * (len(shape) - 2) + (nb,), tk, dtype=np.int64)
    m = env[mf.mask]
    m = m.reshape((1,) * (len(shape) - m.ndim) + m.shape)
    keep = (m != 0) if mf.chain_slot == 1 else (m == 0)
    keep = np.broadcast_to(keep, keep.shape[:-2] + (tq, tk))
    per_block = np.logical_or.reduceat(keep, np.arange(0, tq, bq), axis=-2)  # ... nb x tk
    last = tk - np.argmax(per_block[..., ::-1], axis=-1)
    return np.where(per_block.any(axis=-1), last, tk).astype(np.int64)


def _padded(w: np.ndarray, rank: int) -> np.ndarray:
    """`w` with leading 1s up to the scores' rank."""
    return w.reshape((1,) * (rank - w.ndim) + w.shape)


def _block(k: _Kernel, w: _Worker, idx: tuple[int, ...], i0: int, flags: np.ndarray) -> bool:
    """One block of query rows; False when the compiled kernel flagged a row."""
    tq, tk = k.shape[-2:]
    rank = len(k.shape)
    rows = slice(i0, min(tq, i0 + k.mid.bq))
    n = rows.stop - rows.start
    kmax = int(k.kmax[tuple(i if m > 1 else 0 for i, m in zip(idx, k.kmax.shape, strict=False))
                      + (i0 // k.mid.bq,)])
    k.qk([k.q[idx][rows], k.kt[idx][:, :kmax]], w.s[:n, :kmax], 0, n)
    if kmax < tk:
        w.s[:n, kmax:] = 0
    for buf, v, fixed in zip(w.sides, k.mid.sides, k.mid.fixed, strict=True):
        if not fixed:
            blk = interp.side_block(_padded(k.env[v], rank), rank - 2, idx, rows,
                                    slice(None))
            buf[(0,) * (rank - 2) + (slice(0, n if buf.shape[-2] > 1 else 1),)] = \
                blk.reshape(blk.shape[rank - 2:])
    flat = int(np.ravel_multi_index(idx, k.shape[:-2])) if idx else 0
    w.entry(0, n, (flat * tq + i0) * tk, flags, *w.arrays)
    if flags[:n].any():
        return False
    kv = tk
    if kmax < tk and bool(k.v_finite[idx][kmax:].all()) and not w.p[:n, kmax:].any():
        kv = kmax   # every product dropped is exactly 0
    k.pv([w.p[:n, :kv], k.v[idx][:kv]], k.out[idx][rows], 0, n)
    return True


def _run_blocks(k: _Kernel, states: list[_Worker]) -> bool:
    """Every (leading index, query block) on the pool, one worker per state; False when the
    compiled kernel flagged a row."""
    tq = k.shape[-2]
    tasks = [(idx, i0) for idx in np.ndindex(*k.shape[:-2]) for i0 in range(0, tq, k.mid.bq)]
    counter: Iterator[int] = itertools.count()
    free = list(states)
    ok = [True]

    def worker() -> None:
        w = free.pop()
        flags = np.zeros(k.mid.bq, dtype=np.uint8)
        with np.errstate(all="ignore"):
            while ok[0] and (t := next(counter)) < len(tasks):
                if not _block(k, w, *tasks[t], flags):
                    ok[0] = False

    # each block's small matmuls run on the worker's own thread (one worker: BLAS left as it is)
    with one_blas_thread() if len(states) > 1 else nullcontext():
        run_workers(worker, len(states))
    return ok[0]


def run_attention_compiled(op: Operation, args: list[np.ndarray | None], ctx: RunContext
                           ) -> list[np.ndarray]:
    """The compiled backend's runner for `lamina.fused "attention"` (module docstring)."""
    assert isinstance(op, FusedOp)
    try:
        with np.errstate(all="ignore"):
            k, states = _start(op, args, ctx)
        if not _run_blocks(k, states):
            raise CannotCompile("a row the compiled kernel left to the interpreter")
    except CannotCompile as e:
        explain_fallback(ctx, op, str(e), "the NumPy interpreter's attention kernel")
        return interp.run_attention(op, args, ctx)
    outs = [k.out]
    if ctx.counting:
        interp.record_stats(op, args, outs, ctx)
    return outs


OWN_RUNNERS["attention"] = run_attention_compiled
