"""Value-range facts of Lamina's ops: interval images, domains and exactness, one rule per op.

Why these facts exist: a value-range analysis needs to know, for each op, which values its result
can take given the ranges of its operands. Today the random-program generator
(`tests/strategies/programs.py`) is the user: it tracks an interval for every value it creates and
emits only ops whose operands lie in their domain and whose result stays in range, so that random
programs are numerically meaningful (finite in f16, no NaN from log of a negative, no branch that
flips under reassociation). A future range analysis in `lamina.analysis` (bounds for quantization,
proving a cast cannot overflow, dropping a clamp) can use the same rules. They are per-op facts,
so they live in the op table: each `OpInfo.interval` is an `IntervalRule` defined here, and no
module outside the table keeps a list of ops with their ranges.

A rule has three parts:
- `image(intervals, call)`: an interval that contains the op's result whenever every operand lies
  in its interval (the intervals are in table operand order, None for an absent optional operand;
  `call` is the same `lamina.ir.ops.formulas.Call` the formula gets, for attributes, operand shapes and
  the result type). Images are of the real functions: the element type's rounding can move a
  result an ulp or so past a bound, which users absorb with a margin. Images are sound, not tight
  (gelu's is a simple bound; a reduction's assumes the worst case for every element).
- `domains`: per operand, the values for which the op is defined and well-conditioned (`Domain`):
  anything; positive (log, rsqrt; pow's base); non-zero (reciprocal, a divisor); non-negative
  (sqrt); bounded above (exp, which overflows f16 past log(65504)); bounded (pow's exponent: the
  relative error of x**y is |y| times that of x, so large exponents leave no meaningful digits in
  f16/bf16). `image` may only be called with operand intervals its domains admit.
- `exact`: on operands that hold exactly the values the program computed, the result is a
  function of those stored values alone, with no rounding that an evaluation order or a compute
  precision could change (neg, abs, relu, max, min, compares, select, reduce_max and layout ops
  pick or negate an operand value; a cast rounds once, as its element type defines). Passes that
  reassociate or fuse float math cannot move such a value, so a compare or a float -> int cast of
  it gives the same answer in every pipeline.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from lamina.ir.core.shapes import TensorInfo
from lamina.ir.ops.formulas import Call

Interval = tuple[float, float]                  # (lo, hi), lo <= hi, closed
Image = Callable[[Sequence[Interval | None], Call], Interval]

# f16 overflows past 65504; exp stays finite in every Lamina float type below this input
EXP_MAX = math.log(65504.0)
# |exponent| up to which pow keeps the relative error within 3x its base's
POW_EXPONENT_MAX = 3.0
# the minimum of gelu over the reals, for both forms (erf: -0.169971 at x = -0.7518; tanh:
# -0.170041 at x = -0.7525), rounded down
GELU_MIN = -0.1701


class DomainKind(Enum):
    ANY = "any"
    POSITIVE = "positive"             # x > 0
    NONZERO = "nonzero"               # x != 0 (the interval must not contain 0)
    NON_NEGATIVE = "non_negative"     # x >= 0
    BOUNDED_ABOVE = "bounded_above"   # x <= limit
    BOUNDED = "bounded"               # |x| <= limit


@dataclass(frozen=True)
class Domain:
    """The values one operand may take for the op to be defined and well-conditioned."""

    kind: DomainKind = DomainKind.ANY
    limit: float = math.inf           # BOUNDED_ABOVE / BOUNDED only

    def admits(self, iv: Interval, margin: float = 0.0) -> bool:
        """Whether every value of `iv` is in the domain, keeping `margin` away from 0 where the
        op is undefined at 0 (POSITIVE, NONZERO): a caller that wants a bounded result asks for
        a margin, since 1 / x of x in (0, 1e-30] is finite but useless."""
        lo, hi = iv
        match self.kind:
            case DomainKind.ANY:
                return True
            case DomainKind.POSITIVE:
                return lo > 0 and lo >= margin
            case DomainKind.NONZERO:
                return (lo > 0 and lo >= margin) or (hi < 0 and hi <= -margin)
            case DomainKind.NON_NEGATIVE:
                return lo >= 0
            case DomainKind.BOUNDED_ABOVE:
                return hi <= self.limit
            case DomainKind.BOUNDED:
                return -self.limit <= lo and hi <= self.limit


ANY = Domain()
POSITIVE = Domain(DomainKind.POSITIVE)
NONZERO = Domain(DomainKind.NONZERO)
NON_NEGATIVE = Domain(DomainKind.NON_NEGATIVE)


def bounded_above(limit: float) -> Domain:
    return Domain(DomainKind.BOUNDED_ABOVE, limit)


def bounded(limit: float) -> Domain:
    return Domain(DomainKind.BOUNDED, limit)


@dataclass(frozen=True)
class IntervalRule:
    """An op's value-range facts (see the module docstring)."""

    image: Image
    domains: tuple[Domain, ...] = ()  # per operand in table order; operands past the end: ANY
    exact: bool = False

    def domain(self, i: int) -> Domain:
        return self.domains[i] if i < len(self.domains) else ANY

    def admits(self, ivs: Sequence[Interval | None], margin: float = 0.0) -> bool:
        return all(iv is None or self.domain(i).admits(iv, margin) for i, iv in enumerate(ivs))


