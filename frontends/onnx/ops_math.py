"""ONNX's elementwise, comparison, logic, cast and activation ops as Lamina ops.

Each maps onto its row, or onto an exact composition of rows where ONNX has an op Lamina spells
with several (LeakyRelu is select(x < 0, alpha x, x); Not is x == false; Clip is min(max(x, lo),
hi)), with ONNX's numpy broadcasting (the rows broadcast the same way). Each row says which
element types it takes: Add Sub Mul Max Min Neg Abs run on i32 / i64 too (wrapping, as ONNX
Runtime does), integer Div and Pow are refused (frameworks round differently). Integer shape
arithmetic on known values is folded (see `lamina.frontends.onnx.graph`); `FOLD_ONLY` lists the
ops accepted only that way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from lamina.frontends.common import ATTRIBUTE, DTYPE, OP
from lamina.frontends.onnx.graph import DTYPES, NodeCtx, Val, lamina_dtype
from lamina.frontends.onnx.ops_shape import Out, onnx_op
from lamina.ir.core.dtypes import FLOAT_TYPES
from lamina.ir.core.shapes import TensorInfo, info_of
from lamina.ir.ops import lamina as L
from xdsl.ir import SSAValue

BINARY = {"Add": L.AddOp, "Sub": L.SubOp, "Mul": L.MulOp, "Div": L.DivOp}
UNARY = {"Neg": L.NegOp, "Abs": L.AbsOp, "Exp": L.ExpOp, "Log": L.LogOp, "Tanh": L.TanhOp,
         "Sin": L.SinOp, "Cos": L.CosOp, "Sigmoid": L.SigmoidOp, "Relu": L.ReluOp, "Erf": L.ErfOp,
         "Sqrt": L.SqrtOp,
         "Reciprocal": L.ReciprocalOp}
COMPARE = {"Equal": L.EqOp, "Less": L.LtOp, "Greater": L.GtOp, "LessOrEqual": L.LeOp,
           "GreaterOrEqual": L.GeOp}


def _no_legacy_broadcast(ctx: NodeCtx) -> None:
    """Opsets before 7 broadcast only with `broadcast=1` (and `axis`): read, and refused when
    they ask for anything but numpy broadcasting of equal ranks."""
    if ctx.attr("broadcast", 0) or ctx.has_attr("axis") and ctx.opset < 7:
        ctx.attr("axis", None)
        ctx.refuse(ATTRIBUTE, "legacy broadcast attributes (opset < 7)")
    if ctx.has_attr("consumed_inputs"):
        ctx.attr("consumed_inputs")


def _binary(cls: Any) -> Callable[[NodeCtx], Out]:
    def conv(ctx: NodeCtx) -> Out:
        _no_legacy_broadcast(ctx)
        return [ctx.op(cls, ctx.value(0), ctx.value(1))]   # the row says which types
    return conv


for _name, _cls in BINARY.items():
    onnx_op(_name)(_binary(_cls))


@onnx_op("Pow")
def _pow(ctx: NodeCtx) -> Out:
    """Pow(T x, T1 y): y converted to x's type (ONNX allows an integer exponent)."""
    _no_legacy_broadcast(ctx)
    x = ctx.float_input(0)
    return [ctx.op(L.PowOp, x, ctx.cast(ctx.value(1), info_of(x).dtype))]


@onnx_op("Max", "Min", "Sum", "Mean")
def _variadic(ctx: NodeCtx) -> Out:
    cls = {"Max": L.MaxOp, "Min": L.MinOp, "Sum": L.AddOp, "Mean": L.AddOp}[ctx.node.op_type]
    _no_legacy_broadcast(ctx)
    values = [ctx.value(i) for i in range(ctx.n_inputs)]
    acc = values[0]
    for v in values[1:]:
        acc = ctx.op(cls, acc, v)
    if ctx.node.op_type == "Mean" and len(values) > 1:
        acc = ctx.op(L.DivOp, acc, ctx.const(float(len(values)), info_of(acc).dtype))
    return [acc]


