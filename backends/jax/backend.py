"""The JAX backend: a Lamina function compiled by XLA, placed programs as one `jax.shard_map`.

    lamina-run FILE --backend jax [-p PIPELINE] [--devices N] [--repeats N] [--stats-json OUT]

An unplaced function is one `jax.jit` of the whole function (`lamina.backends.jax.lower`). A
placed function is one `jax.jit(jax.shard_map(...))` over a `jax.sharding.Mesh` of the first
`mesh.devices` devices reshaped to the mesh's sizes, with its axis names (device d sits at the
row-major coordinates Lamina's SPMD runner gives it); arguments enter with the PartitionSpec of
their placement and results leave with theirs (`lamina.backends.jax.collectives`). shard_map runs
with `check_vma=False`: Lamina's verifier has already checked every placement, and jax's own
replication tracking would otherwise insert conversions of its own. Nothing is left to GSPMD: the
compiled HLO holds exactly the collectives Lamina inserted (`plan.expected_hlo`), reported in the
statistics next to Lamina's list.

Numerics: the op table's formulas on `jax.numpy`, with JAX's 64-bit types enabled for the run
(dropout's uint64 element index, erf in float64; every Lamina dtype is explicit, so nothing else
changes) and XLA's excess precision off (`xla_allow_excess_precision=false`), so f16/bf16 ops
round once per op as in the interpreter. bf16 values are native bfloat16 on the device and
float32 arrays (rounded) at this interface.

Memory tiers: where the device has a `pinned_host` memory kind, `lamina.move` to `host` is
`jax.device_put` to that memory and to `hbm` back to device memory (on CPU both are the same RAM
and XLA compiles the moves to no copies); where it has none, moves are no-ops; either way the run
says so once in the result's `notes`. `nvme` and `sram` are statements of the plan, not backend
actions, and `lamina.free` is a no-op under jit (XLA owns the buffers). Tier capacities (`--target`) are not
checked on this backend: that is the NumPy interpreter's checked execution.

Statistics: `backend`, `platform`, `devices`, `processes`, `compile_seconds`, `run_seconds`
(median of `--repeats N` timed calls after the first), `run_seconds_all`, and for placed
functions `collectives` (Lamina's plan, `plan.planned`), `comm_bytes_per_device`,
`hlo_collectives` (kind, replica groups, shape, bytes; `hlo.collectives`),
`hlo_comm_bytes_per_device`, `hlo_matches_plan` with the differences `hlo_extra` / `hlo_missing`
(`plan.difference`) and `lowered_matches_plan` (the HLO before XLA's optimizations).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from lamina.analysis.placed import first_unplaced, partly_placed_note, placed_mesh
from lamina.backends.arrays import assemble, check_inputs
from lamina.backends.interface import Feature, RunResult, arg_names
from lamina.backends.jax import collectives as coll
from lamina.backends.jax import devices as devs
from lamina.backends.jax import hlo, plan
from lamina.backends.jax.devices import Device
from lamina.backends.jax.lower import Lowering, Moves, unsupported_op
from lamina.backends.jax.options import JaxOptions
from lamina.ir.buffers.memory import MoveOp
from lamina.ir.core.diagnostics import LaminaError, error_at
from lamina.ir.core.dtypes import STORAGE
from lamina.ir.mesh.placement import Mesh, spec_or_replicated, stage_of
from lamina.ir.ops.formulas import native_dtype
from lamina.ir.ops.opbase import tensor_info
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp

# XLA options for every compilation: no excess precision (f16/bf16 round once per op, as the
# interpreter does; XLA otherwise may skip roundings it inserted itself), and none of XLA's
# collective combiners: which collectives to merge into one is insert-collectives' bucketing
# decision, made with the target's cost model (XLA:CPU would merge every independent all-reduce)
NO_COMBINERS = ("all-reduce-combiner,cpu-all-reduce-combiner,all-gather-combiner,"
                "reduce-scatter-combiner")
COMPILER_OPTIONS: dict[str, str | bool] = {"xla_allow_excess_precision": False,
                                           "xla_disable_hlo_passes": NO_COMBINERS}


def memory_moves(device: Device, func: FuncOp) -> tuple[Moves, list[str]]:
    """How `lamina.move` runs on `device`'s platform, and the note saying so (if it has moves)."""
    kinds = {m.kind for m in device.addressable_memories()}
    has_moves = any(isinstance(op, MoveOp) for op in func.walk())
    if "pinned_host" not in kinds:
        note = f"platform '{device.platform}' has no host memory kind: lamina.move runs as a no-op"
        return (lambda x, tier: x), [note] if has_moves else []

    def move(x: jax.Array, tier: str) -> jax.Array:
        if tier == "host":
            return jax.device_put(x, jax.memory.Space.Host)
        if tier == "hbm":
            return jax.device_put(x, jax.memory.Space.Device)
        return x   # sram, nvme: the plan's statements, no backend action

    note = "lamina.move to host is device_put to memory kind 'pinned_host', to hbm back to 'device'"
    if device.platform == "cpu":
        note += "; on cpu both are the same RAM and XLA compiles the moves to no copies"
    return move, [note] if has_moves else []


