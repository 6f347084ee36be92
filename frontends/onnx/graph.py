"""The ONNX walk: a model's graph as one Lamina function.

Every ONNX value is a `Val`: its type, its Lamina value once it has one, and its contents when they
are known while importing (`const`: Constant nodes, initializers, shape computations). Graph inputs
become arguments; initializers become arguments named after themselves (values in the weights),
or dense constants when they have at most `CONSTANT_LIMIT` elements, created when first used at run
time. Nodes are converted in the graph's (topological) order by the op table
(`lamina.frontends.onnx.ops.TABLE`), which sees one `NodeCtx`.

Shape computations (Shape, Size, and integer arithmetic, concatenation and slicing of shape
vectors: what exporters and ONNX function bodies emit around Reshape, Expand, ConstantOfShape)
are folded while importing: an op whose inputs are all known and whose outputs are integer or
boolean is evaluated by onnx's reference evaluator (onnx's own definition of the op), since Lamina
has no integer arithmetic and a static shape is a constant. Float arithmetic is never folded: it
is always Lamina ops, computed by Lamina.

An input the converter needs to know while importing (Reshape's shape, Slice's starts, a reduction's
axes) that is a graph input given at run time is a dynamic shape: refused, naming the input
(`ImportRefused.static_input`), unless the caller binds it (`static_inputs`). Every attribute a
node carries must be read by its converter, or the node is refused naming the attribute, so an
attribute no converter knows can never be ignored silently.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np
import onnx
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
from lamina.ir.builder import Builder
from lamina.ir.core.diagnostics import LaminaError, SourceLoc
from lamina.ir.core.dtypes import INT_TYPES
from lamina.ir.core.shapes import ShapeError, TensorInfo, info_of
from lamina.ir.ops.lamina import CastOp
from onnx import TensorProto, numpy_helper
from onnx.reference import ReferenceEvaluator
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

DTYPES: dict[int, str] = {
    TensorProto.FLOAT: "f32", TensorProto.DOUBLE: "f64", TensorProto.FLOAT16: "f16",
    TensorProto.BFLOAT16: "bf16", TensorProto.BOOL: "i1", TensorProto.INT32: "i32",
    TensorProto.INT64: "i64",
}
ONNX_TYPES = {v: k for k, v in DTYPES.items()}
CONSTANT_LIMIT = 64
_MISSING = object()


class StaticInputNeeded(ImportRefused):
    """A graph input given at run time that the program's shapes depend on."""

    def __init__(self, message: str, loc: SourceLoc, name: str, op: str) -> None:
        super().__init__(message, DYNAMIC, loc, op)
        self.static_input = name


def type_name(elem_type: int) -> str:
    return TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() \
        else str(elem_type)


@dataclass
class Val:
    """One ONNX value (see the module docstring)."""

    info: TensorInfo
    value: SSAValue | None = None
    const: np.ndarray | None = None
    initializer: str | None = None      # the initializer it is, if one
    input_name: str | None = None       # the graph input it is, if one


Converter = Callable[["NodeCtx"], Sequence["Val | SSAValue | None"]]


@dataclass
class Importer:
    """The state of one model's import."""

    file: str
    opset: int
    fb: FunctionBuilder
    vals: dict[str, Val] = field(default_factory=dict)
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    loc: SourceLoc = field(init=False)

    def __post_init__(self) -> None:
        self.loc = SourceLoc(self.file, 0, 0)

    @property
    def builder(self) -> Builder:
        return self.fb.builder

    def materialize(self, v: Val) -> SSAValue:
        """`v` as a Lamina value: an initializer becomes an argument (or a small constant)."""
        if v.value is not None:
            return v.value
        assert v.const is not None
        if v.initializer is not None and v.const.size > CONSTANT_LIMIT:
            v.value = self.fb.argument(v.initializer, v.info)
            assert v.value.name_hint is not None
            self.weights[v.value.name_hint] = v.const
        else:
            v.value = self.builder.constant(v.const, v.info.dtype)
        return v.value


