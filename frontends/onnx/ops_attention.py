"""ONNX's Attention (opset 23+) spelled with Lamina rows, as onnx's reference defines it.

    Y = softmax(softcap(Q s @ (K s)^T) + bias) @ V,   s = sqrt(scale) (default scale 1/sqrt(head))

- 3-D inputs [batch, seq, heads * head] are reshaped to [batch, heads, seq, head] (q_num_heads,
  kv_num_heads) and Y back;
- past_key / past_value are concatenated before K / V along the sequence (present_key /
  present_value outputs);
- bias: a boolean attn_mask is 0 where true and -inf where false, a float one is added as is
  (either padded with masked columns to the key length); is_causal adds -inf where key j > query
  i + offset (offset: the past length, or nonpad_kv_seqlen[b] - q_len per batch); the sliding
  window (left/right_window_size) and nonpad_kv_seqlen's padding mask add -inf likewise;
- grouped-query attention repeats each KV head q_heads / kv_heads times (interleaved);
- softcap c > 0 is c tanh(x / c); softmax_precision casts the logits for the softmax;
- a row whose bias is -inf everywhere (no key to attend) is 0;
- qk_matmul_output (mode 0, 1: the scaled and softcapped QK^T; 2: plus the bias; 3: the softmax).
"""

from __future__ import annotations

import math

from lamina.frontends.common import ATTRIBUTE, reshape
from lamina.frontends.onnx.graph import DTYPES, NodeCtx
from lamina.frontends.onnx.ops_shape import Out, onnx_op
from lamina.ir.core.shapes import TensorInfo, info_of
from lamina.ir.ops import lamina as L
from xdsl.ir import SSAValue


