"""Running `lamina.fused "attention"` as a flash-style kernel: the scores never exist whole.

The body's parts (`lamina.ir.ops.attention.attention_parts`): q k^T, score ops, softmax over the keys,
prob ops homogeneous-linear in the probabilities, @ v. Per leading (batch, head) index and block
of query rows, the kernel walks the keys in blocks with an online softmax:

    s  = q[rows] @ kt[:, keys]               one block of scores
    x  = score ops on s                      their other operands sliced to the block
    m' = max(m, rowmax(x));  a = exp(m - m');  e = exp(x - m')
    l  = a * l + rowsum(e)
    acc = a * acc + (prob ops on e) @ v[keys]
    out[rows] = acc / l                      after the last key block

This equals softmax-then-matmul because every prob op g satisfies g(c * p) = c * g(p) for the
per-row factors c (a, 1 / l): the rescaling may be applied to the accumulator instead of the
probabilities. In floating point the sums are grouped differently, so results match the unfused
program within float tolerance, not bit for bit.

A row whose every score is -inf (a query that may attend no key) keeps m = -inf, so its e, l and
acc stay 0: acc / l is nan, as the plain softmax's -inf - -inf is, and with a `safe` softmax
(0 on such a row, PyTorch's sdpa) l is taken as 1 there, so the row is 0 as the body's is.

Position-dependent ops (dropout) get the block's place in the global scores (`Call.block`), so
their masks are the global ones bit for bit, whatever the block sizes. Side values (constants, a
causal mask) are computed once per kernel on whole arrays and sliced per block.

Skipping key blocks, exactly. When the last score op masks with a one-element fill F
(`lamina.ir.ops.attention.masked_fill`: `select(mask, scores, F)`, a causal mask writing -1e9 or
-inf), a key block whose mask block selects F everywhere holds only F, and running it changes
nothing when all of these hold, so it is skipped (`_Skip`):
- every row's running max m is finite, so a block has run (m starts at -inf): a leading block
  of all F would start a uniform row whose accumulator must stay finite for a later alpha = 0
  to wipe it, and proving that costs the work skipped, so leading blocks run;
- F - m is below log(smallest subnormal) - 4 in every row, so e = exp(F - m) is exactly 0 in
  the compute type (with room for exp's rounding), m' = m and alpha = 1;
- every prob op maps a zero block to zeros (checked once per kernel on its side values: a
  multiplication by inf or a division by 0 would make the skipped zeros nan), and v is finite
  over the block's keys (0 * inf is nan), so e @ v adds zeros to the accumulator.
Then l and acc are unchanged bit for bit, except that a zero of acc may flip its sign. Any block
failing a condition runs as before (rows masked whole, scores near F, non-finite v all do).
Skipped blocks are counted in `stats.extra["attention_blocks_skipped"]`.

Block sizes: one block of scores holds about `NumpyOptions.tile_bytes` bytes (ATTENTION_TILE_BYTES
without it); tests use tiny tiles to force many blocks. Blocks (leading index, query rows) run on
the fused executor's thread pool, each computed the same way on any thread.

Planned once (`AttentionPlan`): the body's parts, the side ops' and chain ops' calls and the block
sizes depend only on the op and the options, so they are made at the op's first call and kept in
the program's memo; a call computes its side values, binds its arrays and runs the blocks.

Statistics: one kernel; its bytes are its distinct inputs and its result; the working set it
reports is one worker's block buffers plus the side values it computed. Skipping changes none of
these, nor the flops (the body's, every block counted).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
from lamina.backends.numpy.blas import one_blas_thread
from lamina.backends.numpy.fused import KIND_RUNNERS, Once, record_kernel_stats
from lamina.backends.numpy.kernels import kernel
from lamina.backends.numpy.options import NumpyOptions
from lamina.backends.numpy.runner import (
    RunContext,
    make_call,
)
from lamina.backends.numpy.tile_threads import run_workers, tile_threads
from lamina.ir.core.dtypes import STORAGE, to_storage
from lamina.ir.core.shapes import TensorInfo
from lamina.ir.ops.attention import AttentionParts, MaskedFill, attention_parts, masked_fill
from lamina.ir.ops.formulas import Block, Call
from lamina.ir.ops.fused import FusedOp
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from xdsl.ir import Operation, SSAValue

# Bytes of one block of scores: 1 MiB, 512 x 512 in f32. Smaller query blocks skip more of a
# causal mask (at T=1024: 1 of 4 blocks; 2 of 8 at 512 x 256, 6 of 16 at 256 x 256) but pay
# NumPy's per-call cost more often, and with two workers they cost more CPU time too (406 vs 370
# ms at 256 vs 1024 KiB with dropout; why, unmeasured). Measured on the shared 2-core machine (L2
# 2 MiB per core, L3 32 MiB), B=2 H=16 T=1024 Dh=64 f32, fused kernel alone, medians of 9
# interleaved runs at load ~2, 256 / 512 / 1024 KiB: with dropout 263 / 226 / 197 ms, without 121
# / 108 / 100 ms (one thread: 323 / 312 / 317 and 166 / 191 / 170, a tie); the GPT-2 block's
# attention, medians of 5, 133 / 122 / 140 and 143 / 126 / 129 ms in two runs, 103 on a repeat
# (the old 512 KiB default without skipping: 128-177). 2 MiB (1024 x 512, nothing skipped at
# T=1024) was slower, 128 KiB (256 x 128) too. At load 3+ (one core in effect) the three sizes
# were within noise, 256 KiB a little ahead.
ATTENTION_TILE_BYTES = 1024 * 1024


@dataclass
class _Step:
    """A score or prob op, ready to run on blocks: its kernel and call facts, and per operand
    slot the running chain value (None), an absent operand ("none", None) or a side value
    ("side", array) with the scores' rank, sliced per block."""

    fn: Callable[[Sequence[np.ndarray | None], Call], np.ndarray]
    attrs: dict[str, Any]
    operands: list[TensorInfo | None]
    result: TensorInfo
    sources: list[tuple[str, np.ndarray | None]]


