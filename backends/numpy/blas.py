"""Holding NumPy's BLAS to one thread while a kernel runs many small matmuls on its own threads.

The attention kernel multiplies blocks of a few hundred rows ([512, 64] x [64, 256]) from the
interpreter's own worker threads. OpenBLAS parallelizes calls of that size too, and its threads
then fight the workers for the cores: measured on the 2-core development machine, such a matmul
took 0.2 ms on one BLAS thread and 4-17 ms with BLAS threads on, which made the fused attention
4x slower than the unfused program (`benchmarks/bench_attention.py`). So the kernel asks BLAS
for one thread while it runs and restores the count after, as threadpoolctl does: the OpenBLAS
that NumPy loaded is found among the process's mapped libraries and its
`openblas_set_num_threads` called through ctypes. Where no OpenBLAS is found (another BLAS, or
not Linux) nothing changes: results never depend on this, only the time does.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_SETTERS = ("openblas_set_num_threads", "scipy_openblas_set_num_threads64_",
            "openblas_set_num_threads64_", "scipy_openblas_set_num_threads")
_GETTERS = ("openblas_get_num_threads", "scipy_openblas_get_num_threads64_",
            "openblas_get_num_threads64_", "scipy_openblas_get_num_threads")

_LOCK = threading.Lock()
_DEPTH = 0
_SAVED = 0
_API: tuple[Any, Any] | None | bool = False   # (set, get) ctypes functions; False: not looked up


def _find() -> tuple[Any, Any] | None:
    """(set, get) of the OpenBLAS mapped into this process, or None."""
    import numpy  # noqa: F401  (loads NumPy's BLAS if it is not loaded yet)
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            paths = {p[-1] for p in (line.split() for line in f)
                     if len(p) >= 6 and "openblas" in p[-1].lower() and ".so" in p[-1]}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        setter = next((getattr(lib, n) for n in _SETTERS if hasattr(lib, n)), None)
        getter = next((getattr(lib, n) for n in _GETTERS if hasattr(lib, n)), None)
        if setter is not None and getter is not None:
            setter.argtypes, setter.restype = [ctypes.c_int], None
            getter.argtypes, getter.restype = [], ctypes.c_int
            return setter, getter
    return None


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS on one thread inside the block (nested and concurrent uses share one setting; the
    outermost restores the count found on entry)."""
    global _API, _DEPTH, _SAVED
    with _LOCK:
        if _API is False:
            _API = _find()
        api = _API if isinstance(_API, tuple) else None
        if api is not None:
            if _DEPTH == 0:
                _SAVED = int(api[1]())
                api[0](1)
            _DEPTH += 1
    try:
        yield
    finally:
        if api is not None:
            with _LOCK:
                _DEPTH -= 1
                if _DEPTH == 0:
                    api[0](_SAVED)
