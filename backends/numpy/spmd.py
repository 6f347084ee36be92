"""SPMD execution: run a placed program the way every device of its mesh would.

Devices are numbered row-major over the mesh axes (as `Target.axis_level` assumes). Every value is
held as one local array per device (cut and assembled by `lamina.backends.arrays`, which the JAX
backend shares):
- a dimension split over axes [a, b] (major to minor) is cut into size(a) * size(b) blocks; the
  device with coordinates (i, j) on (a, b) holds block i * size(b) + j;
- a value `partial = sum[axes]` holds local partial sums: inputs put the whole value on the devices
  whose coordinate on every partial axis is 0 and zeros elsewhere (`max` partials: everywhere);
  assembling an output sums (maxes) over the partial axes;
- axes named nowhere replicate: those devices hold equal arrays. After every op the runner checks
  this, and a value whose type says replicated but whose shards differ is an error at that op.
- types without a placement are read as replicated on the entry function's mesh where that
  follows every rule; a partially placed program (an unplaced value whose replicated reading breaks
  its op's rule, e.g. a matmul result of split operands) is rejected up front
  (`lamina.analysis.placed.check_placed`), naming the first such value and telling the user to
  run propagate-sharding.

Local ops run their op-table kernels on local shapes (`Call` with local `TensorInfo`s) and the
blocks they see (`Block(global_shape, offsets, operands)`): dropout's mask is the single-device
one, and a gather on a split table looks up only the rows its block holds. Devices holding the same
operand arrays share the result (computed once), which keeps replicated work cheap here.
`lamina.fused` runs its body op by op on local shapes. Collectives exchange shards exactly as the
op says (`lamina.ir.mesh.collectives`), one lowering per kind of the collectives table
(`LOWERINGS`, keyed by `lamina.ir.mesh.collective_kinds` records); `lamina.reshard` (not yet lowered)
assembles and redistributes.

Pipeline stages (MPMD, issue 28): a value placed `stage = pp[i]` exists only on the devices whose
coordinate on mesh axis pp is i. Every op runs only on the devices of its result's stage; the
others hold `ABSENT` (an empty array, 0 bytes) for it, so a device's live bytes count only its own
stage's values. `lamina.collective_permute` copies each block of stage i to the device of stage j
with the same coordinates on the other axes; inputs placed on a stage are cut onto its devices and
staged outputs are assembled from their stage's devices. The kernel counters count each op once,
on the first device of its stage (for an unstaged program: device 0).

An `ExecutionObserver` (e.g. `MemoryChecker`) gets the same hooks as under `run_function`; the
values' types carry their placements, so it accounts local shard bytes per device.

Statistics: the single-device counters are per device (device 0), plus `devices`, `collectives`
(kind, axes, algorithm, payload and bytes sent per device; `comm_cost.sent_bytes`) and
`comm_bytes_per_device` (their sum).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from lamina.analysis.comm_cost import sent_bytes
from lamina.analysis.fusion import intermediate_bytes
from lamina.analysis.placed import check_placed, placed_mesh
from lamina.backends.arrays import Shards, assemble, block, check_inputs, distribute, reduce_parts
from lamina.backends.interface import RunResult
from lamina.backends.numpy import runner as base
from lamina.backends.numpy.options import NumpyOptions
from lamina.backends.numpy.runner import (
    ExecutionObserver,
    RunContext,
    RunStats,
    device_nbytes,
    distinct_nbytes,
)
from lamina.ir.buffers.memory import FreeOp
from lamina.ir.core.diagnostics import LaminaError, error_at
from lamina.ir.core.dtypes import ITEMSIZE, STORAGE
from lamina.ir.core.shapes import TensorInfo
from lamina.ir.mesh.collective_kinds import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_SLICE,
    ALL_TO_ALL,
    COLLECTIVE_PERMUTE,
    CONCAT_DIM,
    DIM,
    REDUCE_SCATTER,
    RESHARD,
    SPLIT_DIM,
    Lowerings,
)
from lamina.ir.mesh.collectives import COLLECTIVES, PlacementOp
from lamina.ir.mesh.placement import Mesh, MeshOp, spec_or_replicated, stage_devices, stage_of
from lamina.ir.mesh.sharding import Spec
from lamina.ir.ops.formulas import Block, Call
from lamina.ir.ops.fused import FusedOp, YieldOp
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation, SSAValue

_ABSENT: dict[np.dtype, np.ndarray] = {}


def absent(dtype: np.dtype) -> np.ndarray:
    """What a device off a value's stage holds for it: one shared empty array per dtype."""
    return _ABSENT.setdefault(np.dtype(dtype), np.empty((0,), dtype))


