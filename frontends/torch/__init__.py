"""The torch importer: `torch.export` programs as Lamina programs.

    ep = torch.export.export(model.eval(), (idx, targets))
    module, weights = lamina.frontends.torch.import_exported(ep)       # or ep.run_decompositions()
    lamina.run(module, {"idx": idx.numpy(), "targets": ..., **weights})

`import_exported` maps the ATen ops torch.export emits for transformer models, before and after
`run_decompositions()` (the list: `lamina.frontends.torch.aten.mapped()`, and the README); shapes
and dtypes come from each node's `meta['val']`. Parameters and buffers become arguments named
after their fully qualified names, after the user inputs, with their values in `weights`.
Train-mode dropout becomes `lamina.dropout` with seed `seed`, `seed + 1`, ... in graph order
(Lamina's mask is its own hash of seed and element index, not torch's RNG: the same distribution,
not the same mask). `export_factory` is what `lamina-import torch MODULE:FACTORY` runs: it
imports the user's module, or file (`path/model.py:FACTORY`): the one thing that executes user
code, as torch.export itself must; and exports what the factory returns. torch is imported only
when this package is.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from types import ModuleType

import numpy as np
import torch
from lamina.frontends.common import ATTRIBUTE, INPUT, ImportRefused
from lamina.frontends.torch.aten import TABLE
from lamina.frontends.torch.importer import DTYPES, convert_graph
from lamina.ir.core.diagnostics import with_article
from torch.export import ExportedProgram
from xdsl.dialects.builtin import ModuleOp

__all__ = ["export_factory", "import_exported", "parse_args_spec"]


def import_exported(ep: ExportedProgram, *, seed: int = 0, name: str = "forward"
                    ) -> tuple[ModuleOp, dict[str, np.ndarray]]:
    """The verified Lamina module of `ep` (one function `name`) and its weights by argument name."""
    imported = convert_graph(ep, TABLE, seed, name)
    return imported.module, imported.weights


_TORCH_DTYPES = {v: k for k, v in DTYPES.items()}
_SPEC = re.compile(r"(?:(\d+(?:x\d+)*)x)?(f16|bf16|f32|f64|i1|i32|i64)")


def parse_args_spec(spec: str) -> list[torch.Tensor]:
    """Example inputs from `2x8xi64,2x8xi64` (MLIR's shape syntax; `f32` alone is rank 0).
    Their values are zeros: torch.export traces shapes and dtypes, not data."""
    out: list[torch.Tensor] = []
    for item in (s.strip() for s in spec.split(",")):
        m = _SPEC.fullmatch(item)
        if m is None:
            raise ImportRefused(f"--args: '{item}' is not SHAPExDTYPE (e.g. 2x8xi64, 16x32xf32, "
                                f"f32; dtypes {', '.join(_TORCH_DTYPES)})", INPUT)
        shape = [int(d) for d in m[1].split("x")] if m[1] else []
        out.append(torch.zeros(shape, dtype=_TORCH_DTYPES[m[2]]))
    return out


def _is_file(module: str) -> bool:
    """Whether the MODULE of MODULE:FACTORY names a file (`models/gpt.py`) rather than a module."""
    return module.endswith(".py") or "/" in module or os.sep in module


def _import_file(path: str) -> ModuleType:
    """The Python file at `path` run as a module named after it, with its folder first on the
    path (as `python path` would have it, so the model's own sibling modules import)."""
    if not os.path.isfile(path):
        raise ImportRefused(f"cannot import '{path}': no such file", INPUT)
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportRefused(f"cannot import '{path}': not a Python source file", INPUT)
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    sys.modules[name] = module   # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _load_factory(target: str) -> object:
    """`MODULE:FACTORY` imported from the current directory or the path, or `FILE.py:FACTORY`
    loaded from that file."""
    module_name, _, attr = target.rpartition(":")
    if not module_name or not attr:
        raise ImportRefused(f"'{target}' is not MODULE:FACTORY (e.g. mymodels:make_gpt2, "
                            "models/gpt.py:make_gpt2)", INPUT)
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        obj: object = _import_file(module_name) if _is_file(module_name) else \
            importlib.import_module(module_name)
    except ImportRefused:
        raise
    except Exception as e:   # the user's module: any failure is the user's to see
        raise ImportRefused(f"cannot import module '{module_name}': {type(e).__name__}: {e}",
                            INPUT) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ImportRefused(f"module '{module_name}' has no attribute '{attr}'", INPUT)
        obj = getattr(obj, part)
    return obj


# Warnings torch and its companions raise about their own internals while exporting (pytree's
# `LeafSpec` deprecation, raised through copyreg by run_decompositions; torchvision's extension
# notes): nothing the user of lamina-import can act on, so not printed on Lamina's stderr. A
# warning attributed to the user's own model code still shows.
_TORCH_INTERNALS = r"(torch|torchvision|torchaudio|copyreg|functorch)(\.|$)"


@contextlib.contextmanager
def torch_quiet() -> Iterator[None]:
    """Inside: torch's internal Future/Deprecation/User warnings are not shown (see above)."""
    with warnings.catch_warnings():
        for category in (FutureWarning, DeprecationWarning, UserWarning):
            warnings.filterwarnings("ignore", category=category, module=_TORCH_INTERNALS)
        yield


def export_factory(target: str, args: Sequence[torch.Tensor], train: bool = False,
                   decompose: bool = False) -> ExportedProgram:
    """torch.export of the nn.Module that `MODULE:FACTORY()` returns, in eval (or train) mode."""
    factory = _load_factory(target)
    if not callable(factory):
        raise ImportRefused(f"'{target}' is not callable", INPUT)
    try:
        model = factory()
    except Exception as e:
        raise ImportRefused(f"{target}() failed: {type(e).__name__}: {e}", INPUT) from None
    if not isinstance(model, torch.nn.Module):
        raise ImportRefused(f"{target}() returned {with_article(type(model).__name__)}, not a "
                            "torch.nn.Module", INPUT)
    model.train(train)
    try:
        with torch_quiet():
            ep = torch.export.export(model, tuple(args))
            return ep.run_decompositions() if decompose else ep
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ImportRefused(f"torch.export failed for {target}(): {type(e).__name__}: {first}",
                            ATTRIBUTE) from None
