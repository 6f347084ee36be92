"""What every Lamina backend offers: run one function of a verified module on host arrays.

A backend is one folder under `backends/` and one line in `lamina.backends.registry`. It is a class
with a `name`, the set of program `features` it can run, and `run(module, entry, inputs, options)`
returning one host array per function result plus a dictionary of statistics (the `--stats-json`
payload). Before a backend runs a program, `check_supported` compares what the program uses with
what the backend declares, so an unsupported feature is one diagnostic naming the backend and the
first op that needs it, never a failure half-way through a run.

Options that only some backends use (the NumPy interpreter's tile-loop threads, the JAX backend's
device count) travel in `RunOptions`; a backend reads what it understands and says nothing about the
rest. Nothing backend-specific (arrays of another library, device handles) crosses this interface:
inputs and outputs are NumPy arrays in Lamina's storage dtypes (`lamina.ir.dtypes.STORAGE`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Protocol

import numpy as np
from lamina.ir.collectives import PlacementOp
from lamina.ir.diagnostics import LaminaError, error_at, note_at
from lamina.ir.fused import FusedOp
from lamina.ir.memory import FreeOp, MoveOp
from lamina.ir.placement import place_of
from lamina.ir.target import Target
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation


class Feature(Enum):
    """A kind of program a backend may or may not run (values: how diagnostics name them)."""

    PLACED = "placed programs (values on a device mesh, collectives)"
    FUSED = "fused kernels (lamina.fused)"
    TIERS = "memory tiers (lamina.move, values outside hbm)"
    LIFETIMES = "explicit lifetimes (lamina.free)"


@dataclass(frozen=True)
class RunOptions:
    """How to run: options every backend understands, and ones only some use.

    threads     NumPy: threads for fused kernels' tile loops (None: LAMINA_FUSED_THREADS, else
                one per core); results never depend on it
    tile_bytes  NumPy: bytes per tile buffer of a fused kernel (None: the measured defaults)
    target      check every tier's capacity against this target while running (checked execution)
    devices     JAX: devices to run on, per process (None: the mesh's size); on CPU, the host
                device count XLA is started with
    repeats     JAX: timed runs after the first, which compiles (their median is reported)
    coordinator JAX multi-process: the coordinator's host:port (process 0 serves it); None runs
                in this process alone
    num_processes  JAX multi-process: how many processes take part (with `coordinator`)
    process_id  JAX multi-process: this process's number, 0 .. num_processes-1
    """

    threads: int | None = None
    tile_bytes: int | None = None
    target: Target | None = None
    devices: int | None = None
    repeats: int = 1
    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None


@dataclass
class MemoryTrace:
    """Bytes per tier per device at every program point of a run (for `--memory-plot`).

    `timeline[i][tier]` is the bytes live in `tier` after point `labels[i]`; `moves` lists
    (point, source tier, destination tier, bytes) of every `lamina.move`; `capacities` the
    target's capacity per tier (empty without a target)."""

    timeline: list[dict[str, int]]
    labels: list[str]
    moves: list[tuple[int, str, str, int]]
    capacities: dict[str, float]


@dataclass
class RunResult:
    """One array per function result, the statistics (the `--stats-json` payload), the memory
    trace when the backend records one, notes: one line each about how the program was run
    when that differs from how it is written (the tools print them on stderr), and the lines in
    which the backend explains its own choices (`--explain`: a kernel it could not compile, and
    why)."""

    outputs: list[np.ndarray]
    stats: dict[str, Any] = field(default_factory=dict)
    memory: MemoryTrace | None = None
    notes: list[str] = field(default_factory=list)
    explain: list[str] = field(default_factory=list)


class Backend(Protocol):
    """A Lamina backend (see the module docstring)."""

    name: ClassVar[str]
    features: ClassVar[frozenset[Feature]]

    def run(self, module: ModuleOp, entry: str | None, inputs: Sequence[np.ndarray],
            options: RunOptions) -> RunResult: ...


def functions(module: ModuleOp) -> list[FuncOp]:
    return [op for op in module.ops if isinstance(op, FuncOp)]


def signature(func: FuncOp) -> str:
    """`@name(%x: T, ...) -> R` as written, for messages that list functions."""
    args = ", ".join(f"%{n}: {t}" for n, t in zip(arg_names(func), func.function_type.inputs.data,
                                                  strict=True))
    outs = [str(t) for t in func.function_type.outputs.data]
    result = outs[0] if len(outs) == 1 else f"({', '.join(outs)})"
    return f"@{func.sym_name.data}({args}) -> {result}"


def find_entry(module: ModuleOp, entry: str | None) -> FuncOp:
    """The function named `entry`, or the module's only function when `entry` is None; when
    neither is found, the diagnostic lists every function with its signature, as notes at each."""
    funcs = functions(module)
    if not funcs:
        raise LaminaError("the module has no function to run")
    if entry is None and len(funcs) == 1:
        return funcs[0]
    for f in funcs:
        if f.sym_name.data == entry:
            return f
    names = ", ".join(f.sym_name.data for f in funcs)
    notes = [note_at(f, signature(f)) for f in funcs]
    if entry is None:
        raise LaminaError(f"the module has {len(funcs)} functions ({names}); choose one with "
                          "--entry", notes=notes)
    raise LaminaError(f"no function named '{entry}' (functions: {names})", notes=notes)


def arg_names(func: FuncOp) -> list[str]:
    """Argument names as written in the source (`%x` -> "x"), `arg<i>` where none was written."""
    return [a.name_hint or f"arg{i}" for i, a in enumerate(func.body.block.args)]


def output_names(func: FuncOp) -> list[str]:
    return [f"out{i}" for i in range(len(func.function_type.outputs.data))]


def _op_features(op: Operation) -> list[Feature]:
    found: list[Feature] = []
    if isinstance(op, FusedOp):
        found.append(Feature.FUSED)
    if isinstance(op, MoveOp):
        found.append(Feature.TIERS)
    if isinstance(op, FreeOp):
        found.append(Feature.LIFETIMES)
    if isinstance(op, PlacementOp):
        found.append(Feature.PLACED)
    for v in op.results:
        place = place_of(v.type)
        if place is not None and place.mesh_name is not None:
            found.append(Feature.PLACED)
    return found


def required_features(func: FuncOp) -> dict[Feature, Operation]:
    """Every feature `func` uses, with the first op (in program order) that needs it."""
    found: dict[Feature, Operation] = {}
    for t in func.function_type.inputs.data:
        place = place_of(t)
        if place is not None and place.mesh_name is not None:
            found.setdefault(Feature.PLACED, func)
    for op in func.walk():
        for f in _op_features(op):
            found.setdefault(f, op)
    return found


def check_supported(backend: Backend, func: FuncOp) -> None:
    """A diagnostic at the first op of `func` that needs a feature `backend` does not have."""
    for feature, op in required_features(func).items():
        if feature not in backend.features:
            what = f"@{func.sym_name.data}" if op is func else op.name
            raise error_at(op, f"backend '{backend.name}' does not support {feature.value}: "
                           f"{what} needs it")