def is_absent(a: np.ndarray) -> bool:
    return a is _ABSENT.get(a.dtype)


def keep_stage(mesh: Mesh, stage: tuple[str, int] | None, shards: Shards) -> Shards:
    """`shards` with the devices off `stage` holding `absent`."""
    if stage is None:
        return shards
    on = set(stage_devices(mesh, stage))
    return [a if d in on else absent(a.dtype) for d, a in enumerate(shards)]


def spread(mesh: Mesh, stage: tuple[str, int] | None, shards: Shards) -> Shards:
    """`shards` of a value on `stage` as if every stage held it (each device takes the block of
    the device of `stage` with its coordinates on the other axes): what `assemble` reads."""
    if stage is None:
        return shards
    return [shards[peer(mesh, d, stage)] for d in range(mesh.devices)]


def peer(mesh: Mesh, dev: int, stage: tuple[str, int]) -> int:
    """The device of `stage` with `dev`'s coordinates on every other axis."""
    c = mesh.coords(dev)
    c[stage[0]] = stage[1]
    return mesh.index(c, mesh.axes)


def check_replicated(mesh: Mesh, spec: Spec, shards: Shards, shape: Sequence[int],
                     op: Operation, what: str, stage: tuple[str, int] | None = None) -> None:
    """Devices that the placement says hold the same data must hold equal arrays."""
    first: dict[tuple, np.ndarray] = {}
    for dev in stage_devices(mesh, stage):
        c = mesh.coords(dev)
        key = (block(mesh, spec, shape, dev)[0], tuple(c[a] for a in spec.partial))
        ref = first.setdefault(key, shards[dev])
        s = shards[dev]
        if s is ref:
            continue
        if s.shape != ref.shape or not np.array_equal(s, ref, equal_nan=s.dtype.kind == "f"):
            raise error_at(op, f"{op.name}: {what} is placed {spec} but device {dev} holds "
                           f"different data than device {first_device(mesh, spec, shape, key)} "
                           "for the same block (the type claims it is replicated there)")


def first_device(mesh: Mesh, spec: Spec, shape: Sequence[int], key: tuple) -> int:
    for dev in range(mesh.devices):
        c = mesh.coords(dev)
        if (block(mesh, spec, shape, dev)[0], tuple(c[a] for a in spec.partial)) == key:
            return dev
    return 0