def lamina_dtype(elem_type: int, what: str, loc: SourceLoc | None) -> str:
    name = DTYPES.get(elem_type)
    if name is None:
        raise ImportRefused(f"{what} has element type {type_name(elem_type)}, which Lamina does "
                            f"not model (it has {', '.join(type_name(t) for t in DTYPES)})",
                            DTYPE, loc)
    return name


def const_val(array: np.ndarray, what: str, loc: SourceLoc | None,
              initializer: str | None = None) -> Val:
    """A known value; its element type must be one Lamina has."""
    elem = onnx.helper.np_dtype_to_tensor_dtype(array.dtype) if array.dtype.kind != "V" \
        else TensorProto.BFLOAT16
    if array.dtype.name == "bfloat16":
        elem, array = TensorProto.BFLOAT16, array.astype(np.float32)
    dtype = lamina_dtype(elem, what, loc)
    return Val(TensorInfo(tuple(int(d) for d in array.shape), dtype), const=array,
               initializer=initializer)


class NodeCtx:
    """One node being converted: its inputs, attributes (reads are recorded), and building."""

    def __init__(self, imp: Importer, node: onnx.NodeProto, index: int) -> None:
        self.imp = imp
        self.node = node
        self.index = index
        self.attrs = {a.name: a for a in node.attribute}
        self.read: set[str] = set()

    @property
    def opset(self) -> int:
        return self.imp.opset

    # -- diagnostics --
    def what(self) -> str:
        name = f" '{self.node.name}'" if self.node.name else ""
        return f"node {self.index}{name} ({self.node.op_type})"

    def refuse(self, kind: str, message: str) -> NoReturn:
        raise ImportRefused(f"{self.what()}: {message}", kind, self.imp.loc, self.node.op_type)

    # -- attributes --
    def attr(self, name: str, default: Any = _MISSING) -> Any:
        self.read.add(name)
        a = self.attrs.get(name)
        if a is None:
            if default is _MISSING:
                self.refuse(ATTRIBUTE, f"missing required attribute '{name}'")
            return default
        if a.ref_attr_name:
            self.refuse(ATTRIBUTE, f"attribute '{name}' refers to a function attribute")
        value = onnx.helper.get_attribute_value(a)
        if isinstance(value, bytes):
            return value.decode("utf-8")
        if isinstance(value, list) and value and isinstance(value[0], bytes):
            return [v.decode("utf-8") for v in value]
        return value

    def has_attr(self, name: str) -> bool:
        return name in self.attrs

    def unread(self) -> list[str]:
        return sorted(set(self.attrs) - self.read)

    # -- inputs --
    @property
    def n_inputs(self) -> int:
        return len(self.node.input)

    def input(self, i: int) -> Val | None:
        """Input `i`, or None when it is absent (missing or named '')."""
        if i >= len(self.node.input) or not self.node.input[i]:
            return None
        name = self.node.input[i]
        v = self.imp.vals.get(name)
        if v is None:
            self.refuse(INPUT, f"input '{name}' is not defined before the node")
        return v

    def inputs(self) -> list[Val]:
        return [v for i in range(self.n_inputs) if (v := self.input(i)) is not None]

    def info(self, i: int) -> TensorInfo:
        v = self.input(i)
        if v is None:
            self.refuse(INPUT, f"needs input {i}")
        return v.info

    def value(self, i: int) -> SSAValue:
        v = self.input(i)
        if v is None:
            self.refuse(INPUT, f"needs input {i}")
        return self.imp.materialize(v)

    def static(self, i: int, what: str) -> np.ndarray | None:
        """The contents of input `i` (None if absent), which must be known while importing."""
        v = self.input(i)
        if v is None:
            return None
        if v.const is None:
            name = self.node.input[i]
            message = f"{self.what()}: {what} (input '{name}') is computed at run time, so the " \
                      "result's shape would be dynamic; Lamina's shapes are static"
            if v.input_name is not None:
                message += f" (bind graph input '{v.input_name}' to a constant to import it)"
            raise StaticInputNeeded(message, self.imp.loc, v.input_name or "", self.node.op_type)
        return v.const

    def ints(self, i: int, what: str) -> list[int] | None:
        a = self.static(i, what)
        return None if a is None else [int(x) for x in np.asarray(a).reshape(-1)]

    # -- building --
    def op(self, cls: Any, *operands: Any, result: TensorInfo | None = None,
           **attrs: Any) -> SSAValue:
        try:
            return self.imp.builder.op(cls, *operands, result=result, **attrs)
        except ShapeError as e:   # the row's rule: an element type it does not take, or else
            self.refuse(DTYPE if "element type" in str(e) else ATTRIBUTE, str(e))

    def const(self, value: Any, dtype: str) -> SSAValue:
        return self.imp.builder.constant(np.asarray(value), dtype)

    def cast(self, v: SSAValue, dtype: str) -> SSAValue:
        info = info_of(v)
        return v if info.dtype == dtype else self.op(CastOp, v,
                                                     result=TensorInfo(info.shape, dtype))

    def float_input(self, i: int) -> SSAValue:
        """Input `i` as a value whose element type Lamina's arithmetic rows take (a float)."""
        info = self.info(i)
        if info.dtype in INT_TYPES:
            self.refuse(DTYPE, f"computes on {info.dtype}: Lamina's arithmetic rows are defined "
                        "on float types only")
        return self.value(i)


