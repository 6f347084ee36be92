"""The op table: the single source of every per-op fact in Lamina.

One `OpInfo` per op says what the op is called, which operands and attributes it takes, its shape
rule, its NumPy semantics, its class for fusion, whether a pending-reduction (`partial`) value may
pass through it, its sharding rule and its cost. The dialect's op classes are generated from these
entries (`lamina.ir.lamina`), the interpreter runs their kernels, and passes read their classes and
costs; nothing else keeps a list of op names. Adding an elementwise op is one line in `UNARY_OPS` /
`BINARY_OPS` below plus its formula in `lamina.ir.semantics`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np
from lamina.ir import semantics as sem
from lamina.ir import shapes
from lamina.ir.shapes import TensorInfo


class Fusion(Enum):
    """How an op may join a fused kernel (the TVM/XLA lattice, coarsened).

    ELEMENTWISE: each output element depends on the operand elements at the same (broadcast) index.
    BROADCAST:   elementwise after a pure index remapping that only replicates (broadcast_in_dim).
    REDUCTION:   combines elements along some axes (reduce_*, and composites built on row
                 reductions: layernorm, rmsnorm, softmax).
    LAYOUT:      moves elements without arithmetic (transpose, reshape, slice, concat).
    OPAQUE:      anything a fused loop nest cannot absorb (matmul).
    SOURCE:      produces a value from attributes alone (constant); free to pull into any group.
    """

    ELEMENTWISE = "elementwise"
    BROADCAST = "broadcast"
    REDUCTION = "reduction"
    LAYOUT = "layout"
    OPAQUE = "opaque"
    SOURCE = "source"


class Linearity(Enum):
    """Whether a value that is a pending sum over devices (`partial`) may flow through the op.

    ADDITIVE:   f(a1 + a2, b1 + b2) = f(a1, b1) + f(a2, b2): every operand may be partial (all or
                none), the result is partial (add, sub, neg, reduce_sum, layout ops, float casts).
    ONE_SIDED:  linear in each listed operand separately: exactly one of `linear_operands` may be
                partial and the others must not be (mul, matmul; div in its numerator).
    NONE:       a partial operand must be reduced first (exp, gelu, max, softmax, ...).
    """

    ADDITIVE = "additive"
    ONE_SIDED = "one_sided"
    NONE = "none"


class Sharding(Enum):
    """Which propagation rule maps operand placements to result placements (see the sharding pass)."""

    ELEMENTWISE = "elementwise"        # dims aligned by broadcasting keep their splits
    REDUCTION = "reduction"            # reduced dims drop their splits (-> partial for sums)
    ROW_REDUCTION = "row_reduction"    # composites: normalized dims must be unsplit
    MATMUL = "matmul"                  # batch/M/N splits pass, K split -> partial
    TRANSPOSE = "transpose"            # splits move with the permutation
    RESHAPE = "reshape"                # splits move with the dims they belong to
    BROADCAST = "broadcast"            # splits follow broadcast_dimensions
    SLICE = "slice"                    # sliced dims must be unsplit
    CONCAT = "concat"                  # the concat dim must be unsplit
    REPLICATED = "replicated"          # constants: replicated everywhere


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
    kernel: sem.Kernel
    fusion: Fusion
    linearity: Linearity
    sharding: Sharding
    flops: Flops
    linear_operands: tuple[int, ...] = ()
    ew: sem.Elementwise | None = None  # the elementwise formula, for fused/tiled execution
    launches_kernel: bool = True       # False for ops that are views or folded into their users
    # True when an element's result depends on its place in the global tensor (dropout's mask):
    # a backend running the op on a block (a tile, a device's shard) must pass `Call.block`
    position_dependent: bool = False
    # Sharding.REDUCTION: what a split reduced dimension leaves pending ("sum" / "max"), or None
    # when a per-shard result cannot be combined into the whole one (a mean of unequal parts)
    split_reduce: str | None = None
    # Sharding.ROW_REDUCTION: True if the op normalizes dims axis..rank-1 (layernorm), False if
    # only dim `axis` (softmax); those dims must be unsplit
    normalizes_trailing: bool = True

    @property
    def full_name(self) -> str:
        return f"lamina.{self.name}"

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

# name, summary, flops per element, linearity, linear operands
UNARY_OPS: tuple[tuple[str, str, float, Linearity, tuple[int, ...]], ...] = (
    ("neg", "negation", 1, Linearity.ADDITIVE, (0,)),
    ("abs", "absolute value", 1, NONE, ()),
    ("exp", "natural exponential", 4, NONE, ()),
    ("log", "natural logarithm", 4, NONE, ()),
    ("tanh", "hyperbolic tangent", 6, NONE, ()),
    ("sigmoid", "logistic sigmoid 1 / (1 + exp(-x))", 6, NONE, ()),
    ("relu", "max(x, 0)", 1, NONE, ()),
    ("gelu", "Gaussian error linear unit (erf form, or tanh form with approximate = \"tanh\")",
     12, NONE, ()),
    ("erf", "error function", 10, NONE, ()),
    ("sqrt", "square root", 2, NONE, ()),
    ("rsqrt", "1 / sqrt(x)", 3, NONE, ()),
    ("reciprocal", "1 / x", 1, NONE, ()),
)

BINARY_OPS: tuple[tuple[str, str, float, Linearity, tuple[int, ...]], ...] = (
    ("add", "sum", 1, Linearity.ADDITIVE, (0, 1)),
    ("sub", "difference", 1, Linearity.ADDITIVE, (0, 1)),
    ("mul", "product", 1, Linearity.ONE_SIDED, (0, 1)),
    ("div", "quotient", 1, Linearity.ONE_SIDED, (0,)),
    ("max", "elementwise maximum (NaN-propagating)", 1, NONE, ()),
    ("min", "elementwise minimum (NaN-propagating)", 1, NONE, ()),
    ("pow", "lhs raised to rhs", 8, NONE, ()),
)

COMPARE_OPS: tuple[tuple[str, str], ...] = (
    ("eq", "=="), ("ne", "!="), ("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="),
)

_UNARY_ATTRS: dict[str, tuple[AttrSpec, ...]] = {
    "gelu": (AttrSpec("approximate", AttrKind.STR, "none", choices=("none", "tanh")),),
}

_REDUCE_ATTRS = (AttrSpec("axes", AttrKind.INTS, required=True),
                 AttrSpec("keepdims", AttrKind.BOOL, False))
_NORM_ATTRS = (AttrSpec("axis", AttrKind.INT, -1), AttrSpec("eps", AttrKind.FLOAT, 1e-5))


def _build() -> dict[str, OpInfo]:
    table: dict[str, OpInfo] = {}

    def add(info: OpInfo) -> None:
        assert info.name not in table, info.name
        table[info.name] = info

    for name, summary, flops, lin, lin_ops in UNARY_OPS:
        fn = sem.UNARY[name]
        add(OpInfo(name, summary, X, _UNARY_ATTRS.get(name, ()), shapes.unary,
                   sem.elementwise_kernel(fn), Fusion.ELEMENTWISE, lin, Sharding.ELEMENTWISE,
                   per_output(flops), lin_ops, ew=fn))
    for name, summary, flops, lin, lin_ops in BINARY_OPS:
        fn = sem.BINARY[name]
        add(OpInfo(name, summary, XY, (), shapes.binary, sem.elementwise_kernel(fn),
                   Fusion.ELEMENTWISE, lin, Sharding.ELEMENTWISE, per_output(flops), lin_ops,
                   ew=fn))
    for name, symbol in COMPARE_OPS:
        fn = sem.COMPARE[name]
        add(OpInfo(name, f"elementwise lhs {symbol} rhs, an i1 tensor", XY, (), shapes.compare,
                   sem.compare_kernel(fn), Fusion.ELEMENTWISE, NONE, Sharding.ELEMENTWISE,
                   per_output(1), ew=fn))
    add(OpInfo("select", "cond ? true_value : false_value, broadcasting all three",
               (OperandSpec("cond"), OperandSpec("true_value"), OperandSpec("false_value")), (),
               shapes.select, sem.select_kernel, Fusion.ELEMENTWISE, NONE, Sharding.ELEMENTWISE,
               per_output(1), ew=np.where))
    add(OpInfo("cast", "convert the element type", X, (), shapes.cast, sem.cast_kernel,
               Fusion.ELEMENTWISE, Linearity.ADDITIVE, Sharding.ELEMENTWISE, per_output(1), (0,)))
    add(OpInfo("dropout", "zero elements with probability rate, scale the rest by 1/(1-rate)",
               (OperandSpec("input"), OperandSpec("seed", optional=True)),
               (AttrSpec("rate", AttrKind.FLOAT, required=True), AttrSpec("seed", AttrKind.INT)),
               shapes.dropout, sem.dropout_kernel, Fusion.ELEMENTWISE, Linearity.ONE_SIDED,
               Sharding.ELEMENTWISE, per_output(8), (0,), position_dependent=True))
    add(OpInfo("constant", "a splat or dense tensor literal", (),
               (AttrSpec("value", AttrKind.DENSE, required=True),), shapes.constant,
               sem.constant_kernel, Fusion.SOURCE, NONE, Sharding.REPLICATED, per_output(0),
               launches_kernel=False))
    for name, fn, lin, split in (("reduce_sum", "sum", Linearity.ADDITIVE, "sum"),
                                 ("reduce_mean", "mean", Linearity.ADDITIVE, None),
                                 ("reduce_max", "max", NONE, "max")):
        add(OpInfo(name, f"{fn} over `axes`", X, _REDUCE_ATTRS, shapes.reduce,
                   sem.reduce_kernel(getattr(np, fn)), Fusion.REDUCTION, lin,
                   Sharding.REDUCTION, per_input(1), (0,) if lin != NONE else (),
                   split_reduce=split))
    add(OpInfo("layernorm", "(x - mean) / sqrt(var + eps) * scale + bias over dims axis..rank-1",
               (OperandSpec("input"), OperandSpec("scale", optional=True),
                OperandSpec("bias", optional=True)),
               _NORM_ATTRS, shapes.normalization, sem.layernorm_kernel, Fusion.REDUCTION, NONE,
               Sharding.ROW_REDUCTION, per_input(8)))
    add(OpInfo("rmsnorm", "x / sqrt(mean(x^2) + eps) * scale over dims axis..rank-1",
               (OperandSpec("input"), OperandSpec("scale", optional=True)),
               _NORM_ATTRS, shapes.normalization, sem.rmsnorm_kernel, Fusion.REDUCTION, NONE,
               Sharding.ROW_REDUCTION, per_input(5)))
    add(OpInfo("softmax", "exp(x - max) / sum(exp(x - max)) along axis", X,
               (AttrSpec("axis", AttrKind.INT, -1),), shapes.softmax, sem.softmax_kernel,
               Fusion.REDUCTION, NONE, Sharding.ROW_REDUCTION, per_input(6),
               normalizes_trailing=False))
    add(OpInfo("matmul", "batched matrix product, batch dims broadcast", XY, (), shapes.matmul,
               sem.matmul_kernel, Fusion.OPAQUE, Linearity.ONE_SIDED, Sharding.MATMUL,
               _matmul_flops, (0, 1)))
    add(OpInfo("transpose", "permute dimensions", X,
               (AttrSpec("permutation", AttrKind.INTS, required=True),), shapes.transpose,
               sem.transpose_kernel, Fusion.LAYOUT, Linearity.ADDITIVE, Sharding.TRANSPOSE,
               per_output(0), (0,)))
    add(OpInfo("reshape", "same elements, new shape (row-major)", X, (), shapes.reshape,
               sem.reshape_kernel, Fusion.LAYOUT, Linearity.ADDITIVE, Sharding.RESHAPE,
               per_output(0), (0,), launches_kernel=False))
    add(OpInfo("broadcast_in_dim", "replicate along new or size-1 dims (operand dim i -> "
               "result dim broadcast_dimensions[i])", X,
               (AttrSpec("broadcast_dimensions", AttrKind.INTS, required=True),),
               shapes.broadcast_in_dim, sem.broadcast_in_dim_kernel, Fusion.BROADCAST,
               Linearity.ADDITIVE, Sharding.BROADCAST, per_output(0), (0,)))
    add(OpInfo("slice", "the elements start..limit by strides in each dim", X,
               (AttrSpec("start", AttrKind.INTS, required=True),
                AttrSpec("limit", AttrKind.INTS, required=True),
                AttrSpec("strides", AttrKind.INTS)),
               shapes.slice_, sem.slice_kernel, Fusion.LAYOUT, Linearity.ADDITIVE,
               Sharding.SLICE, per_output(0), (0,)))
    add(OpInfo("concat", "join operands along dim", (OperandSpec("inputs", variadic=True),),
               (AttrSpec("dim", AttrKind.INT, required=True),), shapes.concat, sem.concat_kernel,
               Fusion.LAYOUT, Linearity.ADDITIVE, Sharding.CONCAT, per_output(0)))
    return table


OPS: dict[str, OpInfo] = _build()


def lookup(op_name: str) -> OpInfo | None:
    """The table entry for a full op name (`lamina.add`), or None for ops outside the table."""
    if not op_name.startswith("lamina."):
        return None
    return OPS.get(op_name[len("lamina."):])
