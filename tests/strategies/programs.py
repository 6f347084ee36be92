"""Random Lamina programs for property tests and benchmarks.

API (stable; every pass's property tests use it):

    @dataclass
    class GeneratedProgram:
        text: str                      # one `func.func @main(...)` ending in func.return (custom syntax)
        inputs: list[np.ndarray]       # one array per argument, storage dtypes, finite values
        arg_types: list[tuple[tuple[int, ...], str]]   # (shape, element type) per argument
        n_ops: int                     # number of lamina ops in the body
        ranges: list[tuple[float, float]]   # the value interval of each op's result, body order

    programs(*, min_ops=1, max_ops=12, dtypes=("f32",), families=ALL_FAMILIES, max_rank=3,
             max_dim=6, max_outputs=3) -> SearchStrategy[GeneratedProgram]
    random_program_text(seed, n_ops, *, dtypes=..., families=..., max_rank=..., max_dim=...,
                        max_outputs=...) -> str
    random_program(seed, n_ops, **same_kwargs) -> GeneratedProgram   # the same text + inputs

`programs` is a Hypothesis strategy (every structural choice is a separate draw, so failures
shrink to small programs); `random_program_text` makes the same kind of program from an integer
seed without Hypothesis, in time linear in `n_ops`, for benchmarks with 10k-50k ops. It uses
Python's `random.Random(seed)` (deterministic for a seed); run such programs with
`lamina.backends.inputs.random_inputs` (standard-normal floats).

Which ops: the op table (`lamina.ir.ops.optable.OPS`), read by facts, never by name: a family is the
set of rows with some fusion class, type rule or sharding-rule class (below), so a new row of a
known kind is generated with no change here. Value ranges, operand domains and exactness are the
rows' `interval` rules (`lamina.ir.ops.intervals`); helper ops that make an operand fit a domain are
named through their typed classes (`AbsOp.INFO`).

What the programs look like
- A DAG: every op picks its operands among all earlier values (function arguments and op results,
  biased towards recent ones), so values have several uses, diamonds and long live ranges occur.
  Arguments are created lazily when an op needs an operand of a shape nothing provides.
- `dtypes` are the float element types of the arguments (f16, bf16, f32, f64; integer entries are
  ignored). Integer and i1 values come from casts, compares and seed constants/arguments.
- Families (`families=`, any subset of `ALL_FAMILIES`):
    elementwise  type-preserving one-operand rows (every unary op), same-shape binary rows, and
                 element-type conversion round trips (float -> any type -> back)
    broadcast    binary rows on operands of different but broadcastable shapes (rank-0, size-1
                 dims, lower rank, outer-product style) and the broadcasting layout row
    reduction    rows with a `Reduction` sharding rule, keepdims true and false, negative axes,
                 and now and then a row with a `Scan` rule (cumsum, exclusive / reverse drawn)
    composite    rows with a `RowReduction` rule (normalizations, softmax), each optional operand
                 (scale, bias) present or not, attributes given or left to their defaults
    matmul       the contraction row, batched, with broadcast batch dims
    layout       rows with a Transpose / Reshape / Slice (with and without strides) / Concat /
                 Broadcast / Pad rule
    dropout      the position-dependent row, with a seed attribute or a seed operand (constant or
                 i64 argument)
    constant     splat and dense constants (the source row) used by a binary row without domain
                 restrictions
    select       a compare row (on floats, ints, i1) + the select row
    indexing     the lookup row (a `Gather` rule) on indices from the index-source row (a source
                 whose type is declared: iota), some past the input's end (they look up 0),
                 and the index source alone as a float value
  Opt-in motifs (`MOTIF_FAMILIES`, not in `ALL_FAMILIES`, built by `strategies.motifs`):
    layout_between  elementwise ops with a transpose / reshape / slice / concat between them
                    (x -> unary -> transpose -> binary; GPT-2's QKV split: bias add -> slices ->
                    reshape into heads -> transposes -> elementwise; concat of two elementwise
                    results)
    epilogue        a matmul by a rank-2 weight followed by a bias add, gelu, a 0/1 mask
                    multiply and a residual add (1..4 of them)
  Helper ops outside the chosen families may appear where an op needs them (abs + constant or
  exp(tanh(x)) to make an operand positive; tanh to bound one). Without "constant" no constant
  op is emitted except dropout seeds.
- Finite outputs: the generator tracks a conservative value interval for every value (the rows'
  interval images) and only emits ops whose result stays within +-CAP (2000, so f16 is safe) and
  whose operands lie in the rows' domains, keeping POS_MIN (0.05) away from 0 where an op is
  undefined at 0. Arguments are assumed to lie in [-4, 4]; `inputs` are uniform in [-3, 3] (seed
  arguments: integers in [0, 1000)).
- Stable under math reordering: compares and float->int / float->i1 conversions only take exact
  values (arguments, constants, and values derived from them by rows whose rule is `exact`), so
  fusing or reassociating float math cannot flip a branch.
- Results: 1..max_outputs distinct op results, always including the last op's result.
- Shapes: ranks 0..max_rank, dims 1..max_dim (concat may reach 2 * max_dim, the QKV motif's input
  3 * max_dim); no empty tensors.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st
from lamina.ir.core import shapes
from lamina.ir.core.dtypes import STORAGE, to_storage
from lamina.ir.core.shapes import TensorInfo
from lamina.ir.mesh import sharding as sh
from lamina.ir.mesh.sharding_gather import Gather
from lamina.ir.ops.formulas import Call
from lamina.ir.ops.intervals import DomainKind, Interval, IntervalRule
from lamina.ir.ops.lamina import AbsOp, AddOp, ExpOp, TanhOp
from lamina.ir.ops.optable import OPS, AttrKind, AttrSpec, Fusion, OpInfo

ALL_FAMILIES = ("elementwise", "broadcast", "reduction", "composite", "matmul", "layout",
                "dropout", "constant", "select", "indexing")
# opt-in motifs (`strategies.motifs`): only where `families=` names them, never by default
MOTIF_FAMILIES = ("layout_between", "epilogue")
KNOWN_FAMILIES = ALL_FAMILIES + MOTIF_FAMILIES
FLOATS = ("f16", "bf16", "f32", "f64")
CAP = 2000.0            # |value| bound every generated value must respect
ARG_BOUND = 4.0         # assumed |argument| bound (inputs are drawn in [-3, 3])
POS_MIN = 0.05          # distance from 0 of a value used where an op is undefined at 0
CONST_VALUES = (-2.0, -1.5, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0)
BOUNDED_VALUES = (2.0, 0.5, 3.0, -1.0, 1.5, -0.5)   # constants for an operand of bounded size
EPS_VALUES = (1e-5, 1e-6, 1e-3, 0.1)
DROPOUT_RATES = (0.1, 0.0, 0.25, 0.5, 0.75)
DROPOUT_SEEDS = (42, 0, 7, 123456789, 2**32 + 5, -3, 2**62 + 11)


@dataclass
class GeneratedProgram:
    text: str
    inputs: list[np.ndarray]
    arg_types: list[tuple[tuple[int, ...], str]]
    n_ops: int
    # the interval the generator tracked for each op's result, in body order (a sound bound of the
    # values a run computes, up to rounding: tests check the interval rules against runs)
    ranges: list[Interval] = field(default_factory=list)


# ---- the table's rows, by their facts ------------------------------------------------------------

def _rows(pred: Callable[[OpInfo], bool]) -> tuple[OpInfo, ...]:
    """The table rows with a fact, in table order: the generator's only source of ops."""
    return tuple(info for info in OPS.values() if pred(info))


