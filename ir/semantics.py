"""NumPy semantics of every Lamina op: the reference every backend and every pass is checked against.

Conventions (PyTorch's unless said otherwise):
- Elementwise math and reductions on f16/bf16 compute in float32 and round the result to the
  storage type once (see `lamina.ir.dtypes`); f32 and f64 compute in their own precision.
- `layernorm` uses the biased variance (divides by N), `var + eps` under the square root, and
  normalizes over the dimensions `axis ..< rank` (ONNX LayerNormalization's `axis`).
- `rmsnorm` is x / sqrt(mean(x**2) + eps) * scale over the same dimensions.
- `gelu` with approximate = "none" is 0.5 x (1 + erf(x / sqrt 2)); with "tanh" it is
  0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3))), PyTorch's `approximate='tanh'`.
- `max`/`min`/`relu` propagate NaN (torch.maximum); `sigmoid` is evaluated in the overflow-free form.
- `cast` float -> integer truncates toward zero; float/int -> i1 is `x != 0`; i1 -> number is 0/1.
- `matmul` is `numpy.matmul` on operands of rank >= 2; batch dimensions broadcast.
- `dropout` is defined in `lamina.ir.rng`.

Kernels take their operands as arrays and a `Call` describing attributes and result; elementwise
ops are written once as functions of the computation arrays (`ew`), and `elementwise_kernel` turns
them into kernels, so the same formula serves whole-array, tiled and sharded execution.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from lamina.ir import rng
from lamina.ir.dtypes import COMPUTE, STORAGE, is_float, to_storage
from lamina.ir.shapes import TensorInfo


@dataclass(frozen=True)
class Block:
    """Where the values a kernel sees sit inside the global tensor (for position-dependent ops)."""

    global_shape: tuple[int, ...]
    offsets: tuple[int, ...]


@dataclass
class Call:
    """Everything a kernel needs besides its operand arrays, as plain Python values."""

    attrs: dict[str, Any]
    operands: list[TensorInfo | None]
    result: TensorInfo
    block: Block | None = None
    extra: dict[str, Any] = field(default_factory=dict)


Kernel = Callable[[Sequence[np.ndarray | None], Call], np.ndarray]
Elementwise = Callable[..., np.ndarray]


# ---- erf without SciPy ---------------------------------------------------------------------------

_ERFC_COEFFS = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
                0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def erf(x: np.ndarray) -> np.ndarray:
    """erf(x) elementwise.

    float64 inputs use `math.erf` per element (correctly rounded, slow); other inputs use the
    Chebyshev fit of erfc from Numerical Recipes (fractional error < 1.2e-7, below float32's
    epsilon), evaluated in float64 and returned in the input's dtype.
    """
    if x.dtype == np.float64:
        return np.vectorize(math.erf, otypes=[np.float64])(x) if x.size else x.copy()
    z = np.abs(x.astype(np.float64))
    t = 1.0 / (1.0 + 0.5 * z)
    poly = np.full_like(z, _ERFC_COEFFS[-1])
    for c in reversed(_ERFC_COEFFS[:-1]):
        poly = poly * t + c
    erfc = t * np.exp(-z * z + poly)
    out = np.where(x >= 0, 1.0 - erfc, erfc - 1.0)
    return out.astype(x.dtype)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)


def _gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    c = x.dtype.type
    if approximate == "tanh":
        inner = c(_SQRT_2_OVER_PI) * (x + c(0.044715) * x * x * x)
        return c(0.5) * x * (c(1.0) + np.tanh(inner))
    return c(0.5) * x * (c(1.0) + erf(x * c(_INV_SQRT2)))


UNARY: dict[str, Elementwise] = {
    "neg": np.negative,
    "abs": np.abs,
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "relu": lambda x: np.maximum(x, x.dtype.type(0)),
    "gelu": _gelu,
    "erf": erf,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: x.dtype.type(1) / np.sqrt(x),
    "reciprocal": lambda x: x.dtype.type(1) / x,
}

BINARY: dict[str, Elementwise] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.maximum,
    "min": np.minimum,
    "pow": np.power,
}

COMPARE: dict[str, Elementwise] = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}


def _compute(a: np.ndarray, dtype: str) -> np.ndarray:
    target = COMPUTE.get(dtype, STORAGE[dtype])
    return a if a.dtype == target else a.astype(target)


def elementwise_kernel(fn: Elementwise) -> Kernel:
    """A kernel computing `fn` on float operands in the compute dtype, rounded to the result type."""

    def kernel(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
        xs = [_compute(a, t.dtype) for a, t in zip(args, call.operands, strict=True)
              if a is not None and t is not None]
        return to_storage(np.asarray(fn(*xs, **call.attrs)), call.result.dtype)

    return kernel


def compare_kernel(fn: Elementwise) -> Kernel:
    def kernel(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
        a, b = args
        assert a is not None and b is not None
        return np.asarray(fn(a, b))

    return kernel


def select_kernel(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
    c, a, b = args
    assert c is not None and a is not None and b is not None
    return to_storage(np.where(c, a, b), call.result.dtype)


def cast_kernel(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
    (x,) = args
    assert x is not None
    dst = call.result.dtype
    if dst == "i1":
        return x != 0
    if not is_float(dst) and x.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            return np.trunc(x).astype(STORAGE[dst])
    return to_storage(x.astype(COMPUTE.get(dst, STORAGE[dst])), dst)


def constant_kernel(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
    value = call.attrs["value"].materialize()
    assert isinstance(value, np.ndarray)
    return value


def dropout_kernel(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
    x = args[0]
    assert x is not None
    seed_arr = args[1] if len(args) > 1 else None
    seed = int(seed_arr) if seed_arr is not None else int(call.attrs["seed"])
    rate = float(call.attrs["rate"])
    block = call.block or Block(tuple(x.shape), (0,) * x.ndim)
    keep = rng.keep_mask(seed, rate, block.global_shape, block.offsets, tuple(x.shape))
    xc = _compute(x, call.result.dtype)
    scale = xc.dtype.type(1.0 / (1.0 - rate))
    return to_storage(np.where(keep, xc * scale, xc.dtype.type(0)), call.result.dtype)


def _axes_tuple(axes: Sequence[int], ndim: int) -> tuple[int, ...]:
    return tuple(a % ndim for a in axes)


def reduce_kernel(fn: Callable[..., np.ndarray]) -> Kernel:
    def kernel(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
        (x,) = args
        assert x is not None
        xc = _compute(x, call.result.dtype)
        axes = _axes_tuple(call.attrs["axes"], x.ndim)
        out = fn(xc, axis=axes, keepdims=bool(call.attrs["keepdims"]))
        return to_storage(np.asarray(out, dtype=xc.dtype), call.result.dtype)

    return kernel


def layernorm_kernel(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
    x, scale, bias = (list(args) + [None, None])[:3]
    assert x is not None
    xc = _compute(x, call.result.dtype)
    axes = tuple(range(call.attrs["axis"] % x.ndim, x.ndim))
    eps = xc.dtype.type(call.attrs["eps"])
    mean = xc.mean(axis=axes, keepdims=True)
    centered = xc - mean
    var = (centered * centered).mean(axis=axes, keepdims=True)
    y = centered / np.sqrt(var + eps)
    if scale is not None:
        y = y * _compute(scale, call.result.dtype)
    if bias is not None:
        y = y + _compute(bias, call.result.dtype)
    return to_storage(y, call.result.dtype)


def rmsnorm_kernel(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
    x, scale = (list(args) + [None])[:2]
    assert x is not None
    xc = _compute(x, call.result.dtype)
    axes = tuple(range(call.attrs["axis"] % x.ndim, x.ndim))
    eps = xc.dtype.type(call.attrs["eps"])
    y = xc / np.sqrt((xc * xc).mean(axis=axes, keepdims=True) + eps)
    if scale is not None:
        y = y * _compute(scale, call.result.dtype)
    return to_storage(y, call.result.dtype)


def softmax_kernel(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
    (x,) = args
    assert x is not None
    xc = _compute(x, call.result.dtype)
    axis = call.attrs["axis"] % x.ndim
    e = np.exp(xc - xc.max(axis=axis, keepdims=True))
    return to_storage(e / e.sum(axis=axis, keepdims=True), call.result.dtype)


def matmul_kernel(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
    a, b = args
    assert a is not None and b is not None
    dt = call.result.dtype
    return to_storage(np.matmul(_compute(a, dt), _compute(b, dt)), dt)


def transpose_kernel(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
    (x,) = args
    assert x is not None
    return np.transpose(x, tuple(call.attrs["permutation"]))


def reshape_kernel(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
    (x,) = args
    assert x is not None
    return x.reshape(call.result.shape)


def broadcast_in_dim_kernel(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
    (x,) = args
    assert x is not None
    dims = list(call.attrs["broadcast_dimensions"])
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    xt = np.transpose(x, order) if order != list(range(len(dims))) else x
    sizes = dict(zip(sorted(dims), xt.shape, strict=True))
    shape = tuple(sizes.get(d, 1) for d in range(len(call.result.shape)))
    return np.broadcast_to(xt.reshape(shape), call.result.shape)


def slice_kernel(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
    (x,) = args
    assert x is not None
    strides = call.attrs.get("strides") or [1] * x.ndim
    index = tuple(slice(s, e, st) for s, e, st in
                  zip(call.attrs["start"], call.attrs["limit"], strides, strict=True))
    return x[index]


def concat_kernel(args: Sequence[np.ndarray | None], call: Call) -> np.ndarray:
    xs = [a for a in args if a is not None]
    return np.concatenate(xs, axis=call.attrs["dim"] % xs[0].ndim)
