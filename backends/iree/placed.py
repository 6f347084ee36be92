"""`--backend iree` on a placed program: its per-device export run once per device, in threads.

The function exports as the program one device runs (`lamina.analysis.linalg.spmd`), compiled once.
Each device gets its own IREE context holding that module and a `lamina_collectives` module made
in Python (`iree.runtime.PyModuleInterface`) that implements every declaration the export wrote:
the device posts its block, waits at a barrier of all devices (every device makes every call, in
the same order: the program is SPMD), takes its group's blocks (the devices differing only on the
declaration's axes, ordered by their index along them) and computes its result from them in
NumPy, one function per kind of the collectives table (`LOWERINGS`). Inputs are cut into shards
and outputs assembled as the SPMD interpreter does (`lamina.backends.arrays`), so the run's
outputs are the global values, comparable with `run_function`'s.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import iree.runtime as rt
import numpy as np
from iree.runtime.array_interop import map_dtype_to_element_type
from lamina.analysis.linalg.export import export_function, wrap_module
from lamina.analysis.linalg.spmd import IMPORT_MODULE, Declaration, PerDevice, header
from lamina.backends.arrays import Shards, assemble, distribute, reduce_parts
from lamina.ir.core.diagnostics import LaminaError
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
from lamina.ir.mesh.placement import Mesh, MeshOp, spec_or_replicated
from lamina.ir.ops.opbase import tensor_info
from xdsl.dialects.func import FuncOp

BARRIER_SECONDS = 600.0   # a device that never arrives (it failed) breaks the barrier, not a hang

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
    # registered so the table stays covered; the linalg export refuses a staged program first
    # (its per-device modules are SPMD: every device runs the same function)
    raise LaminaError("backend 'iree': lamina.collective_permute (pipeline stages) is not yet "
                      "supported")


def _dtype_name(a: np.ndarray) -> str:
    """The Lamina element type of a storage array (what `reduce_parts` widens by)."""
    return {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64",
            "bool": "i1"}[a.dtype.name]


class Exchange:
    """The devices' meeting point: one slot per device, a barrier of all devices."""

    def __init__(self, mesh: Mesh) -> None:
        self.mesh = mesh
        self.slots: list[np.ndarray | None] = [None] * mesh.devices
        self.barrier = threading.Barrier(mesh.devices, timeout=BARRIER_SECONDS)

    def run(self, decl: Declaration, dev: int, x: np.ndarray) -> np.ndarray:
        """Device `dev`'s result of `decl` on its block `x` (every device calls this)."""
        fn = LOWERINGS.get(decl.collective)
        if fn is None:
            raise LaminaError(f"backend 'iree': no lowering for {decl.collective.op_name}")
        self.slots[dev] = x
        self.barrier.wait()
        group = next(g for g in self.mesh.groups(decl.axes) if dev in g)
        blocks = [self.slots[d] for d in group]
        out = fn([b for b in blocks if b is not None], group.index(dev), decl)
        self.barrier.wait()   # every device has read the slots before any reuses them
        return out


def collectives_module(device: rt.HalDevice, decls: Sequence[Declaration], exchange: Exchange,
                       dev: int) -> rt.VmModule:
    """The `lamina_collectives` module device `dev` binds: one export per declaration."""
    iface = rt.PyModuleInterface(IMPORT_MODULE, lambda _iface: object())
    for decl in decls:
        iface.export(decl.symbol.removeprefix(IMPORT_MODULE + "."), "0r_r",
                     _bound(device, decl, exchange, dev))
    return iface.create()


def _bound(device: rt.HalDevice, decl: Declaration, exchange: Exchange, dev: int
           ) -> Callable[[Any, rt.VmRef], rt.VmRef]:
    def call(_self: Any, ref: rt.VmRef) -> rt.VmRef:
        view = ref.deref(rt.HalBufferView)
        assert view is not None   # the export declares every operand a tensor
        x = np.array(rt.DeviceArray(device, view, implicit_host_transfer=True).to_host())
        out = np.ascontiguousarray(exchange.run(decl, dev, x))
        made = device.allocator.allocate_buffer_copy(
            memory_type=rt.MemoryType.DEVICE_LOCAL, allowed_usage=rt.BufferUsage.DEFAULT,
            device=device, buffer=out, element_type=map_dtype_to_element_type(out.dtype))
        assert isinstance(made, rt.HalBufferView)
        return made.ref
    return call


