"""ATen's contractions, normalizations, softmax, dropout, reductions, lookups and losses.

- linear / addmm / mm / bmm / matmul: `matmul` (rank-1 operands reshaped as torch.matmul does),
  a `transpose` of linear's weight, the bias added after (addmm's beta and alpha as products).
- layer_norm / native_layer_norm: `layernorm` over the trailing normalized dims; the mean and
  rstd outputs of native_layer_norm are built only when something reads them.
- softmax / _softmax / log_softmax / _log_softmax: their rows (a dtype or half_to_float is a cast
  of the input first, which is how ATen computes them); _safe_softmax (0 on a row of only -inf,
  in graphs decomposed with its entry left out of the table) is `softmax` with `safe`.
- dropout / native_dropout: identity in eval, else `dropout` with a seed attribute: Lamina's mask
  is its own counter-based hash of (seed, element index), not torch's RNG stream, so a train-mode
  import computes the same distribution, not the same mask (native_dropout's mask output is
  `dropout(ones) != 0`, the mask Lamina applies).
- sum / mean / amax / amin over dims: the reduce rows (a sum of booleans, a count, in f64: exact).
- embedding / index_select / index.Tensor with one index tensor: `gather`.
- gather (take-along-dim): one index per row on floats as below; any other index shape or an
  integer input as one `gather` of the flattened input at i64 flat positions.
- cumsum: the `cumsum` row in the output's element type (the input cast to it first).
- gather with one index per row and the losses (cross_entropy_loss, nll_loss*): the picked element is
  sum over the class dim of select(iota == index, x, 0), exact since one term is non-zero;
  ignore_index masks, and the mean divides by the count of kept targets, as ATen does.
- scaled_dot_product_attention (and its CPU flash form): the attention it computes, spelled out
  (q k^T * scale, causal or given mask, safe softmax, @ v): the safe softmax is what gives a query
  with every key masked 0, as torch does, and it keeps the pattern fuse-attention fuses.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from lamina.frontends import common
from lamina.frontends.common import ATTRIBUTE, DTYPE, reshape
from lamina.frontends.torch.importer import Ctx
from lamina.frontends.torch.table import aten, float_result, operand
from lamina.ir.core.dtypes import FLOAT_TYPES
from lamina.ir.core.shapes import TensorInfo, info_of
from lamina.ir.ops import lamina as L
from xdsl.ir import SSAValue


def _transpose(ctx: Ctx, v: SSAValue, perm: list[int]) -> SSAValue:
    if perm == sorted(perm):
        return v
    return ctx.op(L.TransposeOp, v, permutation=perm)


def matmul(ctx: Ctx, x: SSAValue, y: SSAValue) -> SSAValue:
    """torch.matmul: numpy's (`common.matmul`), refused for a rank-0 operand as torch does."""
    if info_of(x).rank == 0 or info_of(y).rank == 0:
        ctx.refuse(ATTRIBUTE, "matmul of a rank-0 tensor")
    return common.matmul(ctx, x, y)


