"""The NumPy interpreter's kernel for every op-table row: its formula on NumPy arrays.

`kernel(info)` is the row's array-API formula evaluated with `numpy` as the namespace (or the
row's whole-array NumPy form, `Forms.numpy` registered in `lamina.backends.numpy.specialized`,
which computes the same bits faster), wrapped in the storage rules: for arithmetic rows
(`OpInfo.arith`) float operands are converted to their compute type first (float32 for f16/bf16)
and the result is rounded to its element type once (`lamina.ir.core.dtypes.to_storage`: bf16 stays in
float32 arrays, rounded to bf16).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from lamina.backends.numpy.specialized import Kernel, forms
from lamina.ir.core.dtypes import COMPUTE, STORAGE, to_storage
from lamina.ir.ops.formulas import Call
from lamina.ir.ops.optable import OpInfo

_KERNELS: dict[str, Kernel] = {}


def to_compute(a: np.ndarray, dtype: str) -> np.ndarray:
    """`a` (stored as element type `dtype`) in the type arithmetic on it runs in."""
    target = COMPUTE.get(dtype, STORAGE[dtype])
    return a if a.dtype == target else a.astype(target)


def _make(info: OpInfo) -> Kernel:
    special = forms(info).numpy

    def compute(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
        if special is not None:
            return special(args, call)
        return np.asarray(info.formula(np, args, call))

    if not info.arith:
        return compute

    def kernel(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
        xs = [None if a is None or t is None else to_compute(a, t.dtype)
              for a, t in zip(args, call.operands, strict=True)]
        return to_storage(np.asarray(compute(xs, call)), call.result.dtype)

    return kernel


def kernel(info: OpInfo) -> Kernel:
    """The NumPy kernel of op-table row `info` (built once per row)."""
    k = _KERNELS.get(info.name)
    if k is None:
        k = _KERNELS[info.name] = _make(info)
    return k