def _only(rows: tuple[OpInfo, ...], what: str) -> OpInfo:
    """The one row of a kind the generator has a dedicated builder for."""
    if len(rows) != 1:
        raise AssertionError(f"the generator builds one {what} row; the table has "
                             f"{[r.name for r in rows]}: give the new row its builder")
    return rows[0]


def rule(info: OpInfo) -> IntervalRule:
    """The row's value-range rule (every row the generator emits has one)."""
    if info.interval is None:
        raise AssertionError(f"{info.full_name} has no interval rule (lamina.ir.ops.intervals)")
    return info.interval


def _generatable(info: OpInfo) -> bool:
    """Every required attribute can be drawn from its spec's choices (an elementwise row with a
    required attribute of free values would need a builder of its own)."""
    return info.interval is not None and all(a.choices or not a.required for a in info.attrs)


def _elementwise(*shape_rules: Callable[..., TensorInfo]) -> tuple[OpInfo, ...]:
    """Elementwise rows typed by one of `shape_rules`: `shapes.unary` (one operand, its type),
    `shapes.binary` (two broadcast operands), `shapes.compare` (an i1 result), ...; the
    generator emits them on floats, so a row also defined on integers (`unary_numeric`) is one
    of the float rows here."""
    return _rows(lambda i: i.fusion is Fusion.ELEMENTWISE and i.shape in shape_rules
                 and _generatable(i))