# ---- interval arithmetic -------------------------------------------------------------------------

def _safe(f: Callable[..., float], *xs: float) -> float:
    """f(*xs), or +inf where Python's float overflows (math.exp, **) instead of returning inf."""
    try:
        return f(*xs)
    except OverflowError:
        return math.inf


def hull(*ivs: Interval) -> Interval:
    """The smallest interval containing all of `ivs`."""
    return min(iv[0] for iv in ivs), max(iv[1] for iv in ivs)


def mul(a: Interval, b: Interval) -> Interval:
    c = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
    return min(c), max(c)


def _present(ivs: Sequence[Interval | None]) -> list[Interval]:
    return [iv for iv in ivs if iv is not None]


def _first(ivs: Sequence[Interval | None]) -> Interval:
    iv = ivs[0]
    assert iv is not None, "the first operand is never optional"
    return iv


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(max(x, -745.0))
    return e / (1.0 + e)


def _increasing(f: Callable[[float], float]) -> Image:
    """The image rule of a non-decreasing unary function."""
    def image(ivs: Sequence[Interval | None], call: Call) -> Interval:
        lo, hi = _first(ivs)
        return _safe(f, lo), _safe(f, hi)
    return image


def _decreasing(f: Callable[[float], float]) -> Image:
    """The image rule of a non-increasing unary function."""
    def image(ivs: Sequence[Interval | None], call: Call) -> Interval:
        lo, hi = _first(ivs)
        return _safe(f, hi), _safe(f, lo)
    return image


def _binary(f: Callable[[Interval, Interval], Interval]) -> Image:
    def image(ivs: Sequence[Interval | None], call: Call) -> Interval:
        a, b = ivs
        assert a is not None and b is not None
        return f(a, b)
    return image


def _abs(ivs: Sequence[Interval | None], call: Call) -> Interval:
    lo, hi = _first(ivs)
    least = lo if lo >= 0 else (-hi if hi < 0 else 0.0)
    return least, max(abs(lo), abs(hi))


def _gelu(ivs: Sequence[Interval | None], call: Call) -> Interval:
    """x * P(x) with 0 <= P <= 1 (both forms): between min(x, 0) and max(x, 0), and >= GELU_MIN."""
    lo, hi = _first(ivs)
    return max(GELU_MIN, min(lo, 0.0)), max(hi, 0.0)


def _div(a: Interval, b: Interval) -> Interval:
    """a / b for b not containing 0 (1 / b is then in [1 / b.hi, 1 / b.lo], either sign)."""
    return mul(a, (1.0 / b[1], 1.0 / b[0]))


def _pow(a: Interval, b: Interval) -> Interval:
    """a ** b for a > 0: exp(b log a) is monotone in each argument, so the extremes are corners."""
    c = [_safe(math.pow, x, y) for x in a for y in b]
    return min(c), max(c)


# ---- the rules -----------------------------------------------------------------------------------

NEG = IntervalRule(_decreasing(lambda x: -x), exact=True)
ABS = IntervalRule(_abs, exact=True)
RELU = IntervalRule(_increasing(lambda x: max(x, 0.0)), exact=True)
EXP = IntervalRule(_increasing(math.exp), (bounded_above(EXP_MAX),))
LOG = IntervalRule(_increasing(math.log), (POSITIVE,))
TANH = IntervalRule(_increasing(math.tanh))
# sin and cos of any real lie in [-1, 1]; a bound, not the tight image of a short interval
SIN_COS = IntervalRule(lambda ivs, call: (-1.0, 1.0))
SIGMOID = IntervalRule(_increasing(_sigmoid))
ERF = IntervalRule(_increasing(math.erf))
GELU = IntervalRule(_gelu)
SQRT = IntervalRule(_increasing(math.sqrt), (NON_NEGATIVE,))
RSQRT = IntervalRule(_decreasing(lambda x: 1.0 / math.sqrt(x)), (POSITIVE,))
RECIPROCAL = IntervalRule(_decreasing(lambda x: 1.0 / x), (NONZERO,))

ADD = IntervalRule(_binary(lambda a, b: (a[0] + b[0], a[1] + b[1])))
SUB = IntervalRule(_binary(lambda a, b: (a[0] - b[1], a[1] - b[0])))
MUL = IntervalRule(_binary(mul))
DIV = IntervalRule(_binary(_div), (ANY, NONZERO))
MAX = IntervalRule(_binary(lambda a, b: (max(a[0], b[0]), max(a[1], b[1]))), exact=True)
MIN = IntervalRule(_binary(lambda a, b: (min(a[0], b[0]), min(a[1], b[1]))), exact=True)
POW = IntervalRule(_binary(_pow), (POSITIVE, bounded(POW_EXPONENT_MAX)))

# an i1 result: false / true as 0 / 1
COMPARE = IntervalRule(lambda ivs, call: (0.0, 1.0), exact=True)


def _select(ivs: Sequence[Interval | None], call: Call) -> Interval:
    return hull(*_present(ivs[1:]))


