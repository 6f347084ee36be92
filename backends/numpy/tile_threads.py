"""What every fused kernel's tile loop shares: its threads, their pool and a worker's scratch.

The NumPy interpreter's tile loop (`lamina.backends.numpy.fused`), its attention kernel and the
compiled backend's kernels all hand their tiles or blocks to the same long-lived pool, sized by the
same rule (`thread_count`, `tile_threads`), so a program never runs more threads than one kernel's.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from lamina.backends.numpy.options import NumpyOptions
from lamina.ir.core.diagnostics import LaminaError

# Tiles are independent and NumPy drops the GIL inside its loops, so a fused kernel runs its tiles
# on every core, as XLA:CPU's thread pool does (`thread_count`). Which thread runs a tile never
# changes a result bit: each tile is computed the same way wherever it runs. Only kernels of at
# least PARALLEL_MIN_ELEMENTS elements with 4 tiles per thread use more than one (below that,
# handing tiles out costs more than it saves).
PARALLEL_MIN_ELEMENTS = 1 << 20


def thread_count(options: NumpyOptions) -> int:
    """Tile-loop threads: `options.threads`, else LAMINA_FUSED_THREADS, else the core count."""
    if options.threads is not None:
        return max(1, options.threads)
    env = os.environ.get("LAMINA_FUSED_THREADS", "").strip()
    if env:
        # isdigit() alone accepts '²' and other digits int() refuses; past 18 digits the count is
        # more than any tile loop uses (and int() would refuse 4,300 digits)
        if not (env.isascii() and env.isdigit()) or int(env[:19]) < 1:
            raise LaminaError(f"LAMINA_FUSED_THREADS must be a positive integer, got '{env}'")
        return int(env) if len(env) <= 18 else 10**18
    return os.cpu_count() or 1


class TileScratch:
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

    def nbytes(self) -> int:
        """Bytes of scratch allocated so far (part of the tile working set)."""
        return sum(int(r.nbytes) for r in self._raw.values())


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


def tile_threads(options: NumpyOptions, elements: int, n_tiles: int) -> int:
    """Threads for a kernel of `elements` elements in `n_tiles` tiles: 1 below
    PARALLEL_MIN_ELEMENTS or under 4 tiles per thread (handing tiles out would cost more than it
    saves), else `thread_count`."""
    if elements < PARALLEL_MIN_ELEMENTS:
        return 1
    return max(1, min(thread_count(options), n_tiles // 4))


def run_workers(worker: Callable[[], int | None], nthreads: int) -> int:
    """Run `worker` on `nthreads` threads of the shared pool (on this thread for 1) and wait;
    the workers share their work through a counter, as the tile loop's do. The largest value a
    worker returned (its tile working set; 0 for workers that report none)."""
    if nthreads <= 1:
        return worker() or 0
    ex = _pool(nthreads)
    return max((f.result() or 0) for f in [ex.submit(worker) for _ in range(nthreads)])
