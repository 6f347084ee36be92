"""Reverse-mode rules: each op-table row's vector-Jacobian product, written in Lamina ops.

A row's `vjp` (`lamina.ir.ops.optable.OpInfo.vjp`) is either a `Rule` or `NotDifferentiable(reason)`.
A rule is a pure function of a `VjpCall`: the op's operand slots and result (SSA values of the
forward program), the cotangent of the result, the op's attributes and which operand slots need a
cotangent; it emits Lamina ops through `call.b` (a `lamina.ir.builder.Builder`, so every
op is a typed class with an inferred result type; the rules see it through the `Emitter` protocol
below, so this module, which the table imports, imports no builder) and returns one cotangent per
operand slot, None where none is wanted or it is zero. The backward program is therefore an
ordinary Lamina program: every pass, backend and sharding rule handles it (JAX's per-primitive
VJPs, with Lamina ops as the language). Giving a new row its VJP is its `vjp=vj.NAME` in the
table, plus its rule here when no existing one fits.

Which edges carry a gradient is decided from types, not from a list: an operand slot is
differentiable when the row has a rule and both that operand and the result have float element
types. So select's condition, dropout's seed operand, compares (an i1 result) and casts to integer
or i1 types never carry one; rows with `NotDifferentiable` (compares, constants) carry none at all.
`derive-backward` reports an argument whose every path to the loss crosses such an edge.

Conventions, PyTorch's where the derivative is not unique: relu' (0) = 0 and abs'(0) = 0; max/min
split the cotangent evenly between equal operands (torch.maximum), reduce_max evenly between equal
maxima (torch.amax); pow's rules are torch's `pow_backward` (0 where the exponent is 0, and no
log(0) term where the base is 0 and the exponent >= 0). Broadcast operands receive the cotangent
summed over the dims broadcasting added or stretched (`Builder.sum_to`). dropout's VJP is dropout
of the cotangent with the same rate and seed: the keep mask is a function of (seed, global element
index) (`lamina.ir.ops.rng`), so no mask is stored. The normalizations recompute their statistics
from the input (the overflow rescaling of the forward formula is not repeated: the backward of a
row whose squares overflow is not finite).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lamina.ir.core.shapes import TensorInfo, info_of
from xdsl.ir import SSAValue


class Emitter(Protocol):
    """The ops a rule emits, as `lamina.ir.builder.Builder` provides them (each op its
    typed class, its result type inferred by its row's shape rule).

    A structural type, not an import: the op table imports this module for its rows' rules, and
    the builder imports the op classes generated from the table, so naming the builder here would
    close an import cycle (table -> rules -> builder -> op classes -> table). Pyright checks that
    the builder `derive-backward` hands a rule has every method below."""

    def like(self, value: float, v: SSAValue) -> SSAValue: ...
    def scalar(self, value: float, dtype: str) -> SSAValue: ...
    def zeros(self, info: TensorInfo) -> SSAValue: ...
    def iota(self, shape: Sequence[int], dtype: str, dim: int) -> SSAValue: ...
    def add(self, a: SSAValue, b: SSAValue) -> SSAValue: ...
    def sub(self, a: SSAValue, b: SSAValue) -> SSAValue: ...
    def mul(self, a: SSAValue, b: SSAValue) -> SSAValue: ...
    def div(self, a: SSAValue, b: SSAValue) -> SSAValue: ...
    def pow(self, a: SSAValue, b: SSAValue) -> SSAValue: ...
    def neg(self, a: SSAValue) -> SSAValue: ...
    def exp(self, a: SSAValue) -> SSAValue: ...
    def log(self, a: SSAValue) -> SSAValue: ...
    def tanh(self, a: SSAValue) -> SSAValue: ...
    def sin(self, a: SSAValue) -> SSAValue: ...
    def cos(self, a: SSAValue) -> SSAValue: ...
    def erf(self, a: SSAValue) -> SSAValue: ...
    def rsqrt(self, a: SSAValue) -> SSAValue: ...
    def gt(self, a: SSAValue, b: SSAValue) -> SSAValue: ...
    def lt(self, a: SSAValue, b: SSAValue) -> SSAValue: ...
    def eq(self, a: SSAValue, b: SSAValue) -> SSAValue: ...
    def select(self, c: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue: ...
    def cast(self, a: SSAValue, dtype: str) -> SSAValue: ...
    def dropout(self, a: SSAValue, rate: float, seed: int | None,
                seed_operand: SSAValue | None) -> SSAValue: ...
    def reduce_sum(self, a: SSAValue, axes: Sequence[int], keepdims: bool = False) -> SSAValue: ...
    def reduce_mean(self, a: SSAValue, axes: Sequence[int], keepdims: bool = False) -> SSAValue: ...
    def matmul(self, a: SSAValue, b: SSAValue) -> SSAValue: ...
    def cumsum(self, a: SSAValue, axis: int, exclusive: bool = False,
               reverse: bool = False) -> SSAValue: ...
    def transpose(self, a: SSAValue, perm: Sequence[int]) -> SSAValue: ...
    def reshape(self, a: SSAValue, shape: Sequence[int]) -> SSAValue: ...
    def broadcast_in_dim(self, a: SSAValue, shape: Sequence[int],
                         dims: Sequence[int]) -> SSAValue: ...
    def slice(self, a: SSAValue, start: Sequence[int], limit: Sequence[int],
              strides: Sequence[int] | None = None) -> SSAValue: ...
    def concat(self, parts: Sequence[SSAValue], dim: int) -> SSAValue: ...
    def sum_to(self, g: SSAValue, shape: Sequence[int]) -> SSAValue: ...


@dataclass(frozen=True)
class VjpCall:
    """What a rule sees: builder, forward values, the result's cotangent, attributes, needs."""

    b: Emitter
    operands: Sequence[SSAValue | None]   # the op's operand slots (None: an absent optional)
    result: SSAValue
    ct: SSAValue                          # d loss / d result, the result's type
    attrs: Mapping[str, Any]              # every attribute, defaults filled in
    wanted: Sequence[bool]                # per slot: is its cotangent needed

    def x(self, i: int = 0) -> SSAValue:
        v = self.operands[i]
        assert v is not None
        return v

    def info(self, i: int = 0) -> TensorInfo:
        return info_of(self.x(i))


Cotangents = list[SSAValue | None]
Rule = Callable[[VjpCall], Cotangents]


@dataclass(frozen=True)
class NotDifferentiable:
    """A row with no gradient at all, and why (shown when a gradient would have to cross it)."""

    reason: str


Vjp = Rule | NotDifferentiable

def in_f32(rule: Rule) -> Rule:
    """`rule` evaluated in float32 for f16/bf16 operands (cast up, then each cotangent cast back
    down), as the forward formula of a composite computes in float32 and rounds once: a
    normalization's backward is a dozen ops, and rounding each to bf16 loses the cancellation
    in dx - projection."""

    def wrapped(c: VjpCall) -> Cotangents:
        low = {info_of(v).dtype for v in (*c.operands, c.result) if v is not None} & {"f16", "bf16"}
        if not low:
            return rule(c)
        b = c.b
        up = [None if v is None else b.cast(v, "f32") for v in c.operands]
        cts = rule(VjpCall(b, up, b.cast(c.result, "f32"), b.cast(c.ct, "f32"), c.attrs,
                           c.wanted))
        return [None if g is None or v is None else b.cast(g, info_of(v).dtype)
                for g, v in zip(cts, c.operands, strict=True)]

    wrapped.__name__ = rule.__name__
    return wrapped


COMPARE = NotDifferentiable("a comparison's i1 result carries no gradient")
CONSTANT = NotDifferentiable("a literal has no operands to differentiate")
IOTA = NotDifferentiable("an iota has no operands to differentiate")


# ---- elementwise, one operand --------------------------------------------------------------------

UnaryFn = Callable[[Emitter, SSAValue, SSAValue, SSAValue, Mapping[str, Any]], SSAValue]


def _unary(fn: UnaryFn) -> Rule:
    """A rule from `fn(b, x, y, g, attrs) -> dx` (y: the op's result, g: its cotangent)."""

    def rule(c: VjpCall) -> Cotangents:
        return [fn(c.b, c.x(), c.result, c.ct, c.attrs)]

    rule.__name__ = fn.__name__
    return rule


@_unary
def neg(b: Emitter, x: SSAValue, y: SSAValue, g: SSAValue, a: Mapping[str, Any]) -> SSAValue:
    return b.neg(g)


@_unary
def abs_(b: Emitter, x: SSAValue, y: SSAValue, g: SSAValue, a: Mapping[str, Any]) -> SSAValue:
    zero = b.like(0.0, x)
    return b.select(b.gt(x, zero), g, b.select(b.lt(x, zero), b.neg(g), zero))


@_unary
def exp(b: Emitter, x: SSAValue, y: SSAValue, g: SSAValue, a: Mapping[str, Any]) -> SSAValue:
    return b.mul(g, y)


@_unary
def log(b: Emitter, x: SSAValue, y: SSAValue, g: SSAValue, a: Mapping[str, Any]) -> SSAValue:
    return b.div(g, x)


@_unary
def tanh(b: Emitter, x: SSAValue, y: SSAValue, g: SSAValue, a: Mapping[str, Any]) -> SSAValue:
    return b.mul(g, b.sub(b.like(1.0, y), b.mul(y, y)))


@_unary
def sin(b: Emitter, x: SSAValue, y: SSAValue, g: SSAValue, a: Mapping[str, Any]) -> SSAValue:
    return b.mul(g, b.cos(x))


@_unary
def cos(b: Emitter, x: SSAValue, y: SSAValue, g: SSAValue, a: Mapping[str, Any]) -> SSAValue:
    return b.neg(b.mul(g, b.sin(x)))


@_unary
def sigmoid(b: Emitter, x: SSAValue, y: SSAValue, g: SSAValue, a: Mapping[str, Any]) -> SSAValue:
    return b.mul(g, b.mul(y, b.sub(b.like(1.0, y), y)))


@_unary
def relu(b: Emitter, x: SSAValue, y: SSAValue, g: SSAValue, a: Mapping[str, Any]) -> SSAValue:
    zero = b.like(0.0, x)
    return b.select(b.gt(x, zero), g, zero)


_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_KAPPA = 0.044715


@in_f32
@_unary
def gelu(b: Emitter, x: SSAValue, y: SSAValue, g: SSAValue, a: Mapping[str, Any]) -> SSAValue:
    """erf form: Phi(x) + x phi(x); tanh form: PyTorch's GeluBackward with approximate='tanh'."""
    if a["approximate"] == "tanh":
        x2 = b.mul(x, x)
        inner = b.mul(b.like(_SQRT_2_OVER_PI, x), b.add(x, b.mul(b.like(_KAPPA, x), b.mul(x2, x))))
        t = b.tanh(inner)
        half = b.like(0.5, x)
        left_d = b.mul(half, b.add(b.like(1.0, x), t))
        slope = b.mul(b.like(_SQRT_2_OVER_PI, x), b.add(b.like(1.0, x),
                                                        b.mul(b.like(3.0 * _KAPPA, x), x2)))
        right_d = b.mul(b.mul(b.mul(half, x), b.sub(b.like(1.0, x), b.mul(t, t))), slope)
        return b.mul(g, b.add(left_d, right_d))
    cdf = b.mul(b.like(0.5, x), b.add(b.like(1.0, x), b.erf(b.mul(x, b.like(_INV_SQRT2, x)))))
    pdf = b.mul(b.exp(b.mul(b.like(-0.5, x), b.mul(x, x))), b.like(_INV_SQRT_2PI, x))
    return b.mul(g, b.add(cdf, b.mul(x, pdf)))


@_unary
def erf(b: Emitter, x: SSAValue, y: SSAValue, g: SSAValue, a: Mapping[str, Any]) -> SSAValue:
    return b.mul(g, b.mul(b.like(_TWO_OVER_SQRT_PI, x), b.exp(b.neg(b.mul(x, x)))))


@_unary
def sqrt(b: Emitter, x: SSAValue, y: SSAValue, g: SSAValue, a: Mapping[str, Any]) -> SSAValue:
    return b.div(b.mul(g, b.like(0.5, x)), y)


@_unary
def rsqrt(b: Emitter, x: SSAValue, y: SSAValue, g: SSAValue, a: Mapping[str, Any]) -> SSAValue:
    return b.mul(g, b.mul(b.like(-0.5, x), b.mul(y, b.mul(y, y))))


@_unary
def reciprocal(b: Emitter, x: SSAValue, y: SSAValue, g: SSAValue,
               a: Mapping[str, Any]) -> SSAValue:
    return b.neg(b.mul(g, b.mul(y, y)))


@_unary
def cast(b: Emitter, x: SSAValue, y: SSAValue, g: SSAValue, a: Mapping[str, Any]) -> SSAValue:
    """float -> float only (other casts are not differentiable edges): back to x's type."""
    return b.cast(g, info_of(x).dtype)


def dropout(c: VjpCall) -> Cotangents:
    """The same mask (same seed, same global element indices) applied to the cotangent."""
    return [c.b.dropout(c.ct, float(c.attrs["rate"]), c.attrs.get("seed"), c.operands[1]
                        if len(c.operands) > 1 else None), None]


# ---- elementwise, two or three operands (NumPy broadcasting) -------------------------------------

BinaryFn = Callable[[Emitter, SSAValue, SSAValue, SSAValue, SSAValue, int], SSAValue]


def _binary(fn: BinaryFn) -> Rule:
    """A rule from `fn(b, lhs, rhs, y, g, i) -> cotangent of operand i at the result's shape`;
    each is summed back to its operand's shape."""

    def rule(c: VjpCall) -> Cotangents:
        out: Cotangents = []
        for i in range(2):
            if not c.wanted[i]:
                out.append(None)
                continue
            full = fn(c.b, c.x(0), c.x(1), c.result, c.ct, i)
            out.append(c.b.sum_to(full, c.info(i).shape))
        return out

    rule.__name__ = fn.__name__
    return rule


@_binary
def add(b: Emitter, lhs: SSAValue, rhs: SSAValue, y: SSAValue, g: SSAValue, i: int) -> SSAValue:
    return g


@_binary
def sub(b: Emitter, lhs: SSAValue, rhs: SSAValue, y: SSAValue, g: SSAValue, i: int) -> SSAValue:
    return g if i == 0 else b.neg(g)


@_binary
def mul(b: Emitter, lhs: SSAValue, rhs: SSAValue, y: SSAValue, g: SSAValue, i: int) -> SSAValue:
    return b.mul(g, rhs if i == 0 else lhs)


@_binary
def div(b: Emitter, lhs: SSAValue, rhs: SSAValue, y: SSAValue, g: SSAValue, i: int) -> SSAValue:
    t = b.div(g, rhs)
    return t if i == 0 else b.neg(b.mul(t, y))


def _extremum(pick_other: Callable[[Emitter, SSAValue, SSAValue], SSAValue]) -> BinaryFn:
    """max / min: the whole cotangent to the operand that is the result, half to each on a tie
    (torch.maximum's rule); `pick_other(b, mine, other)` is true where the other one wins."""

    def fn(b: Emitter, lhs: SSAValue, rhs: SSAValue, y: SSAValue, g: SSAValue, i: int) -> SSAValue:
        mine, other = (lhs, rhs) if i == 0 else (rhs, lhs)
        zero = b.like(0.0, g)
        half = b.mul(g, b.like(0.5, g))
        return b.select(b.eq(lhs, rhs), half, b.select(pick_other(b, mine, other), zero, g))

    return fn


max_ = _binary(_extremum(lambda b, mine, other: b.lt(mine, other)))
max_.__name__ = "max"
min_ = _binary(_extremum(lambda b, mine, other: b.gt(mine, other)))
min_.__name__ = "min"


@_binary
def pow_(b: Emitter, lhs: SSAValue, rhs: SSAValue, y: SSAValue, g: SSAValue, i: int) -> SSAValue:
    zero = b.like(0.0, g)
    if i == 0:
        d = b.mul(g, b.mul(rhs, b.pow(lhs, b.sub(rhs, b.like(1.0, rhs)))))
        return b.select(b.eq(rhs, zero), zero, d)
    d = b.mul(g, b.mul(y, b.log(lhs)))
    return b.select(b.eq(lhs, zero), b.select(b.lt(rhs, zero), d, zero), d)


def select(c: VjpCall) -> Cotangents:
    """The condition carries none (i1); each value gets the cotangent where it was chosen."""
    b, cond, g = c.b, c.x(0), c.ct
    zero = b.like(0.0, g)
    out: Cotangents = [None]
    for i, picked in ((1, (g, zero)), (2, (zero, g))):
        out.append(b.sum_to(b.select(cond, *picked), c.info(i).shape) if c.wanted[i] else None)
    return out


# ---- reductions and composites -------------------------------------------------------------------

def _axes(c: VjpCall) -> list[int]:
    rank = c.info().rank
    return sorted(a % rank for a in c.attrs["axes"])


def _spread(c: VjpCall, v: SSAValue) -> SSAValue:
    """A reduction's result-shaped value `v` broadcast back over the reduced axes."""
    shape, axes = c.info().shape, _axes(c)
    dims = range(len(shape)) if c.attrs["keepdims"] else [d for d in range(len(shape))
                                                          if d not in axes]
    return c.b.broadcast_in_dim(v, shape, dims)


def reduce_sum(c: VjpCall) -> Cotangents:
    return [_spread(c, c.ct)]


def reduce_mean(c: VjpCall) -> Cotangents:
    n = math.prod(c.info().shape[a] for a in _axes(c))
    return [_spread(c, c.b.mul(c.ct, c.b.like(1.0 / n, c.ct)))]


def reduce_max(c: VjpCall) -> Cotangents:
    """Evenly between the elements equal to the maximum (torch.amax)."""
    b, x = c.b, c.x()
    hit = b.cast(b.eq(x, _spread(c, c.result)), c.info().dtype)
    count = b.reduce_sum(hit, _axes(c), keepdims=True)
    return [b.div(b.mul(_spread(c, c.ct), hit), count)]


def _norm_axes(c: VjpCall) -> tuple[list[int], list[int]]:
    """(normalized axes axis..rank-1, the leading axes a scale or bias is broadcast over)."""
    rank = c.info().rank
    axis = int(c.attrs["axis"]) % rank
    return list(range(axis, rank)), list(range(axis))


def _norm_input(c: VjpCall, xhat: SSAValue, rstd: SSAValue, dxhat: SSAValue,
                centered: bool) -> SSAValue:
    """dx of y = xhat(x) for xhat = (x - mean) * rstd (centered) or x * rstd (rmsnorm)."""
    b = c.b
    axes, _ = _norm_axes(c)
    proj = b.mul(xhat, b.reduce_mean(b.mul(dxhat, xhat), axes, keepdims=True))
    inner = b.sub(dxhat, b.reduce_mean(dxhat, axes, keepdims=True)) if centered else dxhat
    return b.mul(rstd, b.sub(inner, proj))


def _normalization(c: VjpCall, centered: bool) -> Cotangents:
    """The VJP of layernorm (`centered`) or rmsnorm, which differ only in centering x: the
    forward recomputed in f32 as xhat = v * rstd, then dx, dscale and (layernorm) dbias."""
    b, x = c.b, c.x()
    axes, lead = _norm_axes(c)
    scale = c.operands[1] if len(c.operands) > 1 else None
    v = b.sub(x, b.reduce_mean(x, axes, keepdims=True)) if centered else x
    sq_mean = b.reduce_mean(b.mul(v, v), axes, keepdims=True)
    rstd = b.rsqrt(b.add(sq_mean, b.like(float(c.attrs["eps"]), x)))
    xhat = b.mul(v, rstd)
    g = c.ct
    out: Cotangents = [None] * len(c.operands)
    if c.wanted[0]:
        out[0] = _norm_input(c, xhat, rstd, b.mul(g, scale) if scale is not None else g, centered)
    if len(c.operands) > 1 and c.wanted[1]:
        out[1] = b.reduce_sum(b.mul(g, xhat), lead)
    if len(c.operands) > 2 and c.wanted[2]:
        out[2] = b.reduce_sum(g, lead)
    return out


@in_f32
def layernorm(c: VjpCall) -> Cotangents:
    return _normalization(c, True)


@in_f32
def rmsnorm(c: VjpCall) -> Cotangents:
    return _normalization(c, False)


@in_f32
def softmax(c: VjpCall) -> Cotangents:
    """dx = y (g - sum(g y)), safe or not: on a `safe` line of only -inf, y = 0 and so is dx
    (torch's gradient of `_safe_softmax`)."""
    b, y, g = c.b, c.result, c.ct
    axis = int(c.attrs["axis"]) % c.info().rank
    return [b.mul(y, b.sub(g, b.reduce_sum(b.mul(g, y), [axis], keepdims=True)))]


def log_softmax(c: VjpCall) -> Cotangents:
    """y = x - logsumexp(x): dx = g - softmax(x) * sum(g), softmax(x) being exp(y)."""
    b, y, g = c.b, c.result, c.ct
    axis = int(c.attrs["axis"]) % c.info().rank
    return [b.sub(g, b.mul(b.exp(y), b.reduce_sum(g, [axis], keepdims=True)))]


def gather(c: VjpCall) -> Cotangents:
    """The table's cotangent is a scatter-add of g into the rows the indices read, written as a
    one-hot matmul: with the table P + [V] + S (V along `axis`), the indices I (N elements) and
    g P + I + S, dT[p, v, s] = sum_n onehot[n, v] * g[p, n, s]. A negative index reads row
    V + i, as the forward does; one outside [-V, V) reads nothing and gets no gradient. The
    indices are integers: no cotangent."""
    b, g = c.b, c.ct
    table, idx = c.info(0), c.info(1)
    axis = int(c.attrs["axis"]) % table.rank
    v_rows = table.shape[axis]
    p = math.prod(table.shape[:axis])
    s = math.prod(table.shape[axis + 1:])
    n = math.prod(idx.shape)
    flat = b.reshape(c.x(1), [n])
    wrapped = b.select(b.lt(flat, b.scalar(0, idx.dtype)),
                       b.add(flat, b.scalar(v_rows, idx.dtype)), flat)
    rows = b.broadcast_in_dim(wrapped, [n, v_rows], [0])
    onehot = b.cast(b.eq(rows, b.iota([n, v_rows], idx.dtype, 1)), info_of(g).dtype)
    g3 = b.transpose(b.reshape(g, [p, n, s]), [0, 2, 1])          # [P, S, N]
    dt = b.transpose(b.matmul(g3, onehot), [0, 2, 1])              # [P, V, S]
    return [b.reshape(dt, list(table.shape)) if c.wanted[0] else None, None]


def cumsum(c: VjpCall) -> Cotangents:
    """The running sum taken the other way: x[j] feeds every y[i] with i >= j (i > j when
    exclusive), so dx[j] is the sum of those g[i], a cumsum of g with `reverse` flipped."""
    a = c.attrs
    return [c.b.cumsum(c.ct, int(a["axis"]), bool(a["exclusive"]), not a["reverse"])]


def matmul(c: VjpCall) -> Cotangents:
    """dA = G B^T, dB = A^T G (last two dims), each summed over the batch dims it was broadcast
    along."""
    b, g = c.b, c.ct

    def swap(v: SSAValue) -> SSAValue:
        r = info_of(v).rank
        return b.transpose(v, [*range(r - 2), r - 1, r - 2])

    da = b.sum_to(b.matmul(g, swap(c.x(1))), c.info(0).shape) if c.wanted[0] else None
    db = b.sum_to(b.matmul(swap(c.x(0)), g), c.info(1).shape) if c.wanted[1] else None
    return [da, db]


# ---- layout --------------------------------------------------------------------------------------

def _inverse(perm: Sequence[int]) -> list[int]:
    return [list(perm).index(i) for i in range(len(perm))]


def transpose(c: VjpCall) -> Cotangents:
    return [c.b.transpose(c.ct, _inverse(c.attrs["permutation"]))]


def reshape(c: VjpCall) -> Cotangents:
    return [c.b.reshape(c.ct, c.info().shape)]


def broadcast_in_dim(c: VjpCall) -> Cotangents:
    """Sum over the result dims the operand does not map to and those it stretched from size 1,
    then put the operand's dims back in its own order."""
    b, g = c.b, c.ct
    shape, dims = c.info().shape, list(c.attrs["broadcast_dimensions"])
    rshape = info_of(g).shape
    summed = [d for d in range(len(rshape)) if d not in dims]
    summed += [dims[i] for i in range(len(shape)) if shape[i] == 1 and rshape[dims[i]] != 1]
    kept = b.reduce_sum(g, sorted(summed), keepdims=True)
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    flat = b.reshape(kept, [shape[i] for i in order])
    return [b.transpose(flat, _inverse(order))]


def _spread_strided(b: Emitter, v: SSAValue, d: int, stride: int) -> SSAValue:
    """`v` with stride - 1 zeros after each element along dim d, the trailing ones cut off."""
    info = info_of(v)
    n = info.shape[d]
    wide = list(info.shape[:d + 1]) + [1] + list(info.shape[d + 1:])
    pad = TensorInfo((*info.shape[:d + 1], stride - 1, *info.shape[d + 1:]), info.dtype)
    both = b.concat([b.reshape(v, wide), b.zeros(pad)], d + 1)
    flat = list(info.shape)
    flat[d] = n * stride
    merged = b.reshape(both, flat)
    limit = list(flat)
    limit[d] = (n - 1) * stride + 1
    return b.slice(merged, [0] * len(flat), limit)


def _pad(b: Emitter, v: SSAValue, d: int, before: int, after: int) -> SSAValue:
    info = info_of(v)
    parts = []
    for n in (before, after):
        shape = list(info.shape)
        shape[d] = n
        parts.append(b.zeros(TensorInfo(tuple(shape), info.dtype)) if n else None)
    return b.concat([p for p in (parts[0], v, parts[1]) if p is not None], d)


def slice_(c: VjpCall) -> Cotangents:
    """The cotangent placed back at the sliced positions, zeros elsewhere, without a scatter:
    along each dim, zeros interleaved for a stride, then zeros concatenated before and after."""
    b, g = c.b, c.ct
    x = c.info()
    gshape = info_of(g).shape
    if math.prod(gshape) == 0:
        return [b.zeros(x)]
    start = list(c.attrs["start"])
    strides = list(c.attrs.get("strides") or [1] * x.rank)
    cur = g
    for d in range(x.rank):
        n, stride = gshape[d], strides[d]
        if stride > 1 and n > 1:
            cur = _spread_strided(b, cur, d, stride)
        span = (n - 1) * stride + 1
        cur = _pad(b, cur, d, start[d], x.shape[d] - start[d] - span)
    return [cur]


def pad(c: VjpCall) -> Cotangents:
    """The cotangent's slice at the operand's elements (the fill has no operand)."""
    low = list(c.attrs["low"])
    limit = [lo + n for lo, n in zip(low, c.info().shape, strict=True)]
    return [c.b.slice(c.ct, low, limit)]


def concat(c: VjpCall) -> Cotangents:
    """Each operand's cotangent is its slice of the result's."""
    b, g = c.b, c.ct
    dim = int(c.attrs["dim"]) % c.info().rank
    out: Cotangents = []
    offset = 0
    for i in range(len(c.operands)):
        shape = c.info(i).shape
        if c.wanted[i]:
            start = [0] * len(shape)
            start[dim] = offset
            limit = list(shape)
            limit[dim] = offset + shape[dim]
            out.append(b.slice(g, start, limit))
        else:
            out.append(None)
        offset += shape[dim]
    return out