SELECT = IntervalRule(_select, exact=True)


def _cast(ivs: Sequence[Interval | None], call: Call) -> Interval:
    """To i1: x != 0; to an integer type: truncation toward zero (monotone); to a float: x."""
    lo, hi = _first(ivs)
    dst = call.result.dtype
    if dst == "i1":
        return 0.0, 1.0
    if dst.startswith("i"):
        return float(math.trunc(lo)), float(math.trunc(hi))
    return lo, hi


CAST = IntervalRule(_cast, exact=True)


def _dropout(ivs: Sequence[Interval | None], call: Call) -> Interval:
    """x / (1 - rate) or 0, per element."""
    lo, hi = _first(ivs)
    scale = 1.0 / (1.0 - float(call.attrs["rate"]))
    return min(lo * scale, 0.0), max(hi * scale, 0.0)


DROPOUT = IntervalRule(_dropout)


def _reduced_count(call: Call) -> int:
    """How many elements a reduction over `axes` combines into each result element."""
    x = call.operands[0]
    assert isinstance(x, TensorInfo)
    return math.prod(x.shape[a % x.rank] for a in set(call.attrs["axes"]))


def _reduce_sum(ivs: Sequence[Interval | None], call: Call) -> Interval:
    lo, hi = _first(ivs)
    n = _reduced_count(call)
    return n * lo, n * hi


# a sum of n elements in [lo, hi] is in [n lo, n hi]; a mean or a max stays in [lo, hi]
REDUCE_SUM = IntervalRule(_reduce_sum)
REDUCE_MEAN = IntervalRule(lambda ivs, call: _first(ivs))
REDUCE_MAX = IntervalRule(lambda ivs, call: _first(ivs), exact=True)


def _normalized(ivs: Sequence[Interval | None], call: Call) -> Interval:
    """layernorm / rmsnorm: each normalized element is at most sqrt(n) in size for n normalized
    elements (|x_i| <= sqrt(sum x_j^2) = sqrt(n mean x^2)), then times scale, plus bias."""
    x = call.operands[0]
    assert isinstance(x, TensorInfo)
    m = math.sqrt(math.prod(x.shape[call.attrs["axis"] % x.rank:]))
    out = (-m, m)
    scale = ivs[1] if len(ivs) > 1 else None
    bias = ivs[2] if len(ivs) > 2 else None
    if scale is not None:
        out = mul(out, scale)
    if bias is not None:
        out = (out[0] + bias[0], out[1] + bias[1])
    return out


NORMALIZATION = IntervalRule(_normalized)
SOFTMAX = IntervalRule(lambda ivs, call: (0.0, 1.0))


def _matmul(ivs: Sequence[Interval | None], call: Call) -> Interval:
    """A sum of k products, k the contracted size."""
    a, b = ivs
    x = call.operands[0]
    assert a is not None and b is not None and isinstance(x, TensorInfo)
    lo, hi = mul(a, b)
    k = x.shape[-1]
    return k * lo, k * hi


MATMUL = IntervalRule(_matmul)


def _cumsum(ivs: Sequence[Interval | None], call: Call) -> Interval:
    """A running sum holds 1..n operand elements (0..n-1 when exclusive, so 0 is in it)."""
    lo, hi = _first(ivs)
    x = call.operands[0]
    assert x is not None
    n = x.shape[call.attrs["axis"] % x.rank]
    few = 0 if call.attrs["exclusive"] else min(1, n)
    many = n - 1 if call.attrs["exclusive"] else n
    return hull((few * lo, few * hi), (max(many, 0) * lo, max(many, 0) * hi))


CUMSUM = IntervalRule(_cumsum)

# transpose, reshape, slice, concat, broadcast_in_dim: every result element is an operand element
MOVE = IntervalRule(lambda ivs, call: hull(*_present(ivs)), exact=True)


def _log_softmax(ivs: Sequence[Interval | None], call: Call) -> Interval:
    """x_i - max - log(sum exp(x_j - max)): at most 0 (the log of a sum holding exp(0) is >= 0),
    at least (lo - hi) - log(n) for n elements along the axis."""
    lo, hi = _first(ivs)
    x = call.operands[0]
    assert isinstance(x, TensorInfo)
    n = x.shape[call.attrs["axis"] % x.rank]
    return (lo - hi) - math.log(max(n, 1)), 0.0


LOG_SOFTMAX = IntervalRule(_log_softmax)


def _pad(ivs: Sequence[Interval | None], call: Call) -> Interval:
    v = float(call.attrs["value"])
    return hull(_first(ivs), (v, v))


PAD = IntervalRule(_pad, exact=True)


def _gather(ivs: Sequence[Interval | None], call: Call) -> Interval:
    """An element of the input, or 0 for an index outside it."""
    return hull(_first(ivs), (0.0, 0.0))


GATHER = IntervalRule(_gather, exact=True)


def _iota(ivs: Sequence[Interval | None], call: Call) -> Interval:
    n = call.result.shape[call.attrs["dim"] % call.result.rank]
    return 0.0, float(max(n - 1, 0))


IOTA = IntervalRule(_iota, exact=True)
