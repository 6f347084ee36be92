"""What every Lamina backend offers: run one function of a module on host arrays.

The NumPy interpreter is the first backend; a JAX `shard_map` engine is planned. Both take the same
verified module, the entry function's name and one array per argument, and give back one array per
result plus a dictionary of statistics (the `--stats-json` payload). Keep backend-specific types out
of this interface.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from lamina.ir.diagnostics import LaminaError
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp


@dataclass
class RunResult:
    outputs: list[np.ndarray]
    stats: dict[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    name: str

    def run(self, module: ModuleOp, entry: str, inputs: Sequence[np.ndarray]) -> RunResult: ...


def functions(module: ModuleOp) -> list[FuncOp]:
    return [op for op in module.ops if isinstance(op, FuncOp)]


def find_entry(module: ModuleOp, entry: str | None) -> FuncOp:
    """The function named `entry`, or the module's only function when `entry` is None."""
    funcs = functions(module)
    if entry is None:
        if len(funcs) == 1:
            return funcs[0]
        names = ", ".join(f.sym_name.data for f in funcs) or "none"
        raise LaminaError(f"the module has {len(funcs)} functions ({names}); choose one with "
                          f"--entry")
    for f in funcs:
        if f.sym_name.data == entry:
            return f
    names = ", ".join(f.sym_name.data for f in funcs) or "none"
    raise LaminaError(f"no function named '{entry}' (functions: {names})")


def arg_names(func: FuncOp) -> list[str]:
    """Argument names as written in the source (`%x` -> "x"), `arg<i>` where none was written."""
    return [a.name_hint or f"arg{i}" for i, a in enumerate(func.body.block.args)]


def output_names(func: FuncOp) -> list[str]:
    return [f"out{i}" for i in range(len(func.function_type.outputs.data))]