@dataclass
class _Skip:
    """What deciding that a key block holds only the fill needs (module docstring)."""

    mask: np.ndarray        # the select's condition, the scores' rank
    fill_when: bool         # the condition's value that selects the fill
    fill: np.ndarray        # 0-d: the fill as the blocks hold it, in the compute type
    limit: np.ndarray       # 0-d: exp of anything below it is 0 in the compute type
    v_finite: np.ndarray    # lead + (key blocks,): v finite over the block's keys


@dataclass
class _Kernel:
    """What every block of one call needs: the plan's facts bound to the call's arrays."""

    parts: AttentionParts
    qk_call: Call
    pv_call: Call
    scores: list[_Step]
    probs: list[_Step]
    env: dict[SSAValue, np.ndarray]      # block arguments and side values, whole
    shape: tuple[int, ...]               # the scores' shape: lead + (Tq, Tk)
    q: np.ndarray                        # lead + (Tq, Dh), broadcast over the lead dims
    kt: np.ndarray                       # lead + (Dh, Tk)
    v: np.ndarray                        # lead + (Tk, Dv)
    cdt: np.dtype                        # the online softmax's compute type
    bq: int
    bk: int
    out: np.ndarray                      # lead + (Tq, Dv), written block by block
    dtype: str                           # its element type
    safe: bool                           # the softmax is safe: a row of only -inf scores gives 0
    skip: _Skip | None = None            # how to skip key blocks of only the fill, if any may be

    @property
    def nl(self) -> int:
        return len(self.shape) - 2


