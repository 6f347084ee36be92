"""An independent evaluator of Lamina functions in PyTorch, for gradients by torch.autograd.

`evaluate(func, inputs, wrt, upcast)` runs every op of `func` with PyTorch's own operators (named
here by op, as a reference must: it shares no code with Lamina's formulas or VJP rules) and returns
the argument tensors (those in `wrt` require grad) and the result tensors, so tests can compare
`torch.autograd.grad` with a derived gradient function. The one shared definition is dropout's
keep mask, which Lamina defines as a function of (seed, global index) in `lamina.ir.ops.rng`: the mask
is computed by that definition and applied as a constant, so the reference checks the VJP of
"multiply by the mask" independently. `upcast=D` computes the values of element type D in float64
(the reference for a D program); values of other types (a cast to bf16 inside an f32 program)
keep their own type, so the reference computes the program's own rounding there.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from lamina.ir.buffers.memory import FreeOp, MoveOp
from lamina.ir.core.shapes import TensorInfo
from lamina.ir.mesh.collectives import PlacementOp
from lamina.ir.ops import formulas as fm
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import SSAValue

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32,
          "f64": torch.float64, "i1": torch.bool, "i32": torch.int32, "i64": torch.int64}
FLOATS = ("f16", "bf16", "f32", "f64")

UNARY = {"neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log,
         "tanh": torch.tanh, "sin": torch.sin, "cos": torch.cos, "sigmoid": torch.sigmoid, "relu": torch.relu, "erf": torch.erf,
         "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal}
BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
          "max": torch.maximum, "min": torch.minimum, "pow": torch.pow,
          "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt,
          "ge": torch.ge}


Upcast = str | None   # the element type computed in float64, or None


def torch_dtype(dtype: str, upcast: Upcast) -> torch.dtype:
    return torch.float64 if dtype == upcast else DTYPES[dtype]


def to_torch(a: np.ndarray, dtype: str, upcast: Upcast) -> torch.Tensor:
    """A Lamina storage array as a tensor of the element type (bf16 is stored in float32)."""
    return torch.from_numpy(np.array(a, copy=True)).to(torch_dtype(dtype, upcast))


def _present(t: torch.Tensor | None) -> torch.Tensor:
    assert t is not None
    return t


def _broadcast_in_dim(x: torch.Tensor, dims: Sequence[int], shape: Sequence[int]) -> torch.Tensor:
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    xt = x.permute(order) if order else x
    sizes = dict(zip(sorted(dims), xt.shape, strict=True))
    return xt.reshape([sizes.get(d, 1) for d in range(len(shape))]).expand(list(shape))


def _dropout(x: torch.Tensor, seed: torch.Tensor | None, attrs: dict, info: TensorInfo
             ) -> torch.Tensor:
    seed_arr = None if seed is None else np.asarray(seed.detach().numpy())
    ones = np.ones(info.shape, dtype=np.float64)
    call = fm.Call(dict(attrs), [info], info)
    mask = fm.dropout(np, [ones, seed_arr], call)
    return x * torch.from_numpy(np.asarray(mask)).to(x.dtype)


def _structural(op: LaminaOp, xs: list[torch.Tensor | None], attrs: dict, res: TensorInfo,
                upcast: Upcast) -> torch.Tensor:
    name = op.info.name
    x = xs[0] if xs else None
    if name == "constant":
        lit = attrs["value"]
        return to_torch(lit.materialize(), lit.dtype, upcast)
    if name == "iota":
        dim = attrs["dim"]
        line = torch.arange(res.shape[dim], dtype=torch_dtype(res.dtype, upcast))
        view = [1] * len(res.shape)
        view[dim] = res.shape[dim]
        return line.reshape(view).expand(res.shape).clone()
    assert x is not None
    if name in ("reduce_sum", "reduce_mean", "reduce_max"):
        axes = [a % x.dim() for a in attrs["axes"]]
        fn = {"reduce_sum": torch.sum, "reduce_mean": torch.mean, "reduce_max": torch.amax}[name]
        return fn(x, dim=axes, keepdim=bool(attrs["keepdims"]))
    if name in ("layernorm", "rmsnorm"):
        shape = list(x.shape[attrs["axis"] % x.dim():])
        if name == "layernorm":
            return F.layer_norm(x, shape, xs[1], xs[2], attrs["eps"])
        return F.rms_norm(x, shape, xs[1], attrs["eps"])
    if name == "softmax":   # safe: torch's own `_safe_softmax`, 0 on a line of only -inf
        if attrs["safe"]:
            return torch.ops.aten._safe_softmax(x, attrs["axis"])
        return torch.softmax(x, dim=attrs["axis"])
    if name == "log_softmax":
        return torch.log_softmax(x, dim=attrs["axis"])
    if name == "gather":   # Lamina's index rule: i < 0 reads row n + i, outside [-n, n) gives 0
        idx = _present(xs[1]).to(torch.int64).reshape(-1)
        axis = attrs["axis"] % x.dim()
        n = x.shape[axis]
        idx = torch.where(idx < 0, idx + n, idx)
        inside = (idx >= 0) & (idx < n)
        if n == 0:
            return torch.zeros(res.shape, dtype=x.dtype)
        picked = torch.index_select(x, axis, torch.where(inside, idx, 0))
        keep = inside.reshape([1] * axis + [-1] + [1] * (x.dim() - axis - 1))
        return torch.where(keep, picked, torch.zeros((), dtype=x.dtype)).reshape(res.shape)
    if name == "cumsum":   # exclusive: shifted by one (a zero first); reverse: from the end
        axis = attrs["axis"] % x.dim()
        y = x.flip(axis) if attrs["reverse"] else x
        out = torch.cumsum(y, dim=axis)
        if attrs["exclusive"]:
            out = out - y
        return out.flip(axis) if attrs["reverse"] else out
    if name == "matmul":
        return torch.matmul(x, _present(xs[1]))
    if name == "transpose":
        return x.permute(list(attrs["permutation"]))
    if name == "reshape":
        return x.reshape(res.shape)
    if name == "broadcast_in_dim":
        return _broadcast_in_dim(x, attrs["broadcast_dimensions"], res.shape)
    if name == "slice":
        strides = attrs.get("strides") or [1] * x.dim()
        return x[tuple(slice(s, e, st) for s, e, st in
                       zip(attrs["start"], attrs["limit"], strides, strict=True))]
    if name == "pad":   # F.pad lists (low, high) from the last dim backwards
        flat = [p for lo, hi in zip(attrs["low"][::-1], attrs["high"][::-1], strict=True)
                for p in (lo, hi)]
        return F.pad(x, flat, value=attrs["value"])
    if name == "concat":
        return torch.cat([t for t in xs if t is not None], dim=attrs["dim"])
    raise NotImplementedError(f"torch_ref has no {op.name}")


def run_op(op: LaminaOp, xs: list[torch.Tensor | None], upcast: Upcast) -> torch.Tensor:
    name = op.info.name
    attrs = op.attr_values()
    res = tensor_info(op.results[0].type)
    x = xs[0] if xs else None
    if name in UNARY:
        return UNARY[name](x)
    if name == "gelu":
        return F.gelu(_present(x), approximate=attrs["approximate"])
    if name in BINARY:
        return BINARY[name](x, xs[1])
    if name == "select":
        return torch.where(x, xs[1], xs[2])  # type: ignore[arg-type]
    if name == "cast":
        assert x is not None
        if res.dtype == "i1":
            return x != 0
        if res.dtype in ("i32", "i64") and x.is_floating_point():
            return torch.trunc(x).to(DTYPES[res.dtype])
        return x.to(torch_dtype(res.dtype, upcast))
    if name == "dropout":
        assert x is not None
        return _dropout(x, xs[1] if len(xs) > 1 else None, attrs, res)
    return _structural(op, xs, attrs, res, upcast)


def evaluate(func: FuncOp, inputs: Sequence[np.ndarray], wrt: Sequence[int] = (),
             upcast: Upcast = None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(argument tensors, result tensors) of `func` on `inputs`; `wrt` arguments require grad."""
    block = func.body.block
    env: dict[SSAValue, torch.Tensor] = {}
    args = []
    for i, (a, arr) in enumerate(zip(block.args, inputs, strict=True)):
        t = to_torch(arr, tensor_info(a.type).dtype, upcast)
        if i in wrt:
            t.requires_grad_(True)
        env[a] = t
        args.append(t)
    outs: list[torch.Tensor] = []
    for op in block.ops:
        if isinstance(op, ReturnOp):
            outs = [env[v] for v in op.operands]
            break
        if isinstance(op, FreeOp):
            continue
        if isinstance(op, MoveOp | PlacementOp):  # a tier or placement change: same values
            for r, v in zip(op.results, op.operands, strict=True):
                env[r] = env[v]
            continue
        assert isinstance(op, LaminaOp), op.name
        xs = [None if v is None else env[v] for v in op.operand_slots()]
        env[op.results[0]] = run_op(op, xs, upcast)
    return args, outs


def gradients(func: FuncOp, inputs: Sequence[np.ndarray], wrt: Sequence[int], loss: int,
              seed: np.ndarray | None = None, upcast: Upcast = None
              ) -> tuple[np.ndarray, list[np.ndarray | None]]:
    """(loss value, d loss / d argument for each of `wrt`: None where torch finds no path)."""
    args, outs = evaluate(func, inputs, wrt, upcast)
    out = outs[loss]
    grad_out = torch.ones_like(out) if seed is None else \
        to_torch(seed, tensor_info(func.function_type.outputs.data[loss]).dtype, upcast)
    targets = [args[i] for i in wrt]
    got = torch.autograd.grad([out], targets, [grad_out], allow_unused=True) \
        if out.requires_grad else [None] * len(targets)
    as_np = [None if g is None else g.detach().to(torch.float64).numpy() for g in got]
    return out.detach().to(torch.float64).numpy(), as_np