def _unary(cls: Any) -> Callable[[NodeCtx], Out]:
    def conv(ctx: NodeCtx) -> Out:
        if ctx.has_attr("consumed_inputs"):
            ctx.attr("consumed_inputs")
        return [ctx.op(cls, ctx.value(0))]
    return conv


for _name, _cls in UNARY.items():
    onnx_op(_name)(_unary(_cls))


def _scalar(ctx: NodeCtx, x: SSAValue, value: float) -> SSAValue:
    return ctx.const(value, info_of(x).dtype)


@onnx_op("Gelu")
def _gelu(ctx: NodeCtx) -> Out:
    mode = ctx.attr("approximate", "none")
    if mode not in ("none", "tanh"):
        ctx.refuse(ATTRIBUTE, f"approximate={mode!r}")
    return [ctx.op(L.GeluOp, ctx.float_input(0), approximate=mode)]


def _where_negative(ctx: NodeCtx, x: SSAValue, negative: SSAValue, positive: SSAValue
                    ) -> SSAValue:
    return ctx.op(L.SelectOp, ctx.op(L.LtOp, x, _scalar(ctx, x, 0.0)), negative, positive)


@onnx_op("LeakyRelu", "Elu", "Selu", "Celu", "ThresholdedRelu", "HardSigmoid", "HardSwish",
         "Softplus", "Softsign", "PRelu")
def _activation(ctx: NodeCtx) -> Out:
    """The activations as their ONNX definitions, spelled with rows."""
    op = ctx.node.op_type
    x = ctx.float_input(0)
    c = lambda v: _scalar(ctx, x, v)  # noqa: E731
    if op == "LeakyRelu":
        return [_where_negative(ctx, x, ctx.op(L.MulOp, c(ctx.attr("alpha", 0.01)), x), x)]
    if op == "PRelu":
        return [_where_negative(ctx, x, ctx.op(L.MulOp, ctx.float_input(1), x), x)]
    if op in ("Elu", "Selu", "Celu"):
        alpha = ctx.attr("alpha", {"Elu": 1.0, "Selu": 1.67326319217681884765625,
                                   "Celu": 1.0}[op])
        gamma = ctx.attr("gamma", 1.05070102214813232421875) if op == "Selu" else 1.0
        inner = ctx.op(L.DivOp, x, c(alpha)) if op == "Celu" else x
        neg = ctx.op(L.MulOp, c(alpha), ctx.op(L.SubOp, ctx.op(L.ExpOp, inner), c(1.0)))
        if op == "Celu":     # max(0, x) + min(0, alpha (exp(x / alpha) - 1))
            return [ctx.op(L.AddOp, ctx.op(L.MaxOp, x, c(0.0)), ctx.op(L.MinOp, neg, c(0.0)))]
        y = ctx.op(L.SelectOp, ctx.op(L.LeOp, x, c(0.0)), neg, x)
        return [ctx.op(L.MulOp, y, c(gamma)) if op == "Selu" else y]
    if op == "ThresholdedRelu":
        return [ctx.op(L.SelectOp, ctx.op(L.GtOp, x, c(ctx.attr("alpha", 1.0))), x, c(0.0))]
    if op in ("HardSigmoid", "HardSwish"):
        alpha = ctx.attr("alpha", 0.2) if op == "HardSigmoid" else 1.0 / 6.0
        beta = ctx.attr("beta", 0.5) if op == "HardSigmoid" else 0.5
        lin = ctx.op(L.AddOp, ctx.op(L.MulOp, x, c(alpha)), c(beta))
        hs = ctx.op(L.MaxOp, c(0.0), ctx.op(L.MinOp, c(1.0), lin))
        return [hs if op == "HardSigmoid" else ctx.op(L.MulOp, x, hs)]
    if op == "Softplus":
        return [ctx.op(L.LogOp, ctx.op(L.AddOp, ctx.op(L.ExpOp, x), c(1.0)))]
    return [ctx.op(L.DivOp, x, ctx.op(L.AddOp, ctx.op(L.AbsOp, x), c(1.0)))]   # Softsign


