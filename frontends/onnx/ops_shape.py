"""ONNX's shape and data-movement ops as Lamina layout ops (and known shapes as constants).

Shape and Size of any value are constants (shapes are static); ConstantOfShape is a splat; Reshape,
Flatten, Squeeze and Unsqueeze are `reshape`; Transpose is `transpose`; Expand is
`broadcast_in_dim` to the broadcast of the input's and the given shape; Concat is `concat`; Split
and Slice (positive steps) are `slice`s; Gather is `gather`. Attribute-like inputs (shapes, axes,
starts) must be known while importing (see `lamina.frontends.onnx.graph`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
from lamina.frontends.common import ATTRIBUTE, DTYPE, reshape
from lamina.frontends.onnx.graph import NodeCtx, Val, const_val
from lamina.ir.core.shapes import TensorInfo, broadcast_shapes, info_of
from lamina.ir.ops import lamina as L
from onnx import numpy_helper
from xdsl.ir import SSAValue

Out = Sequence[Val | SSAValue | None]
TABLE: dict[str, Callable[[NodeCtx], Out]] = {}
F = TypeVar("F", bound=Callable[..., Any])


def onnx_op(*names: str) -> Callable[[F], F]:
    """Register a converter for the ONNX op types `names`."""

    def register(conv: F) -> F:
        for n in names:
            TABLE[n] = conv
        return conv
    return register


def broadcast_to(ctx: NodeCtx, v: SSAValue, shape: Sequence[int]) -> SSAValue:
    info = info_of(v)
    if info.shape == tuple(shape):
        return v
    dims = list(range(len(shape) - info.rank, len(shape)))
    return ctx.op(L.BroadcastInDimOp, v, result=TensorInfo(tuple(shape), info.dtype),
                  broadcast_dimensions=dims)


def axes_of(ctx: NodeCtx, axes: Sequence[int], rank: int) -> list[int]:
    out = []
    for a in axes:
        if not -rank <= a < rank:
            ctx.refuse(ATTRIBUTE, f"axis {a} is out of range for rank {rank}")
        out.append(a % rank)
    return out


@onnx_op("Identity")
def _identity(ctx: NodeCtx) -> Out:
    v = ctx.input(0)
    assert v is not None
    return [v]


@onnx_op("Shape")
def _shape(ctx: NodeCtx) -> Out:
    shape = ctx.info(0).shape
    rank = len(shape)
    start, end = ctx.attr("start", 0), ctx.attr("end", rank)
    s = min(max(start + rank if start < 0 else start, 0), rank)
    e = min(max(end + rank if end < 0 else end, 0), rank)
    return [const_val(np.array(shape[s:e], dtype=np.int64), ctx.what(), ctx.imp.loc)]


@onnx_op("Size")
def _size(ctx: NodeCtx) -> Out:
    return [const_val(np.array(int(np.prod(ctx.info(0).shape)), dtype=np.int64), ctx.what(),
                      ctx.imp.loc)]


@onnx_op("ConstantOfShape")
def _constant_of_shape(ctx: NodeCtx) -> Out:
    shape = ctx.ints(0, "the shape")
    value = ctx.attr("value", None)
    fill = np.zeros((1,), np.float32) if value is None else \
        np.asarray(numpy_helper.to_array(value)).reshape(-1)
    return [const_val(np.full(tuple(shape or ()), fill[0], dtype=fill.dtype), ctx.what(),
                      ctx.imp.loc)]


@onnx_op("Reshape")
def _reshape(ctx: NodeCtx) -> Out:
    info = ctx.info(0)
    target = ctx.ints(1, "the shape")
    allowzero = ctx.attr("allowzero", 0)
    if target is None:
        ctx.refuse(ATTRIBUTE, "needs the shape input")
    shape = [info.shape[i] if d == 0 and not allowzero else d for i, d in enumerate(target)]
    if shape.count(-1) > 1:
        ctx.refuse(ATTRIBUTE, f"shape {target} has more than one -1")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1]))
        total = int(np.prod(info.shape))
        if known == 0 or total % known:
            ctx.refuse(ATTRIBUTE, f"cannot infer -1 in {target} for {info.shape}")
        shape[shape.index(-1)] = total // known
    return [reshape(ctx, ctx.value(0), shape)]


@onnx_op("Flatten")
def _flatten(ctx: NodeCtx) -> Out:
    info = ctx.info(0)
    axis = ctx.attr("axis", 1)
    axis = axis + info.rank if axis < 0 else axis
    outer = int(np.prod(info.shape[:axis]))
    return [reshape(ctx, ctx.value(0), (outer, int(np.prod(info.shape[axis:]))))]


def _axes_input(ctx: NodeCtx, attr_until: int) -> list[int] | None:
    """Axes from the attribute (opsets before `attr_until`) or the second input."""
    if ctx.opset < attr_until:
        return ctx.attr("axes", None)
    return ctx.ints(1, "the axes")


@onnx_op("Squeeze")
def _squeeze(ctx: NodeCtx) -> Out:
    info = ctx.info(0)
    axes = _axes_input(ctx, 13)
    drop = set(axes_of(ctx, axes, info.rank)) if axes is not None else \
        {i for i, d in enumerate(info.shape) if d == 1}
    if any(info.shape[a] != 1 for a in drop):
        ctx.refuse(ATTRIBUTE, f"squeezes a dimension that is not 1 in {info.shape}")
    return [reshape(ctx, ctx.value(0), [d for i, d in enumerate(info.shape) if i not in drop])]


@onnx_op("Unsqueeze")
def _unsqueeze(ctx: NodeCtx) -> Out:
    info = ctx.info(0)
    axes = _axes_input(ctx, 13)
    if axes is None:
        ctx.refuse(ATTRIBUTE, "needs axes")
    rank = info.rank + len(axes)
    new = set(axes_of(ctx, axes, rank))
    dims = iter(info.shape)
    shape = [1 if i in new else next(dims) for i in range(rank)]
    return [reshape(ctx, ctx.value(0), shape)]


@onnx_op("Transpose")
def _transpose(ctx: NodeCtx) -> Out:
    info = ctx.info(0)
    perm = ctx.attr("perm", list(reversed(range(info.rank))))
    perm = axes_of(ctx, perm, info.rank)
    if perm == list(range(info.rank)):
        return [ctx.value(0)]
    return [ctx.op(L.TransposeOp, ctx.value(0), permutation=perm)]


@onnx_op("Expand")
def _expand(ctx: NodeCtx) -> Out:
    info = ctx.info(0)
    shape = ctx.ints(1, "the shape") or []
    try:
        out = broadcast_shapes(info.shape, tuple(shape))
    except Exception:
        ctx.refuse(ATTRIBUTE, f"shape {shape} does not broadcast with {info.shape}")
    return [broadcast_to(ctx, ctx.value(0), out)]


@onnx_op("Concat")
def _concat(ctx: NodeCtx) -> Out:
    parts = [v for v in ctx.inputs()]
    axis = ctx.attr("axis")
    rank = parts[0].info.rank
    axis = axes_of(ctx, [axis], rank)[0]
    parts = [p for p in parts if p.info.shape[axis] != 0 or len(parts) == 1]
    if len(parts) == 1:
        return [parts[0]]
    return [ctx.op(L.ConcatOp, [ctx.imp.materialize(p) for p in parts], dim=axis)]


def slice_dim(ctx: NodeCtx, v: SSAValue, dim: int, start: int, end: int,
              step: int = 1) -> SSAValue:
    info = info_of(v)
    if (start, end, step) == (0, info.shape[dim], 1):
        return v
    begin, limit, strides = [0] * info.rank, list(info.shape), [1] * info.rank
    begin[dim], limit[dim], strides[dim] = start, end, step
    return ctx.op(L.SliceOp, v, start=begin, limit=limit, strides=strides if step != 1 else None)


@onnx_op("Split")
def _split(ctx: NodeCtx) -> Out:
    info = ctx.info(0)
    axis = axes_of(ctx, [ctx.attr("axis", 0)], info.rank)[0]
    n = info.shape[axis]
    sizes = ctx.attr("split", None) if ctx.opset < 13 else ctx.ints(1, "the split sizes")
    outputs = len(ctx.node.output)
    count = ctx.attr("num_outputs", None) if ctx.opset >= 18 else None
    if sizes is None:
        k = count or outputs
        step = -(-n // k) if ctx.opset >= 18 else n // k
        if ctx.opset < 18 and n % k:
            ctx.refuse(ATTRIBUTE, f"{n} does not split into {k} equal parts")
        sizes = [min(step, n - i * step) for i in range(k)]
    if sum(sizes) != n or len(sizes) != outputs:
        ctx.refuse(ATTRIBUTE, f"split sizes {sizes} for dimension {n} into {outputs} outputs")
    x = ctx.value(0)
    out: list[SSAValue] = []
    offset = 0
    for s in sizes:
        out.append(slice_dim(ctx, x, axis, offset, offset + s))
        offset += s
    return out


def _clamp(i: int, n: int, lo: int, hi: int) -> int:
    i = i + n if i < 0 else i
    return min(max(i, lo), hi)


@onnx_op("Slice")
def _slice(ctx: NodeCtx) -> Out:
    info = ctx.info(0)
    if ctx.opset < 10:
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        axes, steps = ctx.attr("axes", None), None
    else:
        starts, ends = ctx.ints(1, "the starts"), ctx.ints(2, "the ends")
        axes, steps = ctx.ints(3, "the axes"), ctx.ints(4, "the steps")
    assert starts is not None and ends is not None
    axes = axes_of(ctx, axes if axes is not None else list(range(len(starts))), info.rank)
    steps = steps or [1] * len(starts)
    begin, limit, strides = [0] * info.rank, list(info.shape), [1] * info.rank
    for a, s, e, st in zip(axes, starts, ends, steps, strict=True):
        if st < 1:
            ctx.refuse(ATTRIBUTE, f"step {st} (Lamina's slice has positive strides only)")
        n = info.shape[a]
        begin[a], limit[a], strides[a] = _clamp(s, n, 0, n), _clamp(e, n, 0, n), st
        limit[a] = max(limit[a], begin[a])
    if begin == [0] * info.rank and limit == list(info.shape) and strides == [1] * info.rank:
        return [ctx.value(0)]
    return [ctx.op(L.SliceOp, ctx.value(0), start=begin, limit=limit,
                   strides=strides if any(s != 1 for s in strides) else None)]


@onnx_op("Gather")
def _gather(ctx: NodeCtx) -> Out:
    info = ctx.info(0)
    if ctx.info(1).dtype not in ("i32", "i64"):
        ctx.refuse(DTYPE, f"indices of element type {ctx.info(1).dtype}")
    axis = axes_of(ctx, [ctx.attr("axis", 0)], info.rank)[0]
    return [ctx.op(L.GatherOp, ctx.value(0), ctx.value(1), axis=axis)]


@onnx_op("Tile")
def _tile(ctx: NodeCtx) -> Out:
    """x repeated along each dim: broadcast onto a new leading dim per repeated dim, reshape."""
    info = ctx.info(0)
    reps = ctx.ints(1, "the repeats") or []
    if len(reps) != info.rank:
        ctx.refuse(ATTRIBUTE, f"repeats {reps} for rank {info.rank}")
    inter = [d for r, n in zip(reps, info.shape, strict=True) for d in (r, n)]
    dims = [2 * i + 1 for i in range(info.rank)]
    x = ctx.value(0)
    big = ctx.op(L.BroadcastInDimOp, x, result=TensorInfo(tuple(inter), info.dtype),
                 broadcast_dimensions=dims)
    return [reshape(ctx, big, [r * n for r, n in zip(reps, info.shape, strict=True)])]
