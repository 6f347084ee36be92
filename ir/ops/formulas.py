"""Every op's semantics, written once against the array API: the definition every backend evaluates.

A formula is `formula(xp, args, call)`: `xp` is an array namespace implementing the Python array
API standard (`numpy` 2.x and `jax.numpy` both do), `args` the operand arrays in the op table's
operand order (None for an absent optional operand) and `call` the op's attributes, operand and
result types and, for position-dependent ops, where the arrays sit in the global tensor. A backend
passes its own namespace, so the NumPy interpreter and the JAX engine compute the same definition
and no backend keeps a list of ops. Elementwise ops are written as `ew(xp, *xs, **attrs)` and
wrapped by `elementwise` (the fused executors and compiled backends use the elementwise form).

Conventions (PyTorch's unless said otherwise):
- Float arithmetic sees its operands in the compute type and returns the compute type: float32 for
  f16/bf16/f32, float64 for f64 (`compute_dtype`). The backend converts storage to compute type
  before and rounds to the result's element type once after (`OpInfo.arith`); ops that only move
  data (`arith = False`) see and return storage arrays unchanged.
- Python float constants are "weak" (NEP 50 / JAX): `0.5 * x` multiplies by 0.5 rounded to x's type.
- `layernorm` uses the biased variance (divides by N), `var + eps` under the square root, and
  normalizes over the dimensions `axis ..< rank` (ONNX LayerNormalization's `axis`); a row whose
  squares overflow is rescaled by a power of two first, so it gets its finite answer (`_rescaled`).
- `rmsnorm` is x / sqrt(mean(x**2) + eps) * scale over the same dimensions.
- `gelu` with approximate = "none" is 0.5 x (1 + erf(x / sqrt 2)); with "tanh" it is
  0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3))), PyTorch's `approximate='tanh'`.
- `erf` is W. J. Cody's rational Chebyshev approximation (Math. Comp. 1969), in float64: accurate
  near 0 (erf(x) = x P(x^2)/Q(x^2)) and in the tails (erfc with a split exponent), see `erf`.
- `max`/`min`/`relu` propagate NaN (torch.maximum); `sigmoid` is evaluated in the overflow-free form.
- `cast` float -> integer truncates toward zero; float/int -> i1 is `x != 0`; i1 -> number is 0/1.
- `matmul` is `matmul` on operands of rank >= 2; batch dimensions broadcast.
- `dropout` is defined in `lamina.ir.ops.rng`; its formula builds the global element index from
  `call.block` (offsets may be traced scalars, e.g. JAX's `lax.axis_index` arithmetic).
- `softmax` with `safe` is 0 on a line whose every entry is -inf (PyTorch's `_safe_softmax`).
- `log_softmax` is x - max - log(sum(exp(x - max))) along axis (PyTorch's and ONNX's form).
- `gather` takes input[..., i, ...] along `axis` for every index i (ONNX Gather, numpy.take,
  torch.embedding); a negative index counts from the end, and an index outside [-n, n) gives 0
  (where PyTorch and ONNX raise). That zero is what makes a table split over devices along `axis`
  exact: each device looks up the rows its block holds, gives 0 for the others, and the sum over
  devices is the lookup (its sharding rule makes the result a pending sum).
- `cumsum` along `axis` is element i = x[0] + ... + x[i] (`exclusive`: x[0] + ... + x[i-1], so
  the first is 0; `reverse`: summed from the end instead), ONNX CumSum's attributes; the sum is
  in the operand's compute type, left to right (the NumPy interpreter's order; XLA's scan may
  associate differently, within rounding), integers wrap as every integer sum does.
- `iota` counts 0, 1, ... along `dim` of its result type, converted to the element type.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lamina.ir.core.shapes import TensorInfo
from lamina.ir.ops import rng

Array = Any          # an array of the namespace in use
Namespace = Any      # `numpy`, `jax.numpy`, or any array-API namespace
Args = Sequence[Any]  # operand arrays in table order; None for an absent optional operand


@dataclass(frozen=True)
class Block:
    """Where the arrays a formula sees sit inside the global tensor (for position-dependent ops).

    `offsets` are Python ints, or scalars of the backend's namespace (traced under a JAX jit).
    `operands` are the operands' own blocks, in table order (None for an absent operand): an op
    whose result depends on where an operand's block sits (gather on a vocabulary-split table
    must know which rows its block holds) reads them. A backend that runs such an op on blocks
    passes them; `()` means "not given", which `gather` refuses rather than guess."""

    global_shape: tuple[int, ...]
    offsets: tuple[Any, ...]
    operands: tuple[Block | None, ...] = ()


@dataclass
class Call:
    """Everything a formula needs besides its operand arrays, as plain Python values."""

    attrs: dict[str, Any]
    operands: list[TensorInfo | None]
    result: TensorInfo
    block: Block | None = None
    extra: dict[str, Any] = field(default_factory=dict)


Formula = Callable[[Namespace, Args, Call], Array]
Elementwise = Callable[..., Array]   # ew(xp, *operands, **attrs)

_DTYPE_NAMES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
                "i1": "bool", "i32": "int32", "i64": "int64"}
_COMPUTE_NAMES = {"f16": "float32", "bf16": "float32", "f32": "float32", "f64": "float64",
                  "i1": "bool", "i32": "int32", "i64": "int64"}


def compute_dtype(xp: Namespace, dtype: str) -> Any:
    """The namespace's dtype that arithmetic on Lamina element type `dtype` runs in."""
    return getattr(xp, _COMPUTE_NAMES[dtype])