@onnx_op("Clip")
def _clip(ctx: NodeCtx) -> Out:
    x = ctx.value(0)
    if ctx.opset < 11:
        lo = ctx.attr("min", None)
        hi = ctx.attr("max", None)
        bounds = [None if b is None else _scalar(ctx, x, b) for b in (lo, hi)]
    else:
        bounds = [None if ctx.input(i) is None else ctx.value(i) for i in (1, 2)]
    if bounds[0] is not None:
        x = ctx.op(L.MaxOp, x, bounds[0])
    if bounds[1] is not None:
        x = ctx.op(L.MinOp, x, bounds[1])
    return [x]


# ---- compares, logic, select ------------------------------------------------------------------

def _compare(cls: Any) -> Callable[[NodeCtx], Out]:
    def conv(ctx: NodeCtx) -> Out:
        _no_legacy_broadcast(ctx)
        return [ctx.op(cls, ctx.value(0), ctx.value(1))]
    return conv


for _name, _cls in COMPARE.items():
    onnx_op(_name)(_compare(_cls))


def _bool_input(ctx: NodeCtx, i: int) -> SSAValue:
    if ctx.info(i).dtype != "i1":
        ctx.refuse(DTYPE, f"input {i} has element type {ctx.info(i).dtype}, not bool")
    return ctx.value(i)


@onnx_op("Not")
def _not(ctx: NodeCtx) -> Out:
    return [ctx.op(L.EqOp, _bool_input(ctx, 0), ctx.const(False, "i1"))]


@onnx_op("And", "Or", "Xor")
def _logic(ctx: NodeCtx) -> Out:
    """And: a ? b : false; Or: a ? true : b; Xor: a != b (exact on booleans)."""
    _no_legacy_broadcast(ctx)
    a, b = _bool_input(ctx, 0), _bool_input(ctx, 1)
    if ctx.node.op_type == "And":
        return [ctx.op(L.SelectOp, a, b, ctx.const(False, "i1"))]
    if ctx.node.op_type == "Or":
        return [ctx.op(L.SelectOp, a, ctx.const(True, "i1"), b)]
    return [ctx.op(L.NeOp, a, b)]


@onnx_op("Where")
def _where(ctx: NodeCtx) -> Out:
    return [ctx.op(L.SelectOp, _bool_input(ctx, 0), ctx.value(1), ctx.value(2))]


# ---- casts and constants ----------------------------------------------------------------------

@onnx_op("Cast", "CastLike")
def _cast(ctx: NodeCtx) -> Out:
    if ctx.node.op_type == "Cast":
        to = ctx.attr("to")
        target = lamina_dtype(to if isinstance(to, int) else 0, f"{ctx.what()}: the target",
                              ctx.imp.loc)
    else:
        target = ctx.info(1).dtype
    if ctx.attr("saturate", 1) != 1:
        ctx.refuse(ATTRIBUTE, "saturate=0 (it applies to float8 targets, which Lamina lacks)")
    if ctx.attr("round_mode", "up") != "up":
        ctx.refuse(ATTRIBUTE, "round_mode (float8 targets only)")
    src = ctx.info(0).dtype
    v = ctx.input(0)
    assert v is not None
    if src == target:
        return [v]
    if src in FLOAT_TYPES and target in ("i32", "i64"):
        ctx.refuse(DTYPE, f"float -> {target}: ONNX leaves out-of-range and rounding "
                   "behaviour to the backend; Lamina truncates, so the program could differ")
    return [ctx.cast(ctx.value(0), target)]


