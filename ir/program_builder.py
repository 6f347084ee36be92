"""A typed IR builder for synthesized programs: append op-table ops at a point, one method per
op, with result types inferred by the table.

(`lamina.ir.builder` is its sibling for importers: one generic `op(cls, ...)` with
locations per node. The two grew in parallel branches; they share the shape rules, not code.)

    b = Builder.before(ret)                     # or Builder.at_end(block)
    s = b.mul(x, b.scalar(0.5, "f32"))          # tensor<4x8xf32> * tensor<f32> -> tensor<4x8xf32>
    t = b.reduce_sum(s, (1,), keepdims=True)    # tensor<4x1xf32>

Passes that synthesize programs (derive-backward, append-optimizer) and the VJP rules of
`lamina.ir.autodiff.vjp` build ops through this class instead of spelling op names or result types: every
op is its typed class from `lamina.ir.ops.lamina`, and its result type is what the row's shape rule
gives for the operands and attributes, so a built op always verifies (a `ShapeError` here is a bug
in the caller, raised with the rule's message). Results are unplaced (no `#lamina.place`):
`propagate-sharding` places them like any hand-written op. Identity layout ops (a reshape to the
same shape, the identity permutation, a broadcast to the same shape) are not emitted; scalar
constants are emitted once per (value, element type) and builder.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
from lamina.ir.core.dtypes import FLOAT_TYPES, element_name, to_storage
from lamina.ir.core.shapes import TensorInfo
from lamina.ir.ops.lamina import (
    AddOp,
    BroadcastInDimOp,
    CastOp,
    ConcatOp,
    ConstantOp,
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
    PowOp,
    ReduceMeanOp,
    ReduceSumOp,
    ReshapeOp,
    RsqrtOp,
    SelectOp,
    SliceOp,
    SqrtOp,
    SubOp,
    TanhOp,
    TransposeOp,
)
from lamina.ir.ops.opbase import LaminaOp, attr_value, make_attr, tensor_info
from xdsl.dialects.builtin import (
    BFloat16Type,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerType,
    LocationAttr,
    TensorType,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue

_ELEMENT: dict[str, Attribute] = {
    "f16": Float16Type(), "bf16": BFloat16Type(), "f32": Float32Type(), "f64": Float64Type(),
    "i1": IntegerType(1), "i32": IntegerType(32), "i64": IntegerType(64),
}
# little-endian bytes of one element, as `lamina.ir.ops.opbase.dense_to_array` decodes them
_PACK = {"f16": "<f2", "f32": "<f4", "f64": "<f8", "i32": "<i4", "i64": "<i8", "i1": "i1"}


def tensor_type(info: TensorInfo) -> TensorType:
    """The (unplaced) tensor type of a shape and element-type name."""
    return TensorType(_ELEMENT[info.dtype], info.shape)


def splat_attr(value: float, info: TensorInfo) -> DenseIntOrFPElementsAttr:
    """`dense<value> : T` kept as a splat (one stored element, however large T is)."""
    one = to_storage(np.asarray(value, dtype=np.float64), info.dtype) if info.dtype in FLOAT_TYPES \
        else np.asarray(value)
    if info.dtype == "bf16":
        data = (np.asarray(one, dtype=np.float32).view(np.uint32) >> np.uint32(16)) \
            .astype("<u2").tobytes()
    else:
        data = np.asarray(one).astype(_PACK[info.dtype]).tobytes()
    return DenseIntOrFPElementsAttr(cast(Any, tensor_type(info)), BytesAttr(data))


def info_of(v: SSAValue) -> TensorInfo:
    return tensor_info(v.type)


def retype(v: SSAValue, t: Attribute) -> None:
    """Give `v` the type `t` in place (xDSL has no API for it; `propagate-sharding` places values
    the same way). Only for a type that differs in its encoding (placement, tier)."""
    old = v.type
    assert isinstance(old, TensorType) and isinstance(t, TensorType)
    assert old.element_type == t.element_type and old.get_shape() == t.get_shape(), (old, t)
    v._type = t  # noqa: SLF001 - retyping in place


class Builder:
    """Inserts ops before `before` (or at the end of `block` when `before` is None), each stamped
    with `location` so diagnostics and `--explain` point at the source op they came from."""

    def __init__(self, block: Block, before: Operation | None = None,
                 location: LocationAttr | None = None,
                 scalars: dict[tuple[float, str], SSAValue] | None = None) -> None:
        self.block, self.before, self.location = block, before, location
        # rank-0 constants by (value, type); builders appending at one point in turn may share
        # one dict (a constant made earlier there dominates every later op)
        self._scalars = scalars if scalars is not None else {}
        self.emitted: list[Operation] = []

    @staticmethod
    def before_op(op: Operation, location: LocationAttr | None = None) -> Builder:
        block = op.parent_block()
        assert block is not None
        return Builder(block, op, location)

    @staticmethod
    def at_end(block: Block, location: LocationAttr | None = None,
               scalars: dict[tuple[float, str], SSAValue] | None = None) -> Builder:
        return Builder(block, None, location, scalars)

    # -- the generic entry --
    def emit(self, cls: type[LaminaOp], operands: Sequence[SSAValue | None],
             result: TensorInfo | None = None, **attrs: Any) -> SSAValue:
        """Append `cls` on `operands` (the row's operand slots, in order: None for an absent
        optional, a variadic slot flattened at its end) with `attrs` (Python values, by the row's
        attribute names; absent ones keep their defaults). `result` is the declared result for
        the rules that read it (reshape, broadcast_in_dim, cast); the rule gives the rest."""
        info = cls.INFO
        groups: list[SSAValue | Sequence[SSAValue] | None] = []
        rest = list(operands)
        for spec in info.operands:
            if spec.variadic:
                groups.append([v for v in rest if v is not None])
                rest = []
            elif spec.optional:
                v = rest.pop(0) if rest else None
                groups.append([v] if v is not None else [])
            else:
                groups.append(rest.pop(0))
        assert not rest, f"{info.full_name}: too many operands"
        props = {a.name: make_attr(a, attrs[a.name]) for a in info.attrs if a.name in attrs}
        values = {a.name: attr_value(a, props.get(a.name)) for a in info.attrs}
        slots = [None if v is None else info_of(v) for v in operands]
        declared = result or next((s for s in slots if s is not None), None)
        assert declared is not None, f"{info.full_name} needs a declared result"
        got = info.shape(slots, values, declared)
        op = cls.build(operands=groups, properties=props, result_types=[tensor_type(got)])
        if self.location is not None:
            op.location = self.location
        if self.before is not None:
            self.block.insert_op_before(op, self.before)
        else:
            self.block.add_op(op)
        self.emitted.append(op)
        return op.results[0]

    # -- constants --
    def splat(self, value: float, info: TensorInfo) -> SSAValue:
        return self.emit(ConstantOp, [], info, value=splat_attr(value, info))

    def scalar(self, value: float, dtype: str) -> SSAValue:
        """A rank-0 constant (it broadcasts against any operand); one per value and type."""
        key = (float(value), dtype)
        got = self._scalars.get(key)
        if got is None:
            got = self._scalars[key] = self.splat(value, TensorInfo((), dtype))
        return got

    def iota(self, shape: Sequence[int], dtype: str, dim: int) -> SSAValue:
        """0, 1, 2, ... along `dim` of a tensor of `shape` and `dtype`."""
        return self.emit(IotaOp, [], result=TensorInfo(tuple(shape), dtype), dim=dim)

    def zeros(self, info: TensorInfo) -> SSAValue:
        return self.splat(0.0, info)

    def like(self, value: float, v: SSAValue) -> SSAValue:
        """A rank-0 constant of `v`'s element type."""
        return self.scalar(value, info_of(v).dtype)

    # -- elementwise --
    def add(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(AddOp, [a, b])

    def sub(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(SubOp, [a, b])

    def mul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(MulOp, [a, b])

    def div(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(DivOp, [a, b])

    def pow(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(PowOp, [a, b])

    def neg(self, a: SSAValue) -> SSAValue:
        return self.emit(NegOp, [a])

    def exp(self, a: SSAValue) -> SSAValue:
        return self.emit(ExpOp, [a])

    def log(self, a: SSAValue) -> SSAValue:
        return self.emit(LogOp, [a])

    def tanh(self, a: SSAValue) -> SSAValue:
        return self.emit(TanhOp, [a])

    def erf(self, a: SSAValue) -> SSAValue:
        return self.emit(ErfOp, [a])

    def sqrt(self, a: SSAValue) -> SSAValue:
        return self.emit(SqrtOp, [a])

    def rsqrt(self, a: SSAValue) -> SSAValue:
        return self.emit(RsqrtOp, [a])

    def gt(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(GtOp, [a, b])

    def lt(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(LtOp, [a, b])

    def eq(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(EqOp, [a, b])

    def select(self, c: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(SelectOp, [c, a, b])

    def cast(self, a: SSAValue, dtype: str) -> SSAValue:
        if info_of(a).dtype == dtype:
            return a
        return self.emit(CastOp, [a], TensorInfo(info_of(a).shape, dtype))

    def dropout(self, a: SSAValue, rate: float, seed: int | None,
                seed_operand: SSAValue | None) -> SSAValue:
        attrs: dict[str, Any] = {"rate": rate}
        if seed is not None:
            attrs["seed"] = seed
        return self.emit(DropoutOp, [a, seed_operand], **attrs)

    # -- reductions, contraction, layout --
    def reduce_sum(self, a: SSAValue, axes: Sequence[int], keepdims: bool = False) -> SSAValue:
        if not axes:
            return a
        return self.emit(ReduceSumOp, [a], axes=tuple(axes), keepdims=keepdims)

    def reduce_mean(self, a: SSAValue, axes: Sequence[int], keepdims: bool = False) -> SSAValue:
        if not axes:
            return a
        return self.emit(ReduceMeanOp, [a], axes=tuple(axes), keepdims=keepdims)

    def matmul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(MatmulOp, [a, b])

    def transpose(self, a: SSAValue, perm: Sequence[int]) -> SSAValue:
        if list(perm) == list(range(len(perm))):
            return a
        return self.emit(TransposeOp, [a], permutation=tuple(perm))

    def reshape(self, a: SSAValue, shape: Sequence[int]) -> SSAValue:
        got = info_of(a)
        if got.shape == tuple(shape):
            return a
        return self.emit(ReshapeOp, [a], TensorInfo(tuple(shape), got.dtype))

    def broadcast_in_dim(self, a: SSAValue, shape: Sequence[int], dims: Sequence[int]) -> SSAValue:
        got = info_of(a)
        if got.shape == tuple(shape) and list(dims) == list(range(len(shape))):
            return a
        return self.emit(BroadcastInDimOp, [a], TensorInfo(tuple(shape), got.dtype),
                         broadcast_dimensions=tuple(dims))

    def slice(self, a: SSAValue, start: Sequence[int], limit: Sequence[int],
              strides: Sequence[int] | None = None) -> SSAValue:
        shape = info_of(a).shape
        step = list(strides) if strides is not None else [1] * len(shape)
        if list(start) == [0] * len(shape) and tuple(limit) == shape and step == [1] * len(shape):
            return a
        attrs: dict[str, Any] = {"start": tuple(start), "limit": tuple(limit)}
        if strides is not None and any(s != 1 for s in step):
            attrs["strides"] = tuple(step)
        return self.emit(SliceOp, [a], **attrs)

    def concat(self, parts: Sequence[SSAValue], dim: int) -> SSAValue:
        parts = [p for p in parts if info_of(p).shape[dim] > 0] or list(parts[:1])
        if len(parts) == 1:
            return parts[0]
        return self.emit(ConcatOp, list(parts), dim=dim)

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


def numel(info: TensorInfo) -> int:
    return math.prod(info.shape)


def is_float_value(v: SSAValue) -> bool:
    t = v.type
    return isinstance(t, TensorType) and element_name(t.element_type) in FLOAT_TYPES