def native_dtype(xp: Namespace, dtype: str) -> Any:
    """The namespace's own dtype for Lamina element type `dtype` (None where it has none, such as
    NumPy's missing bfloat16: that backend stores bf16 in float32, rounded)."""
    return getattr(xp, _DTYPE_NAMES[dtype], None)


def elementwise(ew: Elementwise) -> Formula:
    """The formula of an elementwise op: `ew` applied to the present operands with the attributes."""

    def formula(xp: Namespace, args: Args, call: Call) -> Array:
        return ew(xp, *(a for a in args if a is not None), **call.attrs)

    return formula


# ---- elementwise ---------------------------------------------------------------------------------

def sigmoid(xp: Namespace, x: Array) -> Array:
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
GELU_TANH = "tanh"   # gelu's `approximate` value selecting the tanh form (a backend reads it here)


def gelu(xp: Namespace, x: Array, approximate: str = "none") -> Array:
    if approximate == GELU_TANH:
        inner = _SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + xp.tanh(inner))
    return 0.5 * x * (1.0 + erf(xp, x * _INV_SQRT2))


# Cody's coefficients (W. J. Cody, "Rational Chebyshev approximations for the error function",
# Math. Comp. 23 (1969) 631-638), as published in netlib's specfun CALERF.
_ERF_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
          3.20937758913846947e03, 1.85777706184603153e-1)
_ERF_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
          2.84423683343917062e03)
_ERFC_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
           2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
           2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)
_ERFC_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
           1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
           3.43936767414372164e03, 1.23033935480374942e03)
_ERFC_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
           1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)
_ERFC_Q = (2.56852019228982242e00, 1.87295284992346047e00, 5.27905102951428412e-1,
           6.05183413124413191e-2, 2.33520497626869185e-3)
_INV_SQRT_PI = 0.56418958354775628695


def _rational(xp: Namespace, t: Array, num: Sequence[float], den: Sequence[float]) -> Array:
    """Cody's nested form: num[-1] t, then (n + num[i]) t and (d + den[i]) t, finished by the
    last two coefficients (numerator: num[-2]; denominator: den[-1])."""
    n = num[-1] * t
    d = t
    for a, b in zip(num[:-2], den[:-1], strict=True):
        n = (n + a) * t
        d = (d + b) * t
    return (n + num[-2]) / (d + den[-1])


def erfc_tail(xp: Namespace, y: Array) -> Array:
    """erfc(y) for y >= 0.46875 in the compute type (y = |x|).

    exp(-y^2) is computed as exp(-s^2) exp(-(y - s)(y + s)) with s = y truncated to 1/16, so the
    large part of the exponent is exact and erfc keeps its relative accuracy in the far tail."""
    mid = _rational(xp, y, _ERFC_C, _ERFC_D)
    inv = 1.0 / (y * y)
    far = (_INV_SQRT_PI - inv * _rational(xp, inv, _ERFC_P, _ERFC_Q)) / y
    r = xp.where(y <= 4.0, mid, far)
    s = xp.trunc(y * 16.0) / 16.0
    return xp.exp(-s * s) * xp.exp(-(y - s) * (y + s)) * r