def _foldable(ctx: NodeCtx) -> bool:
    """All inputs known and integer or boolean: a shape computation."""
    ins = ctx.inputs()
    return bool(ins) and all(v.const is not None and v.info.dtype in INT_TYPES for v in ins)


def fold(ctx: NodeCtx) -> list[Val] | None:
    """The node's outputs evaluated by onnx's reference evaluator when `_foldable` and every
    output is integer or boolean; None otherwise (the node is then converted)."""
    if not _foldable(ctx):
        return None
    node = ctx.node
    feeds = {}
    for name in node.input:
        if name:
            v = ctx.imp.vals[name]
            assert v.const is not None
            feeds[name] = v.const
    try:
        model = onnx.helper.make_model(
            onnx.helper.make_graph([node], "fold", [
                onnx.helper.make_tensor_value_info(n, ONNX_TYPES[ctx.imp.vals[n].info.dtype],
                                                   list(ctx.imp.vals[n].info.shape))
                for n in feeds], [onnx.helper.make_empty_tensor_value_info(o)
                                  for o in node.output if o]),
            opset_imports=[onnx.helper.make_opsetid("", ctx.opset)])
        outs = ReferenceEvaluator(model).run(None, feeds)
    except Exception as e:   # onnx's evaluator refusing the node: convert it instead
        if isinstance(e, LaminaError):
            raise
        return None
    arrays = [np.asarray(o) for o in outs]
    if not all(a.dtype.kind in "biu" for a in arrays):
        return None
    return [const_val(a, ctx.what(), ctx.imp.loc) for a in arrays]


def check_node(ctx: NodeCtx) -> None:
    """Refuse what no converter may see: another domain, subgraphs (control flow)."""
    node = ctx.node
    if node.domain not in ("", "ai.onnx"):
        ctx.refuse(OP, f"domain '{node.domain}' (only the default ONNX domain is mapped)")
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
           for a in node.attribute):
        ctx.refuse(CONTROL_FLOW, "has a subgraph: control flow is not modeled")


