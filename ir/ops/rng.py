"""The counter-based random function behind `lamina.dropout`.

A dropout keep-mask in Lamina is a pure function of (seed, global flat element index): no state is
carried between ops, tiles or devices, so fusing, tiling or sharding a computation can never change
which elements are dropped. The exact definition, so anyone can reproduce a mask:

    All arithmetic is on unsigned 32-bit integers, wrapping modulo 2**32.

    mix(x)   = x ^= x >> 16;  x *= 0x7FEB352D;  x ^= x >> 15;  x *= 0x846CA68B;  x ^= x >> 16
               (Chris Wellons' "lowbias32" integer hash, a bijection on 32-bit words)
    seed     : a 64-bit unsigned integer; seed_lo / seed_hi are its low / high 32 bits
    i        : the element's flat row-major index in the *global* (unsharded, untiled) tensor,
               a 64-bit unsigned integer; i_lo / i_hi its low / high 32 bits
    key(h)   = mix(mix(seed_lo ^ 0x9E3779B9) ^ seed_hi ^ mix(h ^ 0x85EBCA6B))
    bits(i)  = mix(i_lo ^ key(i_hi))
    keep(i)  = bits(i) >= T,  where T = min(floor(rate * 2**32), 2**32 - 1) for rate in [0, 1)

    dropout(x)[i] = x[i] * (1 / (1 - rate))  if keep(i)  else 0

The scale 1/(1 - rate) is computed in float64 and rounded to the computation's float type; the
product is then rounded to the result's element type like any other Lamina elementwise op (PyTorch's
convention: kept elements are scaled up at training time).
"""

from __future__ import annotations

from typing import Any

import numpy as np

_M1 = np.uint32(0x7FEB352D)
_M2 = np.uint32(0x846CA68B)
_S16 = np.uint32(16)
_S15 = np.uint32(15)
_GOLDEN = 0x9E3779B9
_HI_SALT = 0x85EBCA6B
_MASK32 = 0xFFFFFFFF


def mix_scalar(x: int) -> int:
    """`mix` on one Python integer (used for keys, and as the reference in tests)."""
    x &= _MASK32
    x ^= x >> 16
    x = (x * 0x7FEB352D) & _MASK32
    x ^= x >> 15
    x = (x * 0x846CA68B) & _MASK32
    x ^= x >> 16
    return x


def mix_inplace(x: np.ndarray) -> np.ndarray:
    """`mix` applied elementwise to a uint32 array, in place (returns `x`)."""
    assert x.dtype == np.uint32
    x ^= x >> _S16
    x *= _M1
    x ^= x >> _S15
    x *= _M2
    x ^= x >> _S16
    return x


def key(seed: int, hi: int) -> int:
    seed &= (1 << 64) - 1
    seed_lo, seed_hi = seed & _MASK32, seed >> 32
    return mix_scalar(mix_scalar(seed_lo ^ _GOLDEN) ^ seed_hi ^ mix_scalar(hi ^ _HI_SALT))


def threshold(rate: float) -> int:
    return min(int(rate * 2.0**32), _MASK32)


def bits_for_indices(seed: int, index: np.ndarray) -> np.ndarray:
    """`bits(i)` for an array of global flat indices (any integer dtype, any shape)."""
    idx = np.asarray(index, dtype=np.uint64)
    lo = (idx & np.uint64(_MASK32)).astype(np.uint32)
    hi = idx >> np.uint64(32)
    if idx.size == 0 or int(hi.max()) == 0:
        lo ^= np.uint32(key(seed, 0))
        return mix_inplace(lo)
    # one key per distinct high word (a table indexed by hi would need up to 2**32 entries)
    his, inverse = np.unique(hi, return_inverse=True)
    keys = np.array([key(seed, int(h)) for h in his], dtype=np.uint32)
    lo ^= keys[inverse.reshape(lo.shape)]
    return mix_inplace(lo)


def bits_for_range(seed: int, start: int, count: int) -> np.ndarray:
    """`bits(i)` for the contiguous indices start .. start+count-1 (the common, fast case)."""
    if (start >> 32) == ((start + max(count, 1) - 1) >> 32):
        lo = np.arange(start & _MASK32, (start & _MASK32) + count, dtype=np.uint32)
        lo ^= np.uint32(key(seed, start >> 32))
        return mix_inplace(lo)
    return bits_for_indices(seed, np.arange(start, start + count, dtype=np.uint64))