class Program:
    """One function traced for JAX: the jitted callable, and how values enter and leave it."""

    def __init__(self, func: FuncOp, mesh: Mesh | None, devices: list[Device], moves: Moves,
                 donate: tuple[int, ...] = ()):
        self.func = func
        self.mesh = mesh
        self.arg_types = list(func.function_type.inputs.data)
        self.res_types = list(func.function_type.outputs.data)
        lowering = Lowering(func, mesh, moves)
        self.jmesh: jax.sharding.Mesh | None = None
        self.lowered_hlo: str | None = None   # the HLO handed to XLA (placed programs)
        if mesh is None:
            self.jitted = jax.jit(lowering, donate_argnums=donate)
            self.in_shardings: list[jax.sharding.Sharding] = [
                jax.sharding.SingleDeviceSharding(devices[0])] * len(self.arg_types)
            return
        self.jmesh = jax.sharding.Mesh(np.array(devices).reshape(mesh.sizes), mesh.axes)
        ins = [coll.in_spec(spec_or_replicated(t)) for t in self.arg_types]
        outs = [coll.out_spec(spec_or_replicated(t), mesh, stage_of(t)) for t in self.res_types]
        self.jitted = jax.jit(jax.shard_map(lowering, mesh=self.jmesh, in_specs=tuple(ins),
                                            out_specs=tuple(outs), check_vma=False),
                              donate_argnums=donate)
        self.in_shardings = [jax.sharding.NamedSharding(self.jmesh, s) for s in ins]

    def compile(self) -> Any:
        """Lower and compile for the arguments' shapes, dtypes and shardings (the XLA options: see
        COMPILER_OPTIONS and `plan.could_merge`)."""
        options = dict(COMPILER_OPTIONS)
        if self.mesh is not None and plan.could_merge(self.func):
            options["xla_disable_hlo_passes"] = NO_COMBINERS + ",cse"
        avals = [jax.ShapeDtypeStruct(tensor_info(t).shape,
                                      native_dtype(jnp, tensor_info(t).dtype), sharding=s)
                 for t, s in zip(self.arg_types, self.in_shardings, strict=True)]
        lowered = self.jitted.lower(*avals)
        self.lowered_hlo = lowered.as_text(dialect="hlo") if self.mesh is not None else None
        return lowered.compile(compiler_options=options)

    def check_device_arrays(self, arrays: Sequence[jax.Array], names: list[str]
                            ) -> list[jax.Array]:
        """`jax.Array` arguments as they are, each checked against its argument's shape and
        dtype, and put on the argument's sharding where it is elsewhere (`jax.device_put`)."""
        if len(arrays) != len(self.arg_types):
            raise LaminaError(f"@{self.func.sym_name.data} takes {len(self.arg_types)} arguments, "
                              f"got {len(arrays)} inputs")
        out: list[jax.Array] = []
        for name, t, a, s in zip(names, self.arg_types, arrays, self.in_shardings, strict=True):
            info = tensor_info(t)
            want = native_dtype(jnp, info.dtype)
            if tuple(a.shape) != info.shape or a.dtype != want:
                raise LaminaError(f"input '{name}' is a jax.Array of shape {tuple(a.shape)} and "
                                  f"dtype {a.dtype}; argument type is {t} ({np.dtype(want)})")
            if a.is_deleted():
                raise LaminaError(f"input '{name}' is a jax.Array that was donated to an earlier "
                                  "call and deleted")
            out.append(a if a.sharding == s else jax.device_put(a, s))
        return out

    def put(self, arrays: Sequence[np.ndarray]) -> list[jax.Array]:
        """Global device arrays of `arrays` (storage dtypes) with the arguments' shardings; each
        process supplies the blocks of its own devices."""
        out: list[jax.Array] = []
        for t, a, s in zip(self.arg_types, arrays, self.in_shardings, strict=True):
            host = a.astype(native_dtype(jnp, tensor_info(t).dtype), copy=False)
            if self.mesh is None:   # one device: a plain copy in
                out.append(jax.device_put(host, s))
                continue
            out.append(jax.make_array_from_callback(host.shape, s,
                                                    lambda index, h=host: h[index]))
        return out

    def fetch(self, results: Sequence[jax.Array]) -> list[np.ndarray]:
        """The results as whole host arrays in storage dtypes (partial results reduced as the
        SPMD interpreter does, `lamina.backends.arrays.assemble`, from every device's block)."""
        out: list[np.ndarray] = []
        for t, r in zip(self.res_types, results, strict=True):
            info = tensor_info(t)
            a = _gather(r)
            stage = stage_of(t)
            if self.mesh is not None and (spec_or_replicated(t).partial or stage is not None):
                blocks = [np.asarray(a[_holder(self.mesh, d, stage)]).astype(STORAGE[info.dtype])
                          for d in range(self.mesh.devices)]
                a = assemble(self.mesh, spec_or_replicated(t), blocks, info.shape, info.dtype)
            out.append(np.asarray(a).astype(STORAGE[info.dtype]))
        return out


