"""A run's inputs: random arrays drawn from the argument types, or arrays read from an `.npz`.

Random inputs are drawn for what each argument holds, as the IR says, never from its name: an
argument with a role (`lamina.role`, the table `lamina.ir.buffers.updates.ROLES`) is drawn from its role's
domain (a second moment >= 0, since the step takes its square root; a step count a small whole
number), and an integer argument that a `lamina.gather` reads as indices (directly, or through a
`lamina.move` or layout ops; a gather never runs inside a fused kernel) is drawn within the rows
of the table it indexes, so every index picks a row rather than the zeros of an index out of range.

`.npz` files are read with `allow_pickle=False`: an input file can never execute code. Nothing is
allocated before it is known to fit: every array's header (shape, dtype) is read and checked
against its argument before its data is, so a header declaring a huge shape is one diagnostic,
not a MemoryError; and a program whose inputs alone exceed the machine's physical memory is
refused before any input is drawn or read (`check_input_memory`). Several files are merged by
key (a model's inputs and its weights), a key in two of them refused; an array whose dtype the
argument cannot hold exactly (float64 for an f32) is converted with a note (`LoadedInputs.casts`).
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

import numpy as np
from lamina.analysis.sizes import fmt_bytes
from lamina.backends.interface import arg_names
from lamina.ir.buffers.memory import MoveOp
from lamina.ir.buffers.updates import Domain, roles_of
from lamina.ir.core.diagnostics import LaminaError, error_at
from lamina.ir.core.dtypes import STORAGE, to_storage
from lamina.ir.core.shapes import TensorInfo
from lamina.ir.ops.lamina import GatherOp
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from lamina.ir.ops.optable import Fusion
from xdsl.dialects.func import FuncOp
from xdsl.ir import SSAValue


def physical_memory() -> int | None:
    """Bytes of physical memory of this machine (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_input_memory(func: FuncOp, limit: int | None = None) -> None:
    """Refuse `func` when its inputs, as the interpreter stores them, need more than `limit`
    bytes (default: the machine's physical memory): such a run could never hold its inputs."""
    limit = physical_memory() if limit is None else limit
    if limit is None:
        return
    sizes = []
    for name, t in zip(arg_names(func), func.function_type.inputs.data, strict=True):
        info = tensor_info(t)
        sizes.append((int(np.prod(info.shape, dtype=object)) * STORAGE[info.dtype].itemsize,
                      name))
    total = sum(n for n, _ in sizes)
    if total > limit:
        largest = ", ".join(f"{name} {fmt_bytes(n)}" for n, name in sorted(sizes, reverse=True)[:3])
        which = f"; largest: {largest}" if len(sizes) > 1 else ""
        raise error_at(func, f"the inputs of @{func.sym_name.data} need {fmt_bytes(total)} "
                       f"({total} bytes{which}), more than this machine's {fmt_bytes(limit)} of "
                       "memory")


INT_HIGH = 1000    # integers without a bound are drawn in [0, INT_HIGH)
COUNT_HIGH = 100   # a count (`Domain.COUNT`, a training step's step count) in [0, COUNT_HIGH)
# a rate (`Domain.RATE`, a learning rate fed as an input) is RATE_SCALE * exp(z), z a standard
# normal clipped to +-RATE_SPREAD: in [1.4e-4, 7.4e-3], positive and small enough for a stable step
RATE_SCALE, RATE_SPREAD = 1e-3, 2.0


def index_rows(func: FuncOp) -> dict[int, int]:
    """Argument index -> the fewest rows of a table it indexes, for every argument some
    `lamina.gather` reads as its indices: directly, or through a `lamina.move` or ops that only
    move elements (`Fusion.LAYOUT`), which keep the values."""
    out: dict[int, int] = {}
    for i, arg in enumerate(func.body.block.args if func.body.blocks else ()):
        work: list[SSAValue] = [arg]
        seen: set[SSAValue] = set()
        while work:
            v = work.pop()
            if v in seen:
                continue
            seen.add(v)
            for use in v.uses:
                op = use.operation
                if isinstance(op, GatherOp) and op.indices is v:
                    shape = tensor_info(op.input.type).shape
                    rows = int(shape[int(op.attr_values()["axis"]) % len(shape)])
                    out[i] = min(out[i], rows) if i in out else rows
                elif isinstance(op, MoveOp) or \
                        isinstance(op, LaminaOp) and op.info.fusion is Fusion.LAYOUT:
                    work.extend(op.results)
    return out


def _draw(rng: np.random.Generator, info: TensorInfo, domain: Domain, high: int
          ) -> np.ndarray:
    """One argument's array: from `domain`, integers below `high`."""
    if info.dtype == "i1":
        return rng.integers(0, 2, size=info.shape).astype(bool)
    integer = info.dtype in ("i32", "i64")
    if domain is Domain.COUNT or integer:
        whole = rng.integers(0, COUNT_HIGH if domain is Domain.COUNT else high, size=info.shape)
        return whole.astype(STORAGE[info.dtype]) if integer else \
            to_storage(whole.astype(np.float32), info.dtype)
    a = rng.standard_normal(size=info.shape) if info.dtype == "f64" else \
        rng.standard_normal(size=info.shape, dtype=np.float32)
    if domain is Domain.RATE:  # from the same normal draw, so no other argument's draw moves
        a = RATE_SCALE * np.exp(np.clip(a, -RATE_SPREAD, RATE_SPREAD))
    return to_storage(np.abs(a) if domain is Domain.NONNEGATIVE else a, info.dtype)


def random_inputs(func: FuncOp, seed: int) -> list[np.ndarray]:
    """One array per argument of `func`, a pure function of (the function, seed).

    Floats are standard normal, i1 are fair coins, integers uniform in [0, 1000); an argument
    with a role is drawn from its domain (`Domain.NONNEGATIVE`: |standard normal|,
    `Domain.COUNT`: whole numbers in [0, 100), `Domain.RATE`: 1e-3 exp(z) for a standard normal
    z clipped to [-2, 2]), and gather indices in [0, rows) of their table
    (`index_rows`); see the module docstring.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise LaminaError(f"the seed for random inputs must be a non-negative integer, got {seed!r}")
    check_input_memory(func)
    rng = np.random.default_rng(seed)
    roles, rows = roles_of(func), index_rows(func)
    return [_draw(rng, tensor_info(t), roles[i].domain if i in roles else Domain.REAL,
                  max(1, rows.get(i, INT_HIGH)))
            for i, t in enumerate(func.function_type.inputs.data)]


def input_keys(func: FuncOp) -> list[str]:
    """The `.npz` key of each argument when a tool writes inputs (`--write-inputs`): its name
    (`x` for `%x`), or its position (`arg0`, ...) for all of them when two names coincide."""
    names = arg_names(func)
    return names if len(set(names)) == len(names) else [f"arg{i}" for i in range(len(names))]


def _header(f: IO[bytes]) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype from an `.npy` header, reading nothing past it (ValueError if not .npy)."""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
    else:  # 2.0 and 3.0 differ only in the header's text encoding
        shape, _, dtype = np.lib.format.read_array_header_2_0(f)
    return tuple(shape), dtype


def _headers(path: str) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Every array of the `.npz` at `path`: key -> (shape, dtype), from the headers only."""
    # np.load also accepts .npy and pickle files (and says "pickled data" for any other bytes);
    # an inputs file must be an .npz archive.
    if os.path.isfile(path) and not zipfile.is_zipfile(path):
        raise LaminaError(f"cannot read inputs '{path}': not an .npz archive")
    out: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    with zipfile.ZipFile(path) as z:
        for member in z.infolist():
            key = member.filename[:-4] if member.filename.endswith(".npy") else member.filename
            with z.open(member) as f:
                try:
                    out[key] = _header(f)
                except ValueError:
                    raise LaminaError(f"cannot read inputs '{path}': member '{member.filename}' "
                                      "is not an .npy array") from None
    return out


def _match_keys(paths: Sequence[str], func: FuncOp, keys: set[str]) -> list[str]:
    """The key of each argument in the files (its name, else `arg<i>`; only `arg<i>` when two
    names coincide, see `input_keys`), refusing missing and extra arrays."""
    where = ", ".join(paths)
    names = arg_names(func)
    unique = len(set(names)) == len(names)
    out: list[str] = []
    for i, name in enumerate(names):
        key = name if unique and name in keys else f"arg{i}"
        if key not in keys:
            has = "file has" if len(paths) == 1 else "files have"
            raise LaminaError(f"{where}: no array for argument '{name}' (expected key '{name}' or "
                              f"'arg{i}'; {has}: {', '.join(sorted(keys)) or 'nothing'})")
        out.append(key)
    extra = sorted(keys - set(out))
    if extra:
        raise LaminaError(f"{where}: arrays {', '.join(extra)} match no argument of "
                          f"@{func.sym_name.data} (arguments: {', '.join(names)})")
    return out


@dataclass
class LoadedInputs:
    """Arrays for a function's arguments read from `.npz` files: `arrays[i]` is argument i's,
    read from file `files[i]` under key `keys[i]` (as stored: not yet converted to the
    argument's element type, which `casts` describes)."""

    arrays: list[np.ndarray]
    files: list[str]
    keys: list[str]

    def casts(self, func: FuncOp) -> list[str]:
        """One note per array whose dtype the argument's element type cannot hold exactly
        (float64 for an f32, int64 for an i32, an integer for a float): the run converts it
        (`lamina.backends.arrays.check_inputs`, which refuses a value out of the type's range),
        and the note says so rather than change the input's precision without a word. A
        conversion that keeps every value (float16 to f32, int32 to i64) needs none."""
        notes: list[str] = []
        for a, path, key, t in zip(self.arrays, self.files, self.keys,
                                   func.function_type.inputs.data, strict=True):
            dtype = tensor_info(t).dtype
            want = STORAGE[dtype]
            if np.promote_types(a.dtype, want) != want:
                notes.append(f"{path}: array '{key}' is {a.dtype}; cast to {dtype}, the element "
                             f"type of its argument ({t})")
        return notes


def read_inputs(paths: str | Sequence[str], func: FuncOp) -> LoadedInputs:
    """Arrays for `func`'s arguments from one or more `.npz` files, keyed by argument name (`x`
    for `%x`) or by position (`arg0`, `arg1`, ...), merged by key: a model's inputs in one file
    and its weights (`lamina-import --weights`) in another. A key in two files is refused naming
    both; each array's shape is checked before any data is read."""
    paths = [paths] if isinstance(paths, str) else list(paths)
    check_input_memory(func)
    path = paths[0]
    try:
        headers: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        origin: dict[str, str] = {}
        for path in paths:
            for key, header in _headers(path).items():
                if key in origin:
                    raise LaminaError(f"inputs '{origin[key]}' and '{path}' both have an array "
                                      f"'{key}'")
                headers[key], origin[key] = header, path
        keys = _match_keys(paths, func, set(headers))
        for key, name, t in zip(keys, arg_names(func), func.function_type.inputs.data,
                                strict=True):
            shape, _ = headers[key]
            if shape != tensor_info(t).shape:
                raise error_at(func, f"input '{name}' has shape {shape}, argument type is {t}")
        arrays: dict[str, np.ndarray] = {}
        for path in paths:
            wanted = [k for k in keys if origin[k] == path]
            if wanted:
                with np.load(path, allow_pickle=False) as data:
                    arrays.update((k, data[k]) for k in wanted)
        return LoadedInputs([arrays[k] for k in keys], [origin[k] for k in keys], keys)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise array_file_error(f"cannot read inputs '{path}'", e) from None


def array_file_error(prefix: str, e: BaseException) -> LaminaError:
    """The one diagnostic `prefix: why` for an `.npz` or `.npy` that numpy could not read (`e`
    from opening or loading it): a missing file or a folder in words, not as an errno tuple."""
    if isinstance(e, FileNotFoundError):
        return LaminaError(f"{prefix}: no such file")
    if isinstance(e, IsADirectoryError):
        return LaminaError(f"{prefix}: Is a directory")
    return LaminaError(f"{prefix}: {e}")


def load_inputs(paths: str | Sequence[str], func: FuncOp) -> list[np.ndarray]:
    """The arrays of `read_inputs(paths, func)`, one per argument, as stored in the files."""
    return read_inputs(paths, func).arrays
