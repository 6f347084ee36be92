"""Lamina: a compiler IR for large-model training, on xDSL.

The Python API, for scripts and notebooks (the command-line tools are `lamina.cli`):

    import lamina
    module = lamina.load("samples/mlp_block.mlir")            # parse and verify
    lamina.apply(module, "fuse-elementwise,annotate-lifetimes")  # a pass pipeline, verified after each pass
    print(lamina.to_text(module))                              # the MLIR text
    x = lamina.inputs(module)                                  # random inputs by argument name
    run = lamina.run(module, x)                                # NumPy in, NumPy out
    run.outputs["out0"], run.stats
    exe = lamina.compile(module, backend="compiled")           # compile once ...
    exe(x).outputs["out0"]                                     # ... call many times
    trainer = lamina.train(module, {"x": xs, "y": ys}, steps=50)  # a forward function's loss, trained

The README's "Python API" section is the tutorial; its code is run by the tests.

Every failure raises `lamina.LaminaError`, whose `str()` is the one-line diagnostic the tools print.
The package's layers (each imports only those below it): `lamina.ir` (dialect, op table, types,
targets) <- `lamina.analysis` (what passes and backends share) <- `lamina.passes` |
`lamina.backends` | `lamina.frontends` <- `lamina.cli` and this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lamina.executable import Executable, Run, compile, random_arrays
from lamina.ir.core.diagnostics import LaminaError
from lamina.training import NonFiniteLoss, StepRecord, Trainer, train

if TYPE_CHECKING:
    import numpy as np
    from xdsl.dialects.builtin import ModuleOp

__version__ = "0.2.0"

__all__ = ["Executable", "LaminaError", "NonFiniteLoss", "Run", "StepRecord", "Trainer",
           "__version__", "apply", "compile", "inputs", "load", "parse", "run", "to_text", "train",
           "verify"]


def parse(text: str, name: str = "<string>") -> ModuleOp:
    """Parse and verify a program written in Lamina's MLIR text format."""
    from lamina.ir.text.source import parse_text
    from lamina.ir.text.source import verify as verify_module

    module = parse_text(text, name)
    verify_module(module)
    return module


def load(path: str) -> ModuleOp:
    """Read, parse and verify the program in the file `path`."""
    from lamina.ir.text.source import load as load_module

    return load_module(path)


def verify(module: ModuleOp) -> None:
    """Check every op, type and placement rule; the first failure raises LaminaError."""
    from lamina.ir.text.source import verify as verify_module

    verify_module(module)


def __getattr__(name: str) -> Any:
    """`lamina.frontends` on first use (`lamina.frontends.torch.import_exported(ep)` after a
    plain `import lamina`), without loading torch or onnx when a script does not use them."""
    if name == "frontends":
        import importlib

        return importlib.import_module("lamina.frontends")
    raise AttributeError(f"module 'lamina' has no attribute '{name}'")


def to_text(module: ModuleOp, generic: bool = False) -> str:
    """The program as MLIR text (Lamina's custom syntax, or MLIR's generic form)."""
    import io

    from xdsl.printer import Printer

    out = io.StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(module)
    return out.getvalue() + "\n"


def apply(module: ModuleOp, pipeline: str, explain: bool = False) -> ModuleOp:
    """Run a pass pipeline (`lamina-opt -p` syntax) on `module` in place and return it.

    The module is verified after every pass; with `explain=True` the passes write their
    decisions to stderr, as `--explain` does."""
    from lamina.ir.text.source import make_context
    from lamina.passes.pipeline import build_pipeline, run_pipeline

    run_pipeline(make_context(), module, build_pipeline(pipeline, explain=explain))
    return module


def inputs(module: ModuleOp, entry: str | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """The random inputs `lamina-run --seed` would draw for function `entry`, by argument name
    (`x` for `%x`): a starting point to edit, and what `lamina-run --write-inputs` saves."""
    from lamina.backends.inputs import input_keys, random_inputs
    from lamina.backends.interface import find_entry

    func = find_entry(module, entry)
    return dict(zip(input_keys(func), random_inputs(func, seed), strict=True))


def run(module: ModuleOp, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray] | None = None,
        entry: str | None = None, backend: str = "numpy", seed: int = 0,
        **options: Any) -> Run:
    """Run function `entry` (the only one by default) of a verified module on a backend once:
    `compile(module, entry, backend, **options)` and one call (to call a program many times,
    compile it once and call the `Executable`).

    `inputs` maps argument names (`x` for `%x`) to arrays, or lists them in order; None draws
    them from the argument types and `seed`, as `lamina-run` does. `options` are the backend's
    (`lamina.compile` lists them)."""
    exe = compile(module, entry, backend, warmup=False, **options)
    return exe(random_arrays(module, entry, seed) if inputs is None else inputs)
