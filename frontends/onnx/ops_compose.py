"""ONNX ops Lamina spells with several rows: activations, tests, normalizations, layout, padding.

Each is onnx's definition (its reference implementation's formula) in rows:
- Swish x sigmoid(alpha x), SwiGLU a sigmoid(alpha a) b, Mish x tanh(log(1 + exp(x))), Shrink,
  IsNaN (x != x), IsInf;
- GlobalAveragePool / GlobalMaxPool: mean / max over the spatial dims; LpNormalization x / |x|_p
  (0 where the norm is 0);
- BatchNormalization (inference: (x - mean) / sqrt(var + eps) scale + bias per channel),
  InstanceNormalization (`layernorm` over the spatial dims, then scale and bias per channel),
  GroupNormalization (`layernorm` of each group of channels),
  MeanVarianceNormalization ((x - mean) / (sqrt(mean(x^2) - mean^2) + 1e-9));
- DepthToSpace / SpaceToDepth: reshape, transpose, reshape; EyeLike and OneHot: a compare of
  iotas selecting on / off values; Pad: constant mode with a known fill is the `pad` row (a
  `slice` first where a negative pad crops); numpy.pad's edge, reflect and wrap modes, and a
  fill computed at run time or on booleans, are slices, concatenations and splats.
"""

from __future__ import annotations

import math

import numpy as np
from lamina.frontends.common import ATTRIBUTE, DTYPE, reshape, signed_pad
from lamina.frontends.onnx.graph import DTYPES, NodeCtx
from lamina.frontends.onnx.ops_nn import reduce
from lamina.frontends.onnx.ops_shape import Out, axes_of, onnx_op, slice_dim
from lamina.ir.core.shapes import TensorInfo, info_of
from lamina.ir.ops import lamina as L
from xdsl.ir import SSAValue


def _c(ctx: NodeCtx, x: SSAValue, v: float) -> SSAValue:
    return ctx.const(v, info_of(x).dtype)


@onnx_op("Swish")
def _swish(ctx: NodeCtx) -> Out:
    x = ctx.float_input(0)
    return [ctx.op(L.MulOp, x, ctx.op(L.SigmoidOp, ctx.op(L.MulOp, x,
                                                          _c(ctx, x, ctx.attr("alpha", 1.0)))))]


@onnx_op("Mish")
def _mish(ctx: NodeCtx) -> Out:
    x = ctx.float_input(0)
    softplus = ctx.op(L.LogOp, ctx.op(L.AddOp, ctx.op(L.ExpOp, x), _c(ctx, x, 1.0)))
    return [ctx.op(L.MulOp, x, ctx.op(L.TanhOp, softplus))]


@onnx_op("Shrink")
def _shrink(ctx: NodeCtx) -> Out:
    x = ctx.float_input(0)
    bias, lambd = ctx.attr("bias", 0.0), ctx.attr("lambd", 0.5)
    low = ctx.op(L.LtOp, x, _c(ctx, x, -lambd))
    high = ctx.op(L.GtOp, x, _c(ctx, x, lambd))
    up = ctx.op(L.SelectOp, high, ctx.op(L.SubOp, x, _c(ctx, x, bias)), _c(ctx, x, 0.0))
    return [ctx.op(L.SelectOp, low, ctx.op(L.AddOp, x, _c(ctx, x, bias)), up)]


@onnx_op("IsNaN")
def _isnan(ctx: NodeCtx) -> Out:
    x = ctx.float_input(0)
    return [ctx.op(L.NeOp, x, x)]


@onnx_op("IsInf")
def _isinf(ctx: NodeCtx) -> Out:
    x = ctx.float_input(0)
    pos, neg = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    hits = [ctx.op(L.EqOp, x, _c(ctx, x, s * math.inf)) for s, on in ((1, pos), (-1, neg)) if on]
    if not hits:              # neither sign: all false (x < x is false, for NaN too)
        return [ctx.op(L.LtOp, x, x)]
    out = hits[0]
    for h in hits[1:]:
        out = ctx.op(L.SelectOp, out, ctx.const(True, "i1"), h)
    return [out]