class SpmdRun:
    def __init__(self, mesh: Mesh, ctx: RunContext):
        self.mesh = mesh
        self.ctx = ctx
        self.stats = ctx.stats
        self.collectives: list[dict[str, Any]] = []

    # -- local ops --
    def local_call(self, op: LaminaOp, dev: int) -> Call:
        call = base.make_call(op)
        slots = op.operand_slots()
        infos: list[TensorInfo | None] = []
        blocks: list[Block | None] = []
        for v, t in zip(slots, call.operands, strict=True):
            if v is None or t is None:
                infos.append(None)
                blocks.append(None)
                continue
            v_offs, v_local = block(self.mesh, spec_or_replicated(v.type), t.shape, dev)
            infos.append(TensorInfo(v_local, t.dtype))
            blocks.append(Block(t.shape, v_offs))
        rspec = spec_or_replicated(op.results[0].type)
        offs, local = block(self.mesh, rspec, call.result.shape, dev)
        x = slots[0] if slots else None
        attrs = op.info.sharding.local_attrs(dict(call.attrs),
                                             spec_or_replicated(x.type) if x is not None else None,
                                             infos[0] if infos else None)
        return Call(attrs, infos, TensorInfo(local, call.result.dtype),
                    Block(call.result.shape, offs, tuple(blocks)))

    def run_local(self, op: LaminaOp, args: list[Shards | None], in_fused: bool = False,
                  stage: tuple[str, int] | None = None) -> Shards:
        """`op`'s kernel on every device of its stage (`stage`, for a fused op's body; else its
        result's), on local shapes; devices off it hold `absent`."""
        info = op.info
        stage = stage if in_fused else stage_of(op.results[0].type)
        devs = stage_devices(self.mesh, stage)
        on = set(devs)
        out: Shards = []
        memo: dict[tuple, np.ndarray] = {}
        position_dependent = info.position_dependent
        for dev in range(self.mesh.devices):
            if dev not in on:
                out.append(absent(STORAGE[tensor_info(op.results[0].type).dtype]))
                continue
            call = self.local_call(op, dev)
            local = [None if a is None else a[dev] for a in args]
            where = () if not position_dependent or call.block is None else \
                (call.block.offsets, tuple(None if b is None else b.offsets
                                           for b in call.block.operands))
            key = tuple(id(a) for a in local) + where
            if key not in memo:
                r = base.run_kernel(info, local, call)
                if r.shape != call.result.shape:
                    raise error_at(op, f"{op.name}: local kernel produced shape {r.shape}, the "
                                   f"placement says {call.result.shape} (interpreter bug)")
                memo[key] = r
                if dev == devs[0] and info.launches_kernel:
                    self.stats.kernels += 1
                    self.stats.flops += info.flops(call.operands, call.result, call.attrs)
                    self.stats.bytes_accessed += sum(
                        device_nbytes(a, t.dtype) for a, t in zip(local, call.operands,
                                                                  strict=True)
                        if a is not None and t is not None) + device_nbytes(r, call.result.dtype)
                    if not in_fused:  # a fused op's traffic is its own inputs and results
                        self.stats.bytes_moved += distinct_nbytes(
                            op.operand_slots(), local) + device_nbytes(r, call.result.dtype)
            out.append(memo[key])
        return out

    def run_fused(self, op: FusedOp, args: list[Shards]) -> list[Shards]:
        """A fused op's body op by op on every device's shards (not tile by tile): its working
        set per device is its intermediates, which is what it reports to the observer."""
        env: dict[SSAValue, Shards] = dict(zip(op.body.block.args, args, strict=True))
        stage = stage_of(op.results[0].type) if op.results else None
        for inner in op.body.block.ops:
            if isinstance(inner, YieldOp):
                if self.ctx.observer is not None:
                    self.ctx.observer.on_working_set(op, intermediate_bytes(op))
                return [env[v] for v in inner.operands]
            if not isinstance(inner, LaminaOp):
                if isinstance(inner, FreeOp):
                    continue  # ends a tile buffer's lifetime (annotate-lifetimes): nothing to run
                raise error_at(inner, f"the SPMD interpreter cannot run '{inner.name}' inside "
                               "lamina.fused")
            ins = [None if v is None else env[v] for v in inner.operand_slots()]
            env[inner.results[0]] = self.run_local(inner, ins, in_fused=True, stage=stage)
        raise error_at(op, "lamina.fused has no lamina.yield")

    # -- collectives --
    def record(self, op: PlacementOp, payload: float, n: int) -> None:
        alg = op.algorithm_name()
        sent = sent_bytes(op.short, alg, n, payload, op.inner_group())
        self.collectives.append({"kind": op.short, "axes": list(op.axis_names()),
                                 "algorithm": alg or op.COLLECTIVE.default_algorithm, "devices": n,
                                 "payload_bytes": int(payload), "bytes_per_device": int(sent)})

    def run_collective(self, op: PlacementOp, args: list[Shards]) -> list[Shards]:
        mesh = self.mesh
        c = op.COLLECTIVE
        lowering = LOWERINGS.get(c)
        if lowering is None:
            raise error_at(op, f"the SPMD interpreter has no lowering for '{op.name}'")
        axes = op.axis_names()
        n = mesh.size(axes) if axes else 1
        results: list[Shards] = []
        payload = 0.0
        for x, r, shards in zip(op.inputs, op.outputs, args, strict=True):
            xt = tensor_info(x.type)
            # at the device's element size (bf16 is 2 bytes, though stored in float32 here)
            local_in = float(math.prod(block(mesh, spec_or_replicated(x.type), xt.shape, 0)[1])) * \
                ITEMSIZE[xt.dtype]
            results.append(lowering(mesh, op, shards, x, r))
            if c.communicates:
                payload += local_in * n if c.payload_is_result else local_in
        if c.communicates:
            self.record(op, payload, n if axes else mesh.devices)
        return results

    def run_other(self, op: Operation, runner: base.OpRunner,
                  operands: list[Shards | None]) -> list[Shards]:
        """An op with a registered runner (a memory move, a free) on each device of its stage."""
        stage = stage_of(op.results[0].type) if op.results else None
        on = set(stage_devices(self.mesh, stage))
        per_dev = []
        for d in range(self.mesh.devices):
            local = [None if a is None else a[d] for a in operands]
            if d in on:
                per_dev.append(runner(op, local, RunContext(RunStats(), self.ctx.options)))
            else:
                per_dev.append([absent(a.dtype) for a in local if a is not None][:len(op.results)])
        return [list(r) for r in zip(*per_dev, strict=True)] if op.results else []

    # -- the function --
    def run(self, func: FuncOp, inputs: Sequence[np.ndarray],
            observer: ExecutionObserver | None = None) -> list[np.ndarray]:
        mesh = self.mesh
        args = [keep_stage(mesh, stage_of(v.type), distribute(mesh, spec_or_replicated(v.type), a))
                for v, a in zip(func.body.block.args, check_inputs(func, inputs), strict=True)]

        def execute(op: Operation, operands: list[Shards | None]) -> list[Shards]:
            if isinstance(op, LaminaOp):
                results = [self.run_local(op, operands)]
            elif isinstance(op, FusedOp):
                results = self.run_fused(op, operands)  # type: ignore[arg-type]
                self.stats.bytes_moved += distinct_nbytes(
                    op.inputs, [a[0] for a in operands]) + distinct_nbytes(  # type: ignore[index]
                    op.outputs, [r[0] for r in results])
                self.stats.kernels += 1 - sum(
                    1 for o in op.body.block.ops if isinstance(o, LaminaOp)
                    and o.info.launches_kernel)
            elif isinstance(op, PlacementOp):
                results = self.run_collective(op, operands)  # type: ignore[arg-type]
            elif (runner := base.op_runner(op)) is not None:
                results = self.run_other(op, runner, operands)
            else:
                raise error_at(op, f"the SPMD interpreter cannot run '{op.name}'")
            for k, (r, shards) in enumerate(zip(op.results, results, strict=True)):
                check_replicated(mesh, spec_or_replicated(r.type), shards,
                                 tensor_info(r.type).shape, op, f"result {k}", stage_of(r.type))
            return results

        def finish(ret: ReturnOp, values: list[Shards]) -> list[np.ndarray]:
            outs = []
            for v, shards in zip(ret.operands, values, strict=True):
                t = tensor_info(v.type)
                outs.append(assemble(mesh, spec_or_replicated(v.type),
                                     spread(mesh, stage_of(v.type), shards), t.shape, t.dtype))
            return outs

        # sizes are per device (device 0's shard)
        return base.drive(func, args, execute, lambda s: s[0].nbytes, finish, self.stats,
                          observer)


