"""The NumPy interpreter as a `Backend`: every feature, checked execution, every device simulated.

A function with placed values runs on every device of its mesh (`spmd`), anything else on whole
arrays (`runner`); either way every run is checked execution (`memory.MemoryChecker`): a use
after `lamina.free`, a double free or a compute op touching a host/nvme value is an error at the
op, and with `RunOptions.target` so is a tier's capacity overflow.

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
from lamina.analysis.placed import first_unplaced, partly_placed_note, placed_mesh
from lamina.backends.interface import Feature, RunOptions, RunResult, find_entry
from lamina.backends.numpy.memory import MemoryChecker
from lamina.backends.numpy.runner import OpRunner, run_function
from lamina.backends.numpy.spmd import run_spmd
from lamina.backends.numpy.tile_threads import thread_count
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation


class NumpyBackend:
    """Lamina's reference interpreter (see the module docstring)."""

    name: ClassVar[str] = "numpy"
    features: ClassVar[frozenset[Feature]] = frozenset(Feature)
    # op types a backend built on this one runs its own way on whole arrays (placed programs'
    # devices always run the interpreter's runners)
    op_runners: ClassVar[dict[type[Operation], OpRunner]] = {}

    def run(self, module: ModuleOp, entry: str | None, inputs: Sequence[np.ndarray],
            options: RunOptions) -> RunResult:
        thread_count(options)   # a bad LAMINA_FUSED_THREADS is reported before any work
        func = find_entry(module, entry)
        mesh = placed_mesh(func)
        gap = first_unplaced(func) if mesh is not None else None
        checker = MemoryChecker(options.target, whole_arrays=gap is not None)
        if mesh is not None and gap is None:
            result = run_spmd(func, inputs, mesh, observer=checker, options=options)
        else:
            result = run_function(func, inputs, observer=checker, options=options,
                                      runners=self.op_runners)
        if gap is not None:
            result.notes.append(partly_placed_note(func, gap))
        result.stats.update(checker.stats())
        result.memory = checker.trace()
        return result


def reference_run(module: ModuleOp, entry: str | None, inputs: Sequence[np.ndarray]) -> RunResult:
    """The run every other is checked against (`--check`): whole arrays, one device, placements
    read as the identity they are on whole arrays."""
    return run_function(find_entry(module, entry), inputs)
