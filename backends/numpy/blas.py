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

A compiled program whose matmuls are all small (`small_matmuls`) runs its whole call on one
BLAS thread for the same reason: at a GPT-2 block of D=64 (a [32, 64] x [64, 256] product) a
2-thread OpenBLAS call had a median of 22 us either way on the loaded 2-core machine, but a mean
of 1.7-11 ms against 0.06-0.12 ms on one thread, since a call waits for a partner thread that
the scheduler has put aside; a training step makes dozens of them per call. OpenBLAS splits a
product's rows and columns among its threads, never the sum over k, so every element is the
same sum on any thread count (the property tests compare the programs bit for bit).
"""

from __future__ import annotations

import ctypes
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lamina.ir.opbase import tensor_info
from xdsl.ir import Operation

_SETTERS = ("openblas_set_num_threads", "scipy_openblas_set_num_threads64_",
            "openblas_set_num_threads64_", "scipy_openblas_set_num_threads")
_GETTERS = ("openblas_get_num_threads", "scipy_openblas_get_num_threads64_",
            "openblas_get_num_threads64_", "scipy_openblas_get_num_threads")

# the largest matmul (multiply-adds, M * N * K) that `small_matmuls` calls small: ~0.2 ms on one
# core, where a second BLAS thread could save at most half of that and a stalled one costs ms
SMALL_MATMUL_MACS = 1 << 22
# OpenBLAS runs a product under 65536 * 4 multiply-adds on one thread itself (its
# GEMM_MULTITHREAD_THRESHOLD): a program with only those (the 7-op MLP's [16, 64] x [64, 64])
# has nothing to gain from setting the count, which costs two calls into the library
OPENBLAS_ONE_THREAD_MACS = 1 << 18

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


def small_matmuls(func: Operation) -> bool:
    """Whether every matmul of `func` (at any depth, fused bodies included) makes at most
    SMALL_MATMUL_MACS multiply-adds and one makes more than OpenBLAS runs on one thread by
    itself, so its calls are best run on one BLAS thread."""
    found = False
    for op in func.walk():
        if op.name != "lamina.matmul" or not op.operands or not op.results:
            continue
        out, lhs = tensor_info(op.results[0].type), tensor_info(op.operands[0].type)
        k = lhs.shape[-1] if lhs.shape else 1
        macs = math.prod(out.shape) * k
        if macs > SMALL_MATMUL_MACS:
            return False
        found = found or macs >= OPENBLAS_ONE_THREAD_MACS
    return found


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