def placed_text(func: FuncOp, mesh: MeshOp) -> tuple[str, list[Declaration]]:
    """The per-device module of `func` alone and its declarations."""
    device = PerDevice(mesh.mesh)
    body = export_function(func, device=device)   # fills device.decl_lines
    return wrap_module(device.decl_lines + [body], header(mesh.mesh)), list(device.decls.values())


class DeviceGroup:
    """Every device's IREE context, made once per compiled program: each binds its own
    `lamina_collectives` module to one shared `Exchange`, so a call only runs the threads."""

    def __init__(self, mesh: Mesh, config: rt.Config, vm_module: rt.VmModule,
                 decls: Sequence[Declaration]) -> None:
        self.mesh, self.vm_module = mesh, vm_module
        self.exchange = Exchange(mesh)
        self.contexts = []
        for dev in range(mesh.devices):
            ctx = rt.SystemContext(config=config)
            ctx.add_vm_module(collectives_module(config.device, decls, self.exchange, dev))
            ctx.add_vm_module(vm_module)
            self.contexts.append(ctx)

    def run(self, func: FuncOp, inputs: Sequence[np.ndarray], symbol: str | None = None
            ) -> list[np.ndarray]:
        """Every device's program (`func` exported as `symbol`, default its name) in its own
        thread; the outputs assembled as global values."""
        mesh = self.mesh
        args = [distribute(mesh, spec_or_replicated(v.type), a)
                for v, a in zip(func.body.block.args, inputs, strict=True)]
        self.exchange.barrier.reset()   # a failed call left it broken
        results: list[list[np.ndarray] | BaseException | None] = [None] * mesh.devices
        name = symbol or func.sym_name.data

        def device_main(dev: int) -> None:
            try:
                coords = mesh.coords(dev)
                out = self.contexts[dev].modules[self.vm_module.name][name](
                    *[np.asarray(a[dev], order="C") for a in args],
                    np.array([coords[a] for a in mesh.axes], dtype=np.int64))
                outs = out if isinstance(out, tuple | list) else () if out is None else (out,)
                results[dev] = [np.array(r.to_host() if hasattr(r, "to_host") else r)
                                for r in outs]
            except BaseException as e:  # noqa: BLE001 - reported by the caller, with the device
                self.exchange.barrier.abort()
                results[dev] = e

        threads = [threading.Thread(target=device_main, args=(d,)) for d in range(mesh.devices)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return _assembled(func, mesh, results)


def run_devices(func: FuncOp, mesh: Mesh, config: rt.Config, vm_module: rt.VmModule,
                decls: Sequence[Declaration], inputs: Sequence[np.ndarray],
                symbol: str | None = None) -> list[np.ndarray]:
    """One run of `func` on a fresh `DeviceGroup` (`decls`: every declaration `vm_module`
    imports; a module of several functions binds them all)."""
    return DeviceGroup(mesh, config, vm_module, decls).run(func, inputs, symbol)


def _assembled(func: FuncOp, mesh: Mesh, results: list[Any]) -> list[np.ndarray]:
    for dev, r in enumerate(results):
        if isinstance(r, BaseException) and not isinstance(r, threading.BrokenBarrierError):
            raise LaminaError(f"backend 'iree': @{func.sym_name.data} failed on device {dev}: "
                              f"{str(r).splitlines()[0] if str(r) else type(r).__name__}")
    outs = []
    for k, t in enumerate(func.function_type.outputs.data):
        info = tensor_info(t)
        shards: Shards = [r[k] for r in results]
        outs.append(assemble(mesh, spec_or_replicated(t), shards, info.shape, info.dtype))
    return outs
