"""The ATen table: ATen overload name -> converter, and the helpers converters share.

A converter is `conv(ctx, a) -> value` where `a` holds the node's arguments by schema name (the
schema's defaults filled in) and `ctx` is the walk's `Ctx` (builder, node, refusals). Converters
register with `@aten("add.Tensor", ...)`; the names are ATen's own vocabulary (the frontend's, not
Lamina's op names), and the ops they build are named by their typed classes. The modules holding
converters are imported by `lamina.frontends.torch.aten`, which is what the walk reads.

Type promotion follows PyTorch's: arithmetic computes in the node's output dtype (from
`meta['val']`) with every operand converted to it, which is what TensorIterator does for float
results; a comparison converts both sides to their promoted type (`torch.result_type`, with a
dimensioned or zero-dim stand-in for each tensor, since zero-dim tensors promote like scalars).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch
from lamina.frontends.common import DTYPE
from lamina.frontends.torch.importer import DTYPES, Converter, Ctx, lamina_dtype
from lamina.ir.core.dtypes import FLOAT_TYPES
from lamina.ir.core.shapes import info_of
from torch import fx
from xdsl.ir import SSAValue

TABLE: dict[str, Converter] = {}
F = TypeVar("F", bound=Callable[..., Any])


def aten(*names: str) -> Callable[[F], F]:
    """Register a converter for `aten.<name>` overloads (`add.Tensor`, `mm.default`, ...)."""

    def register(conv: F) -> F:
        for n in names:
            key = f"aten.{n}"
            assert key not in TABLE, key
            TABLE[key] = conv
        return conv

    return register


def is_tensor(x: Any) -> bool:
    return isinstance(x, fx.Node)


def node_dtype(x: fx.Node) -> torch.dtype:
    val = x.meta.get("val")
    assert isinstance(val, torch.Tensor), x
    return val.dtype


def _stand_in(x: Any) -> Any:
    """A value that promotes like `x` in `torch.result_type`."""
    if isinstance(x, fx.Node):
        val = x.meta.get("val")
        assert isinstance(val, torch.Tensor)
        return torch.empty(() if val.dim() == 0 else (1,), dtype=val.dtype)
    return x


def promoted(*xs: Any) -> torch.dtype:
    """PyTorch's promoted dtype of tensors (nodes) and Python scalars: tensors first, pairwise,
    keeping whether the result is zero-dim (a dimensioned tensor outranks zero-dim ones, which
    outrank scalars), then the scalars."""
    tensors = [_stand_in(x) for x in xs if isinstance(x, fx.Node)]
    scalars = [x for x in xs if not isinstance(x, fx.Node)]
    assert tensors, "promotion needs a tensor"
    acc = tensors[0]
    for t in tensors[1:]:
        acc = torch.empty(() if acc.dim() == 0 and t.dim() == 0 else (1,),
                          dtype=torch.result_type(acc, t))
    for s in scalars:
        acc = torch.empty(acc.shape, dtype=torch.result_type(acc, s))
    return acc.dtype


def operand(ctx: Ctx, x: Any, dtype: str) -> SSAValue:
    """Node argument `x` (a tensor node or a Python scalar) as a value of element type `dtype`."""
    if is_tensor(x):
        return ctx.cast(ctx.tensor(x), dtype)
    if isinstance(x, (bool, int, float)):
        return ctx.const(x, dtype)
    ctx.refuse(DTYPE, f"argument {x!r} is neither a tensor nor a number")


def float_result(ctx: Ctx) -> str:
    """The node's output element type, which Lamina's arithmetic rows need to be a float."""
    dtype = ctx.out().dtype
    if dtype not in FLOAT_TYPES:
        ctx.refuse(DTYPE, f"computes on {dtype}: Lamina's arithmetic rows are defined on float "
                   "types only")
    return dtype


def torch_dtype_name(ctx: Ctx, dtype: torch.dtype | None) -> str | None:
    return None if dtype is None else lamina_dtype(dtype, ctx.what())


def same(v: SSAValue, ctx: Ctx) -> SSAValue:
    """`v` if it already has the node's output type (a view, a copy, a no-op cast)."""
    if info_of(v) != ctx.out():
        ctx.refuse(DTYPE, f"expected {ctx.out()}, the input is {info_of(v)}")
    return v


__all__ = ["DTYPES", "TABLE", "aten", "float_result", "is_tensor", "node_dtype", "operand",
           "promoted", "same", "torch_dtype_name"]
