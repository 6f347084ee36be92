"""The op table: the single source of every per-op fact in Lamina.

One `OpInfo` record per op holds everything Lamina knows about it: its name, operands and
attributes, its shape rule (which also says whether it takes integer operands), its semantics (an
array-API formula, `lamina.ir.ops.formulas`, which every backend evaluates with its own array
namespace) and the per-element form a compiled kernel computes (`lamina.ir.ops.scalar_forms`), its
value range (`lamina.ir.ops.intervals`), its vector-Jacobian product (`lamina.ir.autodiff.vjp`), its class for
fusion and the index map a fused kernel reads a layout op through (`lamina.ir.ops.view_rules`),
whether a pending-reduction (`partial`) value may pass through it, its sharding rule (a
`lamina.ir.mesh.sharding.ShardingRule`) and its cost. Rows are records built by keyword, and no fact
about an op is kept beside its row in a dict keyed by its name. The dialect's op classes are
generated from the rows (`lamina.ir.ops.lamina`, by `lamina.ir.ops.opgen`), interpreters run their
formulas, and passes read their classes, rules and costs: no other module keeps a list of op
names. Nothing here is specific to one backend: a backend's faster forms of a row's formula are
registered against the row in that backend (the NumPy interpreter's:
`lamina.backends.numpy.specialized`).

Adding an elementwise op is one `_unary(...)` / `_binary(...)` row in `_ROWS` below (its formula the
namespace's function of the same name, `fm.via(name)`, or one in `lamina.ir.ops.formulas`, which is
also its per-element form), then `python -m lamina.ir.ops.opgen` to regenerate the op classes; the
README's "Where things go" lists every file it touches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from lamina.ir.autodiff import vjp as vj
from lamina.ir.core import shapes
from lamina.ir.core.shapes import TensorInfo
from lamina.ir.mesh import sharding as sh
from lamina.ir.mesh.sharding import Linearity, ShardingRule
from lamina.ir.mesh.sharding_gather import Gather
from lamina.ir.ops import formulas as fm
from lamina.ir.ops import intervals as iv
from lamina.ir.ops import scalar_forms as sf
from lamina.ir.ops import view_rules as vr
from lamina.ir.ops.intervals import IntervalRule


class Fusion(Enum):
    """How an op may join a fused kernel (the TVM/XLA lattice, coarsened).

    ELEMENTWISE: each output element depends on the operand elements at the same (broadcast) index.
    BROADCAST:   elementwise after a pure index remapping that only replicates (broadcast_in_dim).
    REDUCTION:   combines elements along some axes (reduce_*, and composites built on row
                 reductions: layernorm, rmsnorm, softmax).
    LAYOUT:      moves elements without arithmetic (transpose, reshape, slice, concat).
    OPAQUE:      anything a fused loop nest cannot absorb (matmul).
    SCAN:        a prefix combination along one axis (cumsum): element i depends on every element
                 before it on that axis, so it is never fused: a fused loop visits elements in
                 tile order, not along the scan (`fuse-elementwise` makes it a kernel boundary).
    SOURCE:      produces a value from attributes and its result type alone (constant, iota);
                 free to pull into any group.
    """

    ELEMENTWISE = "elementwise"
    BROADCAST = "broadcast"
    REDUCTION = "reduction"
    LAYOUT = "layout"
    OPAQUE = "opaque"
    SCAN = "scan"
    SOURCE = "source"


class Amp(Enum):
    """The type an op computes in under `mixed-precision` (AMP's op lists, as a per-row fact).

    LOW:    matmuls and elementwise math: float operands cast to the compute type (bf16 / f16),
            the result in it (torch.autocast's lower-precision list).
    F32:    ops whose accuracy needs the range or the mantissa of f32: reductions, norms,
            softmax / log_softmax (a loss is built on them), scans; float operands cast to f32
            (autocast's float32 list).
    FOLLOW: ops that move or pick values without arithmetic (layout ops, select, gather,
            compares): operands as they come (widened to f32 when they differ), a float result
            in their type (autocast's promote list).
    KEEP:   ops that state their result type (cast, and the sources constant and iota): left as
            written; a consumer casts what it reads.
    """

    LOW = "low"
    F32 = "f32"
    FOLLOW = "follow"
    KEEP = "keep"


class AttrKind(Enum):
    INT = "int"          # IntegerAttr : i64
    FLOAT = "float"      # FloatAttr : f64
    BOOL = "bool"        # true / false
    STR = "str"          # "string"
    INTS = "ints"        # array<i64: ...>
    DENSE = "dense"      # dense<...> : tensor<...>


@dataclass(frozen=True)
class AttrSpec:
    name: str
    kind: AttrKind
    default: object = None          # None with required=False: absent means "not given"
    required: bool = False
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class OperandSpec:
    name: str
    optional: bool = False
    variadic: bool = False


ShapeRule = Callable[[Sequence[TensorInfo | None], dict, TensorInfo], TensorInfo]
Flops = Callable[[Sequence[TensorInfo | None], TensorInfo, dict], float]


@dataclass(frozen=True, kw_only=True)
class OpInfo:
    """Every fact about one op: its row of the table.

    Keyword-only, so a row names each fact it states (`OpInfo(name="matmul", ..., row_tiled=True)`)
    and a new field cannot shift the meaning of the others; the facts without a default are the
    ones every row must state."""

    # -- the op --
    name: str                          # op name without the `lamina.` prefix
    summary: str
    operands: tuple[OperandSpec, ...]
    attrs: tuple[AttrSpec, ...] = ()
    # the result type for the operands and attributes, and which element types the op takes:
    # `shapes.unary_numeric` / `binary_numeric` also integers (i32 / i64 arithmetic wraps in two's
    # complement, as in NumPy, PyTorch and XLA), `shapes.unary` / `binary` floats only (integer
    # division and powers round differently in every framework)
    shape: ShapeRule
    # True when the result type is part of the op's specification rather than a function of its
    # operands and attributes (reshape's shape, cast's element type, iota's whole type): a
    # builder must be told it (`lamina.ir.builder`), the shape rule checks it
    declares_result: bool = False

    # -- semantics --
    formula: fm.Formula                # the semantics, on any array-API namespace
    ew: fm.Elementwise | None = None   # the elementwise form `ew(xp, *xs, **attrs)`, if one
    # True: float operands are computed in their compute type and the result rounded to its
    # element type once (`formulas.compute_dtype`); False: the op moves or picks stored values
    # (layout ops, select, compares) and sees and returns storage arrays unchanged
    arith: bool = True
    # True when an element's result depends on its place in the global tensor (dropout's mask):
    # a backend running the op on a block (a tile, a device's shard) must pass `Call.block`
    position_dependent: bool = False
    # the op on one element (elementwise rows) or one row (row reductions) in the scalar
    # namespace of `lamina.ir.ops.scalar_forms`: what a compiled fused kernel computes, mostly the
    # formula itself; None: no compiled kernel computes the op inside its loop
    scalar: fm.Formula | None = None
    # value-range facts: the result's interval, the operands' domains, exactness
    # (`lamina.ir.ops.intervals`); None for ops whose range is their literal (constant)
    interval: IntervalRule | None = None
    # reverse mode (`lamina.ir.autodiff.vjp`): the rule emitting the operands' cotangents in Lamina ops,
    # or NotDifferentiable(why); every row states one (tests/test_vjp_rules.py checks the rules)
    vjp: vj.Vjp

    # -- fusion and tiling --
    fusion: Fusion
    launches_kernel: bool = True       # False for ops that are views or folded into their users
    # LAYOUT rows: the op's index map (`lamina.ir.ops.view_rules`), by which a fused kernel reads its
    # inputs and writes its outputs through the op without materializing its operand
    view: vr.ViewRule | None = None
    # OPAQUE rows that a fused kernel may run block of result rows by block of result rows: each
    # row of the result (all dims but the last) needs only the same row of operand 0 when the
    # other operands have no batch dims of their own (rank 2: a matmul by a weight matrix), so
    # elementwise ops on the result fuse after it as its epilogue (`fuse-elementwise`, rule 9)
    row_tiled: bool = False

    # -- sharding --
    linearity: Linearity
    linear_operands: tuple[int, ...] = ()
    # when the linearity depends on the element types (casts): (operands, result) -> Linearity
    type_linearity: Callable[[Sequence[TensorInfo | None], TensorInfo], Linearity] | None = None
    sharding: ShardingRule

    # -- cost --
    flops: Flops

    # -- mixed precision --
    amp: Amp   # the type the op computes in under `mixed-precision` (`Amp`)

    @property
    def full_name(self) -> str:
        return f"lamina.{self.name}"

    def linearity_for(self, operands: Sequence[TensorInfo | None], result: TensorInfo) -> Linearity:
        """The op's linearity for these operand and result types."""
        if self.type_linearity is not None:
            return self.type_linearity(operands, result)
        return self.linearity

    def attr(self, name: str) -> AttrSpec:
        for a in self.attrs:
            if a.name == name:
                return a
        raise KeyError(name)


def _numel(t: TensorInfo | None) -> int:
    n = 1
    for d in t.shape if t is not None else ():
        n *= d
    return n


def per_output(k: float) -> Flops:
    return lambda ops, res, attrs: k * _numel(res)


def per_input(k: float) -> Flops:
    return lambda ops, res, attrs: k * _numel(ops[0])


def _matmul_flops(ops: Sequence[TensorInfo | None], res: TensorInfo, attrs: dict) -> float:
    a = ops[0]
    assert a is not None
    return 2.0 * _numel(res) * a.shape[-1]


X = (OperandSpec("input"),)
XY = (OperandSpec("lhs"), OperandSpec("rhs"))
NONE = Linearity.NONE
ADDITIVE = Linearity.ADDITIVE
ONE_SIDED = Linearity.ONE_SIDED
ELEMENTWISE = sh.Elementwise()


# ---- row constructors: the facts a kind of op shares, the rest by keyword ----------------------

def _elementwise(*, operands: tuple[OperandSpec, ...], shape: ShapeRule, name: str, summary: str,
                 ew: fm.Elementwise, flops: float, interval: IntervalRule, vjp: vj.Vjp,
                 linearity: Linearity, linear_operands: tuple[int, ...],
                 attrs: tuple[AttrSpec, ...], arith: bool = True, amp: Amp = Amp.LOW) -> OpInfo:
    """An elementwise row: `ew` applied element by element is both its formula and its
    per-element form; it shards like its operands and costs `flops` per result element."""
    return OpInfo(name=name, summary=summary, operands=operands, attrs=attrs, shape=shape,
                  formula=fm.elementwise(ew), ew=ew, arith=arith, scalar=fm.elementwise(ew),
                  interval=interval, vjp=vjp, fusion=Fusion.ELEMENTWISE, linearity=linearity,
                  linear_operands=linear_operands, sharding=ELEMENTWISE, flops=per_output(flops),
                  amp=amp)


def _unary(*, name: str, summary: str, ew: fm.Elementwise, flops: float, interval: IntervalRule,
           vjp: vj.Vjp, integer: bool = False, linearity: Linearity = NONE,
           linear_operands: tuple[int, ...] = (), attrs: tuple[AttrSpec, ...] = ()) -> OpInfo:
    """A one-operand elementwise row; `integer`: also defined on i32 / i64 (else float only)."""
    return _elementwise(operands=X, shape=shapes.unary_numeric if integer else shapes.unary,
                        name=name, summary=summary, ew=ew, flops=flops, interval=interval, vjp=vjp,
                        linearity=linearity, linear_operands=linear_operands, attrs=attrs)


def _binary(*, name: str, summary: str, ew: fm.Elementwise, flops: float, interval: IntervalRule,
            vjp: vj.Vjp, integer: bool = False, linearity: Linearity = NONE,
            linear_operands: tuple[int, ...] = ()) -> OpInfo:
    """A two-operand elementwise row, NumPy broadcasting; `integer` as for `_unary`."""
    return _elementwise(operands=XY, shape=shapes.binary_numeric if integer else shapes.binary,
                        name=name, summary=summary, ew=ew, flops=flops, interval=interval, vjp=vjp,
                        linearity=linearity, linear_operands=linear_operands, attrs=())


def _compare(*, name: str, symbol: str, fn: str) -> OpInfo:
    """A comparison: the namespace's function `fn`, an i1 result that carries no gradient."""
    return _elementwise(operands=XY, shape=shapes.compare, name=name,
                        summary=f"elementwise lhs {symbol} rhs, an i1 tensor", ew=fm.via(fn),
                        flops=1, interval=iv.COMPARE, vjp=vj.COMPARE, linearity=NONE,
                        linear_operands=(), attrs=(), arith=False, amp=Amp.FOLLOW)


_REDUCE_ATTRS = (AttrSpec("axes", AttrKind.INTS, required=True),
                 AttrSpec("keepdims", AttrKind.BOOL, False))
_NORM_ATTRS = (AttrSpec("axis", AttrKind.INT, -1), AttrSpec("eps", AttrKind.FLOAT, 1e-5))
_AXIS_ATTRS = (AttrSpec("axis", AttrKind.INT, -1),)


def _reduce(*, name: str, fn: str, shape: ShapeRule, combine: str | None, linearity: Linearity,
            interval: IntervalRule, vjp: vj.Vjp) -> OpInfo:
    """reduce_<fn> over `axes`: the namespace's `fn`, a pending `combine` across devices that
    hold parts of a reduced dim (None: no single collective combines the parts)."""
    return OpInfo(name=name, summary=f"{fn} over `axes`", operands=X, attrs=_REDUCE_ATTRS,
                  shape=shape, formula=fm.reduction(fn), scalar=fm.reduction(fn),
                  interval=interval, vjp=vjp, fusion=Fusion.REDUCTION, linearity=linearity,
                  linear_operands=(0,) if linearity != NONE else (),
                  sharding=sh.Reduction(combine), flops=per_input(1), amp=Amp.F32)


_WIDER_FLOAT = {"f16": ("f32", "f64"), "bf16": ("f32", "f64"), "f32": ("f64",), "f64": ()}


def _cast_linearity(operands: Sequence[TensorInfo | None], result: TensorInfo) -> Linearity:
    """A pending sum may flow through a cast only if casting commutes with adding: a widening
    float cast does (every partial and their sum are exact in the wider type, up to the sum's own
    rounding); an integer or i1 cast does not (cast(a) + cast(b) != cast(a + b): 0.6 + 0.6 -> 0
    + 0 for i32, 1 + 1 for i1), nor does a narrowing one (each device would round its part)."""
    src = operands[0]
    assert src is not None
    return Linearity.ADDITIVE if result.dtype in _WIDER_FLOAT.get(src.dtype, ()) else NONE


# ---- the rows ------------------------------------------------------------------------------------

_ROWS: tuple[OpInfo, ...] = (
    # -- elementwise, one operand --
    _unary(name="neg", summary="negation", ew=fm.neg, flops=1, integer=True, linearity=ADDITIVE,
           linear_operands=(0,), interval=iv.NEG, vjp=vj.neg),
    _unary(name="abs", summary="absolute value", ew=fm.via("abs"), flops=1, integer=True,
           interval=iv.ABS, vjp=vj.abs_),
    _unary(name="exp", summary="natural exponential", ew=fm.via("exp"), flops=4, interval=iv.EXP,
           vjp=vj.exp),
    _unary(name="log", summary="natural logarithm", ew=fm.via("log"), flops=4, interval=iv.LOG,
           vjp=vj.log),
    _unary(name="tanh", summary="hyperbolic tangent", ew=fm.via("tanh"), flops=6,
           interval=iv.TANH, vjp=vj.tanh),
    # sin / cos: RoPE's tables (`cos(pos * freq)`) are ordinary elementwise math and fuse
    _unary(name="sin", summary="sine (radians)", ew=fm.via("sin"), flops=8, interval=iv.SIN_COS,
           vjp=vj.sin),
    _unary(name="cos", summary="cosine (radians)", ew=fm.via("cos"), flops=8, interval=iv.SIN_COS,
           vjp=vj.cos),
    _unary(name="sigmoid", summary="logistic sigmoid 1 / (1 + exp(-x))", ew=fm.sigmoid, flops=6,
           interval=iv.SIGMOID, vjp=vj.sigmoid),
    _unary(name="relu", summary="max(x, 0)", ew=fm.relu, flops=1, interval=iv.RELU, vjp=vj.relu),
    _unary(name="gelu", summary="Gaussian error linear unit (erf form, or tanh form with "
           "approximate = \"tanh\")", ew=fm.gelu, flops=12, interval=iv.GELU, vjp=vj.gelu,
           attrs=(AttrSpec("approximate", AttrKind.STR, "none", choices=("none", fm.GELU_TANH)),)),
    _unary(name="erf", summary="error function", ew=fm.erf, flops=10, interval=iv.ERF, vjp=vj.erf),
    _unary(name="sqrt", summary="square root", ew=fm.via("sqrt"), flops=2, interval=iv.SQRT,
           vjp=vj.sqrt),
    _unary(name="rsqrt", summary="1 / sqrt(x)", ew=fm.rsqrt, flops=3, interval=iv.RSQRT,
           vjp=vj.rsqrt),
    _unary(name="reciprocal", summary="1 / x", ew=fm.reciprocal, flops=1, interval=iv.RECIPROCAL,
           vjp=vj.reciprocal),
    # -- elementwise, two operands --
    _binary(name="add", summary="sum", ew=fm.via("add"), flops=1, integer=True,
            linearity=ADDITIVE, linear_operands=(0, 1), interval=iv.ADD, vjp=vj.add),
    _binary(name="sub", summary="difference", ew=fm.via("subtract"), flops=1, integer=True,
            linearity=ADDITIVE, linear_operands=(0, 1), interval=iv.SUB, vjp=vj.sub),
    _binary(name="mul", summary="product", ew=fm.via("multiply"), flops=1, integer=True,
            linearity=ONE_SIDED, linear_operands=(0, 1), interval=iv.MUL, vjp=vj.mul),
    _binary(name="div", summary="quotient", ew=fm.via("divide"), flops=1, linearity=ONE_SIDED,
            linear_operands=(0,), interval=iv.DIV, vjp=vj.div),
    _binary(name="max", summary="elementwise maximum (NaN-propagating)", ew=fm.via("maximum"),
            flops=1, integer=True, interval=iv.MAX, vjp=vj.max_),
    _binary(name="min", summary="elementwise minimum (NaN-propagating)", ew=fm.via("minimum"),
            flops=1, integer=True, interval=iv.MIN, vjp=vj.min_),
    _binary(name="pow", summary="lhs raised to rhs", ew=fm.via("pow"), flops=8, interval=iv.POW,
            vjp=vj.pow_),
    _compare(name="eq", symbol="==", fn="equal"),
    _compare(name="ne", symbol="!=", fn="not_equal"),
    _compare(name="lt", symbol="<", fn="less"),
    _compare(name="le", symbol="<=", fn="less_equal"),
    _compare(name="gt", symbol=">", fn="greater"),
    _compare(name="ge", symbol=">=", fn="greater_equal"),
    # -- elementwise, with their own operands or attributes --
    OpInfo(name="select", summary="cond ? true_value : false_value, broadcasting all three",
           operands=(OperandSpec("cond"), OperandSpec("true_value"), OperandSpec("false_value")),
           shape=shapes.select, formula=fm.select, ew=fm.via("where"), arith=False,
           scalar=fm.select, interval=iv.SELECT, vjp=vj.select, fusion=Fusion.ELEMENTWISE,
           linearity=NONE, sharding=ELEMENTWISE, flops=per_output(1), amp=Amp.FOLLOW),
    OpInfo(name="cast", summary="convert the element type", operands=X, shape=shapes.cast,
           declares_result=True, formula=fm.cast, scalar=fm.cast, interval=iv.CAST, vjp=vj.cast,
           fusion=Fusion.ELEMENTWISE, linearity=NONE, linear_operands=(0,),
           type_linearity=_cast_linearity, sharding=ELEMENTWISE, flops=per_output(1), amp=Amp.KEEP),
    OpInfo(name="dropout", summary="zero elements with probability rate, scale the rest by "
           "1/(1-rate)", operands=(OperandSpec("input"), OperandSpec("seed", optional=True)),
           attrs=(AttrSpec("rate", AttrKind.FLOAT, required=True), AttrSpec("seed", AttrKind.INT)),
           shape=shapes.dropout, formula=fm.dropout, position_dependent=True, scalar=sf.dropout,
           interval=iv.DROPOUT, vjp=vj.dropout, fusion=Fusion.ELEMENTWISE, linearity=ONE_SIDED,
           linear_operands=(0,), sharding=ELEMENTWISE, flops=per_output(8), amp=Amp.LOW),
    # -- sources --
    OpInfo(name="constant", summary="a splat or dense tensor literal", operands=(),
           attrs=(AttrSpec("value", AttrKind.DENSE, required=True),), shape=shapes.constant,
           formula=fm.constant, arith=False, vjp=vj.CONSTANT, fusion=Fusion.SOURCE,
           launches_kernel=False, linearity=NONE, sharding=sh.Replicated(), flops=per_output(0),
           amp=Amp.KEEP),
    OpInfo(name="iota", summary="0, 1, 2, ... along dim of the result type, broadcast over the "
           "other dims", operands=(), attrs=(AttrSpec("dim", AttrKind.INT, 0),), shape=shapes.iota,
           declares_result=True, formula=fm.iota, interval=iv.IOTA, vjp=vj.IOTA,
           fusion=Fusion.SOURCE, linearity=NONE, sharding=sh.Replicated(), flops=per_output(0),
           amp=Amp.KEEP),
    # -- reductions and the composites built on row reductions --
    _reduce(name="reduce_sum", fn="sum", shape=shapes.reduce, combine="sum", linearity=ADDITIVE,
            interval=iv.REDUCE_SUM, vjp=vj.reduce_sum),
    _reduce(name="reduce_mean", fn="mean", shape=shapes.reduce_nonempty("mean"), combine=None,
            linearity=ADDITIVE, interval=iv.REDUCE_MEAN, vjp=vj.reduce_mean),
    _reduce(name="reduce_max", fn="max", shape=shapes.reduce_nonempty("max"), combine="max",
            linearity=NONE, interval=iv.REDUCE_MAX, vjp=vj.reduce_max),
    OpInfo(name="layernorm", summary="(x - mean) / sqrt(var + eps) * scale + bias over dims "
           "axis..rank-1", operands=(OperandSpec("input"), OperandSpec("scale", optional=True),
                                     OperandSpec("bias", optional=True)),
           attrs=_NORM_ATTRS, shape=shapes.normalization, formula=fm.layernorm,
           scalar=sf.layernorm, interval=iv.NORMALIZATION, vjp=vj.layernorm,
           fusion=Fusion.REDUCTION, linearity=NONE, sharding=sh.RowReduction(trailing=True),
           flops=per_input(8), amp=Amp.F32),
    OpInfo(name="rmsnorm", summary="x / sqrt(mean(x^2) + eps) * scale over dims axis..rank-1",
           operands=(OperandSpec("input"), OperandSpec("scale", optional=True)),
           attrs=_NORM_ATTRS, shape=shapes.normalization, formula=fm.rmsnorm, scalar=sf.rmsnorm,
           interval=iv.NORMALIZATION, vjp=vj.rmsnorm, fusion=Fusion.REDUCTION, linearity=NONE,
           sharding=sh.RowReduction(trailing=True), flops=per_input(5), amp=Amp.F32),
    # `safe`: 0 on a line of only -inf (PyTorch's `_safe_softmax`, sdpa's math path), an attribute
    # rather than a row of its own because every other fact is softmax's: shape, range, VJP
    # (p (g - sum(g p)) is 0 where p is), fusion, sharding, cost, and the attention role, which
    # fuse-attention and the verifier find by this row's formula (`lamina.ir.ops.attention`)
    OpInfo(name="softmax", summary="exp(x - max) / sum(exp(x - max)) along axis (safe: 0 on a "
           "line of only -inf)", operands=X,
           attrs=(*_AXIS_ATTRS, AttrSpec("safe", AttrKind.BOOL, False)), shape=shapes.softmax,
           formula=fm.softmax, scalar=fm.softmax,
           interval=iv.SOFTMAX, vjp=vj.softmax, fusion=Fusion.REDUCTION, linearity=NONE,
           sharding=sh.RowReduction(trailing=False), flops=per_input(6), amp=Amp.F32),
    OpInfo(name="log_softmax", summary="x - max - log(sum(exp(x - max))) along axis", operands=X,
           attrs=_AXIS_ATTRS, shape=shapes.softmax, formula=fm.log_softmax,
           scalar=fm.log_softmax, interval=iv.LOG_SOFTMAX, vjp=vj.log_softmax,
           fusion=Fusion.REDUCTION, linearity=NONE, sharding=sh.RowReduction(trailing=False),
           flops=per_input(7), amp=Amp.F32),
    # -- scans --
    OpInfo(name="cumsum", summary="running sum along axis (exclusive: of the elements before; "
           "reverse: from the end), ONNX CumSum", operands=X,
           attrs=(AttrSpec("axis", AttrKind.INT, required=True),
                  AttrSpec("exclusive", AttrKind.BOOL, False),
                  AttrSpec("reverse", AttrKind.BOOL, False)),
           shape=shapes.scan, formula=fm.cumsum, interval=iv.CUMSUM, vjp=vj.cumsum,
           fusion=Fusion.SCAN, linearity=ADDITIVE, linear_operands=(0,), sharding=sh.Scan(),
           flops=per_output(1), amp=Amp.F32),
    # -- contraction --
    OpInfo(name="matmul", summary="batched matrix product, batch dims broadcast", operands=XY,
           shape=shapes.matmul, formula=fm.matmul, interval=iv.MATMUL, vjp=vj.matmul,
           fusion=Fusion.OPAQUE, row_tiled=True, linearity=ONE_SIDED, linear_operands=(0, 1),
           sharding=sh.Matmul(), flops=_matmul_flops, amp=Amp.LOW),
    # -- layout --
    OpInfo(name="transpose", summary="permute dimensions", operands=X,
           attrs=(AttrSpec("permutation", AttrKind.INTS, required=True),), shape=shapes.transpose,
           formula=fm.transpose, arith=False, interval=iv.MOVE, vjp=vj.transpose,
           fusion=Fusion.LAYOUT, view=vr.TransposeView(), linearity=ADDITIVE, linear_operands=(0,),
           sharding=sh.Transpose(), flops=per_output(0), amp=Amp.FOLLOW),
    OpInfo(name="reshape", summary="same elements, new shape (row-major)", operands=X,
           shape=shapes.reshape, declares_result=True, formula=fm.reshape, arith=False,
           interval=iv.MOVE, vjp=vj.reshape, fusion=Fusion.LAYOUT, launches_kernel=False,
           view=vr.ReshapeView(), linearity=ADDITIVE, linear_operands=(0,), sharding=sh.Reshape(),
           flops=per_output(0), amp=Amp.FOLLOW),
    OpInfo(name="broadcast_in_dim", summary="replicate along new or size-1 dims (operand dim i -> "
           "result dim broadcast_dimensions[i])", operands=X,
           attrs=(AttrSpec("broadcast_dimensions", AttrKind.INTS, required=True),),
           shape=shapes.broadcast_in_dim, declares_result=True, formula=fm.broadcast_in_dim,
           arith=False, scalar=fm.broadcast_in_dim, interval=iv.MOVE, vjp=vj.broadcast_in_dim,
           fusion=Fusion.BROADCAST, linearity=ADDITIVE, linear_operands=(0,),
           sharding=sh.Broadcast(), flops=per_output(0), amp=Amp.FOLLOW),
    OpInfo(name="slice", summary="the elements start..limit by strides in each dim", operands=X,
           attrs=(AttrSpec("start", AttrKind.INTS, required=True),
                  AttrSpec("limit", AttrKind.INTS, required=True),
                  AttrSpec("strides", AttrKind.INTS)),
           shape=shapes.slice_, formula=fm.slice_, arith=False, interval=iv.MOVE, vjp=vj.slice_,
           fusion=Fusion.LAYOUT, view=vr.SliceView(), linearity=ADDITIVE, linear_operands=(0,),
           sharding=sh.Slice(), flops=per_output(0), amp=Amp.FOLLOW),
    OpInfo(name="concat", summary="join operands along dim",
           operands=(OperandSpec("inputs", variadic=True),),
           attrs=(AttrSpec("dim", AttrKind.INT, required=True),), shape=shapes.concat,
           formula=fm.concat, arith=False, interval=iv.MOVE, vjp=vj.concat, fusion=Fusion.LAYOUT,
           view=vr.ConcatView(), linearity=ADDITIVE, sharding=sh.Concat(), flops=per_output(0),
           amp=Amp.FOLLOW),
    # not linear: a non-zero fill added on every device would be summed with the partials
    OpInfo(name="pad", summary="value around the operand: low[d] elements before and high[d] "
           "after dim d (constant mode; a crop is a slice)", operands=X,
           attrs=(AttrSpec("low", AttrKind.INTS, required=True),
                  AttrSpec("high", AttrKind.INTS, required=True),
                  AttrSpec("value", AttrKind.FLOAT, 0.0)),
           shape=shapes.pad, formula=fm.pad, interval=iv.PAD, vjp=vj.pad, fusion=Fusion.LAYOUT,
           linearity=NONE, sharding=sh.Pad(), flops=per_output(0), amp=Amp.FOLLOW),
    # a lookup: OPAQUE (which element it reads depends on data, so no fused loop absorbs it);
    # linear in the table; position-dependent because on a device's block of a split table it
    # must know which rows the block holds (`Block.operands`)
    OpInfo(name="gather", summary="input[..., indices, ...] along axis (0 for an index outside "
           "[-n, n))", operands=(OperandSpec("input"), OperandSpec("indices")),
           attrs=(AttrSpec("axis", AttrKind.INT, 0),), shape=shapes.gather, formula=fm.gather,
           arith=False, position_dependent=True, interval=iv.GATHER, vjp=vj.gather,
           fusion=Fusion.OPAQUE, linearity=ONE_SIDED, linear_operands=(0,), sharding=Gather(),
           flops=per_output(0), amp=Amp.FOLLOW),
)


def _by_name(rows: Sequence[OpInfo]) -> dict[str, OpInfo]:
    table: dict[str, OpInfo] = {}
    for info in rows:
        assert info.name not in table, info.name
        table[info.name] = info
    return table


OPS: dict[str, OpInfo] = _by_name(_ROWS)


def lookup(op_name: str) -> OpInfo | None:
    """The table entry for a full op name (`lamina.add`), or None for ops outside the table."""
    if not op_name.startswith("lamina."):
        return None
    return OPS.get(op_name[len("lamina."):])
