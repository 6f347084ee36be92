"""Where compiled kernels live: in memory for the process, on disk across processes.

A kernel's generated source is written once to `<cache>/kernels-numba<version>/k<sha256>.py`,
named by the hash of its text (which holds the fused body's text, the generator's version and
every decision the generator made), and imported from there; numba's own cache (`cache=True`)
keeps the compiled machine code next to it, in `__pycache__`, keyed by that file. A second
process asking for the same kernel finds the file, and numba loads the machine code instead of
compiling (`Kernel.compiled` says which happened). `<cache>` is `LAMINA_CACHE_DIR`, else
`$XDG_CACHE_HOME/lamina`, else `~/.cache/lamina`; deleting it only costs recompilation.
Files are written to a temporary name and renamed, so processes racing on one kernel each see
a whole file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numba
from lamina.backends.disk_cache import cache_root
from lamina.ir.core.diagnostics import LaminaError


@dataclass
class Kernel:
    """One compiled kernel: its entry point for the argument types it was compiled for."""

    name: str
    entry: Any                      # the compiled function (numba's entry point)
    compiled: bool                  # compiled in this process (False: machine code from disk)
    seconds: float                  # time to compile or to load it
    path: Path


@dataclass
class KernelCache:
    """The kernels of this process, by source hash and argument types."""

    kernels: dict[tuple[str, tuple[Any, ...]], Kernel] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, source: str, arg_types: tuple[Any, ...]) -> tuple[Kernel, bool]:
        """The kernel for `source` and `arg_types`, and whether this process already had it."""
        digest = hashlib.sha256(source.encode()).hexdigest()[:32]
        key = (digest, arg_types)
        with self.lock:
            k = self.kernels.get(key)
            if k is not None:
                return k, True
            k = self.kernels[key] = _build(digest, source, arg_types)
            return k, False


def _kernel_dir() -> Path:
    d = cache_root() / f"kernels-numba{numba.__version__}"
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LaminaError(f"cannot create the kernel cache {d}: {e.strerror} (set "
                          f"LAMINA_CACHE_DIR to a writable directory)") from None
    return d


def _write_once(path: Path, text: str) -> None:
    if path.exists():
        return
    fd, tmp = tempfile.mkstemp(prefix=path.stem, suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _build(digest: str, source: str, arg_types: tuple[Any, ...]) -> Kernel:
    """Write the source (once), import it and compile it for `arg_types`, or load numba's cached
    machine code for it."""
    name = f"k{digest}"
    path = _kernel_dir() / f"{name}.py"
    _write_once(path, source)
    modname = f"lamina_kernel_{digest}"
    module = sys.modules.get(modname)
    if module is None:
        spec = importlib.util.spec_from_file_location(modname, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[modname] = module    # numba finds a cached function's module by name
    dispatcher = module.kernel
    t0 = time.perf_counter()
    entry = dispatcher.compile(arg_types)
    seconds = time.perf_counter() - t0
    hits = sum(dispatcher.stats.cache_hits.values())
    return Kernel(name, entry, hits == 0, seconds, path)


KERNELS = KernelCache()
