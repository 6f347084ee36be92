"""Random Lamina programs for property tests and benchmarks.

API (stable; every pass's property tests use it):

    @dataclass
    class GeneratedProgram:
        text: str                      # one `func.func @main(...)` ending in func.return (custom syntax)
        inputs: list[np.ndarray]       # one array per argument, storage dtypes, finite values
        arg_types: list[tuple[tuple[int, ...], str]]   # (shape, element type) per argument
        n_ops: int                     # number of lamina ops in the body

    programs(*, min_ops=1, max_ops=12, dtypes=("f32",), families=ALL_FAMILIES, max_rank=3,
             max_dim=6, max_outputs=3) -> SearchStrategy[GeneratedProgram]
    random_program_text(seed, n_ops, *, dtypes=..., families=..., max_rank=..., max_dim=...,
                        max_outputs=...) -> str
    random_program(seed, n_ops, **same_kwargs) -> GeneratedProgram   # the same text + inputs

`programs` is a Hypothesis strategy (every structural choice is a separate draw, so failures
shrink to small programs); `random_program_text` makes the same kind of program from an integer
seed without Hypothesis, in time linear in `n_ops` (about 20 us per op), for benchmarks with
10k-50k ops. It uses Python's `random.Random(seed)` (deterministic for a seed); run such programs
with `lamina.backends.inputs.random_inputs` (standard-normal floats).

What the programs look like
- A DAG: every op picks its operands among all earlier values (function arguments and op results,
  biased towards recent ones), so values have several uses, diamonds and long live ranges occur.
  Arguments are created lazily when an op needs an operand of a shape nothing provides.
- `dtypes` are the float element types of the arguments (f16, bf16, f32, f64; integer entries are
  ignored). Integer and i1 values come from casts, compares and seed constants/arguments.
- Families (`families=`, any subset of `ALL_FAMILIES`):
    elementwise  unary ops (all of them) and same-shape binary ops; cast round trips
                 (float -> any type -> back)
    broadcast    binary ops on operands of different but broadcastable shapes (rank-0, size-1
                 dims, lower rank, outer-product style) and broadcast_in_dim
    reduction    reduce_sum / reduce_mean / reduce_max, keepdims true and false, negative axes
    composite    layernorm (with/without scale, bias), rmsnorm (with/without scale), softmax,
                 with and without explicit axis / eps attributes
    matmul       batched matmul with broadcast batch dims
    layout       transpose, reshape, slice (with and without strides), concat, broadcast_in_dim
    dropout      dropout with a seed attribute, or a seed operand (constant or i64 argument)
    constant     splat and dense constants used by a binary op
    select       compare (on floats, ints, i1) + select
  Helper ops outside the chosen families may appear where an op needs them (abs + constant or
  exp(tanh(x)) to make a positive operand for log / sqrt / rsqrt / reciprocal / div / pow; tanh
  to bound a pow exponent). Without "constant" no constant op is emitted except dropout seeds.
- Finite outputs: the generator tracks a conservative value interval for every value and only
  emits ops whose result stays within +-2000 (so f16 is safe) and whose domain is respected
  (log/rsqrt/reciprocal/div denominators >= 0.05, sqrt >= 0, exp of values <= 6, pow bases
  >= 0.3 with exponents in [-3, 3]). Arguments are assumed to lie in [-4, 4]; `inputs` are
  uniform in [-3, 3] (seed arguments: integers in [0, 1000)).
- Stable under math reordering: compares, float->int and float->i1 casts only take "exact"
  values (arguments, constants, and values derived from them by layout ops, casts, neg/abs/relu,
  max/min, reduce_max, select), so fusing or reassociating float math cannot flip a branch.
- Results: 1..max_outputs distinct op results, always including the last op's result.
- Shapes: ranks 0..max_rank, dims 1..max_dim (concat may reach 2 * max_dim); no empty tensors.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st
from lamina.ir.dtypes import STORAGE, to_storage

ALL_FAMILIES = ("elementwise", "broadcast", "reduction", "composite", "matmul", "layout",
                "dropout", "constant", "select")
FLOATS = ("f16", "bf16", "f32", "f64")
CAP = 2000.0            # |value| bound every generated value must respect
ARG_BOUND = 4.0         # assumed |argument| bound (inputs are drawn in [-3, 3])
POS_MIN = 0.05          # minimum of a value used where a positive operand is needed
CONST_VALUES = (-2.0, -1.5, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0)
POW_EXPONENTS = (2.0, 0.5, 3.0, -1.0, 1.5, -0.5)


@dataclass
class GeneratedProgram:
    text: str
    inputs: list[np.ndarray]
    arg_types: list[tuple[tuple[int, ...], str]]
    n_ops: int


# ---- choices: Hypothesis draws or a seeded RNG ---------------------------------------------------

class _Chooser:
    def randint(self, lo: int, hi: int) -> int:  # inclusive
        raise NotImplementedError

    def choice(self, seq: Sequence):
        return seq[self.randint(0, len(seq) - 1)]

    def coin(self, p: float) -> bool:
        return self.randint(0, 999) < int(p * 1000)


class _RandomChooser(_Chooser):
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    def randint(self, lo: int, hi: int) -> int:
        return self.r.randint(lo, hi)

    def coin(self, p: float) -> bool:
        return self.r.random() < p


class _DrawChooser(_Chooser):
    def __init__(self, draw: Callable) -> None:
        self.draw = draw

    def randint(self, lo: int, hi: int) -> int:
        if lo == hi:
            return lo
        return self.draw(st.integers(lo, hi))


# ---- values and intervals ------------------------------------------------------------------------

class _Val:
    __slots__ = ("name", "shape", "dtype", "lo", "hi", "exact", "is_arg")

    def __init__(self, name: str, shape: tuple[int, ...], dtype: str, lo: float, hi: float,
                 exact: bool, is_arg: bool = False) -> None:
        self.name, self.shape, self.dtype = name, shape, dtype
        self.lo, self.hi, self.exact, self.is_arg = lo, hi, exact, is_arg

    @property
    def bound(self) -> float:
        return max(abs(self.lo), abs(self.hi))


def _ty(shape: tuple[int, ...], dtype: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + dtype + ">"


def _bcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    n = max(len(a), len(b))
    out = []
    for i in range(n):
        x = a[i - n + len(a)] if i - n + len(a) >= 0 else 1
        y = b[i - n + len(b)] if i - n + len(b) >= 0 else 1
        if x != y and x != 1 and y != 1:
            return None
        out.append(max(x, y))
    return tuple(out)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _mul_iv(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    c = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
    return min(c), max(c)


def _binary_bounds(op: str, a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    """Interval bounds of `a op b` for the generator's binary ops (b > 0 for div, a > 0 for pow)."""
    match op:
        case "add":
            return a[0] + b[0], a[1] + b[1]
        case "sub":
            return a[0] - b[1], a[1] - b[0]
        case "mul":
            return _mul_iv(a, b)
        case "max":
            return max(a[0], b[0]), max(a[1], b[1])
        case "min":
            return min(a[0], b[0]), min(a[1], b[1])
        case "div":
            return _mul_iv(a, (1 / b[1], 1 / b[0]))
        case "pow":
            c = [a[0] ** b[0], a[0] ** b[1], a[1] ** b[0], a[1] ** b[1]]
            return min(c), max(c)
        case _:
            raise AssertionError(f"no bounds rule for binary op {op!r}")


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(max(x, -700.0))
    return e / (1.0 + e)


