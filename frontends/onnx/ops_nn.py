"""ONNX's contractions, normalizations, softmax, reductions, lookups and losses as Lamina ops.

- MatMul is numpy's matmul (rank-1 operands as a row / column); Gemm is alpha op(A) op(B) + beta C.
- LayerNormalization is `layernorm` over dims axis..; its Mean and InvStdDev outputs, when asked
  for, are mean(x) and rsqrt(mean((x - mean)^2) + eps) kept as size-1 dims in `stash_type`.
  RMSNormalization is `rmsnorm`. Softmax / LogSoftmax from opset 13 take one axis; before,
  they normalize the input coerced to 2-D at `axis`, which is a reshape around the row.
- Reductions: the reduce rows, and exact spellings of the rest (ReduceMin is -max(-x), ReduceL2
  sqrt(sum(x^2)), ReduceMax / ReduceMin of booleans any / all, ReduceLogSumExp
  m + log(sum(exp(x - m))) with m the max).
- GatherElements and the losses pick one element per row along an axis: the sum over that axis
  of select(iota == index, x, 0), exact since one term is non-zero (negative indices compared
  with iota - n as well); NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss weigh each pick
  by weight[target] (a `gather`), drop ignore_index, and divide the mean by the kept weight.
- Trilu selects with a compare of two iotas.
- Conv: only the 2-D non-overlapping patch convolution (kernel_shape = strides, pads 0,
  dilations 1, group 1: a vision transformer's patch embedding), as reshape + matmul
  (`lamina.frontends.patches`); any other is refused naming the attribute.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from lamina.frontends.common import ATTRIBUTE, DTYPE, matmul, reshape
from lamina.frontends.onnx.graph import DTYPES, NodeCtx
from lamina.frontends.onnx.ops_shape import Out, axes_of, broadcast_to, onnx_op
from lamina.frontends.patches import patch_conv, unmodeled
from lamina.ir.core.shapes import TensorInfo, info_of
from lamina.ir.ops import lamina as L
from xdsl.ir import SSAValue


@onnx_op("MatMul")
def _matmul(ctx: NodeCtx) -> Out:
    return [matmul(ctx, ctx.float_input(0), ctx.float_input(1))]


@onnx_op("Gemm")
def _gemm(ctx: NodeCtx) -> Out:
    a, b = ctx.float_input(0), ctx.float_input(1)
    if ctx.attr("transA", 0):
        a = ctx.op(L.TransposeOp, a, permutation=[1, 0])
    if ctx.attr("transB", 0):
        b = ctx.op(L.TransposeOp, b, permutation=[1, 0])
    if ctx.has_attr("broadcast"):
        ctx.attr("broadcast")
    dtype = info_of(a).dtype
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    r = ctx.op(L.MatmulOp, a, b)
    if alpha != 1.0:
        r = ctx.op(L.MulOp, r, ctx.const(alpha, dtype))
    if ctx.input(2) is not None and beta != 0.0:
        c = ctx.float_input(2)
        if beta != 1.0:
            c = ctx.op(L.MulOp, c, ctx.const(beta, dtype))
        r = ctx.op(L.AddOp, r, c)
    return [r]


def _stash_type(ctx: NodeCtx) -> str:
    stash = ctx.attr("stash_type", 1)
    if DTYPES.get(stash) not in ("f32", "f64"):
        ctx.refuse(ATTRIBUTE, f"stash_type={stash}")
    return DTYPES[stash]


@onnx_op("LayerNormalization")
def _layer_norm(ctx: NodeCtx) -> Out:
    x = ctx.float_input(0)
    info = info_of(x)
    axis = axes_of(ctx, [ctx.attr("axis", -1)], info.rank)[0]
    eps = float(ctx.attr("epsilon", 1e-5))
    stash = _stash_type(ctx)
    norm = info.shape[axis:]
    scale = _param(ctx, 1, norm, info.dtype)
    bias = _param(ctx, 2, norm, info.dtype)
    xs = ctx.cast(x, stash)
    y = ctx.op(L.LayernormOp, xs, None if scale is None else ctx.cast(scale, stash),
               None if bias is None else ctx.cast(bias, stash), axis=axis, eps=eps)
    outs: list[SSAValue | None] = [ctx.cast(y, info.dtype)]
    if len(ctx.node.output) > 1:
        axes = list(range(axis, info.rank))
        mean = ctx.op(L.ReduceMeanOp, xs, axes=axes, keepdims=True)
        centered = ctx.op(L.SubOp, xs, mean)
        var = ctx.op(L.ReduceMeanOp, ctx.op(L.MulOp, centered, centered), axes=axes,
                     keepdims=True)
        inv = ctx.op(L.RsqrtOp, ctx.op(L.AddOp, var, ctx.const(eps, stash)))
        outs += [mean, inv]
    return outs


def _param(ctx: NodeCtx, i: int, shape: tuple[int, ...], dtype: str) -> SSAValue | None:
    """Scale / bias input `i` broadcast to the normalized shape (ONNX allows broadcasting)."""
    if ctx.input(i) is None:
        return None
    v = ctx.float_input(i)
    if info_of(v).shape == shape:
        return v
    try:
        return broadcast_to(ctx, v, shape)
    except Exception:
        ctx.refuse(ATTRIBUTE, f"input {i} of shape {info_of(v).shape} does not broadcast to "
                   f"{shape}")


@onnx_op("RMSNormalization")
def _rms_norm(ctx: NodeCtx) -> Out:
    x = ctx.float_input(0)
    info = info_of(x)
    axis = axes_of(ctx, [ctx.attr("axis", -1)], info.rank)[0]
    stash = _stash_type(ctx)
    scale = _param(ctx, 1, info.shape[axis:], info.dtype)
    y = ctx.op(L.RmsnormOp, ctx.cast(x, stash), None if scale is None else ctx.cast(scale, stash),
               axis=axis, eps=float(ctx.attr("epsilon", 1e-5)))
    return [ctx.cast(y, info.dtype)]


@onnx_op("Softmax", "LogSoftmax")
def _softmax(ctx: NodeCtx) -> Out:
    cls = L.SoftmaxOp if ctx.node.op_type == "Softmax" else L.LogSoftmaxOp
    x = ctx.float_input(0)
    info = info_of(x)
    if ctx.opset >= 13:
        return [ctx.op(cls, x, axis=axes_of(ctx, [ctx.attr("axis", -1)], info.rank)[0])]
    axis = axes_of(ctx, [ctx.attr("axis", 1)], info.rank)[0]
    rows = int(np.prod(info.shape[:axis]))
    flat = reshape(ctx, x, (rows, int(np.prod(info.shape[axis:]))))
    return [reshape(ctx, ctx.op(cls, flat, axis=1), info.shape)]


# ---- reductions -------------------------------------------------------------------------------

REDUCE_INPUT_AXES = {"ReduceSum": 13}     # the others take axes as an input from opset 18


def _reduce_axes(ctx: NodeCtx) -> list[int] | None:
    """The axes to reduce (None: all), from the attribute or (newer opsets) the input."""
    since = REDUCE_INPUT_AXES.get(ctx.node.op_type, 18)
    rank = ctx.info(0).rank
    axes = ctx.attr("axes", None) if ctx.opset < since else ctx.ints(1, "the axes")
    noop = ctx.attr("noop_with_empty_axes", 0) if ctx.opset >= since else 0
    if not axes:
        return [] if noop else None
    return axes_of(ctx, axes, rank)


def reduce(ctx: NodeCtx, cls: Any, x: SSAValue, axes: list[int] | None, keep: bool
           ) -> SSAValue:
    info = info_of(x)
    axes = list(range(info.rank)) if axes is None else axes
    if not axes:
        return x
    return ctx.op(cls, x, axes=axes, keepdims=keep)


def _any_all(ctx: NodeCtx, any_: bool, axes: list[int] | None, keep: bool) -> SSAValue:
    """ReduceMax / ReduceMin of booleans: any(x) is sum(x as f32) != 0, all(x) is not any(not x)
    (exact: a sum of zeros and ones is 0 only when all are 0; over no elements any is false)."""
    x = ctx.value(0)
    false = ctx.const(False, "i1")
    if not any_:
        x = ctx.op(L.EqOp, x, false)
    top = reduce(ctx, L.ReduceSumOp, ctx.cast(x, "f32"), axes, keep)
    hit = ctx.op(L.NeOp, top, ctx.const(0.0, "f32"))
    return hit if any_ else ctx.op(L.EqOp, hit, false)


@onnx_op("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2",
         "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")
def _reduction(ctx: NodeCtx) -> Out:
    op = ctx.node.op_type
    axes = _reduce_axes(ctx)
    keep = bool(ctx.attr("keepdims", 1))
    if op in ("ReduceMax", "ReduceMin") and ctx.info(0).dtype == "i1" and axes != []:
        return [_any_all(ctx, op == "ReduceMax", axes, keep)]
    x = ctx.float_input(0)
    if axes == []:                      # noop_with_empty_axes
        return [x]
    c = lambda v: ctx.const(v, info_of(x).dtype)  # noqa: E731
    if op == "ReduceSum":
        return [reduce(ctx, L.ReduceSumOp, x, axes, keep)]
    if op == "ReduceMean":
        return [reduce(ctx, L.ReduceMeanOp, x, axes, keep)]
    if op == "ReduceMax":
        return [reduce(ctx, L.ReduceMaxOp, x, axes, keep)]
    if op == "ReduceMin":
        return [ctx.op(L.NegOp, reduce(ctx, L.ReduceMaxOp, ctx.op(L.NegOp, x), axes, keep))]
    if op == "ReduceL1":
        return [reduce(ctx, L.ReduceSumOp, ctx.op(L.AbsOp, x), axes, keep)]
    if op in ("ReduceL2", "ReduceSumSquare"):
        s = reduce(ctx, L.ReduceSumOp, ctx.op(L.MulOp, x, x), axes, keep)
        return [ctx.op(L.SqrtOp, s) if op == "ReduceL2" else s]
    if op == "ReduceLogSum":
        return [ctx.op(L.LogOp, reduce(ctx, L.ReduceSumOp, x, axes, keep))]
    m = reduce(ctx, L.ReduceMaxOp, x, axes, True)
    finite = ctx.op(L.SelectOp, ctx.op(L.EqOp, ctx.op(L.AbsOp, m), c(np.inf)), c(0.0), m)
    s = reduce(ctx, L.ReduceSumOp, ctx.op(L.ExpOp, ctx.op(L.SubOp, x, finite)), axes, True)
    out = ctx.op(L.AddOp, ctx.op(L.LogOp, s), finite)
    return [out if keep else reshape(ctx, out, _dropped(info_of(out).shape, axes))]


def _dropped(shape: tuple[int, ...], axes: list[int] | None) -> tuple[int, ...]:
    drop = set(range(len(shape))) if axes is None else set(axes)
    return tuple(d for i, d in enumerate(shape) if i not in drop)


# ---- picking along an axis --------------------------------------------------------------------

def pick(ctx: NodeCtx, x: SSAValue, index: SSAValue, axis: int) -> SSAValue:
    """out[..., j, ...] = x[..., index[..., j, ...], ...] along `axis` (index's shape, the
    other dims equal to x's): sum over a new axis of select(index == k or index == k - n, x, 0)."""
    xi, ii = info_of(x), info_of(index)
    n = xi.shape[axis]
    wide = ii.shape[:axis + 1] + (n,) + ii.shape[axis + 1:]       # [..., j, k, ...]
    dims = list(range(axis + 1)) + list(range(axis + 2, len(wide)))
    idx = ctx.op(L.BroadcastInDimOp, ctx.cast(index, "f64"), result=TensorInfo(wide, "f64"),
                 broadcast_dimensions=dims)
    k = ctx.op(L.IotaOp, result=TensorInfo(wide, "f64"), dim=axis + 1)
    hit = ctx.op(L.EqOp, idx, k)
    hit_neg = ctx.op(L.EqOp, idx, ctx.op(L.SubOp, k, ctx.const(float(n), "f64")))
    hit = ctx.op(L.SelectOp, hit, hit, hit_neg)
    xdims = list(range(axis)) + list(range(axis + 1, len(wide)))
    xs = ctx.op(L.BroadcastInDimOp, x, result=TensorInfo(wide, xi.dtype),
                broadcast_dimensions=xdims)
    picked = ctx.op(L.SelectOp, hit, xs, ctx.const(0.0, xi.dtype))
    return ctx.op(L.ReduceSumOp, picked, axes=[axis + 1], keepdims=False)


@onnx_op("GatherElements")
def _gather_elements(ctx: NodeCtx) -> Out:
    x = ctx.float_input(0)
    xi, ii = info_of(x), ctx.info(1)
    axis = axes_of(ctx, [ctx.attr("axis", 0)], xi.rank)[0]
    if ii.rank != xi.rank:
        ctx.refuse(ATTRIBUTE, f"indices of rank {ii.rank} for data of rank {xi.rank}")
    if any(ii.shape[d] > xi.shape[d] for d in range(xi.rank) if d != axis):
        ctx.refuse(ATTRIBUTE, f"indices {ii.shape} larger than data {xi.shape}")
    limit = [ii.shape[d] if d != axis else xi.shape[d] for d in range(xi.rank)]
    if tuple(limit) != xi.shape:
        x = ctx.op(L.SliceOp, x, start=[0] * xi.rank, limit=limit)
    return [pick(ctx, x, ctx.value(1), axis)]


def _loss(ctx: NodeCtx, logp: SSAValue, target: SSAValue, weight: SSAValue | None
          ) -> SSAValue:
    """ONNX's NegativeLogLikelihoodLoss of log-probabilities [N, C, d...] and targets [N, d...]."""
    reduction = ctx.attr("reduction", "mean")
    ignore = ctx.attr("ignore_index", None)
    li, ti = info_of(logp), info_of(target)
    if ti.dtype not in ("i32", "i64"):
        ctx.refuse(DTYPE, f"targets of element type {ti.dtype}")
    if reduction not in ("none", "sum", "mean"):
        ctx.refuse(ATTRIBUTE, f"reduction={reduction!r}")
    index = reshape(ctx, target, ti.shape[:1] + (1,) + ti.shape[1:])
    picked = reshape(ctx, pick(ctx, logp, index, 1), ti.shape)
    zero = ctx.const(0.0, li.dtype)
    w = ctx.op(L.GatherOp, weight, target, axis=0) if weight is not None else \
        ctx.op(L.BroadcastInDimOp, ctx.const(1.0, li.dtype), result=TensorInfo(ti.shape, li.dtype),
               broadcast_dimensions=[])
    loss = ctx.op(L.NegOp, ctx.op(L.MulOp, picked, w))
    if ignore is not None:            # an ignored target's loss and weight are 0 exactly
        kept = ctx.op(L.NeOp, target, ctx.const(ignore, ti.dtype))
        w = ctx.op(L.SelectOp, kept, w, zero)
        loss = ctx.op(L.SelectOp, kept, loss, zero)
    if reduction == "none":
        return loss
    total = reduce(ctx, L.ReduceSumOp, loss, None, False)
    if reduction == "sum":
        return total
    return ctx.op(L.DivOp, total, reduce(ctx, L.ReduceSumOp, w, None, False))


@onnx_op("NegativeLogLikelihoodLoss")
def _nll(ctx: NodeCtx) -> Out:
    weight = ctx.float_input(2) if ctx.input(2) is not None else None
    return [_loss(ctx, ctx.float_input(0), ctx.value(1), weight)]


@onnx_op("SoftmaxCrossEntropyLoss")
def _sce(ctx: NodeCtx) -> Out:
    x = ctx.float_input(0)
    logp = ctx.op(L.LogSoftmaxOp, x, axis=1 if info_of(x).rank > 1 else 0)
    weight = ctx.float_input(2) if ctx.input(2) is not None else None
    outs: list[SSAValue | None] = [_loss(ctx, logp, ctx.value(1), weight)]
    if len(ctx.node.output) > 1:
        outs.append(logp)
    return outs


@onnx_op("Trilu")
def _trilu(ctx: NodeCtx) -> Out:
    """Keep x[..., i, j] where j - i >= k (upper) or <= k (lower): f64 iotas, exact."""
    x = ctx.value(0)
    info = info_of(x)
    if info.rank < 2:
        ctx.refuse(ATTRIBUTE, "needs rank >= 2")
    k = ctx.ints(1, "k")
    upper = ctx.attr("upper", 1)
    rows, cols = info.shape[-2:]
    i = ctx.op(L.IotaOp, result=TensorInfo((rows, cols), "f64"), dim=0)
    j = ctx.op(L.IotaOp, result=TensorInfo((rows, cols), "f64"), dim=1)
    diff = ctx.op(L.SubOp, j, i)
    keep = ctx.op(L.GeOp if upper else L.LeOp, diff, ctx.const(float(k[0] if k else 0), "f64"))
    if info.dtype == "i1":
        return [ctx.op(L.SelectOp, keep, x, ctx.const(False, "i1"))]
    return [ctx.op(L.SelectOp, keep, x, ctx.const(0, info.dtype))]


# ---- convolution ------------------------------------------------------------------------------

def _conv_pads(ctx: NodeCtx, spatial: tuple[int, ...], kernel: list[int]) -> list[int]:
    """The pads as [begin..., end...]: the attribute, or what auto_pad makes of a stride equal
    to the kernel (VALID: none; SAME_*: up to a whole patch, refused unless that is none)."""
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto == "NOTSET":
        return [int(p) for p in ctx.attr("pads", [0] * 2 * len(kernel))]
    if auto == "VALID":
        return [0] * 2 * len(kernel)
    total = [-(-n // k) * k - n for n, k in zip(spatial, kernel, strict=True)]
    if auto not in ("SAME_UPPER", "SAME_LOWER") or any(total):
        ctx.refuse(ATTRIBUTE, f"auto_pad={auto!r} on spatial dims {spatial} with kernel_shape "
                   f"{tuple(kernel)}: pads them; only unpadded patch convolutions are modeled")
    return [0] * 2 * len(kernel)


ONNX_CONV_NAMES = ("kernel_shape", "strides", "pads", "dilations", "group")


@onnx_op("Conv")
def _conv(ctx: NodeCtx) -> Out:
    x, w = ctx.float_input(0), ctx.float_input(1)
    kernel = [int(k) for k in ctx.attr("kernel_shape", info_of(w).shape[2:])]
    if len(kernel) != 2:
        ctx.refuse(ATTRIBUTE, f"a {len(kernel)}-D convolution (kernel_shape {tuple(kernel)}): "
                   "only 2-D non-overlapping patch convolutions are modeled")
    if info_of(x).rank != 4 or tuple(kernel) != info_of(w).shape[2:]:
        ctx.refuse(ATTRIBUTE, f"kernel_shape {tuple(kernel)} for input {info_of(x).shape} and "
                   f"weights {info_of(w).shape}")
    pads = _conv_pads(ctx, info_of(x).shape[2:], kernel)
    why = unmodeled("Conv", kernel, [int(s) for s in ctx.attr("strides", [1, 1])], pads,
                    [int(d) for d in ctx.attr("dilations", [1, 1])], int(ctx.attr("group", 1)),
                    ONNX_CONV_NAMES)
    if why is not None:
        ctx.refuse(ATTRIBUTE, why)
    bias = ctx.float_input(2) if ctx.input(2) is not None else None
    return [patch_conv(ctx, x, w, bias)]


__all__ = ["DTYPE"]
