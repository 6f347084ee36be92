"""ATen's convolutions: the non-overlapping patch convolution, as reshape + matmul.

conv2d (plain export) and convolution (what `run_decompositions()` leaves) with stride equal to
the kernel, padding 0, dilation 1 and groups 1, on a batched [N, C, H, W] or unbatched
[C, H, W] input, with or without bias: ViT's patch embedding. It is lowered onto the layout and
matmul rows (`lamina.frontends.patches`), not a convolution row of its own: that is exact, and
its gradient is the matmul's. Every other convolution (overlapping or padded windows, dilation,
groups, transposed, 1-D / 3-D) is one refusal naming what is not modeled.
"""

from __future__ import annotations

from typing import Any

from lamina.frontends.common import ATTRIBUTE, reshape
from lamina.frontends.patches import patch_conv, unmodeled
from lamina.frontends.torch.importer import Ctx
from lamina.frontends.torch.table import aten, float_result, operand
from lamina.ir.core.shapes import info_of
from xdsl.ir import SSAValue


def _ints(v: Any, n: int) -> list[int]:
    """An int-list argument as n ints (ATen accepts one int for every spatial dim)."""
    vs = [int(v)] if isinstance(v, int) else [int(x) for x in v]
    return vs * n if len(vs) == 1 else vs


def _check(ctx: Ctx, a: dict[str, Any], kernel: tuple[int, ...]) -> None:
    if a.get("transposed"):
        ctx.refuse(ATTRIBUTE, "a transposed convolution: only non-overlapping patch "
                   "convolutions are modeled")
    if len(kernel) != 2:
        ctx.refuse(ATTRIBUTE, f"a {len(kernel)}-D convolution (kernel {kernel}): only 2-D "
                   "non-overlapping patch convolutions are modeled")
    why = unmodeled("conv2d", kernel, _ints(a["stride"], 2), _ints(a["padding"], 2),
                    _ints(a["dilation"], 2), int(a["groups"]))
    if why is not None:
        ctx.refuse(ATTRIBUTE, why)


@aten("conv2d.default", "convolution.default")
def _conv(ctx: Ctx, a: dict[str, Any]) -> SSAValue:
    dtype = float_result(ctx)
    w = operand(ctx, a["weight"], dtype)
    _check(ctx, a, info_of(w).shape[2:])
    x = operand(ctx, a["input"], dtype)
    unbatched = info_of(x).rank == 3
    if unbatched:
        x = reshape(ctx, x, (1, *info_of(x).shape))
    bias = None if a["bias"] is None else operand(ctx, a["bias"], dtype)
    y = patch_conv(ctx, x, w, bias)
    return reshape(ctx, y, info_of(y).shape[1:]) if unbatched else y
