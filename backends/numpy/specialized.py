"""NumPy specializations of some op-table rows: faster forms of their formula, same bits.

The definition of every op is its array-API formula (`lamina.ir.ops.formulas`). The NumPy interpreter
may run a faster form where one matters. Each form is registered here against its row (`register`,
keyed by the row's formula function, which is the row's own: never by op name), and the
interpreter reads a row's forms with `forms(row)`; `tests/test_formulas.py` checks every
registered form bit for bit against the row's formula.

- `Forms.numpy`: a whole-array kernel (dropout's mask from contiguous index ranges and one key per
  2**32 block, instead of the formula's per-element key; layernorm without its overflow guard's
  extra passes on rows that do not overflow), run by `lamina.backends.numpy.kernels`;
- `Forms.ufunc`: the NumPy ufunc an elementwise row's formula is, so a fused tile can write its
  result in place (`out=`);
- `Forms.tile`: an in-place form for a fused kernel's tiles, built once per kernel for one call
  and float dtype, working in the tile buffers and the worker's scratch (dropout's few-pass mask,
  tanh-GeLU and LayerNorm without temporaries, a block of a matmul's result rows). A factory
  returns None where its form does not apply (GeLU without approximate = "tanh", dropout with a
  seed operand, a matmul by a batched right operand), and the executor then runs the formula on
  the tile. The fused tile loop (`lamina.backends.numpy.fused`), the attention kernel and the
  compiled backend's matmul-rooted and attention kernels use the tile forms.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from lamina.ir.ops import formulas, rng
from lamina.ir.ops import lamina as ops
from lamina.ir.ops.formulas import Block, Call, Formula
from lamina.ir.ops.optable import OPS, OpInfo

Kernel = Callable[[Sequence[np.ndarray | None], Call], np.ndarray]
# fast(operands, out, first_row, rows): write the tile's result into `out`
TileRun = Callable[[list[Any], np.ndarray, int, int], None]


class Scratch(Protocol):
    """A worker's scratch buffers: slot `i` viewed as an array of a shape and dtype."""

    def get(self, slot: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray: ...


TileFactory = Callable[[Call, np.dtype, Scratch], TileRun | None]


@dataclass(frozen=True)
class Forms:
    """A row's NumPy specializations (each None where the row has none)."""

    numpy: Kernel | None = None        # a faster whole-array kernel
    ufunc: np.ufunc | None = None      # the one NumPy ufunc the formula is (in-place tiles)
    tile: TileFactory | None = None    # an in-place form for fused tiles


_NO_FORMS = Forms()
_FORMS: dict[Formula, Forms] = {}


def register(row: OpInfo, *, numpy: Kernel | None = None, ufunc: np.ufunc | None = None,
             tile: TileFactory | None = None) -> None:
    """Attach NumPy forms to op-table row `row` (once per row), keyed by its formula function:
    every row has a formula of its own, so a form can never reach another row."""
    assert OPS.get(row.name) is row, f"{row.name} is not a row of the op table"
    assert sum(1 for r in OPS.values() if r.formula is row.formula) == 1, row.name
    assert row.formula not in _FORMS, f"{row.name} has its forms already"
    _FORMS[row.formula] = Forms(numpy, ufunc, tile)


def forms(row: OpInfo) -> Forms:
    """The NumPy forms registered for op-table row `row` (all None when it has none)."""
    return _FORMS.get(row.formula, _NO_FORMS)


def registered() -> list[tuple[OpInfo, Forms]]:
    """Every row with registered forms, in table order, with its forms."""
    return [(row, f) for row in OPS.values() if (f := _FORMS.get(row.formula)) is not None]


# ---- dropout -------------------------------------------------------------------------------------

def dropout(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
    """The dropout formula on whole NumPy arrays, with the mask from `rng.keep_mask`."""
    x = args[0]
    assert x is not None
    seed_arr = args[1] if len(args) > 1 else None
    seed = int(seed_arr) if seed_arr is not None else int(call.attrs["seed"])
    rate = float(call.attrs["rate"])
    block = call.block or Block(tuple(x.shape), (0,) * x.ndim)
    keep = rng.keep_mask(seed, rate, block.global_shape, tuple(int(o) for o in block.offsets),
                         tuple(x.shape))
    scale = x.dtype.type(1.0 / (1.0 - rate))
    return np.where(keep, x * scale, x.dtype.type(0))


_UINT = {4: np.uint32, 8: np.uint64}
_M1, _M2 = np.uint32(0x7FEB352D), np.uint32(0x846CA68B)
_S15, _S16 = np.uint32(15), np.uint32(16)
_PRE_MAX = 1 << 24    # largest tile (elements) that takes the precomputed-word path


def matmul_tile(call: Call, dtype: np.dtype, scratch: Scratch) -> TileRun | None:
    """A block of result rows of a matmul by a matrix, written straight into the tile: the
    formula's `matmul` with `out=`, the same BLAS call on the same operands (same bits) without
    a fresh result array per tile to allocate, fault in and copy."""
    rhs = call.operands[1] if len(call.operands) > 1 else None
    if rhs is None or len(rhs.shape) != 2:
        return None

    def run(xs: list[Any], out: np.ndarray, r0: int, tr: int) -> None:
        np.matmul(xs[0], xs[1], out=out)

    return run


def dropout_tile(call: Call, dtype: np.dtype, scratch: Scratch) -> TileRun | None:
    """`rng`'s mask for the tile, in a few in-place uint32 passes on shared scratch buffers.

    Tiles hold a power-of-two count of elements n' <= P (P a power of two) and start at a global
    index `start` that is a multiple of P. For 0 <= j < P, with C the tile's word
    `(start ^ key) & ~(P - 1)` and pre[j] = j ^ (key & (P - 1)) < P,
        (start + j) ^ key == C + pre[j] == C ^ pre[j]        (C has no bits below P)
    and since a logical shift distributes over XOR, `rng.mix`'s first step (w ^= w >> 16) is
        w ^ (w >> 16) == (C ^ (C >> 16)) ^ (pre[j] ^ (pre[j] >> 16)) == A ^ Q[j]
    with A one scalar per tile and Q one array per (kernel, key). So the first three passes of
    the mask (add index, shift, xor) are ONE xor of Q with A; the rest of `mix` is 6 in-place
    passes. Tiles that are not aligned take the plain path (index, xor key, full `mix`).
    The select `keep ? x * scale : 0` is an integer product of the bits of x * scale with the
    0 / 1 word (bits >= T): the same +0.0 and the same products as the formula.
    """
    if len(call.operands) > 1 and call.operands[1] is not None or call.attrs.get("seed") is None:
        return None
    seed = int(call.attrs["seed"])
    rate = float(call.attrs["rate"])
    thr = np.uint32(rng.threshold(rate))
    scale = dtype.type(1.0 / (1.0 - rate))
    ut = _UINT[dtype.itemsize]
    keys: dict[int, int] = {}
    tables: dict[tuple[int, int], np.ndarray] = {}

    def key(hi: int) -> int:
        k = keys.get(hi)
        if k is None:
            k = keys[hi] = rng.key(seed, hi)
        return k

    def run(xs: list[Any], out: np.ndarray, r0: int, tr: int) -> None:
        np.multiply(xs[0], scale, out=out)
        if rate <= 0:
            return
        n = out.size
        start = r0 * (n // max(tr, 1))
        hi = start >> 32
        w = scratch.get(0, (n,), np.uint32)
        tmp = scratch.get(1, (n,), np.uint32)
        p2 = 1 << max(n - 1, 0).bit_length()
        if p2 <= _PRE_MAX and start % p2 == 0:
            k = key(hi)
            q = tables.get((p2, k))
            if q is None:
                q = np.arange(p2, dtype=np.uint32)
                q ^= np.uint32(k & (p2 - 1))
                q ^= q >> _S16
                tables[(p2, k)] = q
            c = ((start & 0xFFFFFFFF) ^ k) & ~(p2 - 1) & 0xFFFFFFFF
            np.bitwise_xor(q[:n], np.uint32(c ^ (c >> 16)), out=w)
            first = 1                                   # mix's first xorshift is done
        elif hi == (start + n - 1) >> 32:
            np.add(np.arange(n, dtype=np.uint32), np.uint32(start & 0xFFFFFFFF), out=w)
            np.bitwise_xor(w, np.uint32(key(hi)), out=w)
            first = 0
        else:   # the tile crosses a 2**32 boundary of the global index
            w[...] = rng.bits_for_range(seed, start, n)
            first = 5
        if first == 0:
            np.right_shift(w, _S16, out=tmp)
            np.bitwise_xor(w, tmp, out=w)
        if first < 5:                                   # the rest of rng.mix, in place
            np.multiply(w, _M1, out=w)
            np.right_shift(w, _S15, out=tmp)
            np.bitwise_xor(w, tmp, out=w)
            np.multiply(w, _M2, out=w)
            np.right_shift(w, _S16, out=tmp)
            np.bitwise_xor(w, tmp, out=w)
        mask = tmp if ut is np.uint32 else scratch.get(2, (n,), ut)
        np.greater_equal(w, thr, out=mask, casting="unsafe")      # 1 = keep, 0 = drop
        flat = out.reshape(-1).view(ut)
        np.multiply(flat, mask, out=flat)

    return run


# ---- layernorm (whole arrays) ----------------------------------------------------------------------

def layernorm(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
    """The layernorm formula without its overflow guard's extra passes when no row needs it."""
    x, scale, bias = (list(args) + [None, None])[:3]
    assert x is not None
    axes = tuple(range(call.attrs["axis"] % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(axis=axes, keepdims=True)
    if not np.isfinite(var).all():
        return np.asarray(formulas.layernorm(np, args, call))
    y = centered / np.sqrt(var + x.dtype.type(call.attrs["eps"]))
    if scale is not None:
        y = y * scale
    if bias is not None:
        y = y + bias
    return y


# ---- gelu (tanh form) ----------------------------------------------------------------------------

def gelu_tile(call: Call, dtype: np.dtype, scratch: Scratch) -> TileRun | None:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) left to right, in one scratch buffer."""
    if call.attrs.get("approximate") != formulas.GELU_TANH:
        return None
    c = dtype.type
    k0, k1 = c(math.sqrt(2.0 / math.pi)), c(0.044715)
    half, one = c(0.5), c(1.0)

    def run(xs: list[Any], out: np.ndarray, r0: int, tr: int) -> None:
        x = xs[0] if xs[0].shape == out.shape else np.broadcast_to(xs[0], out.shape)
        t = scratch.get(0, out.shape, dtype)
        np.multiply(k1, x, out=t)
        np.multiply(t, x, out=t)
        np.multiply(t, x, out=t)
        np.add(x, t, out=t)
        np.multiply(k0, t, out=t)
        np.tanh(t, out=t)
        np.add(one, t, out=t)
        np.multiply(half, x, out=out)
        np.multiply(out, t, out=out)

    return run


# ---- layernorm -----------------------------------------------------------------------------------

def layernorm_tile(call: Call, dtype: np.dtype, scratch: Scratch) -> TileRun | None:
    """The layernorm formula on a row tile: row statistics in two small buffers, the centered
    tile in scratch, the result written in place."""
    eps = dtype.type(call.attrs["eps"])
    # per tile shape: reduced axes, element count, and the row statistics' buffers
    plans: dict[tuple[int, ...], tuple[tuple[int, ...], int, np.ndarray, np.ndarray]] = {}

    def run(xs: list[Any], out: np.ndarray, r0: int, tr: int) -> None:
        if out.size == 0:   # rows of no elements: nothing to normalize
            return
        x = xs[0]
        scale = xs[1] if len(xs) > 1 else None
        bias = xs[2] if len(xs) > 2 else None
        plan = plans.get(out.shape)
        if plan is None:
            stat_shape = (out.shape[0],) + (1,) * (out.ndim - 1)
            plan = plans[out.shape] = (tuple(range(1, out.ndim)), math.prod(out.shape[1:]),
                                       np.empty(stat_shape, dtype=dtype),
                                       np.empty(stat_shape, dtype=dtype))
        axes, n, m, v = plan
        c = scratch.get(0, out.shape, dtype)
        # mean = x.mean(axes, keepdims); c = x - mean; var = (c*c).mean; y = c / sqrt(var + eps)
        np.add.reduce(x, axis=axes, keepdims=True, out=m)
        np.true_divide(m, n, out=m)
        np.subtract(x, m, out=c)
        np.multiply(c, c, out=out)
        np.add.reduce(out, axis=axes, keepdims=True, out=v)
        np.true_divide(v, n, out=v)
        if not np.isfinite(v).all():   # a row's squares overflowed: the formula rescales it
            out[...] = formulas.layernorm(np, xs, call)
            return
        np.add(v, eps, out=v)
        np.sqrt(v, out=v)
        np.divide(c, v, out=out)
        if scale is not None:
            np.multiply(out, scale, out=out)
        if bias is not None:
            np.add(out, bias, out=out)

    return run


# ---- the registrations ---------------------------------------------------------------------------

# the elementwise rows whose formula is one NumPy ufunc (the namespace's function of that name)
for _cls, _ufunc in (
        (ops.NegOp, np.negative), (ops.AbsOp, np.absolute), (ops.ExpOp, np.exp),
        (ops.LogOp, np.log), (ops.TanhOp, np.tanh), (ops.SqrtOp, np.sqrt),
        (ops.SinOp, np.sin), (ops.CosOp, np.cos),
        (ops.AddOp, np.add), (ops.SubOp, np.subtract), (ops.MulOp, np.multiply),
        (ops.DivOp, np.divide), (ops.MaxOp, np.maximum), (ops.MinOp, np.minimum),
        (ops.PowOp, np.power),
        (ops.EqOp, np.equal), (ops.NeOp, np.not_equal), (ops.LtOp, np.less),
        (ops.LeOp, np.less_equal), (ops.GtOp, np.greater), (ops.GeOp, np.greater_equal)):
    register(_cls.INFO, ufunc=_ufunc)
register(ops.GeluOp.INFO, tile=gelu_tile)
register(ops.DropoutOp.INFO, numpy=dropout, tile=dropout_tile)
register(ops.LayernormOp.INFO, numpy=layernorm, tile=layernorm_tile)
register(ops.MatmulOp.INFO, tile=matmul_tile)