def _unconstrained(info: OpInfo) -> bool:
    return all(d.kind is DomainKind.ANY for d in rule(info).domains)


def _scalar_call(info: OpInfo) -> Call:
    t = TensorInfo((), "f32")
    return Call({a.name: a.default for a in info.attrs}, [t] * len(info.operands), t)


def _never_exceeds_cap(info: OpInfo) -> bool:
    """Defined everywhere, and maps [-CAP, CAP] into itself: always applicable to any value."""
    if not _unconstrained(info):
        return False
    lo, hi = rule(info).image([(-CAP, CAP)], _scalar_call(info))
    return -CAP <= lo and hi <= CAP


UNARY = _elementwise(shapes.unary, shapes.unary_numeric)
BINARY = _elementwise(shapes.binary, shapes.binary_numeric)
COMPARES = _elementwise(shapes.compare)
SELECT = _only(_elementwise(shapes.select), "selecting")
CAST = _only(_elementwise(shapes.cast), "element-type conversion")
FREE_BINARY = tuple(i for i in BINARY if _unconstrained(i))        # with a constant operand
FALLBACK = tuple(i for i in UNARY if _never_exceeds_cap(i))          # an op that always fits
DROPOUT = _only(_rows(lambda i: i.position_dependent and i.fusion is Fusion.ELEMENTWISE),
                "position-dependent elementwise")
CONSTANT = _only(_rows(lambda i: i.fusion is Fusion.SOURCE and not i.declares_result), "literal")
INDEX_SOURCE = _only(_rows(lambda i: i.fusion is Fusion.SOURCE and i.declares_result), "index source")
LOOKUP = _only(_rows(lambda i: isinstance(i.sharding, Gather)), "lookup")
MATMUL = _only(_rows(lambda i: isinstance(i.sharding, sh.Matmul)), "contraction")
REDUCTIONS = _rows(lambda i: isinstance(i.sharding, sh.Reduction))
COMPOSITES = _rows(lambda i: isinstance(i.sharding, sh.RowReduction))
LAYOUTS = _rows(lambda i: isinstance(i.sharding, (sh.Transpose, sh.Reshape, sh.Slice, sh.Concat,
                                                  sh.Broadcast, sh.Pad)))
SCANS = _rows(lambda i: isinstance(i.sharding, sh.Scan))
BROADCAST = _only(_rows(lambda i: isinstance(i.sharding, sh.Broadcast)), "broadcasting")


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



def _attr_value(spec: AttrSpec, v: object) -> str:
    match spec.kind:
        case AttrKind.INT:
            return f"{v} : i64"
        case AttrKind.FLOAT:
            assert isinstance(v, float)
            return f"{_fmt_float(v)} : f64"
        case AttrKind.BOOL:
            return "true" if v else "false"
        case AttrKind.STR:
            return f'"{v}"'
        case AttrKind.INTS:
            assert isinstance(v, list | tuple)
            return _ints(v)
        case AttrKind.DENSE:
            raise AssertionError("dense attributes are written by `_Gen.constant`")


def _attr_text(info: OpInfo, given: dict[str, object]) -> str:
    """The attribute dictionary's text, in the row's attribute order (absent: left out)."""
    return ", ".join(f"{a.name} = {_attr_value(a, given[a.name])}" for a in info.attrs
                     if a.name in given)