def _heads(ctx: NodeCtx, x: SSAValue, heads: int | None, what: str) -> SSAValue:
    """[b, s, h * d] -> [b, h, s, d] (4-D inputs pass)."""
    info = info_of(x)
    if info.rank == 4:
        return x
    if info.rank != 3 or not heads or info.shape[2] % heads:
        ctx.refuse(ATTRIBUTE, f"{what} of shape {info.shape} with {heads} heads")
    b, s, hidden = info.shape
    split = reshape(ctx, x, (b, s, heads, hidden // heads))
    return ctx.op(L.TransposeOp, split, permutation=[0, 2, 1, 3])


def _iotas(ctx: NodeCtx, rows: int, cols: int) -> tuple[SSAValue, SSAValue]:
    i = ctx.op(L.IotaOp, result=TensorInfo((rows, cols), "i64"), dim=0)
    j = ctx.op(L.IotaOp, result=TensorInfo((rows, cols), "i64"), dim=1)
    return i, j


def _where_allowed(ctx: NodeCtx, allowed: SSAValue, dtype: str) -> SSAValue:
    """0 where allowed, -inf elsewhere."""
    return ctx.op(L.SelectOp, allowed, ctx.const(0.0, dtype), ctx.const(-math.inf, dtype))


def _offset(ctx: NodeCtx, past: int, nonpad: SSAValue | None, q_len: int) -> SSAValue:
    """The causal frontier's shift: a scalar, or [batch, 1, 1, 1] from nonpad_kv_seqlen."""
    if nonpad is None or past:
        return ctx.const(past, "i64")
    n = ctx.cast(nonpad, "i64")
    shift = ctx.op(L.SubOp, n, ctx.const(q_len, "i64"))
    return reshape(ctx, shift, (info_of(n).shape[0], 1, 1, 1))


def _bias(ctx: NodeCtx, q_len: int, kv_len: int, past: int, dtype: str) -> SSAValue | None:
    """The additive mask, or None when nothing is masked."""
    mask = ctx.input(3)
    nonpad = ctx.value(6) if ctx.input(6) is not None else None
    bias: SSAValue | None = None
    if mask is not None:
        m = ctx.imp.materialize(mask)
        pad = kv_len - mask.info.shape[-1]
        if pad > 0:
            fill = ctx.const(False if mask.info.dtype == "i1" else -math.inf, mask.info.dtype)
            shape = mask.info.shape[:-1] + (pad,)
            filler = ctx.op(L.BroadcastInDimOp, fill, result=TensorInfo(shape, mask.info.dtype),
                            broadcast_dimensions=[])
            m = ctx.op(L.ConcatOp, [m, filler], dim=mask.info.rank - 1)
        bias = _where_allowed(ctx, m, dtype) if mask.info.dtype == "i1" else ctx.cast(m, dtype)
    left, right = ctx.attr("left_window_size", -1), ctx.attr("right_window_size", -1)
    if ctx.attr("is_causal", 0) or left >= 0 or right >= 0:
        i, j = _iotas(ctx, q_len, kv_len)
        frontier = ctx.op(L.AddOp, i, _offset(ctx, past, nonpad, q_len))   # i + offset
        diff = ctx.op(L.SubOp, frontier, j)                                 # (i + offset) - j
        terms = []
        if ctx.attr("is_causal", 0):
            terms.append(ctx.op(L.GeOp, diff, ctx.const(0, "i64")))
        if left >= 0:
            terms.append(ctx.op(L.LeOp, diff, ctx.const(left, "i64")))
        if right >= 0:
            terms.append(ctx.op(L.GeOp, diff, ctx.const(-right, "i64")))
        allowed = terms[0]
        for t in terms[1:]:
            allowed = ctx.op(L.SelectOp, allowed, t, ctx.const(False, "i1"))
        extra = _where_allowed(ctx, allowed, dtype)
        bias = extra if bias is None else ctx.op(L.AddOp, bias, extra)
    if nonpad is not None:
        _, j = _iotas(ctx, 1, kv_len)
        n = reshape(ctx, ctx.cast(nonpad, "i64"), (info_of(nonpad).shape[0], 1, 1, 1))
        pad_bias = _where_allowed(ctx, ctx.op(L.LtOp, j, n), dtype)
        bias = pad_bias if bias is None else ctx.op(L.AddOp, bias, pad_bias)
    return bias


def _repeat_heads(ctx: NodeCtx, x: SSAValue, reps: int) -> SSAValue:
    """[b, h, s, d] -> [b, h * reps, s, d], each head `reps` times in a row."""
    if reps == 1:
        return x
    b, h, s, d = info_of(x).shape
    wide = ctx.op(L.BroadcastInDimOp, x, result=TensorInfo((b, h, reps, s, d), info_of(x).dtype),
                  broadcast_dimensions=[0, 1, 3, 4])
    return reshape(ctx, wide, (b, h * reps, s, d))


@onnx_op("Attention")
def _attention(ctx: NodeCtx) -> Out:
    q_heads, kv_heads = ctx.attr("q_num_heads", None), ctx.attr("kv_num_heads", None)
    q = _heads(ctx, ctx.float_input(0), q_heads, "Q")
    k = _heads(ctx, ctx.float_input(1), kv_heads, "K")
    v = _heads(ctx, ctx.float_input(2), kv_heads, "V")
    dtype = info_of(q).dtype
    past = 0
    if ctx.input(4) is not None:
        past = ctx.info(4).shape[2]
        k = ctx.op(L.ConcatOp, [ctx.value(4), k], dim=2)
        v = ctx.op(L.ConcatOp, [ctx.value(5), v], dim=2)
    present_k, present_v = k, v
    qi, ki = info_of(q), info_of(k)
    scale = ctx.attr("scale", None)
    s = math.sqrt(scale if scale is not None else 1.0 / math.sqrt(qi.shape[3]))
    sc = ctx.const(s, dtype)
    reps = qi.shape[1] // ki.shape[1] if ki.shape[1] and qi.shape[1] % ki.shape[1] == 0 else 1
    k, v = _repeat_heads(ctx, k, reps), _repeat_heads(ctx, v, reps)
    kt = ctx.op(L.TransposeOp, ctx.op(L.MulOp, k, sc), permutation=[0, 1, 3, 2])
    logits = ctx.op(L.MatmulOp, ctx.op(L.MulOp, q, sc), kt)
    cap = ctx.attr("softcap", 0.0)
    if cap and cap > 0:
        c = ctx.const(cap, dtype)
        logits = ctx.op(L.MulOp, ctx.op(L.TanhOp, ctx.op(L.DivOp, logits, c)), c)
    bias = _bias(ctx, qi.shape[2], ki.shape[2], past, dtype)
    biased = logits if bias is None else ctx.op(L.AddOp, logits, bias)
    precision = ctx.attr("softmax_precision", None)
    soft_in = biased if precision is None else ctx.cast(biased, DTYPES.get(precision, dtype))
    p = ctx.op(L.SoftmaxOp, soft_in, axis=-1)
    if bias is not None:     # rows with no key to attend are 0 (decided on the bias)
        top = ctx.op(L.ReduceMaxOp, bias, axes=[info_of(bias).rank - 1], keepdims=True)
        empty = ctx.op(L.EqOp, top, ctx.const(-math.inf, dtype))
        p = ctx.op(L.SelectOp, empty, ctx.const(0.0, info_of(p).dtype), p)
    p = ctx.cast(p, dtype)
    y = ctx.op(L.MatmulOp, p, v)
    if ctx.info(0).rank == 3:
        b, h, sq, d = info_of(y).shape
        y = reshape(ctx, ctx.op(L.TransposeOp, y, permutation=[0, 2, 1, 3]), (b, sq, h * d))
    mode = ctx.attr("qk_matmul_output_mode", 0)
    qk = {0: logits, 1: logits, 2: biased, 3: p}.get(mode)
    if qk is None:
        ctx.refuse(ATTRIBUTE, f"qk_matmul_output_mode={mode}")
    return [y, present_k, present_v, ctx.cast(qk, dtype)][:len(ctx.node.output)]