@aten("mm.default", "bmm.default", "matmul.default")
def _matmul(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    dtype = float_result(ctx)
    return matmul(ctx, operand(ctx, a["self"], dtype), operand(ctx, a["other"] if "other" in a
                                                                 else a["mat2"], dtype))


@aten("linear.default")
def _linear(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    dtype = float_result(ctx)
    w = operand(ctx, a["weight"], dtype)
    wt = _transpose(ctx, w, [1, 0]) if info_of(w).rank == 2 else w
    r = matmul(ctx, operand(ctx, a["input"], dtype), wt)
    if a["bias"] is not None:
        r = ctx.op(L.AddOp, r, operand(ctx, a["bias"], dtype))
    return r


@aten("addmm.default", "baddbmm.default")
def _addmm(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    """beta * self + alpha * (mat1 @ mat2)."""
    dtype = float_result(ctx)
    first, second = ("mat1", "mat2") if "mat1" in a else ("batch1", "batch2")
    r = ctx.op(L.MatmulOp, operand(ctx, a[first], dtype), operand(ctx, a[second], dtype))
    if a["alpha"] != 1:
        r = ctx.op(L.MulOp, r, ctx.const(a["alpha"], dtype))
    bias = operand(ctx, a["self"], dtype)
    if a["beta"] == 0:
        return r
    if a["beta"] != 1:
        bias = ctx.op(L.MulOp, bias, ctx.const(a["beta"], dtype))
    return ctx.op(L.AddOp, r, bias)


# ---- normalization and softmax ---------------------------------------------------------------

def _layer_norm(ctx: Ctx, a: dict[str, Any]) -> tuple[SSAValue, int, float]:
    dtype = float_result(ctx) if str(ctx.node.target) == "aten.layer_norm.default" else \
        ctx.out(0).dtype
    x = operand(ctx, a["input"], dtype)
    axis = info_of(x).rank - len(a["normalized_shape"])
    eps = float(a["eps"] if a["eps"] is not None else 1e-5)
    w = None if a["weight"] is None else operand(ctx, a["weight"], dtype)
    b = None if a.get("bias") is None else operand(ctx, a["bias"], dtype)
    return ctx.op(L.LayernormOp, x, w, b, axis=axis, eps=eps), axis, eps


@aten("layer_norm.default")
def _layer_norm_conv(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    return _layer_norm(ctx, a)[0]


@aten("native_layer_norm.default")
def _native_layer_norm(ctx: Ctx, a: dict[str, Any]) -> tuple[SSAValue | None, ...]:
    """(y, mean, rstd); mean = mean(x), rstd = rsqrt(mean((x - mean)^2) + eps) over the
    normalized dims, kept as size-1 dims, built only when read."""
    y, axis, eps = _layer_norm(ctx, a)
    if not (ctx.nth_used(1) or ctx.nth_used(2)):
        return y, None, None
    x = operand(ctx, a["input"], info_of(y).dtype)
    axes = list(range(axis, info_of(x).rank))
    mean = ctx.op(L.ReduceMeanOp, x, axes=axes, keepdims=True)
    centered = ctx.op(L.SubOp, x, mean)
    var = ctx.op(L.ReduceMeanOp, ctx.op(L.MulOp, centered, centered), axes=axes, keepdims=True)
    rstd = ctx.op(L.RsqrtOp, ctx.op(L.AddOp, var, ctx.const(eps, info_of(var).dtype)))
    return y, ctx.cast(mean, ctx.out(1).dtype), ctx.cast(rstd, ctx.out(2).dtype)


@aten("rms_norm.default")
def _rms_norm(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    dtype = float_result(ctx)
    x = operand(ctx, a["input"], dtype)
    w = None if a["weight"] is None else operand(ctx, a["weight"], dtype)
    return ctx.op(L.RmsnormOp, x, w, axis=info_of(x).rank - len(a["normalized_shape"]),
                  eps=rms_norm_eps(a["eps"], dtype))


def rms_norm_eps(eps: float | None, dtype: str) -> float:
    """The epsilon `rms_norm` adds: the one given, else torch's rule for `eps=None` (the default
    of `nn.RMSNorm`): the machine epsilon of the type torch computes in, float64's for f64 and
    float32's for f32, f16 and bf16 (which torch upcasts; not the narrow type's own epsilon,
    which is 2**-7 for bf16 and would change every small-norm row)."""
    if eps is not None:
        return float(eps)
    return float(torch.finfo(torch.float64 if dtype == "f64" else torch.float32).eps)


@aten("softmax.int", "_softmax.default", "log_softmax.int", "_log_softmax.default")
def _softmax(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    cls = L.LogSoftmaxOp if "log_softmax" in str(ctx.node.target) else L.SoftmaxOp
    x = operand(ctx, a["self"], float_result(ctx))
    return ctx.op(cls, x, axis=a["dim"])


@aten("_safe_softmax.default")
def _safe_softmax(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    """softmax, 0 on a row of only -inf; its dtype is a cast of the input first, as for softmax."""
    x = operand(ctx, a["self"], float_result(ctx))
    return ctx.op(L.SoftmaxOp, x, axis=a["dim"], safe=True)


@aten("dropout.default", "native_dropout.default")
def _dropout(ctx: Ctx, a: dict[str, Any]) -> SSAValue | tuple[SSAValue | None, ...]:
    native = str(ctx.node.target).startswith("aten.native_dropout")
    x = ctx.tensor(a["input"])
    p, train = float(a["p"]), a["train"] is not False
    if native:
        y = x if not train or p == 0 else _dropout_op(ctx, x, p)
        if not ctx.nth_used(1):
            return y, None
        ones = ctx.const(1.0, info_of(x).dtype)
        full = ctx.op(L.BroadcastInDimOp, ones, result=info_of(x), broadcast_dimensions=[])
        kept = full if not train or p == 0 else _dropout_op(ctx, full, p)
        return y, ctx.op(L.NeOp, kept, ctx.const(0.0, info_of(x).dtype))
    return x if not train or p == 0 else _dropout_op(ctx, x, p)


def _dropout_op(ctx: Ctx, x: SSAValue, p: float) -> SSAValue:
    if not 0 <= p < 1:
        ctx.refuse(ATTRIBUTE, f"p={p} (Lamina's dropout rate is in [0, 1))")
    return ctx.op(L.DropoutOp, x, None, rate=p, seed=ctx.next_seed())


# ---- reductions ------------------------------------------------------------------------------

def _reduce(ctx: Ctx, cls: Any, x: SSAValue, dims: Any, keepdim: bool) -> SSAValue:
    info = info_of(x)
    axes = list(range(info.rank)) if dims is None or list(dims) == [] else \
        [d % info.rank for d in dims]
    if info.rank == 0:
        return x
    return ctx.op(cls, x, axes=axes, keepdims=bool(keepdim))


@aten("sum.dim_IntList", "sum.default", "mean.dim", "mean.default", "amax.default",
      "amin.default", "max.default", "min.default")
def _reduction(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    name = str(ctx.node.target).split(".")[1]
    out = ctx.out()
    x = ctx.tensor(a["self"])
    src = info_of(x).dtype
    dims, keep = a.get("dim"), a.get("keepdim") or False
    if name == "sum" and src == "i1" and out.dtype in ("i32", "i64"):
        total = _reduce(ctx, L.ReduceSumOp, ctx.cast(x, "f64"), dims, keep)
        return ctx.cast(total, out.dtype)       # a count: exact in f64
    dtype = float_result(ctx)
    x = ctx.cast(x, dtype)
    if name in ("amin", "min"):
        neg = _reduce(ctx, L.ReduceMaxOp, ctx.op(L.NegOp, x), dims, keep)
        return ctx.op(L.NegOp, neg)
    cls = {"sum": L.ReduceSumOp, "mean": L.ReduceMeanOp, "amax": L.ReduceMaxOp,
           "max": L.ReduceMaxOp}[name]
    return _reduce(ctx, cls, x, dims, keep)


# ---- lookups and losses ----------------------------------------------------------------------

@aten("any.dim", "any.dims", "any.default", "all.dim", "all.dims", "all.default")
def _any_all(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    """any: max of the booleans as f32 is 1; all: not any(not x) (exact)."""
    x = ctx.tensor(a["self"])
    every = str(ctx.node.target).startswith("aten.all")
    b = x if info_of(x).dtype == "i1" else ctx.op(L.NeOp, x, ctx.const(0, info_of(x).dtype))
    if every:
        b = ctx.op(L.EqOp, b, ctx.const(False, "i1"))
    dims = a.get("dim")
    dims = [dims] if isinstance(dims, int) else dims
    top = _reduce(ctx, L.ReduceMaxOp, ctx.cast(b, "f32"), dims, a.get("keepdim") or False)
    hit = ctx.op(L.NeOp, top, ctx.const(0.0, "f32"))
    return ctx.op(L.EqOp, hit, ctx.const(False, "i1")) if every else hit


@aten("embedding.default")
def _embedding(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    """weight[indices] (padding_idx and scale_grad_by_freq change only gradients)."""
    return ctx.op(L.GatherOp, ctx.tensor(a["weight"]), ctx.tensor(a["indices"]), axis=0)


@aten("index_select.default")
def _index_select(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    return ctx.op(L.GatherOp, ctx.tensor(a["self"]), ctx.tensor(a["index"]), axis=a["dim"])


@aten("index.Tensor")
def _index(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    """x[i0, i1, ...] with index tensors at some dims (None at the others): one index tensor is
    one `gather` along its dim; several broadcast together to a grid B and index the flattened
    product of their dims, as NumPy's (and torch's) advanced indexing does: B takes the indexed
    dims' place when they are adjacent, else it goes first."""
    present = [i for i, t in enumerate(a["indices"]) if t is not None]
    for i in present:
        if info_of(ctx.tensor(a["indices"][i])).dtype not in ("i32", "i64"):
            ctx.refuse(DTYPE, "boolean-mask indexing (its result shape depends on the data)")
    x = ctx.tensor(a["self"])
    if len(present) == 1:
        return ctx.op(L.GatherOp, x, ctx.tensor(a["indices"][present[0]]), axis=present[0])
    return _index_grid(ctx, x, present, [ctx.tensor(a["indices"][i]) for i in present])


def _index_grid(ctx: Ctx, x: SSAValue, dims: list[int], indices: list[SSAValue]) -> SSAValue:
    """x indexed at `dims` by `indices` (broadcast together): the dims moved together (in
    place when adjacent, else to the front), merged into one, and gathered at the flat position
    sum(index_k * stride_k), in i64. A negative index counts from the end, as in torch; one
    outside [-n, n) (where torch raises) gets the position past the end, which reads 0."""
    xi = info_of(x)
    grid = tuple(np.broadcast_shapes(*(info_of(i).shape for i in indices)))
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    at = dims[0] if adjacent else 0
    rest = [d for d in range(xi.rank) if d not in dims]
    perm = rest[:at] + dims + rest[at:]
    moved = _transpose(ctx, x, perm) if perm != list(range(xi.rank)) else x
    sizes = [xi.shape[d] for d in dims]
    merged = math.prod(sizes)
    shape = [xi.shape[d] for d in perm]
    flat_x = reshape(ctx, moved, (*shape[:at], merged, *shape[at + len(dims):]))
    flat: SSAValue | None = None
    inside: SSAValue | None = None
    stride = merged
    for idx, n in zip(indices, sizes, strict=True):
        stride //= n
        i = _broadcast_to(ctx, ctx.cast(idx, "i64"), grid)
        i = ctx.op(L.SelectOp, ctx.op(L.LtOp, i, ctx.const(0, "i64")),
                   ctx.op(L.AddOp, i, ctx.const(n, "i64")), i)
        ok = ctx.op(L.SelectOp, ctx.op(L.GeOp, i, ctx.const(0, "i64")),
                    ctx.op(L.LtOp, i, ctx.const(n, "i64")), ctx.const(False, "i1"))
        inside = ok if inside is None else ctx.op(L.SelectOp, inside, ok, ctx.const(False, "i1"))
        term = i if stride == 1 else ctx.op(L.MulOp, i, ctx.const(stride, "i64"))
        flat = term if flat is None else ctx.op(L.AddOp, flat, term)
    assert flat is not None and inside is not None
    flat = ctx.op(L.SelectOp, inside, flat, ctx.const(merged, "i64"))
    return ctx.op(L.GatherOp, flat_x, flat, axis=at)


def _broadcast_to(ctx: Ctx, v: SSAValue, shape: tuple[int, ...]) -> SSAValue:
    """`v` broadcast to `shape` (NumPy's rule: trailing dims aligned, size-1 dims repeated)."""
    vi = info_of(v)
    if vi.shape == shape:
        return v
    return ctx.op(L.BroadcastInDimOp, v, result=TensorInfo(shape, vi.dtype),
                  broadcast_dimensions=list(range(len(shape) - vi.rank, len(shape))))


def pick(ctx: Ctx, x: SSAValue, index: SSAValue, dim: int) -> SSAValue:
    """x[..., index[...], ...] along `dim` where index has x's shape with 1 at `dim`:
    sum over dim of select(iota == index, x, 0), kept dim dropped."""
    xi, ii = info_of(x), info_of(index)
    iota = ctx.op(L.IotaOp, result=TensorInfo(xi.shape, ii.dtype), dim=dim)
    hit = ctx.op(L.EqOp, iota, index)
    picked = ctx.op(L.SelectOp, hit, x, ctx.const(0, xi.dtype))
    return ctx.op(L.ReduceSumOp, picked, axes=[dim], keepdims=False)


def _take_along(ctx: Ctx, x: SSAValue, idx: SSAValue, dim: int) -> SSAValue:
    """out[i..., j, k...] = x[i..., idx[i..., j, k...], k...] as one `gather` of the flattened
    input: the flat position is sum over dims of coordinate * stride, with idx's value as the
    coordinate along `dim`, in i64 (exact). An index outside [0, n) (where torch raises) gets
    the flat position numel, which `gather` reads as 0, so it never picks a neighbour row."""
    xi, ii = info_of(x), info_of(idx)
    n, numel = xi.shape[dim], math.prod(xi.shape)
    i = ctx.cast(idx, "i64")
    inside = ctx.op(L.SelectOp, ctx.op(L.GeOp, i, ctx.const(0, "i64")),
                    ctx.op(L.LtOp, i, ctx.const(n, "i64")), ctx.const(False, "i1"))
    flat: SSAValue | None = None
    stride = 1
    for d in reversed(range(xi.rank)):
        coord = i if d == dim else ctx.op(L.IotaOp, result=TensorInfo(ii.shape, "i64"), dim=d)
        term = coord if stride == 1 else ctx.op(L.MulOp, coord, ctx.const(stride, "i64"))
        flat = term if flat is None else ctx.op(L.AddOp, flat, term)
        stride *= xi.shape[d]
    assert flat is not None
    flat = ctx.op(L.SelectOp, inside, flat, ctx.const(numel, "i64"))
    return ctx.op(L.GatherOp, reshape(ctx, x, (numel,)), flat, axis=0)


@aten("gather.default")
def _gather(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    """torch.gather (take along dim). One index per row on floats is `pick` (a sum of one
    non-zero term, which fuses); any other index shape, and integer inputs (BERT's
    token_type_ids buffer), one `gather` of the flattened input (`_take_along`)."""
    out = ctx.out()
    x = operand(ctx, a["self"], out.dtype)
    idx = ctx.tensor(a["index"])
    xi, ii = info_of(x), info_of(idx)
    if xi.rank == 0 or ii.rank != xi.rank:
        ctx.refuse(ATTRIBUTE, f"index of rank {ii.rank} for an input of rank {xi.rank}")
    dim = a["dim"] % xi.rank
    if any(ii.shape[d] > xi.shape[d] for d in range(xi.rank) if d != dim):
        ctx.refuse(ATTRIBUTE, f"index shape {ii.shape} exceeds the input's {xi.shape} outside dim")
    one_per_row = ii.shape[dim] == 1 and all(
        ii.shape[d] == xi.shape[d] for d in range(xi.rank) if d != dim)
    if one_per_row and out.dtype in FLOAT_TYPES:
        return reshape(ctx, pick(ctx, x, idx, dim), ii.shape)
    return _take_along(ctx, x, idx, dim)


@aten("cumsum.default")
def _cumsum(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    """`cumsum` in the output's element type (torch sums booleans and integers in i64, or in
    `dtype=`): the input cast to it first, as ATen does."""
    x = ctx.cast(ctx.tensor(a["self"]), ctx.out().dtype)
    rank = info_of(x).rank
    if rank == 0:
        return x
    return ctx.op(L.CumsumOp, x, axis=a["dim"] % rank)


def _nll(ctx: Ctx, logp: SSAValue, target: SSAValue, reduction: int, ignore: int
         ) -> tuple[SSAValue, SSAValue]:
    """(loss, total weight) of ATen's nll_loss with no class weights."""
    li, ti = info_of(logp), info_of(target)
    cdim = 1 if li.rank >= 2 else 0
    if ti.dtype not in ("i32", "i64"):
        ctx.refuse(DTYPE, "class-probability targets (only class indices are mapped)")
    index = reshape(ctx, target, ti.shape[:cdim] + (1,) + ti.shape[cdim:])
    picked = pick(ctx, logp, index, cdim)
    kept = ctx.op(L.NeOp, target, ctx.const(ignore, ti.dtype))
    loss = ctx.op(L.SelectOp, kept, ctx.op(L.NegOp, picked), ctx.const(0, li.dtype))
    count = _reduce(ctx, L.ReduceSumOp, ctx.cast(kept, li.dtype), None, False)
    if reduction == 0:
        return loss, count
    total = _reduce(ctx, L.ReduceSumOp, loss, None, False)
    if reduction == 2:
        return total, count
    return ctx.op(L.DivOp, total, count), count


def _check_loss(ctx: Ctx, a: dict[str, Any]) -> None:
    if a.get("weight") is not None:
        ctx.refuse(ATTRIBUTE, "class weights")
    if a.get("label_smoothing"):
        ctx.refuse(ATTRIBUTE, f"label_smoothing={a['label_smoothing']}")
    if a["reduction"] not in (0, 1, 2):
        ctx.refuse(ATTRIBUTE, f"reduction={a['reduction']}")


@aten("cross_entropy_loss.default")
def _cross_entropy(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    _check_loss(ctx, a)
    x = operand(ctx, a["self"], float_result(ctx))
    logp = ctx.op(L.LogSoftmaxOp, x, axis=1 if info_of(x).rank >= 2 else 0)
    return _nll(ctx, logp, ctx.tensor(a["target"]), a["reduction"], a["ignore_index"])[0]


@aten("nll_loss.default", "nll_loss_nd.default", "nll_loss_forward.default")
def _nll_loss(ctx: Ctx, a: dict[str, Any]) -> SSAValue | tuple[SSAValue | None, ...]:
    _check_loss(ctx, a)
    forward = str(ctx.node.target).startswith("aten.nll_loss_forward")
    dtype = ctx.out(0).dtype if forward else float_result(ctx)
    loss, count = _nll(ctx, operand(ctx, a["self"], dtype), ctx.tensor(a["target"]),
                       a["reduction"], a["ignore_index"])
    return (loss, count) if forward else loss


@aten("scaled_dot_product_attention.default",
      "_scaled_dot_product_flash_attention_for_cpu.default")
def _attention(ctx: Ctx, a: dict[str, Any]) -> SSAValue | tuple[SSAValue | None, ...]:
    flash = str(ctx.node.target).startswith("aten._scaled")
    dtype = ctx.out(0).dtype if flash else float_result(ctx)
    q, k, v = (operand(ctx, a[n], dtype) for n in ("query", "key", "value"))
    if a.get("enable_gqa"):
        ctx.refuse(ATTRIBUTE, "enable_gqa=True")
    qi, ki = info_of(q), info_of(k)
    scale = a["scale"] if a["scale"] is not None else 1.0 / math.sqrt(qi.shape[-1])
    perm = list(range(ki.rank - 2)) + [ki.rank - 1, ki.rank - 2]
    s = ctx.op(L.MulOp, ctx.op(L.MatmulOp, q, _transpose(ctx, k, perm)), ctx.const(scale, dtype))
    rows, cols = qi.shape[-2], ki.shape[-2]
    if a["is_causal"]:
        i = ctx.op(L.IotaOp, result=TensorInfo((rows, cols), "i64"), dim=0)
        j = ctx.op(L.IotaOp, result=TensorInfo((rows, cols), "i64"), dim=1)
        s = ctx.op(L.SelectOp, ctx.op(L.LeOp, j, i), s, ctx.const(-math.inf, dtype))
    mask = a["attn_mask"]
    if mask is not None:
        m = ctx.tensor(mask)
        s = ctx.op(L.SelectOp, m, s, ctx.const(-math.inf, dtype)) if info_of(m).dtype == "i1" \
            else ctx.op(L.AddOp, s, ctx.cast(m, dtype))
    p = ctx.op(L.SoftmaxOp, s, axis=-1, safe=True)   # torch's math path: `_safe_softmax`
    if a["dropout_p"]:
        p = _dropout_op(ctx, p, float(a["dropout_p"]))
    out = ctx.op(L.MatmulOp, p, v)
    return (out, None) if flash else out
