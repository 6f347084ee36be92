"""A verified single-device Lamina module as upstream MLIR text (func, tensor, linalg, arith, math).

What each op becomes:
- an op-table op: its row's formula run on `LinalgNamespace` (the definition every backend
  evaluates), the result materialized: an elementwise op is one `linalg.generic`, a reduction or
  normalization the two-pass generics its formula computes, a matmul `linalg.matmul`, a layout op
  its tensor or linalg op;
- `lamina.fused`: its body's formulas chained without materializing in between, so an elementwise
  kernel is ONE `linalg.generic` (the export shows the fusion decision); a kernel holding a
  reduction or a matmul is that op plus the generic of its elementwise epilogue;
- `lamina.move` / `lamina.free`: dropped (they move or end a buffer, never change a value), with a
  comment at the top of the function saying how many.

An attention kernel (`fuse-attention`) is its body's ops like any other kernel's. Refused with
one diagnostic at the op: ops outside the table (collectives), a formula the namespace has no
form for (`Unsupported`: cumsum's scan; f64 sin/cos, which IREE's CPU runtime lacks), bf16
(not yet computed the interpreter's way; f16 is: each op extends to f32, computes, and truncates
once, `arith.truncf` rounding to nearest even as NumPy's astype does), and a placed program
(export after the SPMD split is not built yet). The text is a pure function of the module: two
runs print the same bytes.
"""

from __future__ import annotations

import numpy as np
from lamina.analysis.linalg.namespace import LinalgNamespace, Node, Unsupported, tensor_type
from lamina.analysis.placed import placed_mesh
from lamina.ir.buffers.memory import FreeOp, MoveOp
from lamina.ir.core.diagnostics import LaminaError, error_at
from lamina.ir.mesh.placement import MeshOp
from lamina.ir.ops.formulas import Call, compute_dtype
from lamina.ir.ops.fused import FusedOp, YieldOp
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Operation, SSAValue

HEADER = "// Lamina module exported to upstream MLIR by `lamina-opt -t linalg`"
_STORAGE = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i32": np.int32,
            "i64": np.int64, "i1": np.bool_}

Env = dict[SSAValue, Node]


def export_module(module: ModuleOp) -> str:
    """The module's functions as one upstream MLIR module (see the module docstring)."""
    funcs = [op for op in module.ops if isinstance(op, FuncOp)]
    for op in module.ops:
        if isinstance(op, MeshOp):
            raise error_at(op, f"{op.name}: export after the SPMD split is not built yet; export "
                           "the single-device program (a module without a mesh)")
        if not isinstance(op, FuncOp):
            raise error_at(op, f"{op.name}: no linalg lowering for {op.name}")
    parts = [export_function(f) for f in funcs if f.body.blocks]
    return wrap_module(parts)


def wrap_module(funcs: list[str]) -> str:
    """Exported functions as one module's text."""
    return HEADER + "\nmodule {\n" + "\n".join(funcs) + "}\n"


def _storage(t: Attribute, op: Operation) -> np.dtype:
    info = tensor_info(t)
    if info.dtype not in _STORAGE:
        raise error_at(op, f"{op.name}: no linalg lowering for {info.dtype} tensors yet (the "
                       "interpreter rounds them from f32 after every op; export f16, f32 or f64)")
    return np.dtype(_STORAGE[info.dtype])


def export_function(func: FuncOp, symbol: str | None = None) -> str:
    """One function as a `func.func` of the export (its text, indented for a module), named
    `symbol` (default: its own name; a caller gathering functions of several modules into one
    renames them apart)."""
    if placed_mesh(func) is not None:
        raise error_at(func, f"@{func.sym_name.data}: export after the SPMD split is not built yet; "
                       "export the single-device program (before propagate-sharding)")
    ns = LinalgNamespace()
    block = func.body.block
    env: Env = {}
    sig = []
    for i, arg in enumerate(block.args):
        sig.append(f"%arg{i}: {tensor_type(tensor_info(arg.type).shape, _storage(arg.type, func))}")
        env[arg] = ns.tensor(f"%arg{i}", tensor_info(arg.type).shape, _storage(arg.type, func))
    dropped = _run_block(ns, block, env, lazy=False)
    outs = [_storage(t, func) for t in func.function_type.outputs.data]
    out_types = [tensor_type(tensor_info(t).shape, d)
                 for t, d in zip(func.function_type.outputs.data, outs, strict=True)]
    lines = [f"  func.func @{symbol or func.sym_name.data}({', '.join(sig)}) -> ({', '.join(out_types)}) {{"]
    if dropped:
        lines.append(f"    // lamina: {dropped} tier move(s) and free(s) dropped: they change no value")
    ret = block.last_op
    assert isinstance(ret, ReturnOp)
    try:
        results = [ns.materialize(env[v]).value for v in ret.operands]
    except Unsupported as e:
        raise _refusal(ret, e) from None
    body = ns.lines
    body.append(f"    func.return {', '.join(results)} : {', '.join(out_types)}"
                if results else "    func.return")
    return "\n".join(lines + body + ["  }"]) + "\n"


def _run_block(ns: LinalgNamespace, block: Block, env: Env, lazy: bool) -> int:
    """Every op of `block` into `ns`; returns how many moves and frees were dropped."""
    dropped = 0
    for op in block.ops:
        if isinstance(op, ReturnOp | YieldOp):
            continue
        if isinstance(op, MoveOp | FreeOp):
            if isinstance(op, MoveOp):
                env[op.result] = env[op.source]
            dropped += 1
        elif isinstance(op, FusedOp):
            _fused(ns, op, env)
        elif isinstance(op, LaminaOp):
            try:
                out = _table_op(ns, op, env)
                env[op.results[0]] = out if lazy else ns.materialize(out)
            except Unsupported as e:
                raise _refusal(op, e) from None
        else:
            raise error_at(op, f"{op.name}: no linalg lowering for {op.name}")
    return dropped


def _refusal(op: Operation, e: Unsupported) -> LaminaError:
    """The one diagnostic for what the namespace could not write (an expression's unsupported
    part surfaces where it is materialized: at its op, a fused kernel or the return)."""
    return error_at(op, f"{op.name}: no linalg lowering for {op.name} (its formula uses {e})")


def _fused(ns: LinalgNamespace, op: FusedOp, env: Env) -> None:
    """The body's formulas chained lazily: each yielded value is one generic of its chain."""
    inner: Env = {a: env[v] for a, v in zip(op.body.block.args, op.inputs, strict=True)}
    _run_block(ns, op.body.block, inner, lazy=True)
    for r, v in zip(op.results, op.yield_op.operands, strict=True):
        try:
            env[r] = ns.materialize(inner[v])
        except Unsupported as e:
            raise _refusal(op, e) from None


def _table_op(ns: LinalgNamespace, op: LaminaOp, env: Env) -> Node:
    """The row's formula on the operands, under the interpreter's storage rule (arithmetic in
    the compute type, the result converted to the element type once)."""
    info = op.info
    result = op.results[0]
    if not isinstance(result.type, TensorType):
        raise error_at(op, f"{op.name}: no linalg lowering for a non-tensor result")
    store = _storage(result.type, op)
    call = Call(op.attr_values(), op.operand_infos(), tensor_info(result.type))
    args: list[Node | None] = []
    for v in op.operand_slots():
        if v is None:
            args.append(None)
            continue
        _storage(v.type, op)
        x = env[v]
        if info.arith:
            x = ns.astype(x, compute_dtype(np, tensor_info(v.type).dtype))
        args.append(x)
    return ns.astype(info.formula(ns, args, call), store)
