"""The one IR builder: Lamina ops whose result types come from their rows' shape rules.

Every piece of Lamina that writes IR from Python builds it through a `Builder`: the importers
(`lamina.frontends`), the VJP rules (`lamina.ir.autodiff.vjp`, which see it through their `Emitter`
protocol), and the passes that synthesize programs (`derive-backward`, `append-optimizer`). One
class, so that there is one answer to "what type does this op get": the row's shape rule
(`OpInfo.shape`, the verifier's own) run on the operand types and attributes. A builder therefore
never writes a type the verifier would reject later, and no caller repeats a shape rule.

Two ways in, one path underneath:

    b = Builder.at_end(block)                              # or Builder.before_op(ret)
    h = b.op(MatmulOp, x, w)                               # generic: tensor<8x16xf32> from the rule
    r = b.op(ReshapeOp, h, result=TensorInfo((128,), "f32"))
    s = b.mul(h, b.scalar(0.5, "f32"))                     # typed: one method per op
    t = b.reduce_sum(s, (1,), keepdims=True)               # tensor<8x1xf32>

`op` is what the importers use: operands in the table's slot order (None for an absent optional,
a sequence for a variadic slot), attributes as Python values. A row whose result type is part of
its specification (`OpInfo.declares_result`: reshape's shape, cast's element type,
broadcast_in_dim's and iota's whole type) is told it with `result=`, which the rule still checks;
any other row refuses `result=`, so a caller cannot override a rule by accident. A rule's refusal
is a `ShapeError` whose message starts with the op's name; an importer adds the node it was
converting, and in a pass or a VJP rule it is a bug in the caller.

The typed methods are what synthesized programs use, and they add what such programs want and an
importer must not get: identity layout ops (a reshape to the same shape, the identity permutation,
a broadcast to the same shape, a whole-tensor slice, an empty reduction) are not emitted, and
`scalar` makes one rank-0 constant per (value, element type) and builder (builders appending in
turn at one point may share the table: `scalars=`). An importer's `constant` is never shared, so
an imported program keeps one constant per source constant.

Where ops go: at the end of a block, or before an op (`before_op`). `location`, when set, is given
to every op created, so a diagnostic or an `--explain` line points at the source: the importers
set it per node, the passes to the op they are differentiating or the function they extend.
Results are unplaced (no `#lamina.place`): `propagate-sharding` places them like any hand-written
op. `emitted` lists every op created, in order (derive-backward reports how many each VJP took).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from lamina.ir.core.dtypes import FLOAT_TYPES, element_name, element_type, tensor_type
from lamina.ir.core.shapes import ShapeError, TensorInfo, info_of
from lamina.ir.ops.lamina import (
    AddOp,
    BroadcastInDimOp,
    CastOp,
    ConcatOp,
    ConstantOp,
    CosOp,
    CumsumOp,
    DivOp,
    DropoutOp,
    EqOp,
    ErfOp,
    ExpOp,
    GtOp,
    IotaOp,
    LogOp,
    LtOp,
    MatmulOp,
    MulOp,
    NegOp,
    PadOp,
    PowOp,
    ReduceMeanOp,
    ReduceSumOp,
    ReshapeOp,
    RsqrtOp,
    SelectOp,
    SinOp,
    SliceOp,
    SqrtOp,
    SubOp,
    TanhOp,
    TransposeOp,
)
from lamina.ir.ops.opbase import LaminaOp, attr_value, dense_from_array, make_attr
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, LocationAttr, TensorType
from xdsl.ir import Attribute, Block, Operation, SSAValue

Operand = SSAValue | Sequence[SSAValue] | None   # a value, a variadic group, an absent optional
Scalars = dict[tuple[float, str], SSAValue]


def splat_attr(value: float, info: TensorInfo) -> DenseIntOrFPElementsAttr:
    """`dense<value> : T` kept as a splat: one stored element, however large T is (a zero
    cotangent of a big activation must not store every zero)."""
    one = np.asarray(value, dtype=np.float64) if info.dtype in FLOAT_TYPES else np.asarray(value)
    return DenseIntOrFPElementsAttr(tensor_type(info.shape, info.dtype),
                                    dense_from_array(one, info.dtype).data)


def retype(v: SSAValue, t: Attribute) -> None:
    """Give `v` the type `t` in place (xDSL has no API for it; `propagate-sharding` places values
    the same way). Only for a type that differs in its encoding (placement, tier)."""
    old = v.type
    assert isinstance(old, TensorType) and isinstance(t, TensorType)
    assert old.element_type == t.element_type and old.get_shape() == t.get_shape(), (old, t)
    v._type = t  # noqa: SLF001 - retyping in place


def set_dtype(v: SSAValue, dtype: str) -> None:
    """Give `v` element type `dtype` in place, keeping its shape and placement (for a rewrite
    that moves a cast across the op making `v`, which then computes in `dtype`)."""
    old = v.type
    assert isinstance(old, TensorType)
    v._type = TensorType(element_type(dtype), old.get_shape(), old.encoding)  # noqa: SLF001


def is_float_value(v: SSAValue) -> bool:
    """Whether `v` is a tensor of a float element type (what can carry a gradient)."""
    t = v.type
    return isinstance(t, TensorType) and element_name(t.element_type) in FLOAT_TYPES


class Builder:
    """Creates ops before `before` (or at the end of `block` when `before` is None), each given
    `location` when it is set (see the module docstring)."""

    def __init__(self, block: Block, before: Operation | None = None,
                 location: LocationAttr | None = None, scalars: Scalars | None = None) -> None:
        self.block, self.before, self.location = block, before, location
        # rank-0 constants by (value, type); builders appending at one point in turn may share
        # one dict (a constant made earlier there dominates every later op)
        self._scalars: Scalars = scalars if scalars is not None else {}
        self.emitted: list[Operation] = []

    @staticmethod
    def before_op(op: Operation, location: LocationAttr | None = None) -> Builder:
        block = op.parent_block()
        assert block is not None
        return Builder(block, op, location)

    @staticmethod
    def at_end(block: Block, location: LocationAttr | None = None,
               scalars: Scalars | None = None) -> Builder:
        return Builder(block, None, location, scalars)

    # -- the generic entry: every op is created here --
    def op(self, cls: type[LaminaOp], *operands: Operand, result: TensorInfo | None = None,
           **attrs: Any) -> SSAValue:
        """A `cls` op on `operands` (table order: None for an absent optional operand, a sequence
        for a variadic one) with attributes `attrs` as Python values (None: absent, the default).
        The rule sees the attributes as the verifier will read them back from the op."""
        info = cls.INFO
        if len(operands) > len(info.operands):
            raise ShapeError(f"{info.full_name} takes {len(info.operands)} operands, got "
                             f"{len(operands)}")
        groups: list[SSAValue | Sequence[SSAValue]] = []
        slots: list[TensorInfo | None] = []
        for spec, v in zip(info.operands, (*operands, *[None] * len(info.operands)), strict=False):
            if spec.variadic:
                values = list(v) if isinstance(v, Sequence) else []
                groups.append(values)
                slots.extend(info_of(x) for x in values)
            elif v is None or isinstance(v, Sequence):
                if not spec.optional:
                    raise ShapeError(f"{info.full_name}: operand '{spec.name}' is required")
                groups.append([])
                slots.append(None)
            else:
                groups.append([v] if spec.optional else v)
                slots.append(info_of(v))
        known = {a.name: a for a in info.attrs}
        unknown = sorted(set(attrs) - set(known))
        if unknown:
            raise ShapeError(f"{info.full_name} has no attribute '{unknown[0]}'")
        if info.declares_result != (result is not None):
            need = "needs its result type (result=)" if info.declares_result else \
                "infers its result type; result= is not taken"
            raise ShapeError(f"{info.full_name} {need}")
        props = {k: make_attr(known[k], v) for k, v in attrs.items() if v is not None}
        values = {a.name: attr_value(a, props.get(a.name)) for a in info.attrs}
        declared = result if result is not None else TensorInfo((), "f32")  # read by no rule
        try:
            out = info.shape(slots, values, declared)
        except ShapeError as e:
            raise ShapeError(f"{info.full_name}: {e}") from None
        op = cls.build(operands=groups, properties=props,
                       result_types=[tensor_type(out.shape, out.dtype)])
        if self.location is not None:
            op.location = self.location
        if self.before is not None:
            self.block.insert_op_before(op, self.before)
        else:
            self.block.add_op(op)
        self.emitted.append(op)
        return op.results[0]

    # -- constants --
    def constant(self, value: np.ndarray | float | int | bool, dtype: str) -> SSAValue:
        """A `lamina.constant` holding `value` as element type `dtype` (stored as a splat when
        every element is the same); a new op on every call, as an importer wants."""
        return self.op(ConstantOp, value=dense_from_array(np.asarray(value), dtype))

    def splat(self, value: float, info: TensorInfo) -> SSAValue:
        """A constant of type `info` with every element `value` (one element stored)."""
        return self.op(ConstantOp, value=splat_attr(value, info))

    def scalar(self, value: float, dtype: str) -> SSAValue:
        """A rank-0 constant (it broadcasts against any operand); one per value and type."""
        key = (float(value), dtype)
        got = self._scalars.get(key)
        if got is None:
            got = self._scalars[key] = self.splat(value, TensorInfo((), dtype))
        return got

    def iota(self, shape: Sequence[int], dtype: str, dim: int) -> SSAValue:
        """0, 1, 2, ... along `dim` of a tensor of `shape` and `dtype`."""
        return self.op(IotaOp, result=TensorInfo(tuple(shape), dtype), dim=dim)

    def zeros(self, info: TensorInfo) -> SSAValue:
        return self.splat(0.0, info)

    def like(self, value: float, v: SSAValue) -> SSAValue:
        """A rank-0 constant of `v`'s element type."""
        return self.scalar(value, info_of(v).dtype)

    # -- elementwise --
    def add(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(AddOp, a, b)

    def sub(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(SubOp, a, b)

    def mul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(MulOp, a, b)

    def div(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(DivOp, a, b)

    def pow(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(PowOp, a, b)

    def neg(self, a: SSAValue) -> SSAValue:
        return self.op(NegOp, a)

    def exp(self, a: SSAValue) -> SSAValue:
        return self.op(ExpOp, a)

    def log(self, a: SSAValue) -> SSAValue:
        return self.op(LogOp, a)

    def tanh(self, a: SSAValue) -> SSAValue:
        return self.op(TanhOp, a)

    def sin(self, a: SSAValue) -> SSAValue:
        return self.op(SinOp, a)

    def cos(self, a: SSAValue) -> SSAValue:
        return self.op(CosOp, a)

    def cumsum(self, a: SSAValue, axis: int, exclusive: bool = False,
               reverse: bool = False) -> SSAValue:
        """The running sum of `a` along `axis`; the flags at their default (False) stay absent."""
        return self.op(CumsumOp, a, axis=axis, exclusive=exclusive or None,
                       reverse=reverse or None)

    def erf(self, a: SSAValue) -> SSAValue:
        return self.op(ErfOp, a)

    def sqrt(self, a: SSAValue) -> SSAValue:
        return self.op(SqrtOp, a)

    def rsqrt(self, a: SSAValue) -> SSAValue:
        return self.op(RsqrtOp, a)

    def gt(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(GtOp, a, b)

    def lt(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(LtOp, a, b)

    def eq(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(EqOp, a, b)

    def select(self, c: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(SelectOp, c, a, b)

    def cast(self, a: SSAValue, dtype: str) -> SSAValue:
        """`a` as element type `dtype`; `a` itself when it already is."""
        if info_of(a).dtype == dtype:
            return a
        return self.op(CastOp, a, result=TensorInfo(info_of(a).shape, dtype))

    def dropout(self, a: SSAValue, rate: float, seed: int | None,
                seed_operand: SSAValue | None) -> SSAValue:
        return self.op(DropoutOp, a, seed_operand, rate=rate, seed=seed)

    # -- reductions, contraction, layout (identities elided) --
    def reduce_sum(self, a: SSAValue, axes: Sequence[int], keepdims: bool = False) -> SSAValue:
        if not axes:
            return a
        return self.op(ReduceSumOp, a, axes=tuple(axes), keepdims=keepdims)

    def reduce_mean(self, a: SSAValue, axes: Sequence[int], keepdims: bool = False) -> SSAValue:
        if not axes:
            return a
        return self.op(ReduceMeanOp, a, axes=tuple(axes), keepdims=keepdims)

    def matmul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(MatmulOp, a, b)

    def transpose(self, a: SSAValue, perm: Sequence[int]) -> SSAValue:
        if list(perm) == list(range(len(perm))):
            return a
        return self.op(TransposeOp, a, permutation=tuple(perm))

    def reshape(self, a: SSAValue, shape: Sequence[int]) -> SSAValue:
        got = info_of(a)
        if got.shape == tuple(shape):
            return a
        return self.op(ReshapeOp, a, result=TensorInfo(tuple(shape), got.dtype))

    def broadcast_in_dim(self, a: SSAValue, shape: Sequence[int], dims: Sequence[int]) -> SSAValue:
        got = info_of(a)
        if got.shape == tuple(shape) and list(dims) == list(range(len(shape))):
            return a
        return self.op(BroadcastInDimOp, a, result=TensorInfo(tuple(shape), got.dtype),
                       broadcast_dimensions=tuple(dims))

    def slice(self, a: SSAValue, start: Sequence[int], limit: Sequence[int],
              strides: Sequence[int] | None = None) -> SSAValue:
        shape = info_of(a).shape
        step = list(strides) if strides is not None else [1] * len(shape)
        if list(start) == [0] * len(shape) and tuple(limit) == shape and step == [1] * len(shape):
            return a
        unit = all(s == 1 for s in step)
        return self.op(SliceOp, a, start=tuple(start), limit=tuple(limit),
                       strides=None if unit else tuple(step))

    def pad(self, a: SSAValue, low: Sequence[int], high: Sequence[int],
            value: float = 0.0) -> SSAValue:
        """`a` with `value` around it; no padding at all is `a` itself."""
        if not any(low) and not any(high):
            return a
        return self.op(PadOp, a, low=tuple(low), high=tuple(high), value=float(value))

    def concat(self, parts: Sequence[SSAValue], dim: int) -> SSAValue:
        """`parts` joined along `dim`; empty parts are dropped, and a single part is itself."""
        parts = [p for p in parts if info_of(p).shape[dim] > 0] or list(parts[:1])
        if len(parts) == 1:
            return parts[0]
        return self.op(ConcatOp, parts, dim=dim)

    # -- NumPy broadcasting, in Lamina ops --
    def broadcast_to(self, a: SSAValue, shape: Sequence[int]) -> SSAValue:
        """`a` replicated to `shape` by NumPy's rules (trailing dims aligned)."""
        rank = len(info_of(a).shape)
        return self.broadcast_in_dim(a, shape, range(len(shape) - rank, len(shape)))

    def sum_to(self, g: SSAValue, shape: Sequence[int]) -> SSAValue:
        """The adjoint of broadcasting a `shape` value to `g`'s shape: sum `g` over the dims that
        broadcasting added or stretched, then drop the added ones."""
        gshape = info_of(g).shape
        lead = len(gshape) - len(shape)
        axes = [d for d in range(len(gshape))
                if d < lead or (shape[d - lead] == 1 and gshape[d] != 1)]
        return self.reshape(self.reduce_sum(g, axes, keepdims=True), shape)
