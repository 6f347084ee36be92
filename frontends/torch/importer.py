"""The torch.export walk: an `ExportedProgram`'s FX graph as one Lamina function.

Placeholders become arguments, in the graph's order: user inputs under their names, parameters,
buffers and lifted constants under their fully qualified names (`graph_signature.input_specs`;
a weight no node reads, such as the tied twin of an embedding, is left out), with their values
in the weights dictionary. Each `call_function` node is converted by the ATen table
(`lamina.frontends.torch.aten`), which reads the node's arguments bound to its schema (defaults
filled in) and its output's shape and dtype from `node.meta['val']`; a node the table does not
know, an argument it cannot map, a symbolic (dynamic) shape, a higher-order op (torch.cond,
while_loop) or an output that is not a user output (a mutated buffer) is one `ImportRefused`
naming the node, its ATen target and what is missing, at the Python line the node came from.
"""

from __future__ import annotations

import linecache
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np
import torch
from lamina.frontends.common import (
    ATTRIBUTE,
    CONTROL_FLOW,
    DTYPE,
    DYNAMIC,
    INPUT,
    OP,
    FunctionBuilder,
    ImportRefused,
)
from lamina.ir.buffers.updates import FROZEN, set_roles
from lamina.ir.builder import Builder
from lamina.ir.core.diagnostics import (
    Note,
    SourceLoc,
    record_source,
    source_line,
    with_article,
)
from lamina.ir.core.shapes import ShapeError, TensorInfo, info_of
from lamina.ir.ops.lamina import CastOp
from torch import fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from xdsl.dialects.builtin import FileLineColLoc, IntAttr, ModuleOp, StringAttr
from xdsl.dialects.func import FuncOp
from xdsl.ir import SSAValue

DTYPES: dict[torch.dtype, str] = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.bool: "i1", torch.int32: "i32", torch.int64: "i64",
}
TORCH_DIR = torch.__file__.rsplit("/", 1)[0]
# lifted tensor constants up to this many elements become dense constants, larger ones arguments
CONSTANT_LIMIT = 64

Value = SSAValue | tuple[SSAValue | None, ...]
Converter = Callable[["Ctx", dict[str, Any]], Value]


def lamina_dtype(dtype: torch.dtype, what: str, loc: SourceLoc | None = None) -> str:
    name = DTYPES.get(dtype)
    if name is None:
        raise ImportRefused(f"{what} has dtype {dtype}, which Lamina does not model (it has "
                            f"{', '.join(str(d) for d in DTYPES)})", DTYPE, loc)
    return name


def fake_info(val: Any, what: str, loc: SourceLoc | None = None) -> TensorInfo:
    """The TensorInfo of a (fake) tensor; refusals for symbolic shapes and unknown dtypes."""
    if not isinstance(val, torch.Tensor):
        raise ImportRefused(f"{what} is {with_article(type(val).__name__)}, not a tensor", OP, loc)
    shape: list[int] = []
    for d in val.shape:
        if not isinstance(d, int):
            raise ImportRefused(f"{what} has the symbolic size {d} (shape {tuple(val.shape)}): "
                                "Lamina's shapes are static; export without dynamic_shapes",
                                DYNAMIC, loc)
        shape.append(d)
    return TensorInfo(tuple(shape), lamina_dtype(val.dtype, what, loc))


def node_loc(node: fx.Node) -> SourceLoc | None:
    """The innermost frame of the node's stack trace outside torch (the user's line), at the
    column where the call that made the node is spelled."""
    trace = node.meta.get("stack_trace") or ""
    best: SourceLoc | None = None
    for line in trace.splitlines():
        line = line.strip()
        if not line.startswith('File "'):
            continue
        path, _, rest = line[6:].partition('", line ')
        number = rest.split(",", 1)[0]
        if path.startswith((TORCH_DIR, "<")) or not number.isdigit():
            continue
        best = SourceLoc(path, int(number), _column(path, int(number), node))
    return best


