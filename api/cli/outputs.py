"""Writing the tools' output files: each one complete or not at all.

Every file a tool writes (`-o`, `--outputs`, `--stats-json`, `--memory-plot`) goes through a
temporary file beside its destination that is renamed into place only when it is complete, so a
failing run never leaves a partial file.
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np
from lamina.ir.diagnostics import LaminaError


def _temp_beside(path: str, suffix: str) -> tuple[int, str]:
    """A temporary file in `path`'s directory (so the final rename is atomic)."""
    if os.path.isdir(path):
        raise LaminaError(f"cannot write '{path}': Is a directory")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".lamina-", suffix=suffix,
                                   dir=os.path.dirname(os.path.abspath(path)))
    except OSError as e:
        raise LaminaError(f"cannot write '{path}': {e.strerror}") from None
    # mkstemp makes the file 0600; give it the mode a plain open() would (or the old file's).
    try:
        mode = os.stat(path).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    os.fchmod(fd, mode)
    return fd, tmp


def save_npz_atomic(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Write `arrays` to `path` only once the whole file is written (temp file + rename)."""
    fd, tmp = _temp_beside(path, ".npz")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, allow_pickle=False, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str, text: str) -> None:
    """Write `text` to `path` (or stdout for '-' and /dev/stdout) only when complete."""
    if path in ("-", "/dev/stdout"):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    fd, tmp = _temp_beside(path, "")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
