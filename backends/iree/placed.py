"""`--backend iree` on a placed program: its per-device export run once per device, in threads.

The function exports as the program one device runs (`lamina.analysis.linalg.spmd`), compiled once;
a pipeline-staged function (issue 28) as one program per stage, each compiled once and run by the
devices of its stage (MPMD). Each device gets its own IREE context holding its program's module
and a `lamina_collectives` module made in Python (`iree.runtime.PyModuleInterface`) that
implements every declaration that program imports:

- a collective over axes: the device posts its block at its group's meeting point (the devices
  differing only on the declaration's axes, ordered by their index along them: one slot each
  and a barrier of the group alone, so groups of different stages, which make different calls,
  never wait for each other), takes the group's blocks and computes its result from them in
  NumPy, one function per kind of the collectives table (`LOWERINGS`);
- a collective_permute's send posts the block to the mailbox of (this device, its peer: the
  device of the target stage with its coordinates on the other axes) and returns; the receive
  takes the next block of the mailbox (its source-stage peer's) in order. Sends never wait, so
  a stage's program runs as far as its own inputs allow, as the staged program's order says.

No call waits forever: a barrier or a receive gives up after BARRIER_SECONDS, and a device that
fails breaks every meeting point and mailbox, so the run reports that device's error. Inputs are
cut into shards and outputs assembled as the SPMD interpreter does (`lamina.backends.arrays`;
a staged value from the devices of its stage), so the run's outputs are the global values,
comparable with `run_function`'s.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import iree.runtime as rt
import numpy as np
from iree.runtime.array_interop import map_dtype_to_element_type
from lamina.analysis.linalg.export import boundary_dtype, export_function, wrap_module
from lamina.analysis.linalg.spmd import (
    IMPORT_MODULE,
    RECV,
    SEND,
    SOURCE,
    TARGET,
    Declaration,
    PerDevice,
    Stage,
    function_stages,
    header,
    on_stage,
)
from lamina.backends.arrays import Shards, assemble, distribute, reduce_parts
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.core.dtypes import STORAGE
from lamina.ir.mesh.collective_kinds import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_SLICE,
    ALL_TO_ALL,
    COLLECTIVE_PERMUTE,
    CONCAT_DIM,
    DIM,
    REDUCE_SCATTER,
    SPLIT_DIM,
    Lowerings,
)
from lamina.ir.mesh.placement import Mesh, MeshOp, spec_or_replicated, stage_of
from lamina.ir.ops.opbase import tensor_info
from xdsl.dialects.func import FuncOp

BARRIER_SECONDS = 600.0   # a device that never arrives (it failed) breaks the wait, not a hang

# (the group's blocks in group order, this device's index in the group, the declaration) -> result
GroupFn = Callable[[list[np.ndarray], int, Declaration], np.ndarray]
LOWERINGS: Lowerings[GroupFn] = Lowerings("iree")


@LOWERINGS.register(ALL_REDUCE)
def _all_reduce(bs: list[np.ndarray], j: int, d: Declaration) -> np.ndarray:
    return reduce_parts(bs, d.reduce, _dtype_name(bs[0]))


@LOWERINGS.register(REDUCE_SCATTER)
def _reduce_scatter(bs: list[np.ndarray], j: int, d: Declaration) -> np.ndarray:
    whole = reduce_parts(bs, d.reduce, _dtype_name(bs[0]))
    return np.split(whole, len(bs), axis=d.ints[DIM])[j]


@LOWERINGS.register(ALL_GATHER)
def _all_gather(bs: list[np.ndarray], j: int, d: Declaration) -> np.ndarray:
    return np.concatenate(bs, axis=d.ints[DIM])


@LOWERINGS.register(ALL_TO_ALL)
def _all_to_all(bs: list[np.ndarray], j: int, d: Declaration) -> np.ndarray:
    return np.concatenate([np.split(b, len(bs), axis=d.ints[SPLIT_DIM])[j] for b in bs],
                          axis=d.ints[CONCAT_DIM])


@LOWERINGS.register(ALL_SLICE)
def _all_slice(bs: list[np.ndarray], j: int, d: Declaration) -> np.ndarray:
    return np.split(bs[j], len(bs), axis=d.ints[DIM])[j]


@LOWERINGS.register(COLLECTIVE_PERMUTE)
def _collective_permute(bs: list[np.ndarray], j: int, d: Declaration) -> np.ndarray:
    """A receive's group is its pair: `bs` is the one block its source-stage peer sent, which
    arrives unchanged (splits and `partial` are the same on both stages)."""
    return bs[0]


def _dtype_name(a: np.ndarray) -> str:
    """The Lamina element type of a storage array (what `reduce_parts` widens by)."""
    return {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64",
            "bool": "i1", "bfloat16": "bf16", "float16": "f16"}[a.dtype.name]


class Broken(Exception):  # noqa: N818 - a state, as threading.BrokenBarrierError
    """A wait given up because another device failed (its own error is the run's)."""


class Meeting:
    """One group's meeting point for collectives: a slot per member, a barrier of the group."""

    def __init__(self, group: Sequence[int]) -> None:
        self.group = list(group)
        self.slots: dict[int, np.ndarray] = {}
        self.barrier = threading.Barrier(len(group), timeout=BARRIER_SECONDS)

    def run(self, decl: Declaration, fn: GroupFn, dev: int, x: np.ndarray) -> np.ndarray:
        self.slots[dev] = x
        self._wait(decl)
        out = fn([self.slots[d] for d in self.group], self.group.index(dev), decl)
        self._wait(decl)   # every member has read the slots before any reuses them
        return out

    def _wait(self, decl: Declaration) -> None:
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            raise Broken(f"{decl.symbol}: the meeting of devices {self.group} was broken (a "
                         f"device failed, or one did not arrive within {BARRIER_SECONDS:g} s)"
                         ) from None


class Exchange:
    """The devices' meeting points: one per (axes, group) a collective meets on, made when its
    first member arrives, and one mailbox per (sender, receiver) pair for permutes."""

    def __init__(self, mesh: Mesh) -> None:
        self.mesh = mesh
        self.lock = threading.Condition()
        self.reset()

    def reset(self) -> None:
        """Fresh meeting points and mailboxes for a run (a failed run left them broken)."""
        with self.lock:
            self.meetings: dict[tuple[tuple[str, ...], tuple[int, ...]], Meeting] = {}
            self.mail: dict[tuple[int, int], deque[np.ndarray]] = {}
            self.failed: int | None = None   # the first device that failed

    def abort(self, dev: int) -> None:
        """Device `dev` failed: every wait of the run gives up (the first failure is kept)."""
        with self.lock:
            if self.failed is None:
                self.failed = dev
            for m in self.meetings.values():
                m.barrier.abort()
            self.lock.notify_all()

    def run(self, decl: Declaration, dev: int, x: np.ndarray) -> np.ndarray:
        """Device `dev`'s result of group collective `decl` on its block `x`."""
        fn = LOWERINGS.get(decl.collective)
        if fn is None:
            raise LaminaError(f"backend 'iree': no lowering for {decl.collective.op_name}")
        group = next(g for g in self.mesh.groups(decl.axes) if dev in g)
        with self.lock:
            if self.failed is not None:
                raise Broken(f"{decl.symbol}: device {self.failed} failed")
            meeting = self.meetings.setdefault((decl.axes, tuple(group)), Meeting(group))
        return meeting.run(decl, fn, dev, x)

    def send(self, decl: Declaration, dev: int, x: np.ndarray) -> None:
        """A permute's send: `x` into the mailbox of `dev` and its target-stage peer."""
        with self.lock:
            self.mail.setdefault((dev, self.peer(dev, decl, TARGET)), deque()).append(x)
            self.lock.notify_all()

    def recv(self, decl: Declaration, dev: int) -> np.ndarray:
        """A permute's receive: the next block its source-stage peer sent to `dev`."""
        fn = LOWERINGS.get(decl.collective)
        assert fn is not None   # the table covers collective_permute
        src = self.peer(dev, decl, SOURCE)
        deadline = time.monotonic() + BARRIER_SECONDS
        with self.lock:
            while not (box := self.mail.get((src, dev))):
                if self.failed is not None:
                    raise Broken(f"{decl.symbol}: device {self.failed} failed")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LaminaError(f"backend 'iree': {decl.symbol}: device {dev} received "
                                      f"nothing from device {src} in {BARRIER_SECONDS:g} s")
                self.lock.wait(left)
            return fn([box.popleft()], 0, decl)

    def peer(self, dev: int, decl: Declaration, which: str) -> int:
        """The device of the permute's `which` stage (SOURCE or TARGET) with `dev`'s
        coordinates on the other axes."""
        (axis,) = decl.axes
        c = self.mesh.coords(dev)
        c[axis] = decl.ints[which]
        return self.mesh.index(c, self.mesh.axes)


def collectives_module(device: rt.HalDevice, decls: Sequence[Declaration], exchange: Exchange,
                       dev: int) -> rt.VmModule:
    """The `lamina_collectives` module device `dev` binds: one export per declaration (a send
    returns an order token, a receive takes no block; a stage's calls take the order token
    too, last, which only orders them: `lamina.analysis.linalg.spmd`)."""
    iface = rt.PyModuleInterface(IMPORT_MODULE, lambda _iface: object())
    for decl in decls:
        ins = ("" if decl.role == RECV else "r") + ("r" if decl.ordered else "")
        iface.export(decl.symbol.removeprefix(IMPORT_MODULE + "."), f"0{ins or 'v'}_r",
                     _bound(device, decl, exchange, dev))
    return iface.create()


def _host(device: rt.HalDevice, ref: rt.VmRef) -> np.ndarray:
    view = ref.deref(rt.HalBufferView)
    assert view is not None   # the export declares every operand a tensor
    return np.array(rt.DeviceArray(device, view, implicit_host_transfer=True).to_host())


def _made(device: rt.HalDevice, out: np.ndarray) -> rt.VmRef:
    made = device.allocator.allocate_buffer_copy(
        memory_type=rt.MemoryType.DEVICE_LOCAL, allowed_usage=rt.BufferUsage.DEFAULT,
        device=device, buffer=np.ascontiguousarray(out),
        element_type=map_dtype_to_element_type(out.dtype))
    assert isinstance(made, rt.HalBufferView)
    return made.ref


def _bound(device: rt.HalDevice, decl: Declaration, exchange: Exchange, dev: int
           ) -> Callable[..., rt.VmRef]:
    def call(_self: Any, *refs: rt.VmRef) -> rt.VmRef:
        if decl.role == RECV:
            return _made(device, exchange.recv(decl, dev))
        x = _host(device, refs[0])
        if decl.role == SEND:
            exchange.send(decl, dev, x)
            return _made(device, np.zeros(1, np.int64))   # the next call's order token
        # in the block's dtype: a bf16 sum is computed in f32 and rounded, but stored in float32
        return _made(device, np.asarray(exchange.run(decl, dev, x)).astype(x.dtype, copy=False))
    return call


def placed_text(func: FuncOp, mesh: MeshOp, stage: Stage | None = None
                ) -> tuple[str, list[Declaration]]:
    """The per-device module of `func` alone (`stage`: that pipeline stage's program) and its
    declarations."""
    device = PerDevice(mesh.mesh, stage)
    body = export_function(func, device=device)   # fills device.decl_lines
    return (wrap_module(device.decl_lines + [body], header(mesh.mesh, stage)),
            list(device.decls.values()))


def placed_texts(func: FuncOp, mesh: MeshOp) -> list[tuple[Stage | None, str, list[Declaration]]]:
    """Every program of `func`: one per pipeline stage of a staged function, else the one SPMD
    program (stage None); each with its text and declarations."""
    return [(stage, *placed_text(func, mesh, stage))
            for stage in function_stages(func, mesh.mesh) or [None]]


@dataclass(frozen=True)
class StageModule:
    """One compiled program of a placed function: the stage whose devices run it (None: every
    device) and the declarations its module imports."""

    stage: Stage | None
    vm_module: rt.VmModule
    decls: tuple[Declaration, ...]


class DeviceGroup:
    """Every device's IREE context, made once per compiled program: each holds its stage's
    module (or the one SPMD module) and binds its own `lamina_collectives` module to one shared
    `Exchange`, so a call only runs the threads."""

    def __init__(self, mesh: Mesh, config: rt.Config, programs: Sequence[StageModule]) -> None:
        self.mesh = mesh
        self.exchange = Exchange(mesh)
        by_stage = {p.stage: p for p in programs}
        self.programs: list[StageModule] = []
        self.contexts = []
        for dev in range(mesh.devices):
            prog = by_stage.get(None) or next(
                p for p in programs if p.stage and mesh.coords(dev)[p.stage[0]] == p.stage[1])
            ctx = rt.SystemContext(config=config)
            ctx.add_vm_module(collectives_module(config.device, prog.decls, self.exchange, dev))
            ctx.add_vm_module(prog.vm_module)
            self.programs.append(prog)
            self.contexts.append(ctx)

    def run(self, func: FuncOp, inputs: Sequence[np.ndarray], symbol: str | None = None
            ) -> list[np.ndarray]:
        """Every device's program (`func` exported as `symbol`, default its name) in its own
        thread; the outputs assembled as global values."""
        mesh = self.mesh
        args = [distribute(mesh, spec_or_replicated(v.type),   # bf16 as IREE takes it
                           np.asarray(a, boundary_dtype(tensor_info(v.type).dtype)))
                for v, a in zip(func.body.block.args, inputs, strict=True)]
        self.exchange.reset()
        results: list[list[np.ndarray] | BaseException | None] = [None] * mesh.devices
        name = symbol or func.sym_name.data

        def device_main(dev: int) -> None:
            prog = self.programs[dev]
            try:
                coords = mesh.coords(dev)
                mine = [np.asarray(a[dev], order="C") for v, a in
                        zip(func.body.block.args, args, strict=True)
                        if on_stage(v.type, prog.stage)]
                out = self.contexts[dev].modules[prog.vm_module.name][name](
                    *mine, np.array([coords[a] for a in mesh.axes], dtype=np.int64))
                outs = out if isinstance(out, tuple | list) else () if out is None else (out,)
                results[dev] = [np.array(r.to_host() if hasattr(r, "to_host") else r)
                                for r in outs]
            except BaseException as e:  # noqa: BLE001 - reported by the caller, with the device
                self.exchange.abort(dev)
                results[dev] = e

        threads = [threading.Thread(target=device_main, args=(d,)) for d in range(mesh.devices)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return _assembled(func, mesh, results, self.exchange.failed,
                          [p.stage for p in self.programs])


def run_devices(func: FuncOp, mesh: Mesh, config: rt.Config, vm_module: rt.VmModule,
                decls: Sequence[Declaration], inputs: Sequence[np.ndarray],
                symbol: str | None = None) -> list[np.ndarray]:
    """One run of SPMD `func` on a fresh `DeviceGroup` (`decls`: every declaration `vm_module`
    imports; a module of several functions binds them all)."""
    return DeviceGroup(mesh, config, [StageModule(None, vm_module, tuple(decls))]).run(
        func, inputs, symbol)


def _assembled(func: FuncOp, mesh: Mesh, results: list[Any], failed: int | None,
               stages: list[Stage | None]) -> list[np.ndarray]:
    """The global outputs from every device's (`stages`: the stage each device ran); a failed
    run is the error of the device that failed first."""
    if failed is not None:
        r = results[failed]
        raise LaminaError(f"backend 'iree': @{func.sym_name.data} failed on device {failed}: "
                          f"{str(r).splitlines()[0] if str(r) else type(r).__name__}")
    outs = []
    types = func.function_type.outputs.data
    for k, t in enumerate(types):
        info = tensor_info(t)
        shards: Shards = []
        for d in range(mesh.devices):
            src = _holder(mesh, d, stage_of(t))   # its program returns the outputs it holds
            shards.append(results[src][sum(on_stage(u, stages[src]) for u in types[:k])])
        whole = assemble(mesh, spec_or_replicated(t), shards, info.shape, info.dtype)
        outs.append(np.asarray(whole, STORAGE[info.dtype]))   # bf16 back in float32
    return outs


def _holder(mesh: Mesh, dev: int, stage: Stage | None) -> int:
    """The device holding `dev`'s block of a value on `stage`: the device of that stage with
    `dev`'s coordinates on the other axes (itself for a value on every stage)."""
    if stage is None:
        return dev
    c = mesh.coords(dev)
    c[stage[0]] = stage[1]
    return mesh.index(c, mesh.axes)