def erf(xp: Namespace, x: Array) -> Array:
    """erf(x) elementwise (see the module docstring for the method).

    |x| <= 0.46875: x P(x^2)/Q(x^2), accurate all the way down to subnormals and +-0 (the sign of
    zero is kept); beyond: sign(x) (1 - erfc(|x|)), which is 1 to the last bit past |x| = 6.
    Narrower floats are evaluated in float64 and rounded once: in float32 the subtraction
    1 - erfc near the threshold costs up to 5 ulp, in float64 the result is within 1 ulp of
    float32 everywhere (tests/test_formulas.py sweeps it against math.erf). The JAX backend runs
    with 64-bit types enabled for this (and for dropout's 64-bit element index)."""
    if x.dtype != xp.float64:
        return xp.astype(erf(xp, xp.astype(x, xp.float64)), x.dtype)
    y = xp.abs(x)
    near = y <= 0.46875
    xs = xp.where(near, x, 0.0)    # each branch sees only its own range: no overflow, no NaN
    small = xs * _rational(xp, xs * xs, _ERF_A, _ERF_B)
    # the tail sees |x| in [0.46875, 8]: erfc(8) is far below half an ulp of 1, and the cap keeps
    # inf - inf out of the split exponent (NaN passes through min/max)
    big = 1.0 - erfc_tail(xp, xp.minimum(xp.maximum(y, 0.46875), 8.0))
    big = xp.where(x < 0, -big, big)
    return xp.where(near, small, big)


# name -> (array-API formula, whether it is one NumPy ufunc) for the plain elementwise ops; the
# table (`lamina.ir.ops.optable`) is what names them and says their facts
def neg(xp: Namespace, x: Array) -> Array:
    return xp.negative(x)


def relu(xp: Namespace, x: Array) -> Array:
    return xp.maximum(x, 0.0)


def rsqrt(xp: Namespace, x: Array) -> Array:
    return 1.0 / xp.sqrt(x)


def reciprocal(xp: Namespace, x: Array) -> Array:
    return 1.0 / x


def via(name: str) -> Elementwise:
    """The namespace's own function `name` as an elementwise formula (`xp.tanh`, `xp.add`, ...)."""

    def ew(xp: Namespace, *xs: Array) -> Array:
        return getattr(xp, name)(*xs)

    ew.__name__ = name
    return ew


def select(xp: Namespace, args: Args, call: Call) -> Array:
    c, a, b = args
    return xp.where(c, a, b)


def cast(xp: Namespace, args: Args, call: Call) -> Array:
    """Element type conversion: to the result's compute type (the backend rounds bf16/f16)."""
    (x,) = args
    dst = call.result.dtype
    src = call.operands[0]
    assert src is not None
    if dst == "i1":
        return x != 0
    target = compute_dtype(xp, dst)
    if dst.startswith("i") and src.dtype.startswith(("f", "b")):
        return xp.astype(xp.trunc(x), target)
    return xp.astype(x, target)


def constant(xp: Namespace, args: Args, call: Call) -> Array:
    return xp.asarray(call.attrs["value"].materialize())


def dropout(xp: Namespace, args: Args, call: Call) -> Array:
    """`rng`'s keep mask of the block `call.block` (the whole tensor without one), applied."""
    x = args[0]
    block = call.block or Block(tuple(x.shape), (0,) * len(x.shape))
    return dropout_at(xp, args, call, lambda: rng.global_index(xp, block.global_shape,
                                                               block.offsets, tuple(x.shape)))


def dropout_at(xp: Namespace, args: Args, call: Call, index: Callable[[], Array]) -> Array:
    """dropout given where its elements sit: `index()` gives their global flat indices (uint64),
    asked for only when the rate drops anything. Shared by the whole-array formula above and the
    per-element form compiled backends trace (`lamina.ir.ops.scalar_forms.dropout`), so both build
    the one mask `rng` defines."""
    x, seed_arr = args[0], args[1] if len(args) > 1 else None
    rate = float(call.attrs["rate"])
    scale = 1.0 / (1.0 - rate)
    if rate <= 0:
        return x * scale
    seed = seed_arr if seed_arr is not None else int(call.attrs["seed"])
    keep = rng.bits(xp, seed, index()) >= xp.asarray(rng.threshold(rate), dtype=xp.uint32)
    return xp.where(keep, x * scale, 0.0)


# ---- reductions and composites -------------------------------------------------------------------

def _axes(axes: Sequence[int], ndim: int) -> tuple[int, ...]:
    return tuple(a % ndim for a in axes)


def reduction(fn: str) -> Formula:
    """reduce_sum / reduce_mean / reduce_max: the namespace's `sum` / `mean` / `max` over `axes`."""

    def formula(xp: Namespace, args: Args, call: Call) -> Array:
        (x,) = args
        axes = _axes(call.attrs["axes"], len(x.shape))
        return getattr(xp, fn)(x, axis=axes, keepdims=bool(call.attrs["keepdims"]))

    return formula


