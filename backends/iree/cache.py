"""Where compiled IREE modules live: on disk, shared by every process, named by what made them.

A module is written once to `<cache>/iree<version>/m<sha256>.vmfb`, named by the hash of the
exported text, IREE's compiler and runtime versions, the target, the compiler flags and, for
llvm-cpu, the CPU it was compiled for: `--iree-llvmcpu-target-cpu=host` builds for this CPU's own
features, so a cache shared between machines (a home directory on NFS) must never hand one of
them another's code. A second process asking for the same module finds the file and maps it
instead of compiling (`CachedModule.compiled` says which happened).

`<cache>` is every backend's (`lamina.backends.disk_cache`): `LAMINA_CACHE_DIR`, else
`$XDG_CACHE_HOME/lamina`, else `~/.cache/lamina`; deleting it only costs recompilation. Files are
written to a temporary name and renamed, so processes racing on one module each see a whole
file.
"""

from __future__ import annotations

import hashlib
import os
import platform
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import iree.compiler as ic
import iree.compiler.version as compiler_version
import iree.runtime.version as runtime_version
from lamina.backends.disk_cache import cache_root
from lamina.ir.core.diagnostics import LaminaError

VERSION = compiler_version.VERSION


@cache
def host_cpu() -> str:
    """What names this machine's CPU for code compiled for its own features: the architecture,
    and on Linux the model and feature flags of the first processor in /proc/cpuinfo."""
    lines: list[str] = []
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break   # the first processor's block is enough
                if line.startswith(("vendor_id", "model name", "flags", "Features", "CPU part")):
                    lines.append(" ".join(line.split()))
    except OSError:
        pass
    return "\n".join([platform.machine(), platform.processor(), *lines])


@dataclass(frozen=True)
class CachedModule:
    """A compiled module on disk: where, whether this process compiled it (False: it was found
    in the cache), and the seconds that took."""

    path: Path
    compiled: bool
    seconds: float


def module_path(text: str, target: str, flags: tuple[str, ...]) -> Path:
    """The cache file of `text` compiled for `target` with `flags` (see the module docstring)."""
    key = "\n".join([VERSION, runtime_version.VERSION, target, *flags,
                     host_cpu() if target == "llvm-cpu" else "", text])
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    return cache_root() / f"iree{VERSION}" / f"m{digest}.vmfb"


def compiled_module(text: str, target: str, flags: tuple[str, ...]) -> CachedModule:
    """`text` compiled by IREE for `target` with `flags`, from the cache when it is there;
    LaminaError when IREE refuses the text (its first lines of errors) or the cache cannot be
    written."""
    start = time.perf_counter()
    path = module_path(text, target, flags)
    if path.exists():
        return CachedModule(path, False, time.perf_counter() - start)
    try:
        vmfb = ic.compile_str(text, target_backends=[target], extra_args=list(flags))
    except ic.CompilerToolError as e:
        errors = [ln for ln in str(e).splitlines() if "error" in ln][:3]
        raise LaminaError(f"backend 'iree': iree-compile refused the exported module: "
                          f"{' | '.join(errors) or str(e)[:500]}") from None
    assert isinstance(vmfb, bytes)
    _write_once(path, vmfb)
    return CachedModule(path, True, time.perf_counter() - start)


def _write_once(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.stem, suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        raise LaminaError(f"cannot write the IREE module cache {path.parent}: {e.strerror} (set "
                          "LAMINA_CACHE_DIR to a writable directory)") from None