def block_sizes(tq: int, tk: int, itemsize: int, tile_bytes: int | None) -> tuple[int, int]:
    """(query rows, keys) of one block of about `tile_bytes` of scores: keys a power of two
    near the square root of the block, the rows what is left."""
    n = max(1, (tile_bytes if tile_bytes is not None else ATTENTION_TILE_BYTES) // itemsize)
    bk = max(1, min(tk, 1 << (math.isqrt(n).bit_length() - 1)))
    return max(1, min(tq, n // bk)), bk


@dataclass(frozen=True)
class _Chain:
    """A score or prob op as every call runs it: its kernel and call facts, and per operand slot
    ("none", None) an absent operand, ("chain", None) the running value or ("side", v) side
    value v (`_Step.sources` once bound)."""

    fn: Callable[[Sequence[np.ndarray | None], Call], np.ndarray]
    attrs: dict[str, Any]
    operands: list[TensorInfo | None]
    result: TensorInfo
    slots: list[tuple[str, SSAValue | None]]


@dataclass(frozen=True)
class AttentionPlan:
    """What depends only on one attention op and the program's options, made at its first call
    and kept in the program's memo (`RunContext.memo`): the body's parts, the side ops with their
    `Call`s, the chain ops' kernels and call facts, the block sizes. A call binds its arguments
    (`env`, `bind`: the side values, the operands' views, the result) and runs the blocks; the
    plan holds no array of any call."""

    parts: AttentionParts
    values: tuple[SSAValue, ...]        # the block arguments, then the side values
    side: tuple[Once, ...]
    scores: list[_Chain]
    probs: list[_Chain]
    shape: tuple[int, ...]              # the scores' shape: lead + (Tq, Tk)
    result: TensorInfo
    cdt: np.dtype
    bq: int
    bk: int
    qk_call: Call
    pv_call: Call
    fill: MaskedFill | None
    safe: bool                          # the softmax's `safe`: 0 for a row whose every score is -inf

    @staticmethod
    def of(op: FusedOp, options: NumpyOptions) -> AttentionPlan:
        parts = attention_parts(op.body.block)
        values: tuple[SSAValue, ...] = (*op.body.block.args, *(o.results[0] for o in parts.side))
        pos: dict[SSAValue, int] = {v: k for k, v in enumerate(values)}
        shape = tuple(parts.scores_shape)
        res = tensor_info(parts.pv.results[0].type)
        cdt = np.dtype(np.float64 if res.dtype == "f64" else np.float32)
        bq, bk = block_sizes(shape[-2], shape[-1], cdt.itemsize, options.tile_bytes)
        return AttentionPlan(parts, values, tuple(Once.of(o, pos) for o in parts.side),
                             _chain(parts.scores, parts.qk.results[0]),
                             _chain(parts.probs, parts.softmax.results[0]), shape, res, cdt,
                             bq, bk, make_call(parts.qk), make_call(parts.pv),
                             masked_fill(parts), bool(parts.softmax.attr_values()["safe"]))

    def env(self, args: Sequence[np.ndarray | None]) -> dict[SSAValue, np.ndarray]:
        """The kernel's block arguments and its side values (computed now, on whole arrays), by
        value: what every block of scores slices its other operands from."""
        vals: list[Any] = [*args, *(None,) * (len(self.values) - len(args))]
        for o in self.side:
            o.run(vals)
        return dict(zip(self.values, vals, strict=True))

    def bind(self, args: Sequence[np.ndarray | None], skip: bool) -> _Kernel:
        """One call's kernel: the plan on `args`, with a fresh result array."""
        parts = self.parts
        env = self.env(args)
        shape = self.shape
        lead = shape[:-2]
        q, kt = (env[v] for v in parts.qk.operands)
        v = env[parts.pv.operands[1]]
        q = np.broadcast_to(q, lead + q.shape[-2:])
        kt = np.broadcast_to(kt, lead + kt.shape[-2:])
        v = np.broadcast_to(v, lead + v.shape[-2:])
        res = self.result
        out = np.empty(res.shape, dtype=STORAGE[res.dtype])
        rank = len(shape)
        k = _Kernel(parts, self.qk_call, self.pv_call, _steps(self.scores, env, rank),
                    _steps(self.probs, env, rank), env, shape, q, kt, v, self.cdt, self.bq,
                    self.bk, out, res.dtype, self.safe)
        if skip and self.fill is not None:
            k.skip = _skip_plan(k, self.fill, env[parts.pv.operands[1]])
        return k


def plan_of(op: FusedOp, ctx: RunContext) -> AttentionPlan:
    """The op's plan, made at its first call in this program (or run) and kept in its memo."""
    plan = ctx.memo.get((_MEMO, op))
    if plan is None:
        plan = ctx.memo[(_MEMO, op)] = AttentionPlan.of(op, ctx.options)
    return plan


_MEMO = "numpy.attention"


def _skip_plan(k: _Kernel, mf: MaskedFill, v: np.ndarray) -> _Skip | None:
    """How to skip key blocks of only the fill (module docstring); None when no block may be
    skipped: no keys, or a prob op that does not keep zeros zero (the masking select `mf` is the
    last score op)."""
    tk = k.shape[-1]
    if tk == 0 or not all(_keeps_zero(k, st) for st in k.probs):
        return None
    sel = k.scores[-1]
    mask = sel.sources[0][1]
    assert mask is not None
    fill_when = mf.chain_slot == 2
    one = (1,) * len(k.shape)
    chain_t = sel.operands[mf.chain_slot]
    assert chain_t is not None
    xs: list[np.ndarray | None] = [np.full(one, fill_when).astype(mask.dtype),
                                   None, None]
    xs[mf.chain_slot] = np.zeros(one, dtype=STORAGE[chain_t.dtype])
    xs[3 - mf.chain_slot] = sel.sources[3 - mf.chain_slot][1]
    fill = sel.fn(xs, Call(sel.attrs, sel.operands, sel.result)).astype(k.cdt).reshape(())
    limit = np.log(np.finfo(k.cdt).smallest_subnormal) - k.cdt.type(4)
    finite = np.isfinite(v).all(axis=-1)                       # ... x Tk
    per_block = np.logical_and.reduceat(finite, np.arange(0, tk, k.bk), axis=-1)
    v_finite = np.broadcast_to(per_block, k.shape[:-2] + per_block.shape[-1:])
    return _Skip(mask, fill_when, fill, np.asarray(limit, dtype=k.cdt), v_finite)


def _keeps_zero(k: _Kernel, st: _Step) -> bool:
    """Whether prob op `st` maps zeros to zeros, on every combination of its side values' elements
    (a zero block the shape of their broadcast, placed at the scores' origin)."""
    sides = [w.shape for kind, w in st.sources if kind == "side" and w is not None]
    shape = np.broadcast_shapes((1,) * len(k.shape), *sides)
    xs: list[np.ndarray | None] = []
    for (kind, w), t in zip(st.sources, st.operands, strict=True):
        if kind == "chain":
            assert t is not None
            xs.append(np.zeros(shape, dtype=STORAGE[t.dtype]))
        else:
            xs.append(w)
    out = st.fn(xs, Call(st.attrs, st.operands, st.result, Block(k.shape, (0,) * len(shape))))
    return bool(np.all(out == 0))


def _chain(ops: list[LaminaOp], chain: SSAValue) -> list[_Chain]:
    """The chain ops from `chain` on, each with where its operands come from."""
    steps: list[_Chain] = []
    for o in ops:
        slots: list[tuple[str, SSAValue | None]] = []
        for v in o.operand_slots():
            slots.append(("none", None) if v is None else ("chain", None) if v is chain
                         else ("side", v))
        steps.append(_Chain(kernel(o.info), o.attr_values(), o.operand_infos(),
                            tensor_info(o.results[0].type), slots))
        chain = o.results[0]
    return steps


def _steps(chain: list[_Chain], env: dict[SSAValue, np.ndarray], rank: int) -> list[_Step]:
    """The chain ops bound to one call's side values (each with the scores' rank)."""
    steps: list[_Step] = []
    for c in chain:
        sources: list[tuple[str, np.ndarray | None]] = []
        for kind, v in c.slots:
            if v is None:
                sources.append((kind, None))
            else:
                w = env[v]
                sources.append(("side", w.reshape((1,) * (rank - w.ndim) + w.shape)))
        steps.append(_Step(c.fn, c.attrs, c.operands, c.result, sources))
    return steps


def side_block(w: np.ndarray, nl: int, idx: tuple[int, ...], rows: slice, keys: slice
               ) -> np.ndarray:
    """Side value `w` (the scores' rank, broadcastable to them; `nl` leading dims) at this
    block: dims where `w` has extent 1 stay 1, the others are sliced."""
    sel = tuple(slice(i, i + 1) if n > 1 else slice(0, 1)
                for i, n in zip(idx, w.shape[:nl], strict=True))
    return w[(*sel, rows if w.shape[-2] > 1 else slice(None),
              keys if w.shape[-1] > 1 else slice(None))]


def _apply(k: _Kernel, steps: list[_Step], x: np.ndarray, idx: tuple[int, ...], rows: slice,
           keys: slice) -> np.ndarray:
    """Run chain ops on block `x` (the running value), every other operand sliced to the
    block, position-dependent ops told where the block sits in the scores."""
    where = Block(k.shape, (*idx, rows.start, keys.start))
    for st in steps:
        xs = [x if kind == "chain" else None if w is None else side_block(w, k.nl, idx, rows, keys)
              for kind, w in st.sources]
        x = st.fn(xs, Call(st.attrs, st.operands, st.result, where))
    return x


def _skippable(k: _Kernel, sk: _Skip, m: np.ndarray, idx: tuple[int, ...], rows: slice,
               keys: slice) -> bool:
    """Whether running key block `keys` after blocks that left running max `m` would change
    nothing (module docstring): cheapest tests first, the mask block last."""
    if not sk.v_finite[idx][keys.start // k.bk]:
        return False
    if not (np.isfinite(m).all() and (sk.fill - m < sk.limit).all()):
        return False
    blk = side_block(sk.mask, k.nl, idx, rows, keys)
    return bool(blk.all()) if sk.fill_when else not blk.any()


def _query_block(k: _Kernel, idx: tuple[int, ...], i0: int) -> tuple[int, int]:
    """One block of query rows of one leading index, over every key block; the bytes of the
    block buffers it held at most and how many key blocks it skipped."""
    p = k.parts
    tq, tk = k.shape[-2:]
    rows = slice(i0, min(tq, i0 + k.bq))
    bi = rows.stop - rows.start
    q = k.q[idx][rows]
    dv = k.v.shape[-1]
    m = np.full((bi, 1), -np.inf, dtype=k.cdt)
    s_sum = np.zeros((bi, 1), dtype=k.cdt)
    acc = np.zeros((bi, dv), dtype=k.cdt)
    qk_call, pv_call = k.qk_call, k.pv_call
    lead1 = (1,) * k.nl
    held = skipped = 0
    for j0 in range(0, tk, k.bk):
        keys = slice(j0, min(tk, j0 + k.bk))
        if k.skip is not None and _skippable(k, k.skip, m, idx, rows, keys):
            skipped += 1
            continue
        s = kernel(p.qk.info)([q, k.kt[idx][:, keys]], qk_call)
        x = _apply(k, k.scores, s.reshape(lead1 + s.shape), idx, rows, keys)
        xb = x.reshape(s.shape).astype(k.cdt, copy=False)
        m_new = np.maximum(m, xb.max(axis=1, keepdims=True))
        safe = np.where(np.isneginf(m_new), 0.0, m_new).astype(k.cdt)  # rows all -inf so far
        alpha = np.exp(m - safe)
        e = np.exp(xb - safe)
        s_sum = s_sum * alpha + e.sum(axis=1, keepdims=True)
        pe = _apply(k, k.probs, e.reshape(lead1 + e.shape).astype(x.dtype, copy=False), idx,
                    rows, keys)
        ctx_part = kernel(p.pv.info)([pe.reshape(e.shape), k.v[idx][keys]], pv_call)
        acc = acc * alpha + ctx_part
        m = m_new
        held = max(held, s.nbytes + x.nbytes + xb.nbytes + e.nbytes + pe.nbytes
                   + ctx_part.nbytes + 3 * acc.nbytes + 4 * m.nbytes)
    if k.safe:   # a row of only -inf never moved m off -inf: its sum and acc are 0, and so is it
        s_sum = np.where(s_sum == 0, k.cdt.type(1), s_sum)
    # no keys: an empty contraction is 0
    k.out[idx][rows] = to_storage(acc / s_sum, k.dtype) if tk else 0
    return held, skipped


def _run_blocks(k: _Kernel, ctx: RunContext) -> tuple[int, int]:
    """Every (leading index, query block) on the pool; the largest worker's block buffers and
    the key blocks skipped in all."""
    tq = k.shape[-2]
    tasks = [(idx, i0) for idx in np.ndindex(*k.shape[:-2]) for i0 in range(0, tq, k.bq)]
    if not tasks or tq == 0:
        return 0, 0
    counter: Iterator[int] = itertools.count()
    skipped: list[int] = []

    def worker() -> int:
        held = n_skipped = 0
        with np.errstate(all="ignore"):
            while (t := next(counter)) < len(tasks):
                h, s = _query_block(k, *tasks[t])
                held, n_skipped = max(held, h), n_skipped + s
        skipped.append(n_skipped)   # one append per worker (atomic under the GIL)
        return held

    n = tile_threads(ctx.options, math.prod(k.shape), len(tasks))
    # the blocks' small matmuls run on the kernel's own threads; a kernel on one thread leaves
    # BLAS as it is (switching its thread count costs more than a small kernel's whole run)
    with one_blas_thread() if n > 1 else nullcontext():
        held = run_workers(worker, n)
    return held, sum(skipped)


def run_attention(op: Operation, args: list[np.ndarray | None], ctx: RunContext,
                  skip: bool = True) -> list[np.ndarray]:
    """The NumPy interpreter's runner for `lamina.fused "attention"` (module docstring); with
    `skip=False` every key block runs (what the tests compare skipping with)."""
    assert isinstance(op, FusedOp)
    with np.errstate(all="ignore"):
        k = plan_of(op, ctx).bind(args, skip)
    held, skipped = _run_blocks(k, ctx)
    outs = [k.out]
    if ctx.counting:
        record_stats(op, args, outs, ctx)
        if k.skip is not None:
            extra = ctx.stats.extra
            extra["attention_blocks_skipped"] = extra.get("attention_blocks_skipped", 0) + skipped
    if ctx.observer is not None:
        side = sum(int(a.nbytes) for o in k.parts.side if (a := k.env[o.results[0]]).flags.owndata)
        ctx.observer.on_working_set(op, held + side)
    return outs


def record_stats(op: FusedOp, args: list[np.ndarray | None], outs: list[np.ndarray],
                  ctx: RunContext) -> None:
    """One kernel whose traffic is its inputs and its result (the scores stay in the block)."""
    record_kernel_stats(ctx.stats, op, args, outs,
                        [o for o in op.body.block.ops if isinstance(o, LaminaOp)])

KIND_RUNNERS["attention"] = run_attention
