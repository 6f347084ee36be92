"""Writing the tools' output files: all of a run's files complete, or none of them.

A tool run may write several files (`lamina-run --outputs`, `--write-inputs`, `--stats-json`,
`--memory-plot`; `lamina-opt -o`). Writing them one after another would leave the earlier ones
behind (and overwrite older ones) when a later one fails, so a run *stages* every file first
(`StagedOutputs`): each is written completely to a temporary file, and only when all of them are
written does `commit` put them in place. A run that fails before the commit leaves every
destination as it was and no temporary file behind.

How each destination is written at commit:
- a regular file, or a name that does not exist yet: its temporary file (`.lamina-*` in the same
  folder) is renamed over it, atomically (a reader sees the old file or the new one, never half);
- `-` and `/dev/stdout`: the data goes to standard output;
- an existing path that is not a regular file (a FIFO, a device such as `/dev/null`, a terminal),
  or a symbolic link: staged in the temporary folder, then copied into the destination in place.
  Renaming over such a path would replace the FIFO, the device node (as root, `-o /dev/null`
  would turn the device into a file) or the link itself; written in place, a link keeps pointing
  where it did and the file it points to gets the new content.

`check_destination` refuses up front what can never be written (a directory, a missing folder, a
name too long, a folder without write permission), so a long run does not fail at its end; the
commit then renames files that are already complete, which leaves little to fail. Every error
names the destination as the user gave it, never a temporary file.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import stat
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import BinaryIO, Literal

import numpy as np
from lamina.ir.core.diagnostics import LaminaError

STDOUT_NAMES = ("-", "/dev/stdout")
# what a process killed by SIGPIPE reports to its shell (128 + 13); see `broken_pipe_exit`
BROKEN_PIPE_EXIT = 141

Mode = Literal["rename", "in-place", "stdout"]


def is_stdout(path: str) -> bool:
    return path in STDOUT_NAMES


def _cannot(path: str, reason: str) -> LaminaError:
    return LaminaError(f"cannot write '{path}': {reason}")


def _strerror(e: OSError) -> str:
    return e.strerror or os.strerror(e.errno or errno.EIO)


def destination_mode(path: str) -> Mode:
    """How `path` is written at commit (see the module docstring); LaminaError when it cannot be
    written at all."""
    if is_stdout(path):
        return "stdout"
    try:
        st = os.stat(path)             # follows links: what a write would reach
    except FileNotFoundError:
        st = None
    except OSError as e:               # a name too long, a file where a folder should be, ...
        raise _cannot(path, _strerror(e)) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise _cannot(path, "Is a directory")
    if os.path.islink(path):
        if st is None and not os.path.isdir(os.path.dirname(os.path.realpath(path))):
            raise _cannot(path, "No such file or directory")
        return "in-place"
    if st is None:
        folder = os.path.dirname(path) or "."
        if not os.path.isdir(folder):
            raise _cannot(path, "No such file or directory")
        if not os.access(folder, os.W_OK):
            raise _cannot(path, "Permission denied")
        return "rename"
    if not stat.S_ISREG(st.st_mode):
        return "in-place"
    if not os.access(os.path.dirname(os.path.abspath(path)), os.W_OK):
        # a writable file in a folder we cannot add a temporary file to: written in place
        if not os.access(path, os.W_OK):
            raise _cannot(path, "Permission denied")
        return "in-place"
    return "rename"


def check_destination(path: str) -> None:
    """Refuse, before any work, a destination that can never be written."""
    destination_mode(path)


def _new_file_mode(path: str) -> int:
    """The permissions a plain open() would give a new file (or the old file's)."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@dataclass
class _Staged:
    path: str
    mode: Mode
    tmp: str | None = None        # the complete content, for "rename" and "in-place"
    data: bytes | None = None     # the complete content, for "stdout"
    text: bool = False            # stdout: written as text (through sys.stdout)


class StagedOutputs:
    """The files of one run, each written completely before any is put in place.

    Use as a context manager: whatever was staged and not committed is removed on exit."""

    def __init__(self) -> None:
        self._staged: list[_Staged] = []

    def __enter__(self) -> StagedOutputs:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.discard()

    def add(self, path: str, write: Callable[[BinaryIO], object], text: bool = False) -> None:
        """Stage `path` with the bytes `write` writes to the file object it is given (`text`:
        UTF-8 text, which goes to stdout through `sys.stdout`)."""
        mode = destination_mode(path)
        if mode == "stdout":
            buf = io.BytesIO()
            write(buf)
            self._staged.append(_Staged(path, mode, data=buf.getvalue(), text=text))
            return
        folder = os.path.dirname(os.path.abspath(path)) if mode == "rename" else None
        try:
            fd, tmp = tempfile.mkstemp(prefix=".lamina-", dir=folder)
        except OSError as e:
            raise _cannot(path, _strerror(e)) from None
        self._staged.append(_Staged(path, mode, tmp=tmp))
        try:
            if mode == "rename":
                os.fchmod(fd, _new_file_mode(path))
            with os.fdopen(fd, "wb") as f:
                write(f)
        except OSError as e:
            raise _cannot(path, _strerror(e)) from None

    def add_text(self, path: str, text: str) -> None:
        self.add(path, lambda f: f.write(text.encode("utf-8")), text=True)

    def add_npz(self, path: str, arrays: dict[str, np.ndarray]) -> None:
        """An `.npz` of `arrays` (never pickled), read back by `np.load` and `--inputs`."""
        self.add(path, lambda f: write_npz(f, arrays))

    def commit(self) -> None:
        """Put every staged file in place: renames first, then in-place copies, then stdout."""
        order = {"rename": 0, "in-place": 1, "stdout": 2}
        for s in sorted(self._staged, key=lambda s: order[s.mode]):
            try:
                _put(s)
            except BrokenPipeError:
                raise       # the reader of stdout went away: the tools exit quietly
            except OSError as e:
                raise _cannot(s.path, _strerror(e)) from None
            s.tmp = None
        self._staged = []

    def discard(self) -> None:
        for s in self._staged:
            if s.tmp is not None and os.path.exists(s.tmp):
                os.unlink(s.tmp)
        self._staged = []


def _put(s: _Staged) -> None:
    if s.mode == "rename":
        assert s.tmp is not None
        os.replace(s.tmp, s.path)
    elif s.mode == "in-place":
        assert s.tmp is not None
        with open(s.tmp, "rb") as src, open(s.path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.unlink(s.tmp)
    else:
        assert s.data is not None
        if s.text:
            sys.stdout.write(s.data.decode("utf-8"))
        else:
            sys.stdout.flush()
            sys.stdout.buffer.write(s.data)
        sys.stdout.flush()


def write_npz(f: BinaryIO, arrays: dict[str, np.ndarray]) -> None:
    """What `np.savez` writes (one `NAME.npy` member per array), without its keyword arguments,
    so an argument named `file` or `allow_pickle` is a key like any other."""
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, a in arrays.items():
            with z.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(a), allow_pickle=False)


def write_text_atomic(path: str, text: str) -> None:
    """Write `text` to `path` (or stdout for '-' and /dev/stdout) only when complete."""
    with StagedOutputs() as out:
        out.add_text(path, text)
        out.commit()


def save_npz_atomic(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Write `arrays` to `path` as an `.npz` only once the whole file is written."""
    with StagedOutputs() as out:
        out.add_npz(path, arrays)
        out.commit()


def broken_pipe_exit() -> int:
    """Exit quietly when the reader of stdout went away (`lamina-run ... | head`), as a Unix tool
    killed by SIGPIPE does: no message, status 141. Whatever Python still holds for stdout goes to
    /dev/null, so the flush at interpreter exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError, AttributeError):  # incl. io.UnsupportedOperation
        pass  # stdout is not a file descriptor (tests capture it): nothing to redirect
    return BROKEN_PIPE_EXIT