def _rescaled(xp: Namespace, v: Array, sq_mean: Array, axes: tuple[int, ...]
              ) -> tuple[Array, Array, Array]:
    """(v / s, mean((v / s)^2), s^2) per row, with s = 1 except on rows whose mean of squares
    overflowed, where s is the largest power of two <= max|v|.

    A power-of-two scale changes no rounding (barring underflow), so rows that did not overflow
    keep exactly the bits of the plain formula, and rows that did get the finite, correctly
    scaled answer instead of 0 (LayerNorm of [1e30, -1e30, 1e30, 0] in float32)."""
    bad = xp.logical_not(xp.isfinite(sq_mean))
    m = xp.max(xp.abs(v), axis=axes, keepdims=True)
    ok = xp.logical_and(bad, xp.logical_and(xp.isfinite(m), m > 0.0))
    s = xp.where(ok, xp.pow(2.0, xp.floor(xp.log2(xp.where(ok, m, 1.0)))), 1.0)
    vs = v / s
    return vs, xp.where(bad, xp.mean(vs * vs, axis=axes, keepdims=True), sq_mean), s * s


Guard = Callable[[Namespace, Array, Array, tuple[int, ...]], tuple[Array, Array, Array]]
"""How a normalization keeps its row's mean of squares finite: (v, mean(v^2), axes) ->
(v', mean(v'^2), s^2), v' = v / s. The formulas rescale (`_rescaled`); the compiled backend's
per-row forms (`scalar_forms`) require a finite mean and keep s = 1."""


def normalized(xp: Namespace, args: Args, call: Call, centered: bool, guard: Guard) -> Array:
    """layernorm (`centered`) or rmsnorm of `args` = (x, [scale, [bias]]), the one statement of
    both that the formulas and the compiled per-row forms share, differing only in `guard`."""
    x, scale, bias = (list(args) + [None, None])[:3]
    axes = tuple(range(call.attrs["axis"] % len(x.shape), len(x.shape)))
    v = x - xp.mean(x, axis=axes, keepdims=True) if centered else x
    v, sq_mean, s2 = guard(xp, v, xp.mean(v * v, axis=axes, keepdims=True), axes)
    y = v / xp.sqrt(sq_mean + float(call.attrs["eps"]) / s2)
    if scale is not None:
        y = y * scale
    if bias is not None:
        y = y + bias
    return y


def layernorm(xp: Namespace, args: Args, call: Call) -> Array:
    return normalized(xp, args, call, True, _rescaled)


def rmsnorm(xp: Namespace, args: Args, call: Call) -> Array:
    return normalized(xp, args, call, False, _rescaled)


def softmax(xp: Namespace, args: Args, call: Call) -> Array:
    """exp(x - max) / sum(exp(x - max)) along `axis`; with `safe`, 0 on a line whose every entry
    is -inf (PyTorch's `_safe_softmax`, what sdpa computes for a query that may attend no key)
    where the plain form gives nan (-inf - -inf). The guard changes no other line's bits: a finite
    max stays as it is, and then the sum holds exp(0) = 1 and is never 0."""
    (x,) = args
    axis = call.attrs["axis"] % len(x.shape)
    m = xp.max(x, axis=axis, keepdims=True)
    if call.attrs["safe"]:
        m = xp.where(m == -math.inf, 0.0, m)       # every exp of the line is then 0, and so is the sum
    e = xp.exp(x - m)
    total = xp.sum(e, axis=axis, keepdims=True)
    if call.attrs["safe"]:
        total = xp.where(total == 0.0, 1.0, total)  # 0 / 1: the line's zeros
    return e / total


def log_softmax(xp: Namespace, args: Args, call: Call) -> Array:
    (x,) = args
    axis = call.attrs["axis"] % len(x.shape)
    shifted = x - xp.max(x, axis=axis, keepdims=True)
    return shifted - xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))


def cumsum(xp: Namespace, args: Args, call: Call) -> Array:
    """The running sum along `axis` (see the module docstring for `exclusive` and `reverse`)."""
    (x,) = args
    axis = call.attrs["axis"] % len(x.shape)
    if call.attrs["reverse"]:
        x = xp.flip(x, axis=axis)
    n = x.shape[axis]
    # the operand's own dtype: NumPy would widen an i32 sum to the platform integer
    out = xp.cumulative_sum(x, axis=axis, dtype=x.dtype, include_initial=bool(call.attrs["exclusive"]))
    if call.attrs["exclusive"]:
        out = out[tuple(slice(0, n) if d == axis else slice(None) for d in range(len(x.shape)))]
    return xp.flip(out, axis=axis) if call.attrs["reverse"] else out