def run_spmd(func: FuncOp, inputs: Sequence[np.ndarray], mesh_op: MeshOp | None = None,
             observer: ExecutionObserver | None = None,
             options: NumpyOptions | None = None) -> RunResult:
    """Run placed `func` on every device of its mesh. `observer` gets the same hooks as under
    `run_function` (values' types carry their placements, so it can size local shards)."""
    mesh_op = mesh_op or placed_mesh(func)
    if mesh_op is None:
        raise LaminaError(f"@{func.sym_name.data} has no placed values to run on a mesh")
    check_placed(func)
    ctx = RunContext(RunStats(), options or NumpyOptions(), observer)
    run = SpmdRun(mesh_op.mesh, ctx)
    outputs = run.run(func, inputs, observer)
    d = ctx.stats.as_dict()
    d["devices"] = run.mesh.devices
    d["collectives"] = run.collectives
    d["comm_bytes_per_device"] = int(sum(c["bytes_per_device"] for c in run.collectives))
    return RunResult(outputs, d)


# -- collectives: one lowering per kind of the table, on every device's shards --
# (mesh, op, the operand's shards, operand, result) -> the result's shards
SpmdLowering = Callable[[Mesh, PlacementOp, Shards, SSAValue, SSAValue], Shards]
LOWERINGS: Lowerings[SpmdLowering] = Lowerings("numpy")


@LOWERINGS.register(RESHARD)
def _reshard(mesh: Mesh, op: PlacementOp, shards: Shards, x: SSAValue, r: SSAValue) -> Shards:
    """Assemble the whole value and distribute it as the result is placed (on its stage)."""
    xt = tensor_info(x.type)
    whole = assemble(mesh, spec_or_replicated(x.type), spread(mesh, stage_of(x.type), shards),
                     xt.shape, xt.dtype)
    return keep_stage(mesh, stage_of(r.type), distribute(mesh, spec_or_replicated(r.type), whole))