def _slots(info: OpInfo, positional: Sequence[_Val],
           keywords: Sequence[tuple[str, _Val]]) -> list[_Val | None]:
    """The operands in the row's operand order, None for an absent optional one (what the row's
    formula and interval rule see)."""
    named = dict(keywords)
    rest = iter(positional)
    out: list[_Val | None] = []
    for spec in info.operands:
        if spec.variadic:
            out.extend(rest)
        elif spec.optional:
            out.append(named.get(spec.name))
        else:
            out.append(next(rest))
    return out


# ---- the generator -------------------------------------------------------------------------------

class _Gen:
    def __init__(self, ch: _Chooser, dtypes: Sequence[str], families: Sequence[str],
                 max_rank: int, max_dim: int, max_outputs: int) -> None:
        self.ch = ch
        self.fdtypes = [d for d in dtypes if d in FLOATS]
        if not self.fdtypes:
            raise ValueError(f"programs need at least one float dtype, got {list(dtypes)}")
        unknown = set(families) - set(KNOWN_FAMILIES)
        if unknown or not families:
            raise ValueError(f"unknown or no families: {sorted(unknown)} (known: {KNOWN_FAMILIES})")
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

    def emit(self, info: OpInfo, operands: Sequence[_Val], shape: tuple[int, ...], dtype: str,
             attrs: dict[str, object] | None = None,
             keywords: Sequence[tuple[str, _Val]] = ()) -> _Val:
        """Append `info` on `operands` (optional operands as `keywords`, by operand name) with the
        attributes `attrs` (absent ones take their defaults). The result's interval and exactness
        are the row's rule applied to the operands'; _Reject if they are outside its domains or the
        result may exceed CAP."""
        if self.n_ops >= self.limit:
            raise AssertionError("op budget exceeded (generator bug)")
        given = attrs or {}
        slots = _slots(info, operands, keywords)
        r = rule(info)
        ivs = [None if v is None else (v.lo, v.hi) for v in slots]
        if not r.admits(ivs, POS_MIN):
            raise _Reject
        call = Call({a.name: given.get(a.name, a.default) for a in info.attrs},
                    [None if v is None else TensorInfo(v.shape, v.dtype) for v in slots],
                    TensorInfo(shape, dtype))
        lo, hi = r.image(ivs, call)
        if dtype in FLOATS and not (max(abs(lo), abs(hi)) <= CAP):
            raise _Reject
        exact = r.exact and all(v.exact for v in slots if v is not None)
        name = f"%{self.counter}"
        self.counter += 1
        res_ty = _ty(shape, dtype)
        all_ops = [*operands, *(v for _, v in keywords)]
        op_tys = [_ty(v.shape, v.dtype) for v in all_ops]
        if op_tys and all(t == res_ty for t in op_tys):
            types = res_ty
        else:
            types = "(" + ", ".join(op_tys) + ") -> " + res_ty
        text = f"  {name} = {info.full_name}"
        if operands:
            text += " " + ", ".join(v.name for v in operands)
        for kw, v in keywords:
            text += f" {kw} {v.name}"
        if given:
            text += " {" + _attr_text(info, given) + "}"
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
        self.lines.append(f"  {name} = {CONSTANT.full_name} dense<{lit}> : {_ty(shape, dtype)}")
        self.n_ops += 1
        v = _Val(name, shape, dtype, lo, hi, True)
        self.results.append(v)
        return self._register(v)

    # -- guards that make an operand fit a row's domain --
    def positive(self, x: _Val) -> _Val:
        """`x` if it is >= POS_MIN, else abs(x) + c or exp(tanh(x)) (2-3 ops)."""
        if x.lo >= POS_MIN:
            return x
        if self.consts_ok and self.left() >= 4 and self.ch.coin(0.6):
            a = self.emit(AbsOp.INFO, [x], x.shape, x.dtype)
            c = self.constant((), x.dtype, splat=True, values=(0.5, 1.0, 2.0))
            return self.emit(AddOp.INFO, [a, c], x.shape, x.dtype)
        self.need(3)
        t = self.emit(TanhOp.INFO, [x], x.shape, x.dtype)
        return self.emit(ExpOp.INFO, [t], x.shape, x.dtype)

    def bounded(self, x: _Val, limit: float) -> _Val:
        """A value of size <= limit in x's place: a constant (of a shape that broadcasts like
        x's), or tanh(x)."""
        values = tuple(v for v in BOUNDED_VALUES if abs(v) <= limit)
        if self.consts_ok and values and self.left() >= 3 and self.ch.coin(0.5):
            return self.constant(self.sub_shape(x.shape), x.dtype, values=values)
        if limit < 1.0:
            raise _Reject
        self.need(2)
        return self.emit(TanhOp.INFO, [x], x.shape, x.dtype)

    def fit(self, info: OpInfo, i: int, x: _Val) -> _Val:
        """`x`, or a guarded value in its place, inside the row's domain for operand `i`."""
        domain = rule(info).domain(i)
        if domain.admits((x.lo, x.hi), POS_MIN):
            return x
        match domain.kind:
            case DomainKind.POSITIVE | DomainKind.NONZERO | DomainKind.NON_NEGATIVE:
                self.need(4)
                return self.positive(x)
            case DomainKind.BOUNDED:
                return self.bounded(x, domain.limit)
            case _:      # bounded above: no cheap guard keeps the op meaningful
                raise _Reject

    def choose_attrs(self, info: OpInfo) -> dict[str, object]:
        """One of each attribute's choices, or (for an optional one) none: its default."""
        given: dict[str, object] = {}
        for a in info.attrs:
            if a.choices:
                pick = self.ch.choice(a.choices if a.required else ("", *a.choices))
                if pick:
                    given[a.name] = pick
        return given

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
    def unary(self) -> None:
        info = self.ch.choice(UNARY)
        x = self.fit(info, 0, self.pick_float())
        self.need(1)
        self.emit(info, [x], x.shape, x.dtype, self.choose_attrs(info))

    def binary(self, same_shape: bool) -> None:
        info = self.ch.choice(BINARY)
        a = self.pick_float()
        b = self.compatible(a, same_shape)
        a = self.fit(info, 0, a)
        b = self.fit(info, 1, b)
        self.need(1)
        shape = _bcast(a.shape, b.shape)
        assert shape is not None
        self.emit(info, [a, b], shape, a.dtype, self.choose_attrs(info))

    def cast_round_trip(self) -> None:
        self.need(2)
        x = self.pick_float()
        targets = [t for t in (*FLOATS, "i32", "i64", "i1") if t != x.dtype]
        if not x.exact:
            targets = [t for t in targets if t in FLOATS]
        y = self.emit(CAST, [x], x.shape, self.ch.choice(targets))
        if self.ch.coin(0.85):
            self.emit(CAST, [y], y.shape, x.dtype)

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
        self.emit(BROADCAST, [x], tuple(shape), x.dtype, {"broadcast_dimensions": dims})

    def reduction(self) -> None:
        if self.max_rank < 1:
            raise _Reject
        x = self.find(self.floats, lambda v: len(v.shape) >= 1) or \
            self.new_arg(self.rand_shape(1) or (2,), self.ch.choice(self.fdtypes))
        if not x.shape:
            raise _Reject
        rank = len(x.shape)
        if SCANS and self.ch.coin(0.2):
            # a running sum along one axis, exclusive / reverse drawn
            info = self.ch.choice(SCANS)
            given: dict[str, object] = {"axis": self.ch.randint(-rank, rank - 1)}
            for flag in ("exclusive", "reverse"):
                if self.ch.coin(0.4):
                    given[flag] = self.ch.coin(0.5)
            self.emit(info, [x], x.shape, x.dtype, given)
            return
        info = self.ch.choice(REDUCTIONS)
        k = self.ch.randint(1, rank)
        axes_pool = list(range(rank))
        axes = [axes_pool.pop(self.ch.randint(0, len(axes_pool) - 1)) for _ in range(k)]
        keep = self.ch.coin(0.5)
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
        given = {"axes": [a - rank if self.ch.coin(0.25) else a for a in axes]}
        if keep or self.ch.coin(0.5):
            given["keepdims"] = keep
        self.emit(info, [x], shape, x.dtype, given)

    def composite(self) -> None:
        """A row-reduction row: its axis given or left at the default, eps given or not, each
        optional operand (scale, bias: the normalized dims' shape) present or not."""
        if self.max_rank < 1:
            raise _Reject
        info = self.ch.choice(COMPOSITES)
        x = self.find(self.floats, lambda v: len(v.shape) >= 1) or \
            self.new_arg(self.rand_shape(1) or (3,), self.ch.choice(self.fdtypes))
        if not x.shape:
            raise _Reject
        rank = len(x.shape)
        axis = self.ch.randint(-rank, rank - 1)
        given: dict[str, object] = {}
        if axis != info.attr("axis").default or self.ch.coin(0.5):
            given["axis"] = axis
        if any(a.name == "eps" for a in info.attrs) and self.ch.coin(0.6):
            given["eps"] = self.ch.choice(EPS_VALUES)
        rows = info.sharding
        assert isinstance(rows, sh.RowReduction)
        norm = x.shape[axis % rank:] if rows.trailing else (x.shape[axis],)
        keywords = [(spec.name, self.operand_of_shape(norm, x.dtype))
                    for spec in info.operands if spec.optional and self.ch.coin(0.55)]
        self.need(1)
        self.emit(info, [x], x.shape, x.dtype, given, keywords)

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
        self.emit(MATMUL, [a, b], batch + (a.shape[-2], b.shape[-1]), a.dtype)

    def layout(self) -> None:
        """A row with a layout sharding rule; the rule's class says how to build it."""
        info = self.ch.choice(LAYOUTS)
        if isinstance(info.sharding, sh.Broadcast):
            self.broadcast_in_dim()
            return
        pool = self.floats if not self.others or self.ch.coin(0.85) else self.others
        x = self.pick(pool) if pool else self.pick_float()
        if isinstance(info.sharding, sh.Pad) and x.dtype == "i1":
            x = self.pick_float()           # the fill is a number: pad takes no i1
        match info.sharding:
            case sh.Transpose():
                perm = list(range(len(x.shape)))
                for i in range(len(x.shape) - 1, 0, -1):
                    j = self.ch.randint(0, i)
                    perm[i], perm[j] = perm[j], perm[i]
                self.emit(info, [x], tuple(x.shape[p] for p in perm), x.dtype,
                          {"permutation": perm})
            case sh.Reshape():
                self.emit(info, [x], self.reshape_target(x.shape), x.dtype)
            case sh.Slice():
                self.build_slice(info, x)
            case sh.Concat():
                self.build_concat(info, x)
            case sh.Pad():
                self.build_pad(info, x)
            case other:
                raise AssertionError(f"no builder for layout rule {other!r}")

    def build_slice(self, info: OpInfo, x: _Val) -> None:
        if not x.shape:
            raise _Reject
        start, limit, strides = [], [], []
        for d in x.shape:
            s = self.ch.randint(0, d - 1)
            start.append(s)
            limit.append(self.ch.randint(s + 1, d))
            strides.append(1 if self.ch.coin(0.6) else self.ch.randint(1, 3))
        shape = tuple((e - s + st_ - 1) // st_ for s, e, st_ in zip(start, limit, strides, strict=True))
        given: dict[str, object] = {"start": start, "limit": limit}
        if any(s != 1 for s in strides) or self.ch.coin(0.3):
            given["strides"] = strides
        self.emit(info, [x], shape, x.dtype, given)

    def build_pad(self, info: OpInfo, x: _Val) -> None:
        """0..2 elements of a fill (given or the default 0) before and after each dim."""
        low = [self.ch.randint(0, 2) for _ in x.shape]
        high = [self.ch.randint(0, 2) for _ in x.shape]
        shape = tuple(d + lo + hi for d, lo, hi in zip(x.shape, low, high, strict=True))
        if any(d > 2 * self.max_dim for d in shape):
            raise _Reject
        given: dict[str, object] = {"low": low, "high": high}
        if self.ch.coin(0.6):
            fills = (-1.5, 0.5, 2.0) if x.dtype in FLOATS else (-100.0, 0.0, 2.0)
            given["value"] = self.ch.choice(fills)
        self.emit(info, [x], shape, x.dtype, given)

    def build_concat(self, info: OpInfo, x: _Val) -> None:
        rank = len(x.shape)
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
        self.emit(info, parts, shape, x.dtype, {"dim": dim - rank if self.ch.coin(0.25) else dim})

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
        """The position-dependent row: a seed attribute, or its optional operand (a constant or an
        i64 argument)."""
        x = self.pick_float()
        given: dict[str, object] = {"rate": self.ch.choice(DROPOUT_RATES)}
        seed_operand = next(spec.name for spec in DROPOUT.operands if spec.optional)
        mode = self.ch.randint(0, 2)
        keywords = []
        if mode == 0:
            given["seed"] = self.ch.choice(DROPOUT_SEEDS)
        elif mode == 1:
            self.need(2)
            dt = self.ch.choice(("i64", "i32"))
            s = self.constant((), dt, splat=True, values=(0.0, 1.0, 42.0, 99.0, 12345.0))
            keywords.append((seed_operand, s))
        else:
            s = self.find(self.others, lambda v: v.is_arg and v.shape == () and v.dtype == "i64")
            keywords.append((seed_operand, s or self.new_arg((), "i64")))
        self.need(1)
        self.emit(DROPOUT, [x], x.shape, x.dtype, given, keywords)

    def indexing(self) -> None:
        """A lookup along a random axis with iota indices of a random shape (values 0..m-1, so
        an index past the input's end looks up 0), or an iota as a float value."""
        if self.max_rank < 1:
            raise _Reject
        ishape = self.rand_shape(1)
        dim = self.ch.randint(-len(ishape), len(ishape) - 1)
        if self.ch.coin(0.25):
            self.need(1)
            self.emit(INDEX_SOURCE, [], ishape, self.ch.choice(self.fdtypes), {"dim": dim})
            return
        x = self.find(self.floats, lambda v: len(v.shape) >= 1) or \
            self.new_arg(self.rand_shape(1) or (3,), self.ch.choice(self.fdtypes))
        rank = len(x.shape)
        if not x.shape or rank - 1 + len(ishape) > self.max_rank:
            raise _Reject
        self.need(2)
        idx = self.emit(INDEX_SOURCE, [], ishape, self.ch.choice(("i32", "i64")), {"dim": dim})
        axis = self.ch.randint(-rank, rank - 1)
        a = axis % rank
        shape = x.shape[:a] + ishape + x.shape[a + 1:]
        self.emit(LOOKUP, [x, idx], shape, x.dtype, {"axis": axis} if axis or self.ch.coin(0.5)
                  else {})

    def constant_family(self) -> None:
        """A constant as one operand (lhs or rhs) of a binary row defined everywhere."""
        self.need(2)
        a = self.pick_float()
        shape = self.sub_shape(a.shape) if self.ch.coin(0.5) else a.shape
        c = self.constant(shape, a.dtype)
        info = self.ch.choice(FREE_BINARY)
        lhs, rhs = (a, c) if self.ch.coin(0.7) else (c, a)
        out = _bcast(lhs.shape, rhs.shape)
        assert out is not None
        self.emit(info, [lhs, rhs], out, a.dtype)

    def select(self) -> None:
        """A compare row on exact values, and the select row on its i1 result."""
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
        cshape = _bcast(a.shape, b.shape)
        assert cshape is not None
        cond = self.emit(self.ch.choice(COMPARES), [a, b], cshape, "i1")
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
        self.emit(SELECT, [cond, t, f], out, t.dtype)

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
            case "indexing":
                self.indexing()
            case "layout_between" | "epilogue":
                from strategies import motifs  # late: motifs builds on this module's names

                getattr(motifs, fam)(self)      # the builder is named as its family

    def fallback(self) -> None:
        """One op that always fits: a unary row defined everywhere that keeps values in CAP."""
        x = self.pick_float()
        self.emit(self.ch.choice(FALLBACK), [x], x.shape, x.dtype)

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
                    # rejected op itself is not emitted; a motif cut short may have spent
                    # the whole budget
                    if self.left() <= 0:
                        break
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


    def ranges(self) -> list[Interval]:
        return [(v.lo, v.hi) for v in self.results]


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
                                [(a.shape, a.dtype) for a in gen.args], gen.n_ops, gen.ranges())

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
                            gen.n_ops, gen.ranges())
