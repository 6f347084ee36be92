"""The op table: the single source of every per-op fact in Lamina.

One `OpInfo` per op says what the op is called, which operands and attributes it takes, its shape
rule, its semantics (an array-API formula, `lamina.ir.formulas`, which every backend evaluates with
its own array namespace), its class for fusion, whether a pending-reduction (`partial`) value may
pass through it, its sharding rule (a `lamina.ir.sharding.ShardingRule`) and its cost. The
dialect's op classes are generated from these entries (`lamina.ir.lamina`, by `lamina.ir.opgen`),
interpreters run their formulas, and passes read their classes, rules and costs: no other module
keeps a list of op names. Nothing here is specific to one backend: a backend's faster forms of a
row's formula are registered against the row in that backend (the NumPy interpreter's:
`lamina.backends.numpy.specialized`). Adding an elementwise op is one line in `UNARY_OPS` /
`BINARY_OPS` below (its formula is the namespace's function of the same name, or one in
`lamina.ir.formulas`), then `python -m lamina.ir.opgen` to regenerate the op classes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from lamina.ir import formulas as fm
from lamina.ir import intervals as iv
from lamina.ir import scalar_forms as sf
from lamina.ir import shapes
from lamina.ir import sharding as sh
from lamina.ir import view_rules as vr
from lamina.ir import vjp as vj
from lamina.ir.intervals import IntervalRule
from lamina.ir.shapes import TensorInfo
from lamina.ir.sharding import Linearity, ShardingRule
from lamina.ir.sharding_gather import Gather


class Fusion(Enum):
    """How an op may join a fused kernel (the TVM/XLA lattice, coarsened).

    ELEMENTWISE: each output element depends on the operand elements at the same (broadcast) index.
    BROADCAST:   elementwise after a pure index remapping that only replicates (broadcast_in_dim).
    REDUCTION:   combines elements along some axes (reduce_*, and composites built on row
                 reductions: layernorm, rmsnorm, softmax).
    LAYOUT:      moves elements without arithmetic (transpose, reshape, slice, concat).
    OPAQUE:      anything a fused loop nest cannot absorb (matmul).
    SOURCE:      produces a value from attributes and its result type alone (constant, iota);
                 free to pull into any group.
    """

    ELEMENTWISE = "elementwise"
    BROADCAST = "broadcast"
    REDUCTION = "reduction"
    LAYOUT = "layout"
    OPAQUE = "opaque"
    SOURCE = "source"


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


@dataclass(frozen=True)
class OpInfo:
    name: str                          # op name without the `lamina.` prefix
    summary: str
    operands: tuple[OperandSpec, ...]
    attrs: tuple[AttrSpec, ...]
    shape: ShapeRule
    formula: fm.Formula                # the semantics, on any array-API namespace
    fusion: Fusion
    linearity: Linearity
    sharding: ShardingRule
    flops: Flops
    linear_operands: tuple[int, ...] = ()
    ew: fm.Elementwise | None = None   # the elementwise form `ew(xp, *xs, **attrs)`, if one
    # True: float operands are computed in their compute type and the result rounded to its
    # element type once (`formulas.compute_dtype`); False: the op moves or picks stored values
    # (layout ops, select, compares) and sees and returns storage arrays unchanged
    arith: bool = True
    launches_kernel: bool = True       # False for ops that are views or folded into their users
    # True when an element's result depends on its place in the global tensor (dropout's mask):
    # a backend running the op on a block (a tile, a device's shard) must pass `Call.block`
    position_dependent: bool = False
    # when the linearity depends on the element types (casts): (operands, result) -> Linearity
    type_linearity: Callable[[Sequence[TensorInfo | None], TensorInfo], Linearity] | None = None
    # value-range facts: the result's interval, the operands' domains, exactness
    # (`lamina.ir.intervals`); None for ops whose range is their literal (constant)
    interval: IntervalRule | None = None
    # True when the result type is part of the op's specification rather than a function of its
    # operands and attributes (reshape's shape, cast's element type, iota's whole type): a
    # builder must be told it (`lamina.ir.builder`), the shape rule checks it
    declares_result: bool = False
    # reverse mode (`lamina.ir.vjp`): the rule emitting the operands' cotangents in Lamina ops,
    # or NotDifferentiable(why); every row states one (tests/test_vjp_rules.py checks it)
    vjp: vj.Vjp | None = None
    # the op on one element (elementwise rows) or one row (row reductions) in the scalar
    # namespace of `lamina.ir.scalar_forms`: what a compiled fused kernel computes, mostly the
    # formula itself; None: no compiled kernel computes the op inside its loop
    scalar: fm.Formula | None = None
    # LAYOUT rows: the op's index map (`lamina.ir.view_rules`), by which a fused kernel reads its
    # inputs and writes its outputs through the op without materializing its operand
    view: vr.ViewRule | None = None
    # OPAQUE rows that a fused kernel may run block of result rows by block of result rows: each
    # row of the result (all dims but the last) needs only the same row of operand 0 when the
    # other operands have no batch dims of their own (rank 2: a matmul by a weight matrix), so
    # elementwise ops on the result fuse after it as its epilogue (`fuse-elementwise`, rule 9)
    row_tiled: bool = False

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
ELEMENTWISE = sh.Elementwise()

# name, summary, flops per element, linearity, linear operands, formula (`fm.via(name)`: the
# namespace's function of that name), value range
EwRow = tuple[str, str, float, Linearity, tuple[int, ...], fm.Elementwise, IntervalRule]
UNARY_OPS: tuple[EwRow, ...] = (
    ("neg", "negation", 1, Linearity.ADDITIVE, (0,), fm.neg, iv.NEG),
    ("abs", "absolute value", 1, NONE, (), fm.via("abs"), iv.ABS),
    ("exp", "natural exponential", 4, NONE, (), fm.via("exp"), iv.EXP),
    ("log", "natural logarithm", 4, NONE, (), fm.via("log"), iv.LOG),
    ("tanh", "hyperbolic tangent", 6, NONE, (), fm.via("tanh"), iv.TANH),
    ("sigmoid", "logistic sigmoid 1 / (1 + exp(-x))", 6, NONE, (), fm.sigmoid, iv.SIGMOID),
    ("relu", "max(x, 0)", 1, NONE, (), fm.relu, iv.RELU),
    ("gelu", "Gaussian error linear unit (erf form, or tanh form with approximate = \"tanh\")",
     12, NONE, (), fm.gelu, iv.GELU),
    ("erf", "error function", 10, NONE, (), fm.erf, iv.ERF),
    ("sqrt", "square root", 2, NONE, (), fm.via("sqrt"), iv.SQRT),
    ("rsqrt", "1 / sqrt(x)", 3, NONE, (), fm.rsqrt, iv.RSQRT),
    ("reciprocal", "1 / x", 1, NONE, (), fm.reciprocal, iv.RECIPROCAL),
)

BINARY_OPS: tuple[EwRow, ...] = (
    ("add", "sum", 1, Linearity.ADDITIVE, (0, 1), fm.via("add"), iv.ADD),
    ("sub", "difference", 1, Linearity.ADDITIVE, (0, 1), fm.via("subtract"), iv.SUB),
    ("mul", "product", 1, Linearity.ONE_SIDED, (0, 1), fm.via("multiply"), iv.MUL),
    ("div", "quotient", 1, Linearity.ONE_SIDED, (0,), fm.via("divide"), iv.DIV),
    ("max", "elementwise maximum (NaN-propagating)", 1, NONE, (), fm.via("maximum"), iv.MAX),
    ("min", "elementwise minimum (NaN-propagating)", 1, NONE, (), fm.via("minimum"), iv.MIN),
    ("pow", "lhs raised to rhs", 8, NONE, (), fm.via("pow"), iv.POW),
)

# name, symbol, the namespace's function
COMPARE_OPS: tuple[tuple[str, str, str], ...] = (
    ("eq", "==", "equal"), ("ne", "!=", "not_equal"),
    ("lt", "<", "less"), ("le", "<=", "less_equal"),
    ("gt", ">", "greater"), ("ge", ">=", "greater_equal"),
)

_UNARY_ATTRS: dict[str, tuple[AttrSpec, ...]] = {
    "gelu": (AttrSpec("approximate", AttrKind.STR, "none", choices=("none", fm.GELU_TANH)),),
}
# the VJP of each UNARY_OPS / BINARY_OPS row (`lamina.ir.vjp`)
_VJP: dict[str, vj.Vjp] = {
    "neg": vj.neg, "abs": vj.abs_, "exp": vj.exp, "log": vj.log, "tanh": vj.tanh,
    "sigmoid": vj.sigmoid, "relu": vj.relu, "gelu": vj.gelu, "erf": vj.erf, "sqrt": vj.sqrt,
    "rsqrt": vj.rsqrt, "reciprocal": vj.reciprocal,
    "add": vj.add, "sub": vj.sub, "mul": vj.mul, "div": vj.div, "max": vj.max_, "min": vj.min_,
    "pow": vj.pow_,
}

# rows also defined on i32 / i64 (integer arithmetic wraps in two's complement, as in NumPy,
# PyTorch and XLA); the others are float-only (integer division and powers round differently
# in every framework)
_INTEGER_OK = frozenset({"neg", "abs", "add", "sub", "mul", "max", "min"})

_REDUCE_ATTRS = (AttrSpec("axes", AttrKind.INTS, required=True),
                 AttrSpec("keepdims", AttrKind.BOOL, False))
_NORM_ATTRS = (AttrSpec("axis", AttrKind.INT, -1), AttrSpec("eps", AttrKind.FLOAT, 1e-5))


_WIDER_FLOAT = {"f16": ("f32", "f64"), "bf16": ("f32", "f64"), "f32": ("f64",), "f64": ()}


def _cast_linearity(operands: Sequence[TensorInfo | None], result: TensorInfo) -> Linearity:
    """A pending sum may flow through a cast only if casting commutes with adding: a widening
    float cast does (every partial and their sum are exact in the wider type, up to the sum's own
    rounding); an integer or i1 cast does not (cast(a) + cast(b) != cast(a + b): 0.6 + 0.6 -> 0
    + 0 for i32, 1 + 1 for i1), nor does a narrowing one (each device would round its part)."""
    src = operands[0]
    assert src is not None
    return Linearity.ADDITIVE if result.dtype in _WIDER_FLOAT.get(src.dtype, ()) else NONE


def _elementwise_rows() -> list[OpInfo]:
    rows: list[OpInfo] = []
    for name, summary, flops, lin, lin_ops, ew, interval in UNARY_OPS:
        rule = shapes.unary_numeric if name in _INTEGER_OK else shapes.unary
        rows.append(OpInfo(name, summary, X, _UNARY_ATTRS.get(name, ()), rule,
                           fm.elementwise(ew), Fusion.ELEMENTWISE, lin, ELEMENTWISE,
                           per_output(flops), lin_ops, ew=ew, interval=interval, vjp=_VJP.get(name),
                           scalar=fm.elementwise(ew)))
    for name, summary, flops, lin, lin_ops, ew, interval in BINARY_OPS:
        rule = shapes.binary_numeric if name in _INTEGER_OK else shapes.binary
        rows.append(OpInfo(name, summary, XY, (), rule, fm.elementwise(ew),
                           Fusion.ELEMENTWISE, lin, ELEMENTWISE, per_output(flops), lin_ops,
                           ew=ew, interval=interval, vjp=_VJP.get(name),
                           scalar=fm.elementwise(ew)))
    for name, symbol, fn in COMPARE_OPS:
        ew = fm.via(fn)
        rows.append(OpInfo(name, f"elementwise lhs {symbol} rhs, an i1 tensor", XY, (),
                           shapes.compare, fm.elementwise(ew), Fusion.ELEMENTWISE, NONE,
                           ELEMENTWISE, per_output(1), ew=ew, arith=False,
                           interval=iv.COMPARE, vjp=vj.COMPARE,
                           scalar=fm.elementwise(ew)))
    rows.append(OpInfo("select", "cond ? true_value : false_value, broadcasting all three",
                       (OperandSpec("cond"), OperandSpec("true_value"),
                        OperandSpec("false_value")), (),
                       shapes.select, fm.select, Fusion.ELEMENTWISE, NONE, ELEMENTWISE,
                       per_output(1), ew=fm.via("where"), arith=False, interval=iv.SELECT,
                       vjp=vj.select, scalar=fm.select))
    rows.append(OpInfo("cast", "convert the element type", X, (), shapes.cast, fm.cast,
                       Fusion.ELEMENTWISE, NONE, ELEMENTWISE, per_output(1), (0,),
                       type_linearity=_cast_linearity, interval=iv.CAST, declares_result=True,
                       vjp=vj.cast, scalar=fm.cast))
    rows.append(OpInfo("dropout", "zero elements with probability rate, scale the rest by "
                       "1/(1-rate)", (OperandSpec("input"), OperandSpec("seed", optional=True)),
                       (AttrSpec("rate", AttrKind.FLOAT, required=True),
                        AttrSpec("seed", AttrKind.INT)),
                       shapes.dropout, fm.dropout, Fusion.ELEMENTWISE, Linearity.ONE_SIDED,
                       ELEMENTWISE, per_output(8), (0,), position_dependent=True,
                       interval=iv.DROPOUT,
                       vjp=vj.dropout, scalar=sf.dropout))
    return rows


def _structural_rows() -> list[OpInfo]:
    rows = [OpInfo("constant", "a splat or dense tensor literal", (),
                   (AttrSpec("value", AttrKind.DENSE, required=True),), shapes.constant,
                   fm.constant, Fusion.SOURCE, NONE, sh.Replicated(), per_output(0),
                   arith=False, launches_kernel=False, vjp=vj.CONSTANT),
            OpInfo("iota", "0, 1, 2, ... along dim of the result type, broadcast over the other "
                   "dims", (), (AttrSpec("dim", AttrKind.INT, 0),), shapes.iota, fm.iota,
                   Fusion.SOURCE, NONE, sh.Replicated(), per_output(0), interval=iv.IOTA,
                   declares_result=True, vjp=vj.IOTA)]
    for name, fn, lin, combine, rule, interval, vjp in (
            ("reduce_sum", "sum", Linearity.ADDITIVE, "sum", shapes.reduce, iv.REDUCE_SUM,
             vj.reduce_sum),
            ("reduce_mean", "mean", Linearity.ADDITIVE, None, shapes.reduce_nonempty("mean"),
             iv.REDUCE_MEAN, vj.reduce_mean),
            ("reduce_max", "max", NONE, "max", shapes.reduce_nonempty("max"), iv.REDUCE_MAX,
             vj.reduce_max)):
        rows.append(OpInfo(name, f"{fn} over `axes`", X, _REDUCE_ATTRS, rule,
                           fm.reduction(fn), Fusion.REDUCTION, lin, sh.Reduction(combine),
                           per_input(1), (0,) if lin != NONE else (), interval=interval,
                           vjp=vjp, scalar=fm.reduction(fn)))
    rows.append(OpInfo("layernorm", "(x - mean) / sqrt(var + eps) * scale + bias over dims "
                       "axis..rank-1", (OperandSpec("input"), OperandSpec("scale", optional=True),
                                        OperandSpec("bias", optional=True)),
                       _NORM_ATTRS, shapes.normalization, fm.layernorm, Fusion.REDUCTION, NONE,
                       sh.RowReduction(trailing=True), per_input(8),
                       interval=iv.NORMALIZATION, vjp=vj.layernorm,
                       scalar=sf.layernorm))
    rows.append(OpInfo("rmsnorm", "x / sqrt(mean(x^2) + eps) * scale over dims axis..rank-1",
                       (OperandSpec("input"), OperandSpec("scale", optional=True)),
                       _NORM_ATTRS, shapes.normalization, fm.rmsnorm, Fusion.REDUCTION, NONE,
                       sh.RowReduction(trailing=True), per_input(5), interval=iv.NORMALIZATION,
                       vjp=vj.rmsnorm, scalar=sf.rmsnorm))
    rows.append(OpInfo("softmax", "exp(x - max) / sum(exp(x - max)) along axis", X,
                       (AttrSpec("axis", AttrKind.INT, -1),), shapes.softmax, fm.softmax,
                       Fusion.REDUCTION, NONE, sh.RowReduction(trailing=False), per_input(6),
                       interval=iv.SOFTMAX, vjp=vj.softmax, scalar=fm.softmax))
    rows.append(OpInfo("log_softmax", "x - max - log(sum(exp(x - max))) along axis", X,
                       (AttrSpec("axis", AttrKind.INT, -1),), shapes.softmax, fm.log_softmax,
                       Fusion.REDUCTION, NONE, sh.RowReduction(trailing=False), per_input(7),
                       interval=iv.LOG_SOFTMAX, vjp=vj.log_softmax, scalar=fm.log_softmax))
    rows.append(OpInfo("matmul", "batched matrix product, batch dims broadcast", XY, (),
                       shapes.matmul, fm.matmul, Fusion.OPAQUE, Linearity.ONE_SIDED, sh.Matmul(),
                       _matmul_flops, (0, 1), interval=iv.MATMUL, vjp=vj.matmul,
                       row_tiled=True))
    rows.append(OpInfo("transpose", "permute dimensions", X,
                       (AttrSpec("permutation", AttrKind.INTS, required=True),), shapes.transpose,
                       fm.transpose, Fusion.LAYOUT, Linearity.ADDITIVE, sh.Transpose(),
                       per_output(0), (0,), arith=False, interval=iv.MOVE, vjp=vj.transpose,
                       view=vr.TransposeView()))
    rows.append(OpInfo("reshape", "same elements, new shape (row-major)", X, (), shapes.reshape,
                       fm.reshape, Fusion.LAYOUT, Linearity.ADDITIVE, sh.Reshape(), per_output(0),
                       (0,), arith=False, launches_kernel=False, interval=iv.MOVE,
                       declares_result=True, vjp=vj.reshape, view=vr.ReshapeView()))
    rows.append(OpInfo("broadcast_in_dim", "replicate along new or size-1 dims (operand dim i -> "
                       "result dim broadcast_dimensions[i])", X,
                       (AttrSpec("broadcast_dimensions", AttrKind.INTS, required=True),),
                       shapes.broadcast_in_dim, fm.broadcast_in_dim, Fusion.BROADCAST,
                       Linearity.ADDITIVE, sh.Broadcast(), per_output(0), (0,), arith=False,
                       interval=iv.MOVE, declares_result=True, vjp=vj.broadcast_in_dim,
                       scalar=fm.broadcast_in_dim))
    rows.append(OpInfo("slice", "the elements start..limit by strides in each dim", X,
                       (AttrSpec("start", AttrKind.INTS, required=True),
                        AttrSpec("limit", AttrKind.INTS, required=True),
                        AttrSpec("strides", AttrKind.INTS)),
                       shapes.slice_, fm.slice_, Fusion.LAYOUT, Linearity.ADDITIVE, sh.Slice(),
                       per_output(0), (0,), arith=False, interval=iv.MOVE, vjp=vj.slice_,
                       view=vr.SliceView()))
    rows.append(OpInfo("concat", "join operands along dim", (OperandSpec("inputs", variadic=True),),
                       (AttrSpec("dim", AttrKind.INT, required=True),), shapes.concat, fm.concat,
                       Fusion.LAYOUT, Linearity.ADDITIVE, sh.Concat(), per_output(0),
                       arith=False, interval=iv.MOVE, vjp=vj.concat, view=vr.ConcatView()))
    # a lookup: OPAQUE (which element it reads depends on data, so no fused loop absorbs it);
    # linear in the table; position-dependent because on a device's block of a split table it
    # must know which rows the block holds (`Block.operands`)
    rows.append(OpInfo("gather", "input[..., indices, ...] along axis (0 for an index outside "
                       "[-n, n))", (OperandSpec("input"), OperandSpec("indices")),
                       (AttrSpec("axis", AttrKind.INT, 0),), shapes.gather, fm.gather,
                       Fusion.OPAQUE, Linearity.ONE_SIDED, Gather(), per_output(0), (0,),
                       arith=False, position_dependent=True, interval=iv.GATHER,
                       vjp=vj.gather))
    return rows


def _build() -> dict[str, OpInfo]:
    table: dict[str, OpInfo] = {}
    for info in (*_elementwise_rows(), *_structural_rows()):
        assert info.name not in table, info.name
        table[info.name] = info
    return table


OPS: dict[str, OpInfo] = _build()


def lookup(op_name: str) -> OpInfo | None:
    """The table entry for a full op name (`lamina.add`), or None for ops outside the table."""
    if not op_name.startswith("lamina."):
        return None
    return OPS.get(op_name[len("lamina."):])
