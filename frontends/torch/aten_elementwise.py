"""ATen's elementwise ops, comparisons, selection, casts and tensor factories as Lamina ops.

Arithmetic computes in the node's output dtype (which must be a float: Lamina's arithmetic rows
are float-only, so `int + int` is refused rather than computed in floats); `alpha` of add/sub
multiplies the second operand, as ATen does. Logical ops on booleans are exact compositions of
compares and select (`not x` is `x == false`). Factories (`full`, `zeros`, `scalar_tensor`) are
splat constants; `arange` is an `iota` (sliced for a start or a step), and `tril`/`triu` select
with a compare of two iotas, so no index tensor is ever materialized as a constant.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from lamina.frontends.common import ATTRIBUTE, DTYPE
from lamina.frontends.torch.importer import Ctx
from lamina.frontends.torch.table import (
    aten,
    float_result,
    is_tensor,
    operand,
    promoted,
    torch_dtype_name,
)
from lamina.ir.core.shapes import TensorInfo, info_of
from lamina.ir.ops import lamina as L
from xdsl.ir import SSAValue

BINARY = {"add": L.AddOp, "sub": L.SubOp, "mul": L.MulOp, "div": L.DivOp, "pow": L.PowOp,
          "maximum": L.MaxOp, "minimum": L.MinOp}
UNARY = {"neg": L.NegOp, "abs": L.AbsOp, "exp": L.ExpOp, "log": L.LogOp, "tanh": L.TanhOp,
         "sin": L.SinOp, "cos": L.CosOp,
         "sigmoid": L.SigmoidOp, "relu": L.ReluOp, "erf": L.ErfOp, "sqrt": L.SqrtOp,
         "rsqrt": L.RsqrtOp, "reciprocal": L.ReciprocalOp}
COMPARE = {"eq": L.EqOp, "ne": L.NeOp, "lt": L.LtOp, "le": L.LeOp, "gt": L.GtOp, "ge": L.GeOp}


def _binary(cls: Any) -> Any:
    def conv(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
        dtype = ctx.out().dtype        # the row refuses integers where it is float-only
        lhs = operand(ctx, a["self"], dtype)
        rhs = operand(ctx, a["other"] if "other" in a else a["exponent"], dtype)
        alpha = a.get("alpha", 1)
        if alpha is not None and alpha != 1:
            rhs = ctx.op(L.MulOp, rhs, ctx.const(alpha, dtype))
        return ctx.op(cls, lhs, rhs)
    return conv


for _name, _cls in BINARY.items():
    _overloads = [f"{_name}.Tensor", f"{_name}.Scalar"] if _name != "pow" else \
        ["pow.Tensor_Tensor", "pow.Tensor_Scalar"]
    if _name in ("maximum", "minimum"):
        # min.other / max.other are torch.min(a, b): elementwise, as torch.minimum (T5's
        # relative-position buckets take it on i64)
        _overloads = [f"{_name}.default", f"{_name[:3]}.other"]
    aten(*_overloads)(_binary(_cls))


@aten("rsub.Scalar", "rsub.Tensor")
def _rsub(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    """other - alpha * self."""
    dtype = ctx.out().dtype
    x = operand(ctx, a["self"], dtype)
    if a["alpha"] != 1:
        x = ctx.op(L.MulOp, x, ctx.const(a["alpha"], dtype))
    return ctx.op(L.SubOp, operand(ctx, a["other"], dtype), x)


@aten("div.Tensor_mode", "div.Scalar_mode")
def _div_mode(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    if a["rounding_mode"] is not None:
        ctx.refuse(ATTRIBUTE, f"rounding_mode={a['rounding_mode']!r} (Lamina has no floor or "
                   "trunc)")
    return _binary(L.DivOp)(ctx, a)


@aten("pow.Scalar")
def _pow_scalar(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    dtype = float_result(ctx)
    return ctx.op(L.PowOp, operand(ctx, a["self"], dtype), operand(ctx, a["exponent"], dtype))


def _unary(cls: Any) -> Any:
    def conv(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
        return ctx.op(cls, operand(ctx, a["self"], ctx.out().dtype))
    return conv


for _name, _cls in UNARY.items():
    aten(f"{_name}.default")(_unary(_cls))


@aten("gelu.default")
def _gelu(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    if a["approximate"] not in ("none", "tanh"):
        ctx.refuse(ATTRIBUTE, f"approximate={a['approximate']!r}")
    return ctx.op(L.GeluOp, operand(ctx, a["self"], float_result(ctx)),
                  approximate=a["approximate"])


@aten("silu.default")
def _silu(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    x = operand(ctx, a["self"], float_result(ctx))
    return ctx.op(L.MulOp, x, ctx.op(L.SigmoidOp, x))


@aten("clamp.default", "clamp_min.default", "clamp_max.default")
def _clamp(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    dtype = ctx.out().dtype
    x = operand(ctx, a["self"], dtype)
    if a.get("min") is not None:
        x = ctx.op(L.MaxOp, x, ctx.const(a["min"], dtype))
    if a.get("max") is not None:
        x = ctx.op(L.MinOp, x, ctx.const(a["max"], dtype))
    return x


def _compare(cls: Any) -> Any:
    def conv(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
        dtype = torch_dtype_name(ctx, promoted(a["self"], a["other"]))
        assert dtype is not None
        return ctx.op(cls, operand(ctx, a["self"], dtype), operand(ctx, a["other"], dtype))
    return conv


for _name, _cls in COMPARE.items():
    aten(f"{_name}.Tensor", f"{_name}.Scalar")(_compare(_cls))


def _bool(ctx: Ctx, x: Any) -> SSAValue:
    """x != 0 as i1 (x itself when it is boolean)."""
    v = ctx.tensor(x)
    if info_of(v).dtype == "i1":
        return v
    return ctx.op(L.NeOp, v, ctx.const(0, info_of(v).dtype))


@aten("logical_not.default")
def _logical_not(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    return ctx.op(L.EqOp, _bool(ctx, a["self"]), ctx.const(False, "i1"))


@aten("bitwise_not.default")
def _bitwise_not(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    if ctx.out().dtype != "i1":
        ctx.refuse(DTYPE, "bitwise not of integers (Lamina has no bitwise ops)")
    return _logical_not(ctx, a)


@aten("logical_and.default", "bitwise_and.Tensor", "logical_or.default", "bitwise_or.Tensor",
      "logical_xor.default", "bitwise_xor.Tensor", "__and__.Tensor", "__or__.Tensor",
      "__xor__.Tensor")
def _logical(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    """and: a ? b : false; or: a ? true : b; xor: a != b (exact on i1)."""
    name = str(ctx.node.target).split(".")[1].strip("_")
    if not name.startswith("logical") and ctx.out().dtype != "i1":
        ctx.refuse(DTYPE, "bitwise ops on integers (Lamina has none)")
    x, y = _bool(ctx, a["self"]), _bool(ctx, a["other"])
    kind = name.rsplit("_", 1)[-1]                      # and / or / xor
    if kind == "and":
        return ctx.op(L.SelectOp, x, y, ctx.const(False, "i1"))
    if kind == "or":
        return ctx.op(L.SelectOp, x, ctx.const(True, "i1"), y)
    return ctx.op(L.NeOp, x, y)


@aten("where.self", "where.ScalarSelf", "where.ScalarOther", "where.Scalar")
def _where(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    dtype = ctx.out().dtype
    return ctx.op(L.SelectOp, _bool(ctx, a["condition"]), operand(ctx, a["self"], dtype),
                  operand(ctx, a["other"], dtype))


@aten("masked_fill.Scalar", "masked_fill.Tensor")
def _masked_fill(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    dtype = ctx.out().dtype
    return ctx.op(L.SelectOp, _bool(ctx, a["mask"]), operand(ctx, a["value"], dtype),
                  operand(ctx, a["self"], dtype))


# ---- copies and casts ------------------------------------------------------------------------

@aten("clone.default", "contiguous.default", "alias.default", "detach.default", "detach_.default",
      "lift_fresh_copy.default", "_to_copy.default", "to.dtype", "to.dtype_layout",
      "to.device", "to.other", "_to_dim_order_copy.default", "type_as.default")
def _copy(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    """A copy, possibly to another element type (the output's): a cast or the value itself."""
    x = a["self"]
    return ctx.cast(ctx.tensor(x), ctx.out().dtype)


@aten("_assert_tensor_metadata.default", "_assert_scalar.default")
def _assert(ctx: Ctx, a: dict[str, Any]) -> tuple[SSAValue | None, ...]:
    """A check of the example's metadata, which a static-shaped import already satisfies."""
    return ()


# ---- factories -------------------------------------------------------------------------------

@aten("scalar_tensor.default", "full.default", "ones.default", "zeros.default",
      "zeros_like.default", "ones_like.default", "full_like.default", "new_zeros.default",
      "new_ones.default", "new_full.default", "empty_like.default")
def _full(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    """A splat of the output's type. `empty_like` is refused: its contents are undefined."""
    name = str(ctx.node.target).split(".")[1]
    if name == "empty_like":
        ctx.refuse(ATTRIBUTE, "empty tensors have undefined contents")
    fill = a.get("fill_value", a.get("s"))
    if fill is None:
        fill = 1 if "ones" in name else 0
    if is_tensor(fill):
        ctx.refuse(ATTRIBUTE, "fill value is a tensor")
    out = ctx.out()
    return ctx.builder.constant(np.full(out.shape, fill), out.dtype)


@aten("arange.default", "arange.start", "arange.start_step")
def _arange(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    """iota for arange(n); iota(start + (n - 1) step + 1)[start::step] for a non-negative
    integer start and a positive integer step (exact: no index arithmetic)."""
    start, step = a.get("start") or 0, a.get("step") or 1
    out = ctx.out()
    if not all(isinstance(v, int) for v in (start, step)) or start < 0 or step < 1:
        ctx.refuse(ATTRIBUTE, f"arange with start={start!r}, step={step!r} (only integer "
                   "start >= 0 and step >= 1 map onto iota)")
    (n,) = out.shape
    if start == 0 and step == 1:
        return ctx.op(L.IotaOp, result=out, dim=0)
    length = start + max(n - 1, 0) * step + 1
    full = ctx.op(L.IotaOp, result=TensorInfo((length,), out.dtype), dim=0)
    return ctx.op(L.SliceOp, full, start=[start], limit=[start + (n - 1) * step + 1],
                  strides=[step])


@aten("tril.default", "triu.default")
def _triangle(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    """Keep x[..., i, j] where j - i <= k (tril) or >= k (triu), else 0: a select on two f64
    iotas (exact for any dimension below 2**53)."""
    x = ctx.tensor(a["self"])
    info = info_of(x)
    if info.rank < 2:
        ctx.refuse(ATTRIBUTE, "needs a rank >= 2 input")
    rows, cols = info.shape[-2:]
    i = ctx.op(L.IotaOp, result=TensorInfo((rows, cols), "f64"), dim=0)
    j = ctx.op(L.IotaOp, result=TensorInfo((rows, cols), "f64"), dim=1)
    diff = ctx.op(L.SubOp, j, i)
    k = ctx.const(float(a["diagonal"]), "f64")
    keep = ctx.op(L.LeOp if str(ctx.node.target).startswith("aten.tril") else L.GeOp, diff, k)
    return ctx.op(L.SelectOp, keep, x, ctx.const(0, info.dtype))

