"""Building Lamina programs from Python: ops whose result types come from their rows' shape rules.

Importers (`lamina.frontends`) and tools that write programs build IR through a `Builder` instead of
computing result types by hand: `b.op(AddOp, x, y)` runs the row's shape rule (`OpInfo.shape`, the
verifier's) on the operand types and creates the op with the result type the rule gives, so a
builder never writes a type the verifier would reject later, and the importers never repeat a
shape rule. A row whose result type is part of its specification (`OpInfo.declares_result`:
reshape's shape, cast's element type, broadcast_in_dim's and iota's whole type) is told it with
`result=`, which the rule still checks; any other row refuses `result=`, so a caller cannot
override a rule by accident.

    b = Builder(block)
    h = b.op(MatmulOp, x, w)                               # tensor<8x16xf32> from the rule
    y = b.op(GeluOp, h, approximate="tanh")
    r = b.op(ReshapeOp, y, result=TensorInfo((128,), "f32"))
    c = b.constant(np.float32(0.5), "f32")                 # a rank-0 splat

A rule's refusal is a `ShapeError` whose message starts with the op's name; callers add their
own context (an importer names the node it was converting).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from lamina.ir.core.dtypes import tensor_type
from lamina.ir.core.shapes import ShapeError, TensorInfo
from lamina.ir.ops.lamina import ConstantOp
from lamina.ir.ops.opbase import LaminaOp, dense_from_array, make_attr, tensor_info
from xdsl.dialects.builtin import LocationAttr
from xdsl.ir import Block, SSAValue

Operand = SSAValue | Sequence[SSAValue] | None   # a value, a variadic group, an absent optional


def info_of(v: SSAValue) -> TensorInfo:
    """The (shape, element type) of a tensor value."""
    return tensor_info(v.type)


class Builder:
    """Appends ops at the end of `block` (see the module docstring); `location`, when set, is
    given to every op it creates (importers set it per node, so a verifier error points there)."""

    def __init__(self, block: Block, location: LocationAttr | None = None) -> None:
        self.block = block
        self.location = location

    def op(self, cls: type[LaminaOp], *operands: Operand, result: TensorInfo | None = None,
           **attrs: Any) -> SSAValue:
        """A `cls` op on `operands` (table order: None for an absent optional operand, a sequence
        for a variadic one) with attributes `attrs` as Python values (None: absent, the default)."""
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
        values = {a.name: a.default for a in info.attrs}
        values.update({k: v for k, v in attrs.items() if v is not None})
        if info.declares_result != (result is not None):
            need = "needs its result type (result=)" if info.declares_result else \
                "infers its result type; result= is not taken"
            raise ShapeError(f"{info.full_name} {need}")
        declared = result if result is not None else TensorInfo((), "f32")
        try:
            out = info.shape(slots, values, declared)
        except ShapeError as e:
            raise ShapeError(f"{info.full_name}: {e}") from None
        props = {k: make_attr(known[k], v) for k, v in attrs.items() if v is not None}
        op = cls.build(operands=groups, properties=props,
                       result_types=[tensor_type(out.shape, out.dtype)])
        if self.location is not None:
            op.location = self.location
        self.block.add_op(op)
        return op.results[0]

    def constant(self, value: np.ndarray | float | int | bool, dtype: str) -> SSAValue:
        """A `lamina.constant` holding `value` as element type `dtype` (a splat when every element
        is the same)."""
        attr = dense_from_array(np.asarray(value), dtype)
        op = ConstantOp.build(properties={"value": attr}, result_types=[attr.get_type()])
        if self.location is not None:
            op.location = self.location
        self.block.add_op(op)
        return op.results[0]
