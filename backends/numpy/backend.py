"""The NumPy interpreter as a `Backend`: every feature, checked execution, every device simulated.

A function with placed values runs on every device of its mesh (`spmd`), anything else on whole
arrays (`runner`); either way every run is checked execution (`memory.MemoryChecker`): a use
after `lamina.free`, a double free or a compute op touching a host/nvme value is an error at the
op, and with `NumpyOptions.target` so is a tier's capacity overflow.

A partially placed function (placements written on some values, e.g. only on the inputs, before
`propagate-sharding` placed the rest) cannot run on its mesh, since the unplaced values do not say
where they live. It runs on one device, whole arrays, with its placements ignored (read as the
identity they are on whole arrays, as the `--check` reference run reads them), and the result
carries a one-line note saying so and naming the first unplaced value: any program runs, before
or after any pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from lamina.backends.interface import Feature, RunResult, find_entry
from lamina.backends.numpy.options import NumpyOptions
from lamina.backends.numpy.program import NumpyProgram
from lamina.backends.numpy.runner import OpRunner, run_function
from lamina.ir.buffers.updates import updates_of
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation


class NumpyBackend:
    """Lamina's reference interpreter (see the module docstring)."""

    name: ClassVar[str] = "numpy"
    features: ClassVar[frozenset[Feature]] = frozenset(Feature)
    Options: ClassVar[type[NumpyOptions]] = NumpyOptions
    # op types a backend built on this one runs its own way on whole arrays (placed programs'
    # devices always run the interpreter's runners)
    op_runners: ClassVar[dict[type[Operation], OpRunner]] = {}
    # a fused kernel that fits one tile runs as its body's steps (the compiled backend compiles it)
    whole_small_fused: ClassVar[bool] = True
    # the checked call made at compile time even when `warmup` is False (the compiled backend:
    # that call compiles its kernels, which the first real call must not wait for)
    warm: ClassVar[bool] = False

    def compile(self, module: ModuleOp, func: FuncOp, options: NumpyOptions,
                donate: frozenset[int] = frozenset(), warmup: bool = True) -> NumpyProgram:
        """`func` as prepared steps; with `warmup` the checked call (checked execution, every
        statistic, its plans kept) is made now, on zeros of the argument types, so every call
        runs the steps alone; without it, the first call is the checked one, on its own inputs
        (what a single run wants: `lamina.run`, `lamina-run`)."""
        by_arg = {a: r for r, a in updates_of(func).items()}
        return NumpyProgram(func, options, self.op_runners, {i: by_arg[i] for i in donate},
                            self.whole_small_fused, self.warm or warmup)


def reference_run(module: ModuleOp, entry: str | None, inputs: Sequence[np.ndarray]) -> RunResult:
    """The run every other is checked against (`--check`): whole arrays, one device, placements
    read as the identity they are on whole arrays."""
    return run_function(find_entry(module, entry), inputs)
