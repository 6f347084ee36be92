"""What every Lamina backend offers: compile one function of a verified module once, call it many times.

A backend is one folder under `backends/` and one line in `lamina.backends.registry`. It is a class
with a `name`, the set of program `features` it can run, its options type (`Options`, a frozen
dataclass: the keywords `lamina.compile` takes for it) and `compile(module, func, options,
donate)`, which does everything that depends only on the program, its types and the options, and
returns a `Program`. Calling the program with one array per argument runs only the kernels and
returns a `RunResult`: one array per function result plus the statistics (the `--stats-json`
payload). Before a backend compiles a program, `check_supported` compares what the program uses
with what the backend declares, so an unsupported feature is one diagnostic naming the backend and
the first op that needs it, never a failure half-way through a run.

`donate` names the arguments (by index) whose buffers the results that update them
(`lamina.ir.buffers.updates`) may take: on the NumPy backends the returned array is the input array,
updated in place; on JAX the argument is donated to XLA (`donate_argnums`).

Inputs and outputs are NumPy arrays in Lamina's storage dtypes (`lamina.ir.core.dtypes.STORAGE`); a
backend with device-resident arrays of its own (JAX) also accepts and returns those.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Protocol

import numpy as np
from lamina.ir.buffers.memory import FreeOp, MoveOp
from lamina.ir.core.diagnostics import LaminaError, Note, SourceLoc, error_at, note_at
from lamina.ir.mesh.collectives import PlacementOp
from lamina.ir.mesh.placement import place_of
from lamina.ir.ops.fused import FusedOp
from lamina.ir.text.result_names import result_names
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation


class Feature(Enum):
    """A kind of program a backend may or may not run (values: how diagnostics name them)."""

    PLACED = "placed programs (values on a device mesh, collectives)"
    FUSED = "fused kernels (lamina.fused)"
    TIERS = "memory tiers (lamina.move, values outside hbm)"
    LIFETIMES = "explicit lifetimes (lamina.free)"


class TierOverflow(LaminaError):
    """Checked execution found a memory tier over its capacity (`--target`): which tier, the
    bytes per device live there and the capacity. A class of its own so that a caller running
    the program for a purpose of its own (`lamina.Trainer`: a training step) can say which step
    overflowed without reading the message."""

    def __init__(self, message: str, loc: SourceLoc | None, tier: str, live: int,
                 capacity: int, target: str, notes: Sequence[str | Note] = ()):
        super().__init__(message, loc, notes)
        self.tier, self.live, self.capacity, self.target = tier, live, capacity, target


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


class Program(Protocol):
    """One function compiled by a backend for its argument types and options: call it with one
    array per argument (checked against the types: a bad one is a LaminaError naming it, and the
    program stays usable)."""

    def __call__(self, inputs: Sequence[Any]) -> RunResult: ...


class Backend(Protocol):
    """A Lamina backend (see the module docstring)."""

    name: ClassVar[str]
    features: ClassVar[frozenset[Feature]]
    Options: ClassVar[type[Any]]

    def compile(self, module: ModuleOp, func: FuncOp, options: Any,
                donate: frozenset[int] = frozenset(), warmup: bool = True) -> Program: ...


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
        raise error_at(module, "the module has no function to run")
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
    """Each result's name (`lamina.ir.text.result_names`)."""
    return result_names(func)


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