@onnx_op("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx: NodeCtx) -> Out:
    x = ctx.float_input(0)
    cls = L.ReduceMeanOp if ctx.node.op_type == "GlobalAveragePool" else L.ReduceMaxOp
    return [reduce(ctx, cls, x, list(range(2, info_of(x).rank)), True)]


@onnx_op("LpNormalization")
def _lp_norm(ctx: NodeCtx) -> Out:
    x = ctx.float_input(0)
    axis = axes_of(ctx, [ctx.attr("axis", -1)], info_of(x).rank)[0]
    p = ctx.attr("p", 2)
    if p not in (1, 2):
        ctx.refuse(ATTRIBUTE, f"p={p}")
    if p == 1:
        norm = reduce(ctx, L.ReduceSumOp, ctx.op(L.AbsOp, x), [axis], True)
    else:
        norm = ctx.op(L.SqrtOp, reduce(ctx, L.ReduceSumOp, ctx.op(L.MulOp, x, x), [axis], True))
    zero = ctx.op(L.EqOp, norm, _c(ctx, x, 0.0))        # a zero norm gives 0, not 0 / 0
    return [ctx.op(L.SelectOp, zero, _c(ctx, x, 0.0), ctx.op(L.DivOp, x, norm))]


def _per_channel(ctx: NodeCtx, i: int, rank: int) -> SSAValue:
    """Input `i`, a [C] vector, as [C, 1, ..., 1] against an [N, C, ...] input."""
    v = ctx.float_input(i)
    (c,) = info_of(v).shape
    return reshape(ctx, v, (c,) + (1,) * (rank - 2))


@onnx_op("BatchNormalization")
def _batch_norm(ctx: NodeCtx) -> Out:
    x = ctx.float_input(0)
    rank = info_of(x).rank
    for legacy in ("spatial", "is_test", "consumed_inputs"):
        if ctx.has_attr(legacy):
            ctx.attr(legacy)
    ctx.attr("momentum", 0.9)       # only updates running statistics in training
    if ctx.attr("training_mode", 0) or len(ctx.node.output) > 1:
        ctx.refuse(ATTRIBUTE, "training_mode (running statistics are state Lamina does not model)")
    eps = ctx.attr("epsilon", 1e-5)
    scale, bias, mean, var = (_per_channel(ctx, i, rank) for i in (1, 2, 3, 4))
    std = ctx.op(L.SqrtOp, ctx.op(L.AddOp, var, _c(ctx, x, eps)))
    normalized = ctx.op(L.DivOp, ctx.op(L.SubOp, x, mean), std)
    return [ctx.op(L.AddOp, ctx.op(L.MulOp, scale, normalized), bias)]


@onnx_op("InstanceNormalization")
def _instance_norm(ctx: NodeCtx) -> Out:
    x = ctx.float_input(0)
    rank = info_of(x).rank
    y = ctx.op(L.LayernormOp, x, None, None, axis=2, eps=float(ctx.attr("epsilon", 1e-5)))
    y = ctx.op(L.MulOp, y, _per_channel(ctx, 1, rank))
    return [ctx.op(L.AddOp, y, _per_channel(ctx, 2, rank))]


@onnx_op("GroupNormalization")
def _group_norm(ctx: NodeCtx) -> Out:
    """`layernorm` of [N, G, C/G * spatial], then scale and bias per channel (opset 21) or per
    group (opset 18)."""
    x = ctx.float_input(0)
    info = info_of(x)
    groups = ctx.attr("num_groups")
    if info.rank < 2 or groups <= 0 or info.shape[1] % groups:
        ctx.refuse(ATTRIBUTE, f"num_groups={groups} for an input of shape {info.shape}")
    if ctx.attr("stash_type", 1) != 1:   # Lamina normalizes in float32, stash_type 1
        ctx.refuse(ATTRIBUTE, f"stash_type={ctx.attr('stash_type')}")
    n, c = info.shape[:2]
    grouped = reshape(ctx, x, (n, groups, c // groups * math.prod(info.shape[2:])))
    y = ctx.op(L.LayernormOp, grouped, None, None, axis=2, eps=float(ctx.attr("epsilon", 1e-5)))
    if ctx.info(1).shape == (c,):
        y = reshape(ctx, y, info.shape)
        y = ctx.op(L.MulOp, y, _per_channel(ctx, 1, info.rank))
        return [ctx.op(L.AddOp, y, _per_channel(ctx, 2, info.rank))]
    scale, bias = (reshape(ctx, ctx.float_input(i), (groups, 1)) for i in (1, 2))
    y = ctx.op(L.AddOp, ctx.op(L.MulOp, y, scale), bias)
    return [reshape(ctx, y, info.shape)]


@onnx_op("SwiGLU")
def _swiglu(ctx: NodeCtx) -> Out:
    """a sigmoid(alpha a) b, on operands of one shape (ONNX does not broadcast them)."""
    a, b = ctx.float_input(0), ctx.float_input(1)
    if info_of(a) != info_of(b):
        ctx.refuse(ATTRIBUTE, f"operands of types {info_of(a)} and {info_of(b)} (SwiGLU takes "
                   "one shape and type)")
    gate = ctx.op(L.SigmoidOp, ctx.op(L.MulOp, a, _c(ctx, a, ctx.attr("alpha", 1.0))))
    return [ctx.op(L.MulOp, ctx.op(L.MulOp, a, gate), b)]


@onnx_op("MeanVarianceNormalization")
def _mvn(ctx: NodeCtx) -> Out:
    x = ctx.float_input(0)
    axes = axes_of(ctx, ctx.attr("axes", [0, 2, 3]), info_of(x).rank)
    mean = reduce(ctx, L.ReduceMeanOp, x, axes, True)
    sq_mean = reduce(ctx, L.ReduceMeanOp, ctx.op(L.MulOp, x, x), axes, True)
    std = ctx.op(L.SqrtOp, ctx.op(L.SubOp, sq_mean, ctx.op(L.MulOp, mean, mean)))
    return [ctx.op(L.DivOp, ctx.op(L.SubOp, x, mean), ctx.op(L.AddOp, std, _c(ctx, x, 1e-9)))]


@onnx_op("DepthToSpace", "SpaceToDepth")
def _depth_space(ctx: NodeCtx) -> Out:
    x = ctx.value(0)
    if ctx.info(0).rank != 4:
        ctx.refuse(ATTRIBUTE, "needs a rank-4 input")
    n, c, h, w = ctx.info(0).shape
    bs = ctx.attr("blocksize")
    mode = ctx.attr("mode", "DCR")      # SpaceToDepth has one from opset 28
    if ctx.node.op_type == "SpaceToDepth":
        if mode not in ("DCR", "CRD"):
            ctx.refuse(ATTRIBUTE, f"mode={mode!r}")
        parts = reshape(ctx, x, (n, c, h // bs, bs, w // bs, bs))
        perm = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]
        moved = ctx.op(L.TransposeOp, parts, permutation=perm)
        return [reshape(ctx, moved, (n, c * bs * bs, h // bs, w // bs))]
    if mode == "DCR":
        parts = reshape(ctx, x, (n, bs, bs, c // (bs * bs), h, w))
        perm = [0, 3, 4, 1, 5, 2]
    elif mode == "CRD":
        parts = reshape(ctx, x, (n, c // (bs * bs), bs, bs, h, w))
        perm = [0, 1, 4, 2, 5, 3]
    else:
        ctx.refuse(ATTRIBUTE, f"mode={mode!r}")
    moved = ctx.op(L.TransposeOp, parts, permutation=perm)
    return [reshape(ctx, moved, (n, c // (bs * bs), h * bs, w * bs))]


@onnx_op("EyeLike")
def _eye_like(ctx: NodeCtx) -> Out:
    info = ctx.info(0)
    if info.rank != 2:
        ctx.refuse(ATTRIBUTE, "needs a rank-2 input")
    dtype_attr = ctx.attr("dtype", None)
    dtype = info.dtype if dtype_attr is None else DTYPES.get(dtype_attr)
    if dtype is None:
        ctx.refuse(DTYPE, f"dtype {dtype_attr}")
    i = ctx.op(L.IotaOp, result=TensorInfo(info.shape, "i64"), dim=0)
    j = ctx.op(L.IotaOp, result=TensorInfo(info.shape, "i64"), dim=1)
    on = ctx.op(L.EqOp, ctx.op(L.SubOp, j, i), ctx.const(ctx.attr("k", 0), "i64"))
    one, zero = (ctx.const(v, dtype) for v in ((True, False) if dtype == "i1" else (1, 0)))
    return [ctx.op(L.SelectOp, on, one, zero)]


@onnx_op("OneHot")
def _one_hot(ctx: NodeCtx) -> Out:
    """values[1] where index (negative ones from the end) == position along axis, else values[0]."""
    idx = ctx.value(0)
    ii = info_of(idx)
    depth_arr = ctx.static(1, "the depth")
    assert depth_arr is not None
    depth = int(np.asarray(depth_arr).reshape(-1)[0])
    values = ctx.value(2)
    rank = ii.rank + 1
    axis = axes_of(ctx, [ctx.attr("axis", -1)], rank)[0]
    shape = ii.shape[:axis] + (depth,) + ii.shape[axis:]
    dt = ii.dtype
    k = ctx.op(L.IotaOp, result=TensorInfo(shape, dt), dim=axis)
    wrapped = ctx.op(L.SelectOp, ctx.op(L.LtOp, idx, ctx.const(0, dt)),
                     ctx.op(L.AddOp, idx, ctx.const(depth, dt)), idx)
    spread = reshape(ctx, wrapped, ii.shape[:axis] + (1,) + ii.shape[axis:])
    hit = ctx.op(L.EqOp, k, spread)
    off = slice_dim(ctx, values, 0, 0, 1)
    on = slice_dim(ctx, values, 0, 1, 2)
    return [ctx.op(L.SelectOp, hit, on, off)]


def _pad_value(ctx: NodeCtx, dtype: str) -> SSAValue:
    """The constant-mode fill, a rank-0 value: known (attribute or constant input) or computed
    at run time (an expanded function body casts -inf); it never decides a shape."""
    if ctx.opset < 11:
        return ctx.const(ctx.attr("value", 0.0), dtype)
    v = ctx.input(2)
    if v is None:
        return ctx.const(0, dtype)
    if v.const is not None:
        return ctx.const(np.asarray(v.const).reshape(-1)[0].item(), dtype)
    if v.info.dtype != dtype or int(np.prod(v.info.shape)) != 1:
        ctx.refuse(ATTRIBUTE, f"a constant value of type {v.info.shape} {v.info.dtype} for a "
                   f"{dtype} input")
    return reshape(ctx, ctx.value(2), ())


def _pad_side(ctx: NodeCtx, x: SSAValue, a: int, amount: int, before: bool, mode: str,
              fill: SSAValue) -> SSAValue | None:
    """The `amount` rows added before (or after) `x` along `a`, as numpy.pad's `mode` makes them."""
    if amount <= 0:
        return None
    info = info_of(x)
    n = info.shape[a]
    if mode == "constant":
        shape = info.shape[:a] + (amount,) + info.shape[a + 1:]
        return ctx.op(L.BroadcastInDimOp, fill, result=TensorInfo(shape, info.dtype),
                      broadcast_dimensions=[])
    limit = {"edge": n, "wrap": n, "reflect": n - 1}[mode]
    if amount > limit or n == 0:
        ctx.refuse(ATTRIBUTE, f"mode={mode!r} padding {amount} rows onto {n}")
    if mode == "wrap":
        return slice_dim(ctx, x, a, n - amount, n) if before else slice_dim(ctx, x, a, 0, amount)
    if mode == "edge":
        rows = [0 if before else n - 1] * amount
    else:    # reflect, the edge row not repeated: x[amount], ..., x[1] / x[n-2], ..., x[n-1-amount]
        rows = list(range(amount, 0, -1)) if before else list(range(n - 2, n - 2 - amount, -1))
    pieces = [slice_dim(ctx, x, a, r, r + 1) for r in rows]
    return pieces[0] if len(pieces) == 1 else ctx.op(L.ConcatOp, pieces, dim=a)


def _known_fill(ctx: NodeCtx, dtype: str) -> float | None:
    """The constant-mode fill when the `pad` row can hold it: known while importing, on a
    number type, integral (and exact in its f64 attribute) for an integer input; else None."""
    if dtype == "i1":
        return None
    if ctx.opset < 11:
        value = float(ctx.attr("value", 0.0))
    else:
        v = ctx.input(2)
        if v is not None and v.const is None:
            return None
        value = 0.0 if v is None else float(np.asarray(v.const).reshape(-1)[0].item())
    if dtype in ("i32", "i64") and not (value.is_integer() and abs(value) < 2**53):
        return None
    return value


def _pad_row(ctx: NodeCtx, axes: list[int], pads: list[int], value: float) -> SSAValue:
    """Constant padding as one `slice` (the negative pads crop) and one `pad` row."""
    x = ctx.value(0)
    info = info_of(x)
    low, high = [0] * info.rank, [0] * info.rank
    for a, before, after in zip(axes, pads[:len(axes)], pads[len(axes):], strict=True):
        low[a], high[a] = before, after
    out = signed_pad(ctx, x, low, high, value)
    if out is None:
        ctx.refuse(ATTRIBUTE, f"pads {pads} crop more than the input's {info.shape}")
    return out


@onnx_op("Pad")
def _pad(ctx: NodeCtx) -> Out:
    """Constant mode with a fill known while importing: the `pad` row (after a `slice` where a
    negative pad crops). numpy.pad's edge, reflect and wrap modes, and a fill computed at run
    time or on booleans: slices and concatenations."""
    info = ctx.info(0)
    pads = ctx.attr("pads") if ctx.opset < 11 else ctx.ints(1, "the pads")
    axes = None if ctx.opset < 18 else ctx.ints(3, "the axes")
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        ctx.refuse(ATTRIBUTE, f"mode={mode!r}")
    assert pads is not None
    axes = axes_of(ctx, axes if axes is not None else list(range(info.rank)), info.rank)
    if len(pads) != 2 * len(axes):
        ctx.refuse(ATTRIBUTE, f"{len(pads)} pads for {len(axes)} axes")
    value = _known_fill(ctx, info.dtype) if mode == "constant" else None
    if value is not None and len(set(axes)) == len(axes):
        return [_pad_row(ctx, axes, list(pads), value)]
    fill = _pad_value(ctx, info.dtype)
    x = ctx.value(0)
    for a, before, after in zip(axes, pads[:len(axes)], pads[len(axes):], strict=True):
        n = info_of(x).shape[a]
        x = slice_dim(ctx, x, a, max(-before, 0), n - max(-after, 0))
        lo = _pad_side(ctx, x, a, before, True, mode, fill)
        hi = _pad_side(ctx, x, a, after, False, mode, fill)
        pieces = [p for p in (lo, x, hi) if p is not None]
        if len(pieces) > 1:
            x = ctx.op(L.ConcatOp, pieces, dim=a)
    return [x]