def global_indices(global_shape: tuple[int, ...], offsets: tuple[int, ...],
                   shape: tuple[int, ...]) -> np.ndarray:
    """Global flat indices (uint64) of the block at `offsets` with `shape` inside `global_shape`."""
    idx = np.zeros((), dtype=np.uint64)
    stride = 1
    for d in range(len(global_shape) - 1, -1, -1):
        ax = np.arange(offsets[d], offsets[d] + shape[d], dtype=np.uint64) * np.uint64(stride)
        idx = idx + ax.reshape((-1,) + (1,) * (len(global_shape) - 1 - d))
        stride *= global_shape[d]
    return np.broadcast_to(idx, shape)


def keep_mask(seed: int, rate: float, global_shape: tuple[int, ...],
              offsets: tuple[int, ...] | None = None,
              shape: tuple[int, ...] | None = None) -> np.ndarray:
    """Boolean keep-mask of the block (`offsets`, `shape`) of a tensor of `global_shape`.

    With no block given, the whole tensor's mask.
    """
    if offsets is None or shape is None or tuple(shape) == tuple(global_shape):
        n = int(np.prod(global_shape, dtype=np.int64))
        return (bits_for_range(seed, 0, n) >= np.uint32(threshold(rate))).reshape(global_shape) \
            if rate > 0 else np.ones(global_shape, dtype=bool)
    if rate <= 0:
        return np.ones(shape, dtype=bool)
    bits = bits_for_indices(seed, global_indices(tuple(global_shape), tuple(offsets), tuple(shape)))
    return bits >= np.uint32(threshold(rate))


# ---- the same definition on any array-API namespace (NumPy, jax.numpy) ---------------------------
#
# Everything below is uint32 arithmetic that wraps modulo 2**32 (as both NumPy and XLA do), plus
# uint64 for the global index; the seed may be a Python int or a rank-0 integer array (a seed
# operand), and offsets may be traced scalars (a device's block under JAX's shard_map).

def mix_xp(xp: Any, x: Any) -> Any:
    """`mix` elementwise on a uint32 array of namespace `xp`."""
    u = xp.uint32
    x = xp.bitwise_xor(x, xp.bitwise_right_shift(x, xp.asarray(16, dtype=u)))
    x = x * xp.asarray(0x7FEB352D, dtype=u)
    x = xp.bitwise_xor(x, xp.bitwise_right_shift(x, xp.asarray(15, dtype=u)))
    x = x * xp.asarray(0x846CA68B, dtype=u)
    return xp.bitwise_xor(x, xp.bitwise_right_shift(x, xp.asarray(16, dtype=u)))


def _split64(xp: Any, v: Any) -> tuple[Any, Any]:
    """(low, high) uint32 words of a uint64 array."""
    mask = xp.asarray(_MASK32, dtype=xp.uint64)
    lo = xp.astype(xp.bitwise_and(v, mask), xp.uint32)
    hi = xp.astype(xp.bitwise_right_shift(v, xp.asarray(32, dtype=xp.uint64)), xp.uint32)
    return lo, hi


def key_xp(xp: Any, seed: Any, hi: Any) -> Any:
    """`key(h)` for a uint32 array of high index words and a seed (int or integer array)."""
    u = xp.uint32
    if isinstance(seed, int):
        seed &= (1 << 64) - 1
        s_lo, s_hi = xp.asarray(seed & _MASK32, dtype=u), xp.asarray(seed >> 32, dtype=u)
    else:  # a two's-complement int32/int64 seed read as the unsigned 64-bit word
        s_lo, s_hi = _split64(xp, xp.astype(xp.astype(seed, xp.int64), xp.uint64))
    a = mix_xp(xp, xp.bitwise_xor(s_lo, xp.asarray(_GOLDEN, dtype=u)))
    b = mix_xp(xp, xp.bitwise_xor(hi, xp.asarray(_HI_SALT, dtype=u)))
    return mix_xp(xp, xp.bitwise_xor(xp.bitwise_xor(a, s_hi), b))


def bits(xp: Any, seed: Any, index: Any) -> Any:
    """`bits(i)` for a uint64 array of global flat indices."""
    lo, hi = _split64(xp, index)
    return mix_xp(xp, xp.bitwise_xor(lo, key_xp(xp, seed, hi)))


def global_index(xp: Any, global_shape: tuple[int, ...], offsets: tuple[Any, ...],
                 shape: tuple[int, ...]) -> Any:
    """uint64 global flat indices of the block at `offsets` with `shape` in `global_shape`."""
    u = xp.uint64
    rank = len(global_shape)
    idx = xp.zeros((1,) * rank, dtype=u)
    stride = 1
    for d in range(rank - 1, -1, -1):
        ax = xp.astype(xp.arange(shape[d]), u) + xp.astype(xp.asarray(offsets[d]), u)
        idx = idx + xp.reshape(ax * xp.asarray(stride, dtype=u),
                               (1,) * d + (shape[d],) + (1,) * (rank - 1 - d))
        stride *= global_shape[d]
    return xp.broadcast_to(idx, shape)
