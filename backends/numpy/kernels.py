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


def _stored_as_computed(dtype: str) -> bool:
    return dtype != "bf16" and COMPUTE.get(dtype, STORAGE[dtype]) == STORAGE[dtype]


def native_kernel(info: OpInfo, call: Call) -> Kernel | None:
    """Row `info`'s kernel for `call` without the storage rule's operand conversions, where
    they are the identity (None elsewhere): every operand is stored in its compute type (f32,
    f64, the integers; not f16 or bf16) and so, like the result, arrives as such (each kernel's
    result is in its storage type). The result keeps its check: a formula that computed another
    type is converted as `kernel`'s is. A prepared step calls it per call, where the
    conversions' list and lookups were most of a small kernel's Python time."""
    if not all(t is None or _stored_as_computed(t.dtype) for t in call.operands) or \
            not _stored_as_computed(call.result.dtype):
        return None
    k = kernel(info)
    if not info.arith:
        return k
    special = forms(info).numpy
    formula = info.formula
    rdtype = call.result.dtype
    target = STORAGE[rdtype]

    def run(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
        r = np.asarray(special(args, call) if special is not None else formula(np, args, call))
        return r if r.dtype == target else to_storage(r, rdtype)

    return run
