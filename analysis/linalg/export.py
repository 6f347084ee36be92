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

An attention kernel (`fuse-attention`) is its body's ops like any other kernel's. f16 and bf16
are computed the interpreter's way: each op extends to f32, computes, and rounds once to
nearest even (f16: `arith.truncf`, as NumPy's astype; bf16: the interpreter's `round_bf16` in
integer ops, then an exact `arith.truncf`; f16 <-> bf16 through f32). bf16 tensors are
ml_dtypes' bfloat16 (without ml_dtypes, a base install, they are refused). Refused with one
diagnostic at the op: ops outside the table and a formula the namespace has no form for
(`Unsupported`; every row's formula has one today). The text is a pure function of the
module: two runs print the same bytes.

A module with a mesh exports its placed functions as per-device programs whose collectives are
calls the caller binds (`lamina.analysis.linalg.spmd`; not as `shard` annotations, which IREE does
not register).
"""

from __future__ import annotations

import numpy as np
from lamina.analysis.linalg import spmd
from lamina.analysis.linalg.namespace import BF16, LinalgNamespace, Node, Unsupported, tensor_type
from lamina.analysis.placed import check_placed, placed_mesh
from lamina.ir.buffers.memory import FreeOp, MoveOp
from lamina.ir.core.diagnostics import LaminaError, error_at
from lamina.ir.mesh.collectives import PlacementOp
from lamina.ir.mesh.placement import MeshOp
from lamina.ir.ops.formulas import Call, compute_dtype
from lamina.ir.ops.fused import FusedOp, YieldOp
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Operation, SSAValue

HEADER = "// Lamina module exported to upstream MLIR by `lamina-opt -t linalg`"
_STORAGE = {"f16": np.dtype(np.float16), "f32": np.dtype(np.float32),
            "f64": np.dtype(np.float64), "i32": np.dtype(np.int32), "i64": np.dtype(np.int64),
            "i1": np.dtype(np.bool_), **({"bf16": BF16} if BF16 is not None else {})}

Env = dict[SSAValue, Node]


def export_module(module: ModuleOp) -> str:
    """The module's functions as one upstream MLIR module (see the module docstring); a module
    with a mesh exports its placed functions per device (`lamina.analysis.linalg.spmd`)."""
    funcs = [op for op in module.ops if isinstance(op, FuncOp)]
    meshes = [op for op in module.ops if isinstance(op, MeshOp)]
    if len(meshes) > 1:
        raise error_at(meshes[1], f"{meshes[1].name}: the per-device export takes one mesh per "
                       f"module; this one has {len(meshes)}")
    for op in module.ops:
        if not isinstance(op, FuncOp | MeshOp):
            raise error_at(op, f"{op.name}: no linalg lowering for {op.name}")
    if not meshes:
        return wrap_module([export_function(f) for f in funcs if f.body.blocks])
    device = spmd.PerDevice(meshes[0].mesh)
    parts = [export_function(f, device=device) for f in funcs if f.body.blocks]
    return wrap_module(device.decl_lines + parts, spmd.header(meshes[0].mesh))


def wrap_module(funcs: list[str], comment: str | None = None) -> str:
    """Exported functions as one module's text (`comment`: lines after the header)."""
    return HEADER + ("\n" + comment if comment else "") + "\nmodule {\n" + "\n".join(funcs) + "}\n"


def boundary_dtype(element: str) -> np.dtype:
    """The NumPy dtype of an exported function's tensors of Lamina element type `element` at
    its boundary: the interpreter's storage dtype, but bf16 as ml_dtypes' bfloat16 (IREE's
    runtime reads and writes those; the interpreter keeps bf16 in float32, rounded)."""
    return _STORAGE[element]


def _storage(t: Attribute, op: Operation) -> np.dtype:
    info = tensor_info(t)
    if info.dtype not in _STORAGE:
        why = " (bf16 needs ml_dtypes: install the iree extra)" if info.dtype == "bf16" else ""
        raise error_at(op, f"{op.name}: no linalg lowering for {info.dtype} tensors{why}")
    return _STORAGE[info.dtype]


def export_function(func: FuncOp, symbol: str | None = None,
                    device: spmd.PerDevice | None = None) -> str:
    """One function as a `func.func` of the export (its text, indented for a module), named
    `symbol` (default: its own name; a caller gathering functions of several modules into one
    renames them apart). A placed function exports as the per-device program (`device`: the
    module's collective declarations; without one, a placed function is refused); with
    `device.stage`, as that pipeline stage's program: only the arguments, ops and results its
    devices hold (`PerDevice.holds`, in the function's order)."""
    mesh = placed_mesh(func)
    if mesh is not None:
        if device is None:
            raise error_at(func, f"@{func.sym_name.data} is placed: export its module (the "
                           "per-device program needs the collective declarations)")
        check_placed(func)
    elif device is not None:
        device = None   # an unplaced function of a module with a mesh runs on one device
    shape = device.local_shape if device else (lambda t: tensor_info(t).shape)
    ns = LinalgNamespace()
    block = func.body.block
    env: Env = {}
    sig = []
    for i, arg in enumerate(block.args):
        if device is not None and not device.holds(arg.type):
            continue
        sig.append(f"%arg{i}: {tensor_type(shape(arg.type), _storage(arg.type, func))}")
        env[arg] = ns.tensor(f"%arg{i}", shape(arg.type), _storage(arg.type, func))
    if device is not None:   # the device's mesh coordinates (lamina.analysis.linalg.spmd)
        rank = len(device.mesh.axes)
        sig.append(f"%lamina_device: {tensor_type((rank,), np.dtype(np.int64))}")
        device.coords = ns.tensor("%lamina_device", (rank,), np.int64)
        if device.stage is not None:   # a stage's calls in order (lamina.analysis.linalg.spmd)
            device.token = ("%lamina_device", tensor_type((rank,), np.dtype(np.int64)))
    dropped = _run_block(ns, block, env, lazy=False, device=device)
    ret = block.last_op
    assert isinstance(ret, ReturnOp)
    returned = [v for v in ret.operands if device is None or device.holds(v.type)]
    out_types = [tensor_type(shape(v.type), _storage(v.type, func)) for v in returned]
    lines = [f"  func.func @{symbol or func.sym_name.data}({', '.join(sig)}) -> ({', '.join(out_types)}) {{"]
    if dropped:
        lines.append(f"    // lamina: {dropped} tier move(s) and free(s) dropped: they change no value")
    try:
        results = [ns.materialize(env[v]).value for v in returned]
    except Unsupported as e:
        raise _refusal(ret, e) from None
    body = ns.lines
    body.append(f"    func.return {', '.join(results)} : {', '.join(out_types)}"
                if results else "    func.return")
    return "\n".join(lines + body + ["  }"]) + "\n"


def _run_block(ns: LinalgNamespace, block: Block, env: Env, lazy: bool,
               device: spmd.PerDevice | None = None) -> int:
    """Every op of `block` into `ns` (`device`: on one device's shards); returns how many moves
    and frees were dropped."""
    dropped = 0
    for op in block.ops:
        if isinstance(op, ReturnOp | YieldOp) or (device is not None and not device.runs(op)):
            continue
        if isinstance(op, MoveOp | FreeOp):
            if isinstance(op, MoveOp):
                env[op.result] = env[op.source]
            dropped += 1
        elif isinstance(op, FusedOp):
            _fused(ns, op, env, device)
        elif isinstance(op, LaminaOp):
            try:
                call = device.local_call(op, ns) if device else None
                out = _table_op(ns, op, env, call)
                env[op.results[0]] = out if lazy else ns.materialize(out)
            except Unsupported as e:
                raise _refusal(op, e) from None
        elif isinstance(op, PlacementOp) and device is not None:
            _collective(ns, op, env, device)
        else:
            raise error_at(op, f"{op.name}: no linalg lowering for {op.name}")
    return dropped


def _collective(ns: LinalgNamespace, op: PlacementOp, env: Env, device: spmd.PerDevice) -> None:
    """Each operand of a collective through a call of its declaration (a bucket: one call each);
    a permute's send takes the operand and gives an order token, its receive takes none; in a
    stage's program each call takes the order token, last (`lamina.analysis.linalg.spmd`)."""
    role = device.role(op)
    for x, r in zip(op.inputs, op.outputs, strict=True):
        xt = tensor_type(device.local_shape(x.type), _storage(x.type, op))
        rt = tensor_type(device.local_shape(r.type), _storage(r.type, op))
        sym = device.declaration(op, xt, rt)
        ins: list[tuple[str, str]] = []
        if role != spmd.RECV:
            try:
                ins.append((ns.materialize(env[x]).value, xt))
            except Unsupported as e:
                raise _refusal(op, e) from None
        if device.token is not None:
            ins.append(device.token)
        out = spmd.TOKEN_TYPE if role == spmd.SEND else rt
        name = ns.emit(f"func.call @{sym}({', '.join(v for v, _ in ins)}) : "
                       f"({', '.join(t for _, t in ins)}) -> {out}")
        if device.token is not None:
            device.token = (name, out)
        if role != spmd.SEND:
            env[r] = ns.tensor(name, device.local_shape(r.type), _storage(r.type, op))


def _refusal(op: Operation, e: Unsupported) -> LaminaError:
    """The one diagnostic for what the namespace could not write (an expression's unsupported
    part surfaces where it is materialized: at its op, a fused kernel or the return)."""
    return error_at(op, f"{op.name}: no linalg lowering for {op.name} (its formula uses {e})")


def _fused(ns: LinalgNamespace, op: FusedOp, env: Env, device: spmd.PerDevice | None) -> None:
    """The body's formulas chained lazily: each yielded value is one generic of its chain."""
    inner: Env = {a: env[v] for a, v in zip(op.body.block.args, op.inputs, strict=True)}
    _run_block(ns, op.body.block, inner, lazy=True, device=device)
    for r, v in zip(op.results, op.yield_op.operands, strict=True):
        try:
            env[r] = ns.materialize(inner[v])
        except Unsupported as e:
            raise _refusal(op, e) from None


def _table_op(ns: LinalgNamespace, op: LaminaOp, env: Env, local: Call | None = None) -> Node:
    """The row's formula on the operands, under the interpreter's storage rule (arithmetic in
    the compute type, the result converted to the element type once); `local`: the call one
    device makes on its shards."""
    info = op.info
    result = op.results[0]
    if not isinstance(result.type, TensorType):
        raise error_at(op, f"{op.name}: no linalg lowering for a non-tensor result")
    store = _storage(result.type, op)
    call = local or Call(op.attr_values(), op.operand_infos(), tensor_info(result.type))
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
