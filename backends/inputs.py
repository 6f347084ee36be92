"""A run's inputs: random arrays drawn from the argument types, or arrays read from an `.npz`.

`.npz` files are read with `allow_pickle=False`: an input file can never execute code.
"""

from __future__ import annotations

import os
import zipfile

import numpy as np
from lamina.backends.interface import arg_names
from lamina.ir.diagnostics import LaminaError
from lamina.ir.dtypes import STORAGE, to_storage
from lamina.ir.opbase import tensor_info
from xdsl.dialects.func import FuncOp


def random_inputs(func: FuncOp, seed: int) -> list[np.ndarray]:
    """One array per argument of `func`, a pure function of (argument types, seed).

    Floats are standard normal, i1 are fair coins, integers uniform in [0, 1000).
    """
    rng = np.random.default_rng(seed)
    out: list[np.ndarray] = []
    for t in func.function_type.inputs.data:
        info = tensor_info(t)
        if info.dtype == "i1":
            a = rng.integers(0, 2, size=info.shape).astype(bool)
        elif info.dtype in ("i32", "i64"):
            a = rng.integers(0, 1000, size=info.shape).astype(STORAGE[info.dtype])
        else:
            a = to_storage(rng.standard_normal(size=info.shape, dtype=np.float32)
                           if info.dtype != "f64" else rng.standard_normal(size=info.shape),
                           info.dtype)
        out.append(a)
    return out


def load_inputs(path: str, func: FuncOp) -> list[np.ndarray]:
    """Arrays for `func`'s arguments from an `.npz`, keyed by argument name (`x` for `%x`) or
    by position (`arg0`, `arg1`, ...)."""
    try:
        # np.load also accepts .npy and pickle files (and says "pickled data" for any other
        # bytes); an inputs file must be an .npz archive.
        if os.path.isfile(path) and not zipfile.is_zipfile(path):
            raise LaminaError(f"cannot read inputs '{path}': not an .npz archive")
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise LaminaError(f"cannot read inputs '{path}': no such file") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise LaminaError(f"cannot read inputs '{path}': {e}") from None
    names = arg_names(func)
    out: list[np.ndarray] = []
    used: set[str] = set()
    for i, name in enumerate(names):
        key = name if name in arrays else f"arg{i}"
        if key not in arrays:
            raise LaminaError(f"{path}: no array for argument '{name}' (expected key '{name}' or "
                              f"'arg{i}'; file has: {', '.join(sorted(arrays)) or 'nothing'})")
        used.add(key)
        out.append(arrays[key])
    extra = sorted(set(arrays) - used)
    if extra:
        raise LaminaError(f"{path}: arrays {', '.join(extra)} match no argument of "
                          f"@{func.sym_name.data} (arguments: {', '.join(names)})")
    return out