def _column(path: str, line: int, node: fx.Node) -> int:
    """1-based column of the target's name (`cumsum` of aten.cumsum.default) on the file's line,
    else of the statement; 0 (the line as a whole) when the file cannot be read."""
    code = linecache.getline(path, line)
    if not code.strip():
        return 0
    if source_line(path, line) is None:       # so a refusal echoes the line with a caret
        record_source(path, "".join(linecache.getlines(path)))
    parts = str(node.target).split(".")
    name = (parts[1] if len(parts) > 2 else parts[-1]).strip("_")
    at = code.find(name) if name else -1
    return (at if at >= 0 else len(code) - len(code.lstrip())) + 1


@dataclass
class Ctx:
    """What a converter sees: the builder, the node being converted and the values so far."""

    builder: Builder
    values: dict[fx.Node, Value]
    node: fx.Node
    seed: int
    dropouts: list[int] = field(default_factory=lambda: [0])

    # -- diagnostics --
    def what(self) -> str:
        return f"node '{self.node.name}' ({self.node.target})"

    def refuse(self, kind: str, message: str) -> NoReturn:
        raise ImportRefused(f"{self.what()}: {message}", kind, node_loc(self.node),
                            str(self.node.target))

    # -- operands --
    def tensor(self, arg: Any) -> SSAValue:
        """The Lamina value of a node argument that must be a tensor."""
        if isinstance(arg, fx.Node):
            v = self.values.get(arg)
            if isinstance(v, SSAValue):
                return v
            self.refuse(OP, f"argument '{arg.name}' is not a tensor value")
        self.refuse(ATTRIBUTE, f"expected a tensor argument, got {arg!r}")

    def out(self, index: int | None = None) -> TensorInfo:
        """Shape and element type of the node's output (`index` of a tuple output)."""
        val = self.node.meta.get("val")
        if index is not None:
            if not isinstance(val, (tuple, list)):
                self.refuse(OP, "has no tuple output")
            val = val[index]
        return fake_info(val, self.what(), node_loc(self.node))

    def nth_used(self, index: int) -> bool:
        """Whether some getitem reads output `index` of this (tuple-valued) node."""
        return any(u.target is operator.getitem and u.args[1] == index for u in self.node.users)

    # -- building --
    def op(self, cls: Any, *operands: Any, result: TensorInfo | None = None,
           **attrs: Any) -> SSAValue:
        try:
            return self.builder.op(cls, *operands, result=result, **attrs)
        except ShapeError as e:
            self.refuse(DTYPE if "element type" in str(e) else ATTRIBUTE, str(e))

    def const(self, value: Any, dtype: str) -> SSAValue:
        return self.builder.constant(np.asarray(value), dtype)

    def cast(self, v: SSAValue, dtype: str) -> SSAValue:
        info = info_of(v)
        if info.dtype == dtype:
            return v
        return self.op(CastOp, v, result=TensorInfo(info.shape, dtype))

    def next_seed(self) -> int:
        """A distinct dropout seed per dropout node, from the import's base seed."""
        k = self.dropouts[0]
        self.dropouts[0] += 1
        return self.seed + k


