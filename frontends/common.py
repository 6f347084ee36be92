"""What both importers share: refusals, argument names, and building the one function they emit.

A refusal (`ImportRefused`) is a `LaminaError` with a `kind` (what is missing: an op, an attribute
value, an element type, a dynamic shape, control flow, or the input itself) so that the ONNX
conformance report can group cases by it; its location is the model file (or the Python line a
torch node came from) and its message names the node.

`FunctionBuilder` collects arguments (named: MLIR value names allow `[A-Za-z0-9_$.-]`, so a
parameter's fully qualified name `blocks.0.attn.weight` is kept as written; a name outside that
alphabet, or one ending in `_<digits>`, which xDSL's printer reserves for its own numbering, is
spelled with those characters replaced and a trailing `_`), then makes the function, its module,
and verifies it with Lamina's verifier.

`reshape` and `matmul` are the two lowerings whose semantics ONNX and ATen share exactly (numpy's
matmul: a rank-1 operand is a row or column, dropped again from the result); they build through
any `Emitter` (either importer's context), so each importer's diagnostics stay its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

from lamina.ir.builder import Builder
from lamina.ir.core.diagnostics import LaminaError, Note, SourceLoc
from lamina.ir.core.dtypes import tensor_type
from lamina.ir.core.shapes import TensorInfo, info_of
from lamina.ir.ops.lamina import MatmulOp, PadOp, ReshapeOp, SliceOp
from lamina.ir.text.source import verify
from xdsl.dialects.builtin import FunctionType, ModuleOp
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Region, SSAValue

# refusal kinds (the conformance report's groups)
OP = "unsupported op"
ATTRIBUTE = "unsupported attribute"
DTYPE = "unsupported dtype"
DYNAMIC = "dynamic shape"
CONTROL_FLOW = "control flow"
INPUT = "bad input"
KINDS = (OP, ATTRIBUTE, DTYPE, DYNAMIC, CONTROL_FLOW, INPUT)


class ImportRefused(LaminaError):
    """A model an importer cannot map exactly; `kind` is one of `KINDS`, `op` the refused node's
    op type or ATen target when a node is to blame."""

    def __init__(self, message: str, kind: str, loc: SourceLoc | None = None,
                 op: str | None = None, notes: Sequence[str | Note] = ()) -> None:
        super().__init__(message, loc, notes)
        self.kind = kind
        self.op = op


_NAME = re.compile(r"[A-Za-z_$.-][\w$.-]*")
_NUMBERED = re.compile(r"_\d+$")


def value_name(name: str) -> str:
    """`name` as an MLIR value name that prints back verbatim (see the module docstring)."""
    if _NAME.fullmatch(name) and not _NUMBERED.search(name):
        return name
    out = re.sub(r"[^\w$.-]", "_", name) or "_"
    if not re.match(r"[A-Za-z_$.-]", out):
        out = "_" + out
    return out + "_" if _NUMBERED.search(out) else out


class FunctionBuilder:
    """One function being imported: arguments by name, a `Builder` for its body, `finish`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.block = Block()
        self.builder = Builder(self.block)
        self.arg_names: list[str] = []

    def argument(self, name: str, info: TensorInfo) -> SSAValue:
        """A new argument of type `info` named after `name` (made unique: `x`, `x.1`, ...)."""
        base = value_name(name)
        unique, k = base, 0
        taken = set(self.arg_names)
        while unique in taken:
            k += 1
            unique = f"{base}.{k}"
        arg = self.block.insert_arg(tensor_type(info.shape, info.dtype), len(self.block.args))
        arg.name_hint = unique
        self.arg_names.append(unique)
        return arg

    def finish(self, results: Sequence[SSAValue]) -> ModuleOp:
        """The verified module holding the function that returns `results`."""
        self.block.add_op(ReturnOp(*results))
        ftype = FunctionType.from_lists([a.type for a in self.block.args],
                                        [r.type for r in results])
        func = FuncOp(self.name, ftype, Region(self.block))
        module = ModuleOp([func])
        verify(module)
        return module


class Emitter(Protocol):
    """What the shared lowerings build through: an importer's context, whose `op` turns a shape
    rule's refusal into that importer's diagnostic for the node being converted."""

    def op(self, cls: Any, *operands: Any, result: TensorInfo | None = None,
           **attrs: Any) -> SSAValue: ...


def reshape(ctx: Emitter, v: SSAValue, shape: Sequence[int]) -> SSAValue:
    """`v` as `shape` (`v` itself when it has that shape already)."""
    info = info_of(v)
    if info.shape == tuple(shape):
        return v
    return ctx.op(ReshapeOp, v, result=TensorInfo(tuple(shape), info.dtype))


def signed_pad(ctx: Emitter, x: SSAValue, low: Sequence[int], high: Sequence[int],
               value: float) -> SSAValue | None:
    """`x` with `low[d]` / `high[d]` elements added before / after dim d (ONNX Pad, torch's
    F.pad in constant mode): a negative amount crops, which is one `slice` first, then one `pad`
    row with the non-negative rest (both importers allow both at once on different sides). None
    when the crops take more than the input has, for the caller to refuse in its own words."""
    info = info_of(x)
    start = [max(-lo, 0) for lo in low]
    limit = [n - max(-hi, 0) for n, hi in zip(info.shape, high, strict=True)]
    if any(s > e for s, e in zip(start, limit, strict=True)):
        return None
    if start != [0] * info.rank or tuple(limit) != info.shape:
        x = ctx.op(SliceOp, x, start=start, limit=limit)
    low, high = [max(p, 0) for p in low], [max(p, 0) for p in high]
    if not any(low) and not any(high):
        return x
    return ctx.op(PadOp, x, low=low, high=high, value=value)


def matmul(ctx: Emitter, x: SSAValue, y: SSAValue) -> SSAValue:
    """numpy.matmul (ONNX MatMul, torch.matmul): a rank-1 `x` is a row and a rank-1 `y` a column
    for `lamina.matmul`, and that dim is dropped from the result again."""
    a, b = info_of(x), info_of(y)
    xm = reshape(ctx, x, (1, a.shape[0])) if a.rank == 1 else x
    ym = reshape(ctx, y, (b.shape[0], 1)) if b.rank == 1 else y
    r = ctx.op(MatmulOp, xm, ym)
    shape = info_of(r).shape
    if a.rank == 1:
        shape = shape[:-2] + shape[-1:]
    if b.rank == 1:
        shape = shape[:-1]
    return reshape(ctx, r, shape)