def matmul(xp: Namespace, args: Args, call: Call) -> Array:
    a, b = args
    return xp.matmul(a, b)


# ---- layout --------------------------------------------------------------------------------------

def transpose(xp: Namespace, args: Args, call: Call) -> Array:
    (x,) = args
    return xp.permute_dims(x, tuple(call.attrs["permutation"]))


def reshape(xp: Namespace, args: Args, call: Call) -> Array:
    (x,) = args
    return xp.reshape(x, call.result.shape)


def broadcast_in_dim(xp: Namespace, args: Args, call: Call) -> Array:
    (x,) = args
    dims = list(call.attrs["broadcast_dimensions"])
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    xt = xp.permute_dims(x, tuple(order)) if order != list(range(len(dims))) else x
    sizes = dict(zip(sorted(dims), xt.shape, strict=True))
    shape = tuple(sizes.get(d, 1) for d in range(len(call.result.shape)))
    return xp.broadcast_to(xp.reshape(xt, shape), call.result.shape)


def slice_(xp: Namespace, args: Args, call: Call) -> Array:
    (x,) = args
    strides = call.attrs.get("strides") or [1] * len(x.shape)
    index = tuple(slice(s, e, st) for s, e, st in
                  zip(call.attrs["start"], call.attrs["limit"], strides, strict=True))
    return x[index]


def concat(xp: Namespace, args: Args, call: Call) -> Array:
    xs = [a for a in args if a is not None]
    return xp.concat(xs, axis=call.attrs["dim"] % len(xs[0].shape))


def pad(xp: Namespace, args: Args, call: Call) -> Array:
    """`value` around the operand, `low[d]` before and `high[d]` after each dim (the fill is
    converted to the compute type, so the result rounds it to the element type once)."""
    (x,) = args
    for d, (lo, hi) in enumerate(zip(call.attrs["low"], call.attrs["high"], strict=True)):
        if lo == 0 and hi == 0:
            continue
        parts = []
        for n in (lo, None, hi):
            if n is None:
                parts.append(x)
            elif n:
                shape = tuple(n if k == d else x.shape[k] for k in range(len(x.shape)))
                parts.append(xp.full(shape, call.attrs["value"], dtype=x.dtype))
        x = xp.concat(parts, axis=d)
    return x


# ---- indexing and index sources ------------------------------------------------------------------

def gather(xp: Namespace, args: Args, call: Call) -> Array:
    """input[..., indices, ...] along axis (see the module docstring for the index rules).

    On a block of the input (a device's shard of a split table) the indices are global: only
    those inside the block's rows are looked up, the others give 0."""
    x, idx = args
    rank = len(x.shape)
    axis = call.attrs["axis"] % rank
    n_local = x.shape[axis]
    n, offset = n_local, 0
    if call.block is not None:
        if not call.block.operands or call.block.operands[0] is None:
            raise ValueError("lamina.gather run on blocks needs its input's block "
                             "(Block.operands): the backend did not pass it")
        table = call.block.operands[0]
        n, offset = table.global_shape[axis], table.offsets[axis]
    i = xp.astype(idx, xp.int64)
    i = xp.where(i < 0, i + n, i) - offset
    inside = xp.logical_and(i >= 0, i < n_local)
    flat = xp.reshape(xp.where(inside, i, 0), (-1,))
    if n_local == 0:   # nothing to look up: every index is outside
        shape = tuple(x.shape[:axis]) + tuple(idx.shape) + tuple(x.shape[axis + 1:])
        return xp.zeros(shape, dtype=x.dtype)
    taken = xp.take(x, flat, axis=axis)
    shape = tuple(x.shape[:axis]) + tuple(idx.shape) + tuple(x.shape[axis + 1:])
    taken = xp.reshape(taken, shape)
    keep = xp.reshape(inside, (1,) * axis + tuple(idx.shape) + (1,) * (rank - axis - 1))
    return xp.where(keep, taken, xp.zeros((), dtype=x.dtype))


def iota(xp: Namespace, args: Args, call: Call) -> Array:
    """0, 1, ..., n-1 along `dim`, broadcast over the other dims of the result type."""
    shape = call.result.shape
    dim = call.attrs["dim"] % len(shape)
    line = xp.astype(xp.arange(shape[dim]), compute_dtype(xp, call.result.dtype))
    view = tuple(shape[dim] if d == dim else 1 for d in range(len(shape)))
    return xp.broadcast_to(xp.reshape(line, view), shape)