def bind(node: fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name, with the schema's defaults for the ones left out."""
    target = node.target
    assert isinstance(target, torch._ops.OpOverload)
    schema = target._schema
    bound: dict[str, Any] = {}
    for i, a in enumerate(schema.arguments):
        if i < len(node.args) and not a.kwarg_only:
            bound[a.name] = node.args[i]
        elif a.name in node.kwargs:
            bound[a.name] = node.kwargs[a.name]
        else:
            bound[a.name] = a.default_value if a.has_default_value() else None
    return bound


@dataclass
class Imported:
    """The imported function's module and its weights by argument name."""

    module: ModuleOp
    weights: dict[str, np.ndarray]


def _weight_array(t: torch.Tensor) -> np.ndarray:
    """`t` as a NumPy array, sharing torch's memory where it can: copying every weight made an
    import's peak memory twice the model's (a 1B-parameter Llama held twice). A contiguous CPU
    tensor of a NumPy dtype is viewed, read-only, so Lamina never writes into the caller's
    model: donating such a weight (`lamina.compile(..., donate=...)`, which updates it in place)
    is refused as read-only, so pass a copy to train in place (`lamina.train` copies its
    parameters itself). The view follows the model: a tensor changed after the import changes
    the weight. bf16 (no NumPy dtype) is widened into a new f32 array, a strided or non-CPU
    tensor copied."""
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.to(device="cpu", dtype=torch.float32).numpy()
    if t.device.type != "cpu" or not t.is_contiguous():
        return t.cpu().contiguous().numpy()
    shared = t.numpy()
    shared.flags.writeable = False
    return shared


_FROZEN_KINDS = (InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


def _mark_frozen(module: ModuleOp, frozen: list[int]) -> ModuleOp:
    """`module` with role `frozen` (`lamina.ir.buffers.updates.ROLES`) on the arguments made
    from buffers and lifted constants: torch never trains them (a rotary table's inv_freq, BERT's
    position_ids), so derive-backward's default wrt and a trainer must not either."""
    if frozen:
        func = next(op for op in module.ops if isinstance(op, FuncOp))
        set_roles(func, dict.fromkeys(frozen, FROZEN))
    return module


def _placeholders(ep: ExportedProgram, fb: FunctionBuilder, values: dict[fx.Node, Value],
                  weights: dict[str, np.ndarray]) -> list[int]:
    """Arguments (and small lifted constants) for the graph's placeholders; the indices of the
    arguments made from buffers and constant tensors (for `_mark_frozen`)."""
    frozen: list[int] = []
    specs = {s.arg.name: s for s in ep.graph_signature.input_specs
             if hasattr(s.arg, "name")}
    state = {**ep.state_dict, **ep.constants}
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    weights_first = [n for n in placeholders if n.name in specs
                     and specs[n.name].kind != InputKind.USER_INPUT]
    for node in placeholders:          # the user's inputs first, in their order
        val = node.meta.get("val")
        if node not in weights_first and isinstance(val, torch.Tensor):
            values[node] = fb.argument(node.name, fake_info(val, f"input '{node.name}'"))
    for node in weights_first:         # then parameters, buffers, constants
        spec = specs[node.name]
        if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            raise ImportRefused(f"input '{node.name}' is {with_article(spec.kind.name)}, which Lamina does "
                                "not model", INPUT)
        if not node.users:
            continue
        target = spec.target or node.name
        tensor = state.get(target)
        if not isinstance(tensor, torch.Tensor):
            raise ImportRefused(f"no value for {spec.kind.name.lower()} '{target}'", INPUT)
        info = fake_info(tensor, f"{spec.kind.name.lower()} '{target}'")
        if spec.kind == InputKind.CONSTANT_TENSOR and tensor.numel() <= CONSTANT_LIMIT:
            values[node] = fb.builder.constant(_weight_array(tensor), info.dtype)
            continue
        arg = fb.argument(target, info)
        values[node] = arg
        assert arg.name_hint is not None
        weights[arg.name_hint] = _weight_array(tensor)
        if spec.kind in _FROZEN_KINDS:
            frozen.append(len(fb.arg_names) - 1)
    return frozen


def convert_graph(ep: ExportedProgram, table: dict[str, Converter], seed: int,
                  name: str = "forward") -> Imported:
    """The Lamina module and weights of `ep` (see the module docstring)."""
    fb = FunctionBuilder(name)
    values: dict[fx.Node, Value] = {}
    weights: dict[str, np.ndarray] = {}
    frozen = _placeholders(ep, fb, values, weights)  # first: a symbolic input shape is refused
    check_coverage(ep.graph_module, table)
    ctx = Ctx(fb.builder, values, next(iter(ep.graph.nodes)), seed)
    output = _walk(ctx, ep.graph_module, table)
    ctx.node = output
    return Imported(_mark_frozen(fb.finish(_outputs(ep, ctx, output)), frozen), weights)


def _walk(ctx: Ctx, module: fx.GraphModule, table: dict[str, Converter]) -> fx.Node:
    """Convert the nodes of `module`'s graph (its placeholders already in `ctx.values`), in
    order; the graph's output node, for the caller to read."""
    for node in module.graph.nodes:
        ctx.node = node
        loc = node_loc(node)
        ctx.builder.location = None if loc is None else FileLineColLoc(
            StringAttr(loc.file), IntAttr(loc.line), IntAttr(loc.col))
        if node.op == "call_function":
            ctx.values[node] = _inline(ctx, module, table) if _is_inlined(node) else \
                _convert(ctx, table)
        elif node.op == "get_attr":
            ctx.values[node] = ()     # a higher-order op's body: read by the op that runs it
        elif node.op == "output":
            return node
    raise AssertionError("an FX graph ends with its output node")


def _is_inlined(node: fx.Node) -> bool:
    """`wrap_with_set_grad_enabled(enabled, body, *args)`: torch.export's form of a
    `torch.no_grad()` (or `enable_grad`) region, such as HF's rotary-embedding tables. Its body
    is straight-line code, so it is inlined: gradient mode is no part of a forward program's
    meaning. (Autocast regions, `wrap_with_autocast`, change dtypes inside: not inlined.)"""
    return node.target is torch.ops.higher_order.wrap_with_set_grad_enabled


def _inline(ctx: Ctx, module: fx.GraphModule, table: dict[str, Converter]) -> Value:
    """The body of the region node `ctx.node` converted in place, its placeholders bound to the
    node's operands; its outputs as the node's (tuple) value."""
    node = ctx.node
    body = _body(module, node)
    operands = node.args[2:]
    params = [n for n in body.graph.nodes if n.op == "placeholder"]
    if len(params) != len(operands):
        ctx.refuse(CONTROL_FLOW, f"its body takes {len(params)} operands, the call passes "
                   f"{len(operands)}")
    for param, arg in zip(params, operands, strict=True):
        ctx.values[param] = ctx.tensor(arg)
    output = _walk(ctx, body, table)
    ctx.node = node
    outs = output.args[0]
    result: list[SSAValue | None] = []
    for out in outs if isinstance(outs, (tuple, list)) else (outs,):
        v = ctx.values.get(out) if isinstance(out, fx.Node) else None
        if not isinstance(v, SSAValue):
            ctx.refuse(OP, f"its body returns {out!r}, which is not a tensor")
        result.append(v)
    return tuple(result)


def _body(module: fx.GraphModule, node: fx.Node) -> fx.GraphModule:
    """The subgraph module a region node runs (its second argument, a `get_attr`)."""
    ref = node.args[1]
    sub = getattr(module, str(ref.target), None) if isinstance(ref, fx.Node) else None
    if not isinstance(sub, fx.GraphModule):
        raise ImportRefused(f"node '{node.name}' ({node.target}): its body {ref!r} is not a "
                            "graph", CONTROL_FLOW, node_loc(node), str(node.target))
    return sub


def _convert(ctx: Ctx, table: dict[str, Converter]) -> Value:
    node = ctx.node
    target = str(node.target)
    if node.target is operator.getitem:
        src, index = node.args[0], node.args[1]
        seq = ctx.values.get(src) if isinstance(src, fx.Node) else None
        item = seq[index] if isinstance(seq, tuple) and isinstance(index, int) else None
        if item is None:
            ctx.refuse(OP, "reads an output the converter did not produce")
        return item
    if not isinstance(node.target, torch._ops.OpOverload):
        kind = CONTROL_FLOW if isinstance(node.target, torch._ops.HigherOrderOperator) else OP
        ctx.refuse(kind, "control flow is not modeled" if kind == CONTROL_FLOW else
                   "is not an ATen op (a Python call), which Lamina does not map")
    if is_in_place(node.target):
        return _functionalized(ctx, table)
    conv = table.get(target)
    if conv is None:
        ctx.refuse(OP, "has no Lamina mapping (see the README for the ATen ops the torch "
                   "importer maps)")
    return conv(ctx, bind(node))


def is_in_place(target: object) -> bool:
    """Whether `target` is an in-place ATen overload (`add_.Tensor`: named with a trailing
    underscore, it writes its `self`; an `out=` overload writes a separate buffer instead)."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    schema = target._schema
    info = schema.arguments[0].alias_info if schema.arguments else None
    return schema.name.endswith("_") and info is not None and info.is_write


def functional_name(target: object) -> str:
    """`aten.add.Tensor` for `aten.add_.Tensor`: the overload that returns what the in-place
    one writes."""
    namespace, op, overload = str(target).split(".", 2)
    return f"{namespace}.{op.rstrip('_')}.{overload}"


def _functionalized(ctx: Ctx, table: dict[str, Converter]) -> Value:
    """An in-place op as its functional twin, whose result then stands for `self` in every
    later use: exact when `self` shares storage with no other value (the op writes only
    itself), which is checked; a write through a view of another tensor, or into a tensor that
    other values view, would change those too, and is refused."""
    node = ctx.node
    conv = table.get(functional_name(node.target))
    if conv is None:
        ctx.refuse(OP, f"is in place and its functional form {functional_name(node.target)} "
                   "has no Lamina mapping (see the README for the ATen ops the torch importer "
                   "maps)")
    a = bind(node)
    written = a["self"]
    if not isinstance(written, fx.Node):
        ctx.refuse(OP, "writes into a value that is not a tensor node")
    if _aliases(written) or any(_aliases(u) for u in written.users):
        ctx.refuse(OP, f"writes into '{written.name}', which shares storage with another value "
                   "(a view): in-place writes through views are not modeled")
    value = conv(ctx, a)
    ctx.values[written] = value
    return value


def _aliases(node: fx.Node) -> bool:
    """Whether `node`'s result may share storage with an operand: a view op (`view`, `slice`,
    `transpose`, ...), whose schema's return carries an alias annotation."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or is_in_place(target):
        return False
    return any(r.alias_info is not None for r in target._schema.returns)


def check_coverage(module: fx.GraphModule, table: dict[str, Converter]) -> None:
    """Refuse, before converting anything, when some ATen op of the graph (or of a region it
    inlines) has no mapping: one error naming every such op with its count, at the first one's
    source line, and a note at the first source line of each, so the whole gap shows at once."""
    missing: dict[str, list[fx.Node]] = {}
    for node in _call_nodes(module):
        target = node.target
        if not isinstance(target, torch._ops.OpOverload):
            continue
        name = functional_name(target) if is_in_place(target) else str(target)
        if name not in table:
            missing.setdefault(str(target), []).append(node)
    if not missing:
        return
    first = next(iter(missing.values()))[0]
    message = f"node '{first.name}' ({first.target}): has no Lamina mapping (see the README " \
        "for the ATen ops the torch importer maps)"
    total = sum(len(nodes) for nodes in missing.values())
    if total == 1:
        raise ImportRefused(message, OP, node_loc(first), str(first.target))
    counts = ", ".join(f"{op} ({len(nodes)})" for op, nodes in missing.items())
    notes = [Note(f"{op}: {_count(len(nodes), 'node')}, the first '{nodes[0].name}' here",
                  node_loc(nodes[0])) for op, nodes in missing.items()]
    raise ImportRefused(f"{message}; in all, {_count(len(missing), 'ATen op')} "
                        f"({_count(total, 'node')}) have none: {counts}", OP, node_loc(first),
                        str(first.target), notes)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _call_nodes(module: fx.GraphModule) -> Iterator[fx.Node]:
    """The `call_function` nodes of `module`, with those of the regions it inlines in place."""
    for node in module.graph.nodes:
        if node.op != "call_function":
            continue
        if _is_inlined(node):
            yield from _call_nodes(_body(module, node))
            continue
        yield node


def _outputs(ep: ExportedProgram, ctx: Ctx, node: fx.Node) -> list[SSAValue]:
    for spec in ep.graph_signature.output_specs:
        if spec.kind != OutputKind.USER_OUTPUT:
            ctx.refuse(OP, f"output '{getattr(spec.arg, 'name', spec.arg)}' is a "
                       f"{spec.kind.name} (a mutated buffer or input): Lamina programs are pure")
    results: list[SSAValue] = []
    outs = node.args[0]
    for out in outs if isinstance(outs, (tuple, list)) else (outs,):
        v = ctx.values.get(out) if isinstance(out, fx.Node) else None
        if not isinstance(v, SSAValue):
            ctx.refuse(OP, f"output {out!r} is not a tensor")
        results.append(v)
    return results
