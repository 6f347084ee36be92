"""Fused kernels' large result arrays, reused once nothing refers to them any more.

A fresh large array comes from `mmap`, and its first write faults every page in and has the kernel
zero it: on this project's 2-core machine, writing a fresh f32[8192, 4096] result (128 MiB) cost
23-29 ms more than writing one already touched, about three times the whole LN + GeLU + Dropout
kernel's memory floor. Every runtime that streams large results keeps a caching allocator for that
reason (PyTorch's, XLA's BFC); this is the interpreter's.

An array handed out here stays referenced by the pool. It is reusable exactly when the pool holds
the only reference: NumPy views, reshapes and buffer exports (memoryview, `np.frombuffer`) all keep
a reference to the array that owns the memory, so while a caller holds any of them the array is
not handed out again. Whoever keeps a result keeps its memory; whoever drops it lends it to the
next kernel of the same shape and dtype. A reused array's contents are whatever its last user left,
exactly like `np.empty`'s: the kernels write every element of their results.

Only arrays of at least MIN_BYTES are pooled (smaller ones come from malloc's own free lists), and
the pool holds at most MAX_BYTES of arrays, dropping the least recently handed out unused one first;
`release()` empties it.
"""

from __future__ import annotations

import math
import sys
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

MIN_BYTES = 4 * 1024 * 1024
MAX_BYTES = 1024 * 1024 * 1024

_LOCK = threading.Lock()
# (shape, dtype) -> arrays of that kind, least recently handed out first
_POOL: OrderedDict[tuple[tuple[int, ...], str], list[np.ndarray]] = OrderedDict()
_held = 0
# references to a pooled array nobody else holds, as sys.getrefcount(arrays[i]) sees it: the
# pool's list and getrefcount's own argument (no loop variable may hold it while counting)
_UNUSED_REFS = 2


def _free(arrays: list[np.ndarray]) -> int | None:
    """The index of an array of `arrays` that only the pool refers to, if any."""
    for i in range(len(arrays)):
        if sys.getrefcount(arrays[i]) == _UNUSED_REFS:
            return i
    return None


def _evict(need: int) -> bool:
    """Drop unused arrays, least recently handed out first, until `need` more bytes fit under
    MAX_BYTES; whether they do."""
    global _held
    for key in list(_POOL):
        if _held + need <= MAX_BYTES:
            break
        arrays = _POOL[key]
        while (i := _free(arrays)) is not None and _held + need > MAX_BYTES:
            _held -= arrays.pop(i).nbytes
        if not arrays:
            del _POOL[key]
    return _held + need <= MAX_BYTES


def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised array of `shape` and `dtype`, like `np.empty`, reusing a pooled one that
    nobody refers to any more (module docstring)."""
    global _held
    dt = np.dtype(dtype)
    nbytes = math.prod(shape) * dt.itemsize   # not np.prod: ~3 us, per kernel call
    if nbytes < MIN_BYTES:
        return np.empty(shape, dtype=dt)
    key = (tuple(shape), dt.str)
    with _LOCK:
        arrays = _POOL.get(key)
        if arrays is not None:
            _POOL.move_to_end(key)
            i = _free(arrays)
            if i is not None:
                a = arrays.pop(i)
                arrays.append(a)
                return a
        a = np.empty(shape, dtype=dt)
        if _evict(nbytes):
            _POOL.setdefault(key, []).append(a)
            _held += nbytes
        return a


def release() -> None:
    """Forget every pooled array (arrays still in use stay valid; their memory goes back to the
    system when their last user drops them)."""
    global _held
    with _LOCK:
        _POOL.clear()
        _held = 0


def held_bytes() -> int:
    """Bytes of arrays the pool refers to (in use or not)."""
    return _held