def _fmt_float(v: float) -> str:
    return f"{v:.6e}"


def _fmt_elem(v: float, dtype: str) -> str:
    if dtype == "i1":
        return "true" if v else "false"
    if dtype in FLOATS:
        return _fmt_float(v)
    return str(int(v))


def _ints(vals: Sequence[int]) -> str:
    return "array<i64" + (": " + ", ".join(str(int(v)) for v in vals) if len(vals) else "") + ">"


def _factor(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


class _Reject(Exception):
    """The chosen op does not fit here (domain, bounds, budget); choose again."""


# ---- the generator -------------------------------------------------------------------------------

class _Gen:
    def __init__(self, ch: _Chooser, dtypes: Sequence[str], families: Sequence[str],
                 max_rank: int, max_dim: int, max_outputs: int) -> None:
        self.ch = ch
        self.fdtypes = [d for d in dtypes if d in FLOATS]
        if not self.fdtypes:
            raise ValueError(f"programs need at least one float dtype, got {list(dtypes)}")
        unknown = set(families) - set(ALL_FAMILIES)
        if unknown or not families:
            raise ValueError(f"unknown or no families: {sorted(unknown)} (known: {ALL_FAMILIES})")
        self.families = list(families)
        self.max_rank, self.max_dim = max(0, max_rank), max(1, max_dim)
        self.max_outputs = max(1, max_outputs)
        self.consts_ok = "constant" in families
        self.args: list[_Val] = []
        self.lines: list[str] = []
        self.results: list[_Val] = []
        self.floats: list[_Val] = []
        self.others: list[_Val] = []     # int and i1 values
        self.n_ops = 0
        self.limit = 0
        self.counter = 0

    # -- bookkeeping --
    def left(self) -> int:
        return self.limit - self.n_ops

    def need(self, k: int) -> None:
        if self.left() < k:
            raise _Reject

    def _register(self, v: _Val) -> _Val:
        (self.floats if v.dtype in FLOATS else self.others).append(v)
        return v

    def new_arg(self, shape: tuple[int, ...], dtype: str) -> _Val:
        if dtype in FLOATS:
            v = _Val(f"%arg{len(self.args)}", shape, dtype, -ARG_BOUND, ARG_BOUND, True, True)
        else:
            v = _Val(f"%arg{len(self.args)}", shape, dtype, 0.0, 1000.0, True, True)
        self.args.append(v)
        return self._register(v)

    def emit(self, op: str, operands: Sequence[_Val], shape: tuple[int, ...], dtype: str,
             lo: float, hi: float, exact: bool, attrs: str = "",
             keywords: Sequence[tuple[str, _Val]] = ()) -> _Val:
        if self.n_ops >= self.limit:
            raise AssertionError("op budget exceeded (generator bug)")
        if dtype in FLOATS and not (max(abs(lo), abs(hi)) <= CAP):
            raise _Reject
        name = f"%{self.counter}"
        self.counter += 1
        res_ty = _ty(shape, dtype)
        all_ops = [*operands, *(v for _, v in keywords)]
        op_tys = [_ty(v.shape, v.dtype) for v in all_ops]
        if op_tys and all(t == res_ty for t in op_tys):
            types = res_ty
        else:
            types = "(" + ", ".join(op_tys) + ") -> " + res_ty
        text = f"  {name} = lamina.{op}"
        if operands:
            text += " " + ", ".join(v.name for v in operands)
        for kw, v in keywords:
            text += f" {kw} {v.name}"
        if attrs:
            text += " {" + attrs + "}"
        self.lines.append(f"{text} : {types}")
        self.n_ops += 1
        v = _Val(name, shape, dtype, lo, hi, exact)
        self.results.append(v)
        return self._register(v)

    # -- picking values --
    def pick(self, pool: list[_Val]) -> _Val:
        n = len(pool)
        if n > 1 and self.ch.coin(0.5):
            return pool[n - 1 - self.ch.randint(0, min(7, n - 1))]
        return pool[self.ch.randint(0, n - 1)]

    def pick_float(self, dtype: str | None = None) -> _Val:
        if not self.floats:
            return self.new_arg(self.rand_shape(), self.ch.choice(self.fdtypes))
        for _ in range(6):
            v = self.pick(self.floats)
            if dtype is None or v.dtype == dtype:
                return v
        return self.new_arg(self.rand_shape(), dtype or self.ch.choice(self.fdtypes))

    def find(self, pool: list[_Val], pred: Callable[[_Val], bool], tries: int = 6) -> _Val | None:
        if not pool:
            return None
        for _ in range(tries):
            v = self.pick(pool)
            if pred(v):
                return v
        return None

    def rand_shape(self, min_rank: int = 0) -> tuple[int, ...]:
        lo = min(min_rank, self.max_rank)
        r = self.ch.randint(lo, self.max_rank)
        return tuple(self.ch.randint(1, self.max_dim) for _ in range(r))

    def sub_shape(self, s: tuple[int, ...]) -> tuple[int, ...]:
        """A shape that broadcasts to `s` (suffix of s with some dims set to 1)."""
        r = self.ch.randint(0, len(s))
        return tuple(1 if self.ch.coin(0.3) else d for d in s[len(s) - r:])

    def cross_shape(self, s: tuple[int, ...]) -> tuple[int, ...]:
        """A shape that broadcasts *with* `s` to something larger (outer-product style)."""
        out = [1 if d != 1 or self.ch.coin(0.5) else self.ch.randint(1, self.max_dim) for d in s]
        while len(out) < self.max_rank and self.ch.coin(0.4):
            out.insert(0, self.ch.randint(1, self.max_dim))
        return tuple(out)

    def operand_of_shape(self, shape: tuple[int, ...], dtype: str, exact: bool = False) -> _Val:
        """An existing value of exactly `shape`/`dtype`, else a new argument or constant."""
        v = self.find(self.floats if dtype in FLOATS else self.others,
                      lambda v: v.shape == shape and v.dtype == dtype and (v.exact or not exact))
        if v is not None:
            return v
        if self.consts_ok and self.left() >= 2 and self.ch.coin(0.4):
            return self.constant(shape, dtype)
        return self.new_arg(shape, dtype)

    # -- constants --
    def constant(self, shape: tuple[int, ...], dtype: str, splat: bool | None = None,
                 values: Sequence[float] = CONST_VALUES) -> _Val:
        if splat is None:
            splat = _numel(shape) <= 1 or self.ch.coin(0.5)
        if dtype == "i1":
            values = (0.0, 1.0)
        elif dtype not in FLOATS:
            values = (-3.0, -1.0, 0.0, 1.0, 2.0, 7.0)
        if splat:
            v = self.ch.choice(values)
            lit, lo, hi = _fmt_elem(v, dtype), v, v
        else:
            flat = [self.ch.choice(values) for _ in range(_numel(shape))]
            lo, hi = min(flat), max(flat)
            it = iter(flat)

            def nest(dims: tuple[int, ...]) -> str:
                if not dims:
                    return _fmt_elem(next(it), dtype)
                return "[" + ", ".join(nest(dims[1:]) for _ in range(dims[0])) + "]"

            lit = nest(shape)
        name = f"%{self.counter}"
        self.counter += 1
        self.lines.append(f"  {name} = lamina.constant dense<{lit}> : {_ty(shape, dtype)}")
        self.n_ops += 1
        v = _Val(name, shape, dtype, lo, hi, True)
        self.results.append(v)
        return self._register(v)

    # -- helpers that make operands usable --
    def positive(self, x: _Val, minimum: float = POS_MIN) -> _Val:
        """`x` if it is >= minimum, else abs(x) + c or exp(tanh(x)) (2-3 ops)."""
        if x.lo >= minimum:
            return x
        if self.consts_ok and self.left() >= 4 and self.ch.coin(0.6):
            a = self.emit("abs", [x], x.shape, x.dtype, 0.0, x.bound, x.exact)
            c = self.constant((), x.dtype, splat=True, values=(0.5, 1.0, 2.0))
            return self.emit("add", [a, c], x.shape, x.dtype, c.lo, a.hi + c.hi, False,
                             )
        self.need(3)
        t = self.emit("tanh", [x], x.shape, x.dtype, math.tanh(x.lo), math.tanh(x.hi), False)
        return self.emit("exp", [t], x.shape, x.dtype, math.exp(t.lo), math.exp(t.hi), False)

    def compatible(self, a: _Val, same_shape: bool, exact: bool = False) -> _Val:
        """An operand of a's dtype that broadcasts with a (same shape, or different if not
        same_shape)."""
        pool = self.floats if a.dtype in FLOATS else self.others
        if same_shape:
            return self.operand_of_shape(a.shape, a.dtype, exact)
        v = self.find(pool, lambda v: v.dtype == a.dtype and v.shape != a.shape and
                      (v.exact or not exact) and _bcast(v.shape, a.shape) is not None)
        if v is not None:
            return v
        shape = self.sub_shape(a.shape) if self.ch.coin(0.6) else self.cross_shape(a.shape)
        if self.consts_ok and self.left() >= 2 and self.ch.coin(0.4):
            return self.constant(shape, a.dtype)
        return self.new_arg(shape, a.dtype)

    # -- op families --
    UNARY = ("neg", "abs", "tanh", "sigmoid", "relu", "gelu", "erf", "exp", "log", "sqrt",
             "rsqrt", "reciprocal")
    BINARY = ("add", "sub", "mul", "max", "min", "div", "pow")

    def unary(self) -> None:
        op = self.ch.choice(self.UNARY)
        x = self.pick_float()
        lo, hi, attrs, exact = x.lo, x.hi, "", False
        if op in ("log", "rsqrt", "reciprocal"):
            self.need(4)
            x = self.positive(x)
        elif op == "sqrt" and x.lo < 0:
            self.need(4)
            x = self.positive(x)
        elif op == "exp" and x.hi > 6:
            raise _Reject
        lo, hi = x.lo, x.hi
        match op:
            case "neg":
                lo, hi, exact = -hi, -lo, x.exact
            case "abs":
                lo, hi, exact = (lo if lo >= 0 else 0.0 if hi >= 0 else -hi), x.bound, x.exact
            case "relu":
                lo, hi, exact = max(lo, 0.0), max(hi, 0.0), x.exact
            case "tanh":
                lo, hi = math.tanh(lo), math.tanh(hi)
            case "sigmoid":
                lo, hi = _sigmoid(lo), _sigmoid(hi)
            case "erf":
                lo, hi = math.erf(lo), math.erf(hi)
            case "gelu":
                lo, hi = -0.2, max(hi, 0.0)
                mode = self.ch.choice(("", "none", "tanh"))
                attrs = f'approximate = "{mode}"' if mode else ""
            case "exp":
                lo, hi = math.exp(lo), math.exp(hi)
            case "log":
                lo, hi = math.log(lo), math.log(hi)
            case "sqrt":
                lo, hi = math.sqrt(lo), math.sqrt(hi)
            case "rsqrt":
                lo, hi = 1 / math.sqrt(hi), 1 / math.sqrt(lo)
            case "reciprocal":
                lo, hi = 1 / hi, 1 / lo
        self.emit(op, [x], x.shape, x.dtype, lo, hi, exact, attrs)

    def binary(self, same_shape: bool, op: str | None = None, b: _Val | None = None) -> None:
        op = op or self.ch.choice(self.BINARY)
        a = self.pick_float()
        if b is None:
            b = self.compatible(a, same_shape)
        if op == "div" and b.lo < POS_MIN:
            self.need(4)
            b = self.positive(b)
        if op == "pow":
            self.need(5)
            a = self.positive(a, 0.3)
            if b.bound > 3:
                if self.consts_ok and self.ch.coin(0.5):
                    b = self.constant(self.sub_shape(a.shape), a.dtype, values=POW_EXPONENTS)
                else:
                    b = self.emit("tanh", [b], b.shape, b.dtype, math.tanh(b.lo),
                                  math.tanh(b.hi), False)
        self.need(1)
        shape = _bcast(a.shape, b.shape)
        assert shape is not None
        lo, hi = _binary_bounds(op, (a.lo, a.hi), (b.lo, b.hi))
        exact = op in ("max", "min") and a.exact and b.exact
        self.emit(op, [a, b], shape, a.dtype, lo, hi, exact)

    def cast_round_trip(self) -> None:
        self.need(2)
        x = self.pick_float()
        targets = [t for t in (*FLOATS, "i32", "i64", "i1") if t != x.dtype]
        if not x.exact:
            targets = [t for t in targets if t in FLOATS]
        t = self.ch.choice(targets)
        if t == "i1":
            lo, hi = 0.0, 1.0
        elif t in FLOATS:
            lo, hi = x.lo, x.hi
        else:
            lo, hi = float(math.trunc(x.lo)), float(math.trunc(x.hi))
        y = self.emit("cast", [x], x.shape, t, lo, hi, x.exact)
        if self.ch.coin(0.85):
            self.emit("cast", [y], y.shape, x.dtype, lo, hi, x.exact)

    def broadcast_in_dim(self) -> None:
        pool = self.floats if not self.others or self.ch.coin(0.8) else self.others
        x = self.pick(pool) if pool else self.pick_float()
        if len(x.shape) > self.max_rank:
            raise _Reject
        r = self.ch.randint(len(x.shape), self.max_rank)
        positions = list(range(r))
        chosen = []
        for _ in range(len(x.shape)):
            chosen.append(positions.pop(self.ch.randint(0, len(positions) - 1)))
        dims = chosen if self.ch.coin(0.2) else sorted(chosen)
        shape = [self.ch.randint(1, self.max_dim) for _ in range(r)]
        for i, d in enumerate(dims):
            if x.shape[i] != 1 or self.ch.coin(0.5):
                shape[d] = x.shape[i]
        self.emit("broadcast_in_dim", [x], tuple(shape), x.dtype, x.lo, x.hi, x.exact,
                  f"broadcast_dimensions = {_ints(dims)}")

    def reduction(self) -> None:
        if self.max_rank < 1:
            raise _Reject
        x = self.find(self.floats, lambda v: len(v.shape) >= 1) or \
            self.new_arg(self.rand_shape(1) or (2,), self.ch.choice(self.fdtypes))
        if not x.shape:
            raise _Reject
        op = self.ch.choice(("reduce_sum", "reduce_mean", "reduce_max"))
        rank = len(x.shape)
        k = self.ch.randint(1, rank)
        axes_pool = list(range(rank))
        axes = [axes_pool.pop(self.ch.randint(0, len(axes_pool) - 1)) for _ in range(k)]
        keep = self.ch.coin(0.5)
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
        n = _numel(tuple(x.shape[a] for a in axes))
        shown = [a - rank if self.ch.coin(0.25) else a for a in axes]
        lo, hi = (n * x.lo, n * x.hi) if op == "reduce_sum" else (x.lo, x.hi)
        attrs = f"axes = {_ints(shown)}"
        if keep or self.ch.coin(0.5):
            attrs += f", keepdims = {'true' if keep else 'false'}"
        self.emit(op, [x], shape, x.dtype, lo, hi, x.exact and op == "reduce_max", attrs)

    def composite(self) -> None:
        if self.max_rank < 1:
            raise _Reject
        op = self.ch.choice(("layernorm", "rmsnorm", "softmax"))
        x = self.find(self.floats, lambda v: len(v.shape) >= 1) or \
            self.new_arg(self.rand_shape(1) or (3,), self.ch.choice(self.fdtypes))
        if not x.shape:
            raise _Reject
        rank = len(x.shape)
        axis = self.ch.randint(-rank, rank - 1)
        attrs = [] if axis == -1 and self.ch.coin(0.5) else [f"axis = {axis} : i64"]
        if op == "softmax":
            self.emit(op, [x], x.shape, x.dtype, 0.0, 1.0, False, ", ".join(attrs))
            return
        if self.ch.coin(0.6):
            attrs.append(f"eps = {_fmt_float(self.ch.choice((1e-5, 1e-6, 1e-3, 0.1)))} : f64")
        norm = x.shape[axis % rank:]
        m = math.sqrt(_numel(norm))
        lo, hi = -m, m
        keywords = []
        if self.ch.coin(0.6):
            s = self.operand_of_shape(norm, x.dtype)
            keywords.append(("scale", s))
            lo, hi = _mul_iv((lo, hi), (s.lo, s.hi))
        if op == "layernorm" and self.ch.coin(0.5):
            b = self.operand_of_shape(norm, x.dtype)
            keywords.append(("bias", b))
            lo, hi = lo + b.lo, hi + b.hi
        self.need(1)
        self.emit(op, [x], x.shape, x.dtype, lo, hi, False, ", ".join(attrs), keywords)

    def matmul(self) -> None:
        a = self.find(self.floats, lambda v: len(v.shape) >= 2)
        if a is None:
            if self.max_rank < 2:
                raise _Reject
            a = self.new_arg(self.rand_shape(2), self.ch.choice(self.fdtypes))
        k = a.shape[-1]
        b = self.find(self.floats, lambda v: len(v.shape) >= 2 and v.dtype == a.dtype and
                      v.shape[-2] == k and _bcast(v.shape[:-2], a.shape[:-2]) is not None)
        if b is None:
            shape = self.sub_shape(a.shape[:-2]) + (k, self.ch.randint(1, self.max_dim))
            if self.consts_ok and self.left() >= 2 and self.ch.coin(0.3):
                b = self.constant(shape, a.dtype)
            else:
                b = self.new_arg(shape, a.dtype)
        self.need(1)
        batch = _bcast(a.shape[:-2], b.shape[:-2])
        assert batch is not None
        lo, hi = _mul_iv((a.lo, a.hi), (b.lo, b.hi))
        self.emit("matmul", [a, b], batch + (a.shape[-2], b.shape[-1]), a.dtype, k * lo, k * hi,
                  False)

    def layout(self) -> None:
        op = self.ch.choice(("transpose", "reshape", "slice", "concat", "broadcast_in_dim"))
        if op == "broadcast_in_dim":
            self.broadcast_in_dim()
            return
        pool = self.floats if not self.others or self.ch.coin(0.85) else self.others
        x = self.pick(pool) if pool else self.pick_float()
        rank = len(x.shape)
        if op == "transpose":
            perm = list(range(rank))
            for i in range(rank - 1, 0, -1):
                j = self.ch.randint(0, i)
                perm[i], perm[j] = perm[j], perm[i]
            self.emit(op, [x], tuple(x.shape[p] for p in perm), x.dtype, x.lo, x.hi, x.exact,
                      f"permutation = {_ints(perm)}")
        elif op == "reshape":
            shape = self.reshape_target(x.shape)
            self.emit(op, [x], shape, x.dtype, x.lo, x.hi, x.exact)
        elif op == "slice":
            if rank == 0:
                raise _Reject
            start, limit, strides = [], [], []
            for d in x.shape:
                s = self.ch.randint(0, d - 1)
                e = self.ch.randint(s + 1, d)
                start.append(s)
                limit.append(e)
                strides.append(1 if self.ch.coin(0.6) else self.ch.randint(1, 3))
            shape = tuple((e - s + st_ - 1) // st_ for s, e, st_ in zip(start, limit, strides, strict=True))
            attrs = f"start = {_ints(start)}, limit = {_ints(limit)}"
            if any(s != 1 for s in strides) or self.ch.coin(0.3):
                attrs += f", strides = {_ints(strides)}"
            self.emit(op, [x], shape, x.dtype, x.lo, x.hi, x.exact, attrs)
        else:  # concat
            if rank == 0:
                raise _Reject
            dim = self.ch.randint(0, rank - 1)
            parts = [x]
            for _ in range(self.ch.randint(0, 2)):
                p = self.find(self.floats if x.dtype in FLOATS else self.others,
                              lambda v: v.dtype == x.dtype and len(v.shape) == rank and
                              all(v.shape[i] == x.shape[i] for i in range(rank) if i != dim))
                parts.append(p if p is not None else self.pick(parts))
            total = sum(p.shape[dim] for p in parts)
            while total > 2 * self.max_dim and len(parts) > 1:
                total -= parts.pop().shape[dim]
            if total > 2 * self.max_dim:
                raise _Reject
            shape = x.shape[:dim] + (total,) + x.shape[dim + 1:]
            shown = dim - rank if self.ch.coin(0.25) else dim
            self.emit(op, parts, shape, x.dtype, min(p.lo for p in parts),
                      max(p.hi for p in parts), all(p.exact for p in parts),
                      f"dim = {shown} : i64")

    def reshape_target(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        n = _numel(shape)
        if self.ch.coin(0.7) and self.max_rank >= 1:
            r = self.ch.randint(1, self.max_rank)
            dims = [1] * r
            for p in _factor(n):
                dims[self.ch.randint(0, r - 1)] *= p
            if all(d <= 2 * self.max_dim for d in dims):
                return tuple(dims)
        squeezed = [d for d in shape if d != 1]
        while len(squeezed) < self.max_rank and self.ch.coin(0.5):
            squeezed.insert(self.ch.randint(0, len(squeezed)), 1)
        if len(squeezed) > self.max_rank:
            return shape
        return tuple(squeezed)

    def dropout(self) -> None:
        x = self.pick_float()
        rate = self.ch.choice((0.1, 0.0, 0.25, 0.5, 0.75))
        scale = 1.0 / (1.0 - rate)
        lo, hi = min(x.lo * scale, 0.0), max(x.hi * scale, 0.0)
        attrs = f"rate = {_fmt_float(rate)} : f64"
        mode = self.ch.randint(0, 2)
        keywords = []
        if mode == 0:
            seed = self.ch.choice((42, 0, 7, 123456789, 2**32 + 5, -3, 2**62 + 11))
            attrs += f", seed = {seed} : i64"
        elif mode == 1:
            self.need(2)
            dt = self.ch.choice(("i64", "i32"))
            s = self.constant((), dt, splat=True, values=(0.0, 1.0, 42.0, 99.0, 12345.0))
            keywords.append(("seed", s))
        else:
            s = self.find(self.others, lambda v: v.is_arg and v.shape == () and v.dtype == "i64")
            keywords.append(("seed", s or self.new_arg((), "i64")))
        self.need(1)
        self.emit("dropout", [x], x.shape, x.dtype, lo, hi, False, attrs, keywords)

    def constant_family(self) -> None:
        self.need(2)
        a = self.pick_float()
        shape = self.sub_shape(a.shape) if self.ch.coin(0.5) else a.shape
        c = self.constant(shape, a.dtype)
        op = self.ch.choice(("add", "mul", "sub", "max", "min"))
        # the constant is the rhs (or lhs) of a binary op with a
        lhs, rhs = (a, c) if self.ch.coin(0.7) else (c, a)
        out = _bcast(lhs.shape, rhs.shape)
        assert out is not None
        lo, hi = _binary_bounds(op, (lhs.lo, lhs.hi), (rhs.lo, rhs.hi))
        self.emit(op, [lhs, rhs], out, a.dtype, lo, hi,
                  op in ("max", "min") and a.exact)

    def select(self) -> None:
        self.need(2)
        a = None
        for _ in range(4):
            pool = self.others if self.others and self.ch.coin(0.25) else self.floats
            v = self.pick(pool) if pool else None
            if v is not None and v.exact:
                a = v
                break
        if a is None:
            a = self.new_arg(self.rand_shape(), self.ch.choice(self.fdtypes))
        b = self.compatible(a, self.ch.coin(0.5), exact=True) if self.ch.coin(0.85) else a
        if not b.exact:
            b = a
        self.need(2)
        cmp = self.ch.choice(("eq", "ne", "lt", "le", "gt", "ge"))
        cshape = _bcast(a.shape, b.shape)
        assert cshape is not None
        cond = self.emit(cmp, [a, b], cshape, "i1", 0.0, 1.0, True)
        t = self.pick_float()
        f = self.find(self.floats, lambda v: v.dtype == t.dtype and
                      _bcast(_bcast(v.shape, t.shape) or (), cond.shape) is not None
                      and _bcast(v.shape, t.shape) is not None)
        if f is None:
            f = t
        tf = _bcast(t.shape, f.shape)
        assert tf is not None
        out = _bcast(cond.shape, tf)
        if out is None:
            if self.left() < 2:
                raise _Reject
            t = f = self.operand_of_shape(cond.shape, t.dtype)
            out = cond.shape
        self.need(1)
        self.emit("select", [cond, t, f], out, t.dtype, min(t.lo, f.lo), max(t.hi, f.hi),
                  t.exact and f.exact)

    # -- driver --
    def step(self) -> None:
        fam = self.ch.choice(self.families)
        match fam:
            case "elementwise":
                k = self.ch.randint(0, 9)
                if k < 5:
                    self.unary()
                elif k < 9:
                    self.binary(True)
                else:
                    self.cast_round_trip()
            case "broadcast":
                if self.ch.coin(0.75):
                    self.binary(False)
                else:
                    self.broadcast_in_dim()
            case "reduction":
                self.reduction()
            case "composite":
                self.composite()
            case "matmul":
                self.matmul()
            case "layout":
                self.layout()
            case "dropout":
                self.dropout()
            case "constant":
                self.constant_family()
            case "select":
                self.select()

    def fallback(self) -> None:
        """One op that always fits: a bounded unary op of a float value."""
        x = self.pick_float()
        op = self.ch.choice(("tanh", "sigmoid", "neg", "abs"))
        lo, hi = {"tanh": (math.tanh(x.lo), math.tanh(x.hi)),
                  "sigmoid": (_sigmoid(x.lo), _sigmoid(x.hi)),
                  "neg": (-x.hi, -x.lo),
                  "abs": (0.0, x.bound)}[op]
        self.emit(op, [x], x.shape, x.dtype, lo, hi, x.exact and op in ("neg", "abs"))

    def run(self, n_ops: int) -> str:
        self.limit = n_ops
        # a few starting arguments of related shapes
        main = self.rand_shape(1 if self.ch.coin(0.9) else 0)
        dt = self.ch.choice(self.fdtypes)
        self.new_arg(main, dt)
        for _ in range(self.ch.randint(0, 2)):
            shape = main if self.ch.coin(0.4) else self.sub_shape(main)
            self.new_arg(shape, self.ch.choice(self.fdtypes))
        while self.n_ops < n_ops:
            before = (self.n_ops, len(self.lines), len(self.args), len(self.results),
                      len(self.floats), len(self.others), self.counter)
            ok = False
            for _ in range(4):
                try:
                    self.step()
                    ok = True
                    break
                except _Reject:
                    # ops emitted before the rejection stay (they are valid); only the
                    # rejected op itself is not emitted
                    pass
            if not ok and self.n_ops == before[0]:
                self.fallback()
        # results: the last value plus up to max_outputs - 1 other op results
        last = self.results[-1]
        outs = [last]
        k = self.ch.randint(0, min(self.max_outputs, len(self.results)) - 1)
        for _ in range(k):
            v = self.results[self.ch.randint(0, len(self.results) - 1)]
            if v not in outs:
                outs.insert(0, v)
        arg_text = ", ".join(f"{a.name}: {_ty(a.shape, a.dtype)}" for a in self.args)
        res_tys = [_ty(v.shape, v.dtype) for v in outs]
        res_text = res_tys[0] if len(res_tys) == 1 else "(" + ", ".join(res_tys) + ")"
        return "\n".join([
            f"func.func @main({arg_text}) -> {res_text} {{",
            *self.lines,
            f"  func.return {', '.join(v.name for v in outs)} : {', '.join(res_tys)}",
            "}",
            "",
        ])

    def make_inputs(self, seed: int) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        out = []
        for a in self.args:
            if a.dtype in FLOATS:
                x = rng.uniform(-3.0, 3.0, size=a.shape)
                out.append(to_storage(x.astype(np.float64 if a.dtype == "f64" else np.float32),
                                      a.dtype))
            else:
                out.append(np.asarray(rng.integers(0, 1000, size=a.shape), dtype=STORAGE[a.dtype]))
        return out


# ---- public API ----------------------------------------------------------------------------------

def programs(*, min_ops: int = 1, max_ops: int = 12, dtypes: Sequence[str] = ("f32",),
             families: Sequence[str] = ALL_FAMILIES, max_rank: int = 3, max_dim: int = 6,
             max_outputs: int = 3) -> st.SearchStrategy[GeneratedProgram]:
    """A Hypothesis strategy for random verified Lamina programs with finite inputs/outputs."""
    if min_ops < 1 or max_ops < min_ops:
        raise ValueError(f"need 1 <= min_ops <= max_ops, got {min_ops}, {max_ops}")
    _Gen(_RandomChooser(0), dtypes, families, max_rank, max_dim, max_outputs)  # validate args

    @st.composite
    def _programs(draw) -> GeneratedProgram:
        n = draw(st.integers(min_ops, max_ops))
        gen = _Gen(_DrawChooser(draw), dtypes, families, max_rank, max_dim, max_outputs)
        text = gen.run(n)
        seed = draw(st.integers(0, 2**32 - 1))
        return GeneratedProgram(text, gen.make_inputs(seed),
                                [(a.shape, a.dtype) for a in gen.args], gen.n_ops)

    return _programs()


def random_program_text(seed: int, n_ops: int, *, dtypes: Sequence[str] = ("f32",),
                        families: Sequence[str] = ALL_FAMILIES, max_rank: int = 3,
                        max_dim: int = 6, max_outputs: int = 3) -> str:
    """A program with exactly `n_ops` ops, a pure function of the arguments (no Hypothesis)."""
    if n_ops < 1:
        raise ValueError("n_ops must be >= 1")
    return _Gen(_RandomChooser(seed), dtypes, families, max_rank, max_dim, max_outputs).run(n_ops)


def random_program(seed: int, n_ops: int, **kwargs) -> GeneratedProgram:
    """`random_program_text` plus inputs (uniform in [-3, 3]) as a GeneratedProgram."""
    gen = _Gen(_RandomChooser(seed), kwargs.get("dtypes", ("f32",)),
               kwargs.get("families", ALL_FAMILIES), kwargs.get("max_rank", 3),
               kwargs.get("max_dim", 6), kwargs.get("max_outputs", 3))
    text = gen.run(n_ops)
    return GeneratedProgram(text, gen.make_inputs(seed), [(a.shape, a.dtype) for a in gen.args],
                            gen.n_ops)
