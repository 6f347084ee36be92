"""`lamina.compile`: a function of a verified module compiled once, as an `Executable` to call many times.

Everything that depends only on the program, its types and the options happens in `compile`:
verification, the backend's support check, and the backend's own preparation (the NumPy
interpreter's flat list of prepared steps, the compiled backend's kernels bound, the JAX
backend's function traced, lowered and compiled by XLA for these shapes and devices). A call
checks its inputs against the argument types and runs the kernels.

The executable owns a copy of the module taken at `compile`: changing the module afterwards
(`lamina.apply` rewrites it in place) never changes what an executable runs.

Donation: `donate=True` (every argument the step's `lamina.updates` attribute names) or
`donate=("w1", ...)` lets the result that updates an argument take the argument's buffer. On the
NumPy and compiled backends the returned array *is* the input array, updated in place (the
caller's array changes; it must be C-contiguous, writeable, of the argument's storage dtype and
share no memory with another input). On JAX the argument is donated to XLA (`donate_argnums`): a
`jax.Array` passed for it is deleted by the call (reading it raises, as in JAX) and the result
takes its device memory; a NumPy array passed for it is copied to the device first, so the
caller's array is left as it was and donation saves nothing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from lamina.ir.core.diagnostics import LaminaError

if TYPE_CHECKING:
    import numpy as np
    from lamina.backends.interface import MemoryTrace, Program
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.dialects.func import FuncOp


class Outputs(dict[str, Any]):
    """A run's results by name (`lamina.ir.text.result_names`: `%loss` -> "loss", unnamed -> `out<i>`),
    in result order. `out<i>` also finds result i when it is called otherwise: a lookup only, so
    iterating, `keys()` and `len` see each result once, under its name."""

    def __missing__(self, key: str) -> Any:
        values = list(self.values())
        if isinstance(key, str) and key.startswith("out") and key[3:].isdigit() and \
                int(key[3:]) < len(values) and key == f"out{int(key[3:])}":
            return values[int(key[3:])]
        raise KeyError(f"no result '{key}' (results: {', '.join(self) or 'none'})")

    def __contains__(self, key: object) -> bool:
        try:
            self[key]  # type: ignore[index]
        except KeyError:
            return False
        return True

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return self[key] if key in self else default


@dataclass
class Run:
    """What a run gives back: one array per function result, by name (`Outputs`),
    the statistics `lamina-run --stats-json` writes (fields: the README's "Run statistics"), and
    notes about how the program ran when that differs from how it is written (a partially placed
    program runs on one device with its placements ignored)."""

    outputs: Outputs
    stats: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    explain: list[str] = field(default_factory=list)   # the backend's own decisions (--explain)
    memory: MemoryTrace | None = None                  # bytes per tier over time (NumPy only)


Inputs = Mapping[str, Any] | Sequence[Any]


class Executable:
    """A function compiled by `lamina.compile`; call it with its inputs (by argument name, or
    positionally) to get a `Run`. A bad call (a missing, extra or misshapen input, a donated
    buffer that cannot be updated in place) raises `LaminaError` naming the argument, and the
    executable stays usable."""

    def __init__(self, func: FuncOp, backend: str, program: Program, donated: tuple[str, ...],
                 compile_seconds: float):
        from lamina.analysis.zero_bytes import step_stats
        from lamina.backends.interface import arg_names, output_names

        self.entry: str = func.sym_name.data
        self.backend = backend
        self.arg_names: list[str] = arg_names(func)
        self.output_names: list[str] = output_names(func)
        self.donated = donated
        self.compile_seconds = compile_seconds
        self._step_stats = step_stats(func)   # a training step's ZeRO bytes (param_bytes, ...)
        self._program = program
        self._index = {n: i for i, n in enumerate(self.arg_names)}

    @property
    def memory_plan(self) -> dict[str, Any] | None:
        """The static memory plan the NumPy and compiled backends made at compile time (the
        `arena` statistic: arena per tier against the peak of live bytes, and what a call still
        allocates); None where the backend plans its own buffers (JAX: XLA) or the function runs
        on a simulated mesh."""
        arena = getattr(self._program, "arena", None)
        return arena.report() if arena is not None else None

    def __repr__(self) -> str:
        return (f"<lamina.Executable @{self.entry} on {self.backend}: "
                f"({', '.join(self.arg_names)}) -> ({', '.join(self.output_names)})>")

    def _arrays(self, args: tuple[Any, ...]) -> Sequence[Any]:
        if len(args) == 1 and type(args[0]) in (list, tuple):   # positional: no ABC check
            args = tuple(args[0])
        elif len(args) == 1 and isinstance(args[0], Mapping):
            given: Mapping[str, Any] = args[0]
            names = self.arg_names
            if len(given) == len(names):
                try:
                    return [given[n] for n in names]
                except KeyError:
                    pass
            missing = [n for n in names if n not in given]
            extra = sorted(str(k) for k in given if k not in self._index)
            raise LaminaError(f"inputs for @{self.entry} must be exactly its arguments "
                              f"({', '.join(names)}); missing: {', '.join(missing) or 'none'}"
                              f", unknown: {', '.join(extra) or 'none'}")
        elif len(args) == 1 and isinstance(args[0], list | tuple):   # a list or tuple subclass
            args = tuple(args[0])
        if len(args) != len(self.arg_names):
            raise LaminaError(f"@{self.entry} takes {len(self.arg_names)} inputs "
                              f"({', '.join(self.arg_names)}), got {len(args)}")
        return args

    def __call__(self, *inputs: Any) -> Run:
        """`exe({"x": x, ...})`, `exe([x, ...])` or `exe(x, ...)`: one run of the kernels."""
        result = self._program(self._arrays(inputs))
        stats = result.stats
        stats["compile_seconds"] = self.compile_seconds
        stats.update(self._step_stats)
        return Run(Outputs(zip(self.output_names, result.outputs, strict=True)), stats,
                   result.notes, result.explain, result.memory)


def _backend_options(backend: Any, options: dict[str, Any]) -> Any:
    """The backend's options object from `lamina.compile`'s keywords (a target by name or path
    is loaded); an option the backend does not take is one diagnostic listing those it does."""
    from lamina.ir.mesh.target import load_target

    cls = backend.Options
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(options) - set(known))
    if unknown:
        if unknown == ["target"] and backend.name == "jax":
            raise LaminaError(f"backend 'jax' does not check memory-tier capacities (target "
                              f"'{getattr(options['target'], 'name', options['target'])}'): XLA "
                              "owns the buffers; use backend 'numpy' for checked execution")
        raise LaminaError(f"backend '{backend.name}' has no option {', '.join(map(repr, unknown))}"
                          f" (its options: {', '.join(known) or 'none'})")
    if isinstance(options.get("target"), str):
        options = {**options, "target": load_target(options["target"])}
    return cls(**options)


def _donated(func: FuncOp, donate: bool | Sequence[str]) -> dict[int, str]:
    """Argument index -> name of every donated argument; each must be one a result updates."""
    from lamina.backends.interface import arg_names
    from lamina.ir.buffers.updates import updates_of

    names = arg_names(func)
    updated = {a: r for r, a in updates_of(func).items()}
    if donate is False:
        return {}
    if donate is True:
        if not updated:
            raise LaminaError(f"donate=True: @{func.sym_name.data} has no 'lamina.updates' "
                              "attribute naming the arguments its results update (append-optimizer"
                              " writes one)")
        return {i: names[i] for i in sorted(updated)}
    if isinstance(donate, str):
        donate = (donate,)
    out: dict[int, str] = {}
    for n in donate:
        if n not in names:
            raise LaminaError(f"donate: @{func.sym_name.data} has no argument '{n}' (arguments: "
                              f"{', '.join(names)})")
        i = names.index(n)
        if i not in updated:
            raise LaminaError(f"donate: no result of @{func.sym_name.data} updates argument '{n}'"
                              " (its 'lamina.updates' attribute names "
                              f"{', '.join(names[a] for a in sorted(updated)) or 'none'}), so no "
                              "output can take its buffer")
        out[i] = n
    return out


def compile(module: ModuleOp, entry: str | None = None, backend: str = "numpy",
            donate: bool | Sequence[str] = False, warmup: bool = True,
            **options: Any) -> Executable:
    """Compile function `entry` (the only one by default) of `module` for `backend`, once.

    `options` are the backend's (`NumpyOptions`: threads, tile_bytes, target; the compiled
    backend's are the same; `JaxOptions`: devices, coordinator, num_processes, process_id;
    `IreeOptions`: iree_target, "llvm-cpu" or "cuda"; IREE compiles the `-t linalg` export).
    `donate` lets updated arguments' buffers be reused (see the module docstring). `warmup`
    (default) makes the NumPy backends' checked call here, on zeros of the argument types, so
    that every call runs the prepared steps alone; `warmup=False` leaves it to the first call,
    on that call's inputs, which is cheaper for a program called once (`lamina.run` does so;
    the compiled backend warms up regardless: that call compiles its kernels)."""
    from lamina.backends.interface import check_supported, find_entry
    from lamina.backends.registry import get_backend
    from lamina.ir.text.source import verify

    start = time.perf_counter()
    chosen = get_backend(backend)
    opts = _backend_options(chosen, dict(options))
    own = module.clone()
    verify(own)
    func = find_entry(own, entry)
    check_supported(chosen, func)
    donated = _donated(func, donate)
    program = chosen.compile(own, func, opts, frozenset(donated), warmup)
    return Executable(func, backend, program, tuple(donated.values()),
                      time.perf_counter() - start)


def random_arrays(module: ModuleOp, entry: str | None, seed: int) -> list[np.ndarray]:
    """The inputs `lamina-run --seed` draws for `entry`, in argument order."""
    from lamina.backends.inputs import random_inputs
    from lamina.backends.interface import find_entry

    return random_inputs(find_entry(module, entry), seed)