def input_val(fb: FunctionBuilder, vi: onnx.ValueInfoProto, loc: SourceLoc,
              static: Mapping[str, np.ndarray]) -> Val:
    """A graph input: an argument, or the constant the caller bound it to."""
    what = f"graph input '{vi.name}'"
    if vi.name in static:
        v = const_val(np.asarray(static[vi.name]), what, loc)
        v.input_name = vi.name
        return v
    t = vi.type
    if not t.HasField("tensor_type"):
        raise ImportRefused(f"{what} is a {t.WhichOneof('value')} (only tensors are modeled)",
                            DTYPE, loc)
    dtype = lamina_dtype(t.tensor_type.elem_type, what, loc)
    if not t.tensor_type.HasField("shape"):
        raise ImportRefused(f"{what} has no shape: Lamina's shapes are static", DYNAMIC, loc)
    dims: list[int] = []
    for d in t.tensor_type.shape.dim:
        if not d.HasField("dim_value"):
            shown = d.dim_param or "?"
            raise ImportRefused(f"{what} has the symbolic dimension '{shown}': Lamina's shapes "
                                "are static (export with fixed sizes)", DYNAMIC, loc)
        dims.append(int(d.dim_value))
    info = TensorInfo(tuple(dims), dtype)
    return Val(info, fb.argument(vi.name, info), input_name=vi.name)


def import_graph(model: onnx.ModelProto, file: str, table: Mapping[str, Converter],
                 static: Mapping[str, np.ndarray]) -> tuple[ModuleOp, dict[str, np.ndarray]]:
    """The verified module and weights of `model` (see the module docstring)."""
    graph = model.graph
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                default=0)
    loc = SourceLoc(file, 0, 0)
    if opset < 1:
        raise ImportRefused("the model imports no version of the default ONNX domain", INPUT, loc)
    imp = Importer(file, opset, FunctionBuilder(_func_name(graph.name)))
    inits = {t.name: t for t in graph.initializer}
    for vi in graph.input:
        imp.vals[vi.name] = input_val(imp.fb, vi, loc, static)
    for name, t in inits.items():
        if name not in imp.vals:
            if t.data_location == TensorProto.EXTERNAL and not t.raw_data:
                raise ImportRefused(f"initializer '{name}' is stored in an external file that "
                                    "was not loaded", INPUT, loc)
            imp.vals[name] = const_val(numpy_helper.to_array(t), f"initializer '{name}'", loc,
                                       initializer=name)
    for k, node in enumerate(graph.node):
        _convert(imp, NodeCtx(imp, node, k), table)
    results = []
    for vi in graph.output:
        v = imp.vals.get(vi.name)
        if v is None:
            raise ImportRefused(f"graph output '{vi.name}' is never computed", INPUT, loc)
        want = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
        if want and DTYPES.get(want) != v.info.dtype:
            raise LaminaError(f"graph output '{vi.name}': declared {type_name(want)}, the import "
                              f"computes {v.info.dtype}", loc)
        results.append(imp.materialize(v))
    return imp.fb.finish(results), imp.weights


def _func_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"main_{cleaned}".rstrip("_")


def _convert(imp: Importer, ctx: NodeCtx, table: Mapping[str, Converter]) -> None:
    node = ctx.node
    check_node(ctx)
    outs: Sequence[Val | SSAValue | None] | None = fold(ctx)
    if outs is None:
        conv = table.get(node.op_type)
        if conv is None:
            ctx.refuse(OP, "has no Lamina mapping (see the README for the ONNX ops the "
                       "importer maps)")
        try:
            outs = conv(ctx)
        except (LaminaError, ShapeError):
            raise
        except Exception as e:   # an importer bug: name the node, not a traceback
            raise LaminaError(f"{ctx.what()}: internal error: {type(e).__name__}: {e}",
                              imp.loc) from e
        if ctx.unread():
            ctx.refuse(ATTRIBUTE, f"attribute '{ctx.unread()[0]}' is not mapped")
    for name, out in zip(node.output, outs, strict=False):
        if not name:
            continue
        if out is None:
            ctx.refuse(OP, f"output '{name}' is not mapped")
        imp.vals[name] = out if isinstance(out, Val) else Val(info_of(out), out)
    missing = [n for n in node.output[len(outs):] if n]
    if missing:
        ctx.refuse(OP, f"output '{missing[0]}' is not mapped")
