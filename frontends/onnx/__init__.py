"""The ONNX importer: an ONNX model file as a Lamina program.

    module, weights = lamina.frontends.onnx.import_model("model.onnx")
    lamina.run(module, {"input_ids": ids, **weights})

The file is read with onnx's protobuf loader only (`onnx.load`; a `MODEL.onnx.data` external
weight file beside it, as torch's exporter writes, is read by the same loader), never executed.
Every op that maps exactly onto Lamina's op table is imported (`lamina.frontends.onnx.ops.mapped()`,
listed in the README) at any opset from 1 to the newest onnx knows, with each opset's attribute
and input conventions; anything else is one `ImportRefused` naming the node (its index, name and
op type) and what is missing. Graph inputs become arguments (named after themselves), then
initializers (or dense constants when small), with the initializers' values in `weights`.
`static_inputs` binds graph inputs to constants, for inputs that determine shapes (a Reshape's
shape given at run time); a bound input is no argument.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from lamina.frontends.common import INPUT, ImportRefused
from lamina.frontends.onnx.graph import StaticInputNeeded, import_graph
from lamina.frontends.onnx.ops import TABLE
from lamina.ir.core.diagnostics import SourceLoc
from xdsl.dialects.builtin import ModuleOp

__all__ = ["StaticInputNeeded", "import_model", "load_model"]


def load_model(path: str) -> onnx.ModelProto:
    """The model in `path` with its external data; `ImportRefused` for anything unreadable."""
    loc = SourceLoc(path, 0, 0)
    if not os.path.isfile(path):
        raise ImportRefused(f"no such file: '{path}'", INPUT)
    try:
        return onnx.load(path, load_external_data=True)
    except DecodeError as e:
        raise ImportRefused(f"not an ONNX model (protobuf decoding failed: {e})", INPUT,
                            loc) from None
    except (OSError, ValueError, onnx.checker.ValidationError) as e:
        raise ImportRefused(f"cannot read the model or its external data: {e}", INPUT,
                            loc) from None


def import_model(model: str | onnx.ModelProto, *, name: str | None = None,
                 static_inputs: Mapping[str, np.ndarray] | None = None
                 ) -> tuple[ModuleOp, dict[str, np.ndarray]]:
    """The verified Lamina module of an ONNX model (a path or a loaded `ModelProto`) and the
    initializers' values by argument name. `name` is how diagnostics name the model (default:
    the path, or the graph's name)."""
    if isinstance(model, str):
        proto = load_model(model)
        file = name or model
    else:
        proto = model
        file = name or (proto.graph.name or "<model>") + ".onnx"
    if proto.graph.sparse_initializer:
        raise ImportRefused("sparse initializers are not modeled", INPUT, SourceLoc(file, 0, 0))
    return import_graph(proto, file, TABLE, dict(static_inputs or {}))
