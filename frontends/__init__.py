"""Lamina's frontends: models from other frameworks as ordinary, verified Lamina programs.

- `lamina.frontends.torch`: a `torch.export.ExportedProgram` (ATen ops, before or after
  `run_decompositions()`);
- `lamina.frontends.onnx`: an ONNX model file (external weight files included).

Each importer produces one `func.func` whose arguments are the model's inputs followed by its
weights (parameters, buffers, initializers, named after them), and the weights' values as NumPy
arrays keyed by argument name (what `lamina-run --inputs` reads). An op the importer cannot map
exactly onto Lamina's op table (an operator, an attribute value, an element type, a dynamic shape,
control flow) is refused with one `ImportRefused` diagnostic naming the node and what is missing:
never a silently different program. Frontends import only `lamina.ir` and `lamina.analysis`, and
the framework (torch, onnx) only when an importer is used.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    """`lamina.frontends.torch` and `.onnx` on first use: the framework is imported only by a
    script that reaches for its importer."""
    if name in ("torch", "onnx"):
        import importlib

        return importlib.import_module(f"lamina.frontends.{name}")
    raise AttributeError(f"module 'lamina.frontends' has no attribute '{name}'")