def _holder(mesh: Mesh, device: int, stage: tuple[str, int] | None) -> int:
    """The device whose block of a value `device` stands for: itself, or for a value held by one
    pipeline stage, the device of that stage with the same coordinates on the other axes."""
    if stage is None:
        return device
    coords = mesh.coords(device)
    coords[stage[0]] = stage[1]
    return mesh.index(coords, mesh.axes)


def _gather(r: jax.Array) -> np.ndarray:
    if r.is_fully_addressable:
        return np.asarray(r)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(r, tiled=True))


class JaxProgram:
    """One function traced, lowered and compiled by XLA once (`jax.jit(...).lower(...).compile()`);
    a call only moves the arguments to their devices (NumPy arrays; `jax.Array`s already placed
    as the arguments are go in as they are), runs the executable and fetches the results (NumPy
    arrays; with `jax.Array` inputs the results stay on their devices, as `jax.Array`s)."""

    def __init__(self, func: FuncOp, options: JaxOptions, donate: frozenset[int]):
        start = time.perf_counter()
        bad = unsupported_op(func)
        if bad is not None:
            raise error_at(bad, f"backend 'jax' cannot run '{bad.name}'")
        mesh_op = placed_mesh(func)
        self.gap = first_unplaced(func) if mesh_op is not None else None
        mesh = mesh_op.mesh if mesh_op is not None and self.gap is None else None
        self.func = func
        self.names = arg_names(func)
        self.devices = devs.prepare(mesh.name if mesh else None, mesh.devices if mesh else 1,
                                    options)
        self.moves, self.notes = memory_moves(self.devices[0], func)
        if self.gap is not None:   # as on the interpreter: one device, placements ignored
            self.notes.append(partly_placed_note(func, self.gap))
        with jax.enable_x64(True):
            self.program = Program(func, mesh, self.devices, self.moves, tuple(sorted(donate)))
            self.compiled = self.program.compile()
        self.stats: dict[str, Any] = {
            "backend": "jax", "platform": self.devices[0].platform, "devices": len(self.devices),
            "processes": jax.process_count()}
        if mesh is not None:
            self.stats.update(compare_collectives(func, mesh, self.compiled.as_text(),
                                                  self.program.lowered_hlo))
        self.compile_seconds = time.perf_counter() - start

    def __call__(self, inputs: Sequence[Any]) -> RunResult:
        on_device = len(inputs) > 0 and all(isinstance(a, jax.Array) for a in inputs)
        with jax.enable_x64(True):
            if on_device:
                start = time.perf_counter()
                results = self._run_on_device(inputs)
            else:
                args = self.program.put(check_inputs(self.func, inputs))
                start = time.perf_counter()
                results = self.compiled(*args)
            results = jax.block_until_ready(results)
            seconds = time.perf_counter() - start
            outs = list(results) if on_device and self.program.mesh is None else \
                self.program.fetch(results)
        stats = {**self.stats, "run_seconds": seconds}
        return RunResult(outs, stats, notes=list(self.notes))

    def _run_on_device(self, inputs: Sequence[jax.Array]) -> Any:
        """The executable on `jax.Array` arguments: as given (XLA checks their shapes, dtypes and
        placement itself), and where XLA refuses them (a wrong shape, an array on other devices,
        one an earlier call deleted), checked one by one: a diagnostic naming the argument, or the
        array put where the argument lives."""
        try:
            return self.compiled(*inputs)
        except (ValueError, RuntimeError, TypeError):
            return self.compiled(*self.program.check_device_arrays(inputs, self.names))


