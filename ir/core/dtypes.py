"""Element types Lamina accepts and how each is stored as a NumPy array.

Lamina names element types by their MLIR spelling (`f32`, `bf16`, `i1`, ...). Backends map those
names to their own array dtypes; for NumPy the mapping is `STORAGE`. NumPy has no bfloat16, so a
`bf16` tensor is stored in a float32 array whose values are always exactly representable in bf16:
every kernel that produces bf16 rounds its float32 result to the nearest bf16 (ties to even), the
same rounding PyTorch and JAX apply when they store bf16. f16 is computed in float32 and rounded to
float16, as PyTorch does on CPU.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import (
    AnyFloat,
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerType,
    TensorType,
)
from xdsl.ir import Attribute

FLOAT_TYPES = ("f16", "bf16", "f32", "f64")
INT_TYPES = ("i1", "i32", "i64")
ALL_TYPES = FLOAT_TYPES + INT_TYPES

STORAGE: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(np.float32),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "i1": np.dtype(np.bool_),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
}

# Bytes per element as the target would store it (bf16 is 2 bytes on a device even though the
# NumPy backend keeps it in 4).
ITEMSIZE: dict[str, int] = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i1": 1, "i32": 4, "i64": 8}

# The dtype elementwise math runs in before rounding to the storage type.
COMPUTE: dict[str, np.dtype] = {
    "f16": np.dtype(np.float32),
    "bf16": np.dtype(np.float32),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
}


def element_name(t: Attribute) -> str | None:
    """The MLIR spelling of an element type, or None when Lamina does not support it."""
    if isinstance(t, Float32Type):
        return "f32"
    if isinstance(t, Float64Type):
        return "f64"
    if isinstance(t, Float16Type):
        return "f16"
    if isinstance(t, BFloat16Type):
        return "bf16"
    if isinstance(t, IntegerType) and t.signedness.data.name == "SIGNLESS":
        width = t.width.data
        return {1: "i1", 32: "i32", 64: "i64"}.get(width)
    return None


def element_type(dtype: str) -> IntegerType | AnyFloat:
    """The xDSL element type spelled `dtype` (the inverse of `element_name`)."""
    match dtype:
        case "f16":
            return Float16Type()
        case "bf16":
            return BFloat16Type()
        case "f32":
            return Float32Type()
        case "f64":
            return Float64Type()
        case "i1" | "i32" | "i64":
            return IntegerType(int(dtype[1:]))
    raise ValueError(f"unsupported element type {dtype!r} (use {', '.join(ALL_TYPES)})")


def tensor_type(shape: tuple[int, ...], dtype: str) -> TensorType[IntegerType | AnyFloat]:
    """`tensor<SHAPExDTYPE>` without a placement."""
    return TensorType(element_type(dtype), list(shape))


def tensor_dtype(t: Attribute) -> str:
    """Element-type name of a tensor type (assumes the type was verified)."""
    assert isinstance(t, TensorType)
    name = element_name(t.element_type)
    assert name is not None, f"unsupported element type {t.element_type}"
    return name


def tensor_shape(t: Attribute) -> tuple[int, ...]:
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def nbytes(t: Attribute) -> int:
    """Bytes a value of tensor type `t` occupies on a device."""
    shape = tensor_shape(t)
    return int(np.prod(shape, dtype=np.int64)) * ITEMSIZE[tensor_dtype(t)]


def round_bf16(a: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even), keeping float32 storage.

    NaN stays NaN; infinities stay infinite; values beyond bf16's range round to infinity.
    """
    a32 = np.asarray(a, dtype=np.float32, order="C")  # not ascontiguousarray: it makes rank 0 rank 1
    bits = a32.view(np.uint32)
    nan = np.isnan(a32)
    lsb = (bits >> np.uint32(16)) & np.uint32(1)
    rounded = np.asarray((bits + np.uint32(0x7FFF) + lsb) & np.uint32(0xFFFF0000))  # 0-d stays array
    out = rounded.view(np.float32)
    if nan.any():
        out = np.asarray(np.where(nan, np.float32(np.nan), out))
    return out


def to_storage(a: np.ndarray, dtype: str) -> np.ndarray:
    """Convert `a` to the storage form of element type `dtype` (rounding bf16)."""
    if dtype == "bf16":
        return round_bf16(a)
    target = STORAGE[dtype]
    if a.dtype == target:
        return a
    return a.astype(target)


def unrepresentable(a: np.ndarray, dtype: str) -> str | None:
    """Why the values of `a` cannot be held by element type `dtype`, or None when they can.

    Converting with NumPy would not say: an integer outside the type's range wraps around
    (2**40 into i32 gives 0) and a finite float beyond the type's largest becomes infinite. Both
    change the program's input silently, so the runners refuse them; rounding a float to a
    narrower one (0.1 to f32) is the ordinary conversion and is accepted."""
    if a.size == 0:
        return None
    if dtype in ("i32", "i64") and a.dtype.kind in "iub":
        info = np.iinfo(STORAGE[dtype])
        bad = (a < info.min) | (a > info.max)
        if bad.any():
            i = np.unravel_index(int(np.argmax(bad)), a.shape)
            return (f"{a[i].item()!r} at index {tuple(int(k) for k in i)} is outside {dtype}'s range "
                    f"[{info.min}, {info.max}]")
    if dtype in FLOAT_TYPES and a.dtype.kind in "iubf":
        with np.errstate(over="ignore", invalid="ignore"):
            converted = to_storage(a, dtype)
            bad = np.isinf(converted) & np.isfinite(a)
        if bad.any():
            i = np.unravel_index(int(np.argmax(bad)), a.shape)
            return (f"{a[i].item()!r} at index {tuple(int(k) for k in i)} is beyond {dtype}'s "
                    f"largest finite value (it would become infinite)")
    return None


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_TYPES
