"""Patch convolutions (ViT's patch embedding) as reshape + matmul, shared by both importers.

Lamina has no convolution row. The convolution a vision transformer starts with is a special
case that needs none: with stride equal to the kernel, no padding, dilation 1 and one group, the
patches do not overlap, so the convolution is a matmul of every patch (flattened C x kh x kw)
with the weight (flattened the same way), which is exact and reuses the matmul row's VJP,
sharding and fusion rules. Rows and columns a whole patch does not cover are dropped, as the
convolution's floor((H - kh) / kh) + 1 output size does. Every other convolution (overlapping,
padded, dilated, grouped, transposed, not 2-D) is refused by the importer, naming
what is not modeled (`unmodeled`).
"""

from __future__ import annotations

from collections.abc import Sequence

from lamina.frontends.common import Emitter, reshape
from lamina.ir.core.shapes import info_of
from lamina.ir.ops.lamina import AddOp, MatmulOp, SliceOp, TransposeOp
from xdsl.ir import SSAValue

MODELED = ("only non-overlapping patch convolutions (stride = kernel, padding 0, dilation 1, "
           "groups 1) are modeled")
TORCH_NAMES = ("kernel", "stride", "padding", "dilation", "groups")


def _ints(name: str, v: Sequence[int]) -> str:
    return f"{name} ({', '.join(str(int(x)) for x in v)})"


def unmodeled(op: str, kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int],
              dilation: Sequence[int], groups: int, names: Sequence[str] = TORCH_NAMES
              ) -> str | None:
    """Why this convolution is not a patch convolution, as a refusal message naming the
    attributes in the frontend's own words (`names`: kernel, stride, padding, dilation, groups),
    or None when it is one."""
    k, s, p, d, g = names
    off = []
    if list(stride) != list(kernel):
        off.append(_ints(s, stride))
    if any(padding):
        off.append(_ints(p, padding))
    if any(x != 1 for x in dilation):
        off.append(_ints(d, dilation))
    if groups != 1:
        off.append(f"{g} {groups}")
    if not off:
        return None
    return f"{op} with {', '.join(off)} and {_ints(k, kernel)}: {MODELED}"


def _permute(ctx: Emitter, v: SSAValue, perm: list[int]) -> SSAValue:
    return ctx.op(TransposeOp, v, permutation=perm)


def patch_conv(ctx: Emitter, x: SSAValue, w: SSAValue, bias: SSAValue | None) -> SSAValue:
    """conv2d(x, w, bias) with stride = kernel, for x [N, C, H, W] and w [O, C, kh, kw]:
    the patches [N*Ho*Wo, C*kh*kw] @ w as [C*kh*kw, O] (+ bias), back to [N, O, Ho, Wo]."""
    n, c, h, wd = info_of(x).shape
    o, _, kh, kw = info_of(w).shape
    ho, wo = h // kh, wd // kw
    if (ho * kh, wo * kw) != (h, wd):      # the remainder no whole patch covers
        x = ctx.op(SliceOp, x, start=[0, 0, 0, 0], limit=[n, c, ho * kh, wo * kw])
    grid = reshape(ctx, x, (n, c, ho, kh, wo, kw))
    rows = reshape(ctx, _permute(ctx, grid, [0, 2, 4, 1, 3, 5]), (n * ho * wo, c * kh * kw))
    cols = _permute(ctx, reshape(ctx, w, (o, c * kh * kw)), [1, 0])
    y = ctx.op(MatmulOp, rows, cols)
    if bias is not None:
        y = ctx.op(AddOp, y, bias)
    return _permute(ctx, reshape(ctx, y, (n, ho, wo, o)), [0, 3, 1, 2])


__all__ = ["MODELED", "TORCH_NAMES", "patch_conv", "unmodeled"]