@onnx_op("Constant")
def _constant(ctx: NodeCtx) -> Out:
    from lamina.frontends.onnx.graph import const_val
    from onnx import numpy_helper

    for name in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if ctx.has_attr(name):
            raw = ctx.attr(name)
            if name == "value":
                array = numpy_helper.to_array(raw)
            elif name.startswith("value_float"):
                array = np.asarray(raw, dtype=np.float32)
            else:
                array = np.asarray(raw, dtype=np.int64)
            return [const_val(np.asarray(array), ctx.what(), ctx.imp.loc)]
    for name in ("sparse_value", "value_string", "value_strings"):
        if ctx.has_attr(name):
            ctx.refuse(DTYPE if "string" in name else ATTRIBUTE, f"a {name} constant")
    ctx.refuse(ATTRIBUTE, "no value")


@onnx_op("Range")
def _range(ctx: NodeCtx) -> Out:
    """start + i * delta for i < ceil((limit - start) / delta): a float iota, scaled and
    shifted (integer ranges of known bounds are folded)."""
    start, limit, delta = (ctx.static(i, n) for i, n in enumerate(("start", "limit", "delta")))
    assert start is not None and limit is not None and delta is not None
    dtype = ctx.info(0).dtype
    if dtype not in FLOAT_TYPES:
        ctx.refuse(DTYPE, f"a {dtype} range of run-time bounds")
    n = max(int(math.ceil((float(limit) - float(start)) / float(delta))), 0)
    i = ctx.op(L.IotaOp, result=TensorInfo((n,), dtype), dim=0)
    return [ctx.op(L.AddOp, ctx.op(L.MulOp, i, ctx.const(delta, dtype)), ctx.const(start, dtype))]


@onnx_op("Dropout")
def _dropout(ctx: NodeCtx) -> Out:
    """Inference dropout is the identity and its mask all true; training-mode dropout is
    refused (Lamina's mask is its own hash, not the backend's RNG the test data records)."""
    if ctx.opset < 12:
        ratio = ctx.attr("ratio", 0.5)
        training = not ctx.attr("is_test", 0) if ctx.opset < 7 else False
    else:
        r = ctx.static(1, "the ratio")
        t = ctx.static(2, "training_mode")
        ratio = 0.5 if r is None else float(r)
        training = bool(t) if t is not None else False
    ctx.attr("seed", None)
    x = ctx.input(0)
    assert x is not None
    if training and ratio > 0:
        ctx.refuse(ATTRIBUTE, "training_mode dropout: Lamina's keep-mask is its own "
                   "counter-based hash, so the outputs cannot match another RNG's")
    outs: list[Val | SSAValue | None] = [x]
    if len(ctx.node.output) > 1:
        dtype = "i1" if ctx.opset >= 10 else x.info.dtype
        ones = ctx.const(True if dtype == "i1" else 1.0, dtype)
        outs.append(ctx.op(L.BroadcastInDimOp, ones, result=TensorInfo(x.info.shape, dtype),
                           broadcast_dimensions=[]))
    return outs


@onnx_op("CumSum")
def _cumsum(ctx: NodeCtx) -> Out:
    """`cumsum` along the axis input (known while importing), with CumSum's `exclusive` and
    `reverse`; on floats, i32 and i64 (what the row takes)."""
    axis = ctx.ints(1, "the axis")
    if axis is None or len(axis) != 1:
        ctx.refuse(ATTRIBUTE, "needs one axis")
    x = ctx.value(0)
    return [ctx.op(L.CumsumOp, x, axis=axis[0], exclusive=bool(ctx.attr("exclusive", 0)) or None,
                   reverse=bool(ctx.attr("reverse", 0)) or None)]


# ops Lamina has no row for, met in shape computations (Mod in Attention's function body, the
# product of a shape, ...): `graph.fold` evaluates them when every input is a known integer; a
# run-time use reaches this converter and is refused
FOLD_ONLY = ("Mod", "ReduceProd", "CumProd", "ArgMax", "ArgMin", "Sign", "Floor",
             "Ceil", "Round", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot",
             "NonZero")


@onnx_op(*FOLD_ONLY)
def _fold_only(ctx: NodeCtx) -> Out:
    ctx.refuse(OP, "is mapped only on integer values known while importing (shape arithmetic); "
               "Lamina has no row for it at run time")


__all__ = ["DTYPES", "FOLD_ONLY", "Sequence"]