@LOWERINGS.register(COLLECTIVE_PERMUTE)
def _collective_permute(mesh: Mesh, op: PlacementOp, shards: Shards, x: SSAValue,
                        r: SSAValue) -> Shards:
    """Each device of the result's stage gets the block of the operand's stage's device with its
    coordinates on the other axes (one send per pair; the others keep nothing)."""
    src, dst = stage_of(x.type), stage_of(r.type)
    assert src is not None and dst is not None
    return keep_stage(mesh, dst, [shards[peer(mesh, d, src)] for d in range(mesh.devices)])


def _by_group(mesh: Mesh, op: PlacementOp, shards: Shards,
              member_blocks: Callable[[list[np.ndarray]], list[np.ndarray]]) -> Shards:
    """The shards after a collective over `op`'s mesh axes: each group's members' blocks, in
    group order, become `member_blocks(blocks)`, one per member in the same order. What the
    collectives below differ in is only that function."""
    out: Shards = [shards[0]] * mesh.devices
    for g in mesh.groups(op.axis_names()):
        if is_absent(shards[g[0]]):   # a group off the value's stage (it holds nothing)
            for d in g:
                out[d] = shards[d]
            continue
        for d, block_ in zip(g, member_blocks([shards[d] for d in g]), strict=True):
            out[d] = block_
    return out


@LOWERINGS.register(ALL_REDUCE)
def _all_reduce(mesh: Mesh, op: PlacementOp, shards: Shards, x: SSAValue, r: SSAValue) -> Shards:
    """Every device of a group gets the group's reduction."""
    dtype = tensor_info(x.type).dtype
    return _by_group(mesh, op, shards,
                     lambda bs: [reduce_parts(bs, op.reduce_kind(), dtype)] * len(bs))


@LOWERINGS.register(REDUCE_SCATTER)
def _reduce_scatter(mesh: Mesh, op: PlacementOp, shards: Shards, x: SSAValue,
                    r: SSAValue) -> Shards:
    """Device j of a group gets block j along `dim` of the group's reduction."""
    dim, dtype = op.int_attr(DIM), tensor_info(x.type).dtype
    return _by_group(mesh, op, shards, lambda bs: np.split(
        reduce_parts(bs, op.reduce_kind(), dtype), len(bs), axis=dim))


@LOWERINGS.register(ALL_GATHER)
def _all_gather(mesh: Mesh, op: PlacementOp, shards: Shards, x: SSAValue, r: SSAValue) -> Shards:
    """Every device of a group gets the group's blocks concatenated along `dim`."""
    dim = op.int_attr(DIM)
    return _by_group(mesh, op, shards, lambda bs: [np.concatenate(bs, axis=dim)] * len(bs))


@LOWERINGS.register(ALL_TO_ALL)
def _all_to_all(mesh: Mesh, op: PlacementOp, shards: Shards, x: SSAValue, r: SSAValue) -> Shards:
    """Device j of a group gets piece j (along `split_dim`) of every member's block,
    concatenated along `concat_dim`."""
    sd, cd = op.int_attr(SPLIT_DIM), op.int_attr(CONCAT_DIM)

    def exchange(bs: list[np.ndarray]) -> list[np.ndarray]:
        pieces = [np.split(b, len(bs), axis=sd) for b in bs]
        return [np.concatenate([p[j] for p in pieces], axis=cd) for j in range(len(bs))]

    return _by_group(mesh, op, shards, exchange)


@LOWERINGS.register(ALL_SLICE)
def _all_slice(mesh: Mesh, op: PlacementOp, shards: Shards, x: SSAValue, r: SSAValue) -> Shards:
    """Device j of a group keeps its block j along `dim` (no communication)."""
    dim = op.int_attr(DIM)
    return _by_group(mesh, op, shards, lambda bs: [
        np.split(b, len(bs), axis=dim)[j] for j, b in enumerate(bs)])


def _identity(op: Operation, args: list[np.ndarray | None], ctx: RunContext) -> list[np.ndarray]:
    # On whole (global) arrays every placement op is the identity: it only moves data.
    return [a for a in args if a is not None]


for _cls in COLLECTIVES:
    base.register_op_runner(_cls, _identity)
