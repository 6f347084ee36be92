"""ATen's views and data movement as Lamina layout ops.

Every view (view, reshape, squeeze, unsqueeze, flatten) is a `reshape` to the node's output shape;
permute / transpose / t are `transpose`; expand is `broadcast_in_dim` onto the trailing dims;
slice / select / split / chunk / unbind are `slice`s (select and unbind drop the dim with a
reshape); cat and stack are `concat`; constant_pad_nd / pad (constant mode) are `pad`, after a
`slice` for negative (cropping) entries. Lamina's values are immutable, so ATen's aliasing of
views needs nothing: no in-place op survives torch.export's functionalization.
"""

from __future__ import annotations

from typing import Any

from lamina.frontends.common import ATTRIBUTE, signed_pad
from lamina.frontends.torch.importer import Ctx
from lamina.frontends.torch.table import aten, operand
from lamina.ir.core.shapes import info_of
from lamina.ir.ops import lamina as L
from xdsl.ir import SSAValue

INT64_MAX = 2**63 - 1


@aten("view.default", "reshape.default", "_unsafe_view.default", "squeeze.dim",
      "squeeze.dims", "squeeze.default", "unsqueeze.default", "flatten.using_ints",
      "view_copy.default")
def _view(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    x = ctx.tensor(a["self"])
    out = ctx.out()
    if info_of(x).shape == out.shape:
        return x
    return ctx.op(L.ReshapeOp, x, result=out)


def _permute(ctx: Ctx, x: SSAValue, perm: list[int]) -> SSAValue:
    rank = info_of(x).rank
    perm = [p % rank for p in perm] if rank else []
    if perm == list(range(rank)):
        return x
    return ctx.op(L.TransposeOp, x, permutation=perm)


@aten("permute.default")
def _permute_conv(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    return _permute(ctx, ctx.tensor(a["self"]), list(a["dims"]))


@aten("transpose.int", "swapaxes.default", "t.default", "numpy_T.default")
def _transpose(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    x = ctx.tensor(a["self"])
    rank = info_of(x).rank
    if rank < 2 and "dim0" not in a:
        return x
    d0, d1 = (a["dim0"], a["dim1"]) if "dim0" in a else \
        (a["axis0"], a["axis1"]) if "axis0" in a else (0, 1)
    perm = list(range(rank))
    if rank:
        perm[d0 % rank], perm[d1 % rank] = perm[d1 % rank], perm[d0 % rank]
    return _permute(ctx, x, perm)


@aten("expand.default", "expand_copy.default")
def _expand(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    x = ctx.tensor(a["self"])
    out = ctx.out()
    rank = info_of(x).rank
    if info_of(x).shape == out.shape:
        return x
    dims = list(range(out.rank - rank, out.rank))
    return ctx.op(L.BroadcastInDimOp, x, result=out, broadcast_dimensions=dims)


def _bounds(size: int, start: Any, end: Any) -> tuple[int, int]:
    """Python-style slice bounds, clamped (ATen's slice)."""
    s = 0 if start is None else start
    e = size if end is None or end == INT64_MAX else end
    s = s + size if s < 0 else s
    e = e + size if e < 0 else e
    s = min(max(s, 0), size)
    return s, min(max(e, s), size)


def slice_dim(ctx: Ctx, x: SSAValue, dim: int, start: int, end: int, step: int = 1
              ) -> SSAValue:
    info = info_of(x)
    if start == 0 and end == info.shape[dim] and step == 1:
        return x
    begin = [0] * info.rank
    limit = list(info.shape)
    strides = [1] * info.rank
    begin[dim], limit[dim], strides[dim] = start, end, step
    return ctx.op(L.SliceOp, x, start=begin, limit=limit,
                  strides=strides if step != 1 else None)


@aten("slice.Tensor", "slice_copy.Tensor")
def _slice(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    x = ctx.tensor(a["self"])
    info = info_of(x)
    dim = a["dim"] % info.rank
    if a["step"] < 1:
        ctx.refuse(ATTRIBUTE, f"step={a['step']}")
    s, e = _bounds(info.shape[dim], a["start"], a["end"])
    return slice_dim(ctx, x, dim, s, e, a["step"])


@aten("select.int", "select_copy.int")
def _select(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    x = ctx.tensor(a["self"])
    info = info_of(x)
    dim = a["dim"] % info.rank
    i = a["index"] + info.shape[dim] if a["index"] < 0 else a["index"]
    part = slice_dim(ctx, x, dim, i, i + 1)
    return ctx.op(L.ReshapeOp, part, result=ctx.out())


def _pieces(ctx: Ctx, x: SSAValue, dim: int, sizes: list[int]) -> tuple[SSAValue, ...]:
    out: list[SSAValue] = []
    offset = 0
    for n in sizes:
        out.append(slice_dim(ctx, x, dim, offset, offset + n))
        offset += n
    return tuple(out)


@aten("split.Tensor", "split_with_sizes.default", "chunk.default", "unbind.int",
      "split_copy.Tensor", "split_with_sizes_copy.default")
def _split(ctx: Ctx, a: dict[str, Any]) -> tuple[SSAValue | None, ...]:
    x = ctx.tensor(a["self"])
    info = info_of(x)
    dim = a["dim"] % info.rank
    n = info.shape[dim]
    name = str(ctx.node.target).split(".")[1]
    if name.startswith("split_with_sizes"):
        sizes = list(a["split_sizes"])
    elif name == "unbind":
        sizes = [1] * n
    else:
        step = a["split_size"] if "split_size" in a else -(-n // a["chunks"])
        sizes = [min(step, n - k) for k in range(0, n, step)] if n else [0]
    parts = _pieces(ctx, x, dim, sizes)
    if name == "unbind":
        return tuple(ctx.op(L.ReshapeOp, p, result=ctx.out(i)) for i, p in enumerate(parts))
    return parts


@aten("cat.default", "concat.default")
def _cat(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    dtype = ctx.out().dtype
    parts = [operand(ctx, t, dtype) for t in a["tensors"]]
    rank = ctx.out().rank
    parts = [p for p in parts if info_of(p).rank == rank]     # legacy empty 1-D tensors
    if len(parts) == 1:
        return parts[0]
    return ctx.op(L.ConcatOp, parts, dim=a["dim"] % rank)


@aten("stack.default")
def _stack(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    out = ctx.out()
    dim = a["dim"] % out.rank
    parts = []
    for t in a["tensors"]:
        v = operand(ctx, t, out.dtype)
        shape = info_of(v).shape
        parts.append(ctx.op(L.ReshapeOp, v, result=type(out)(shape[:dim] + (1,) + shape[dim:],
                                                                  out.dtype)))
    return parts[0] if len(parts) == 1 else ctx.op(L.ConcatOp, parts, dim=dim)


@aten("constant_pad_nd.default", "pad.default")
def _pad(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    """F.pad in constant mode (HF's label shift pads i64 labels with -100): `pad` lists (before,
    after) pairs from the last dim backwards; a negative entry crops, which is a `slice` first,
    then `pad` with the non-negative rest (torch allows both at once on different sides)."""
    if a.get("mode", "constant") != "constant":
        ctx.refuse(ATTRIBUTE, f"mode={a['mode']!r} (only constant padding is a Lamina row)")
    x = ctx.tensor(a["self"])
    info = info_of(x)
    pads = list(a["pad"])
    if len(pads) % 2 or len(pads) // 2 > info.rank:
        ctx.refuse(ATTRIBUTE, f"pad={pads} for an input of rank {info.rank}")
    low, high = [0] * info.rank, [0] * info.rank
    for k in range(len(pads) // 2):
        d = info.rank - 1 - k
        low[d], high[d] = int(pads[2 * k]), int(pads[2 * k + 1])
    value = a.get("value")
    value = 0.0 if value is None else float(value)
    if info.dtype in ("i32", "i64") and not value.is_integer():
        ctx.refuse(ATTRIBUTE, f"value={value} for an integer input")
    out = signed_pad(ctx, x, low, high, value)
    if out is None:
        ctx.refuse(ATTRIBUTE, f"pad={pads} crops more than the input's {info.shape}")
    return out