class JaxBackend:
    """Lamina programs compiled by XLA through JAX (see the module docstring)."""

    name: ClassVar[str] = "jax"
    features: ClassVar[frozenset[Feature]] = frozenset(Feature)
    Options: ClassVar[type[JaxOptions]] = JaxOptions

    def compile(self, module: ModuleOp, func: FuncOp, options: JaxOptions,
                donate: frozenset[int] = frozenset(), warmup: bool = True) -> JaxProgram:
        """The function traced, lowered and compiled by XLA now (`warmup` changes nothing: XLA
        has nothing left to do at the first call)."""
        return JaxProgram(func, options, donate)


def compare_collectives(func: FuncOp, mesh: Mesh, compiled: str,
                        lowered: str | None = None) -> dict[str, Any]:
    """Lamina's collectives, the compiled HLO's, and how they differ (`plan.difference`); with
    `lowered` (the HLO handed to XLA) also whether that one holds exactly the plan."""
    mine = plan.planned(func, mesh)
    want = plan.expected_hlo(func, mesh)
    found = hlo.collectives(compiled, mesh.devices)
    got = [(c.kind, c.groups) for c in found]
    extra, missing = plan.difference(got, want), plan.difference(want, got)
    out: dict[str, Any] = {
        "collectives": mine, "comm_bytes_per_device": sum(c["bytes_per_device"] for c in mine),
        "hlo_collectives": [c.as_dict() for c in found],
        "hlo_comm_bytes_per_device": int(sum(c.sent for c in found)),
        "hlo_matches_plan": not extra and not missing, "hlo_extra": extra,
        "hlo_missing": missing}
    if lowered is not None:
        before = [(c.kind, c.groups) for c in hlo.collectives(lowered, mesh.devices)]
        out["lowered_matches_plan"] = not plan.difference(before, want) and \
            not plan.difference(want, before)
    return out
