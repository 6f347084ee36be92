"""`--backend iree`: a Lamina function exported to upstream MLIR, compiled by IREE to native code.

    lamina-run FILE --backend iree [-p PIPELINE] [--check]
    lamina.compile(module, entry, backend="iree", iree_target="llvm-cpu")

`compile` exports the function (`lamina.analysis.linalg.export.export_function`: what the export
refuses is its diagnostic at the op), compiles the text with IREE
(`iree.compiler.compile_str`) or finds it compiled in the on-disk cache
(`lamina.backends.iree.cache`: a second process maps the file instead of compiling), and loads it
once into an `iree.runtime` context on the target's device. A call only converts the inputs to
their storage dtypes (`check_inputs`), invokes the function and copies the results out as NumPy
arrays of their storage dtypes. bf16 crosses IREE's boundary as ml_dtypes' bfloat16 (which
iree.runtime maps to its BFLOAT_16 element type both ways): the interpreter's float32 storage
is converted to it going in (exactly: the values are bf16's) and back coming out.

Targets (`IreeOptions.iree_target`): `llvm-cpu` (default) compiles for this machine's CPU and its
features (`--iree-llvmcpu-target-cpu=host`) and runs on IREE's `local-task` driver; `cuda` emits
PTX for IREE's default CUDA architecture (the CUDA driver compiles it for the GPU present) and
runs on the `cuda` driver. A target the compiler lacks or a driver without a device is one
diagnostic before anything compiles.

Numerics: f64 stays f64 (`--iree-input-demote-f64-to-f32=false`: IREE demotes f64 by default),
integers keep their width; the values are the op table's formulas as the export writes them,
so integer ops, compares, scans and dropout's mask hash are bit-exact, as are f16/bf16 ops
whose f32 value is (one rounding per op, as the interpreter), and exp, tanh, erf ... are IREE's
own approximations, within `lamina.backends.compare`'s tolerances of NumPy's (f64 sin/cos: the
export's own, within 2 ulp of NumPy's for |x| < 2^30).

Features: fused kernels (each is one `linalg.generic` or a root op plus its epilogue), tier
moves and frees (the export drops them: they change no value), and placed programs: the
per-device export compiled once and run once per device in threads, its collectives bound in
Python (`lamina.backends.iree.placed`; what the per-device export refuses is its diagnostic);
a pipeline-staged program as one module per stage, each compiled once, each device running its
stage's.

Donation is accepted and changes nothing: IREE copies each argument into a buffer of its own and
the results are new arrays, so a donated argument's array is left as it was and no buffer is
reused (as on JAX with NumPy inputs). `warmup` changes nothing either: the module is compiled
ahead of time, so nothing is left for the first call.

Statistics: `backend`, `iree_target`, `iree_version`, `module_compiled` (whether this process
compiled a module; False: loaded from the cache), `module_seconds` (compiling or loading them),
`module_path` (a staged program's: stage 0's, and `module_paths`, stage i's at i), `run_seconds`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar

import iree.compiler as ic
import iree.runtime as rt
import numpy as np
from lamina.analysis.linalg.export import boundary_dtype, export_function, wrap_module
from lamina.analysis.placed import placed_mesh
from lamina.backends.arrays import check_inputs
from lamina.backends.interface import Feature, RunResult
from lamina.backends.iree.cache import VERSION, CachedModule, compiled_module
from lamina.backends.iree.options import IreeOptions
from lamina.backends.iree.placed import DeviceGroup, StageModule, placed_texts
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.core.dtypes import STORAGE
from lamina.ir.ops.opbase import tensor_info
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp

# every target: f64 stays f64 (IREE's input pipeline demotes it to f32 unless told not to)
COMMON_FLAGS = ("--iree-input-demote-f64-to-f32=false",)


@dataclass(frozen=True)
class Target:
    """One IREE target: the runtime driver its modules run on and its own compiler flags."""

    driver: str
    flags: tuple[str, ...]


TARGETS: dict[str, Target] = {
    "llvm-cpu": Target("local-task", ("--iree-llvmcpu-target-cpu=host",)),
    "cuda": Target("cuda", ()),
}


def check_target(name: str) -> Target:
    """The target called `name`, once its compiler target and a device of its driver are known
    to exist; else one diagnostic saying which is missing."""
    target = TARGETS.get(name)
    if target is None:
        raise LaminaError(f"backend 'iree': unknown target '{name}' (targets: "
                          f"{', '.join(TARGETS)})")
    if name not in ic.query_available_targets():
        raise LaminaError(f"backend 'iree': this IREE compiler ({VERSION}) has no '{name}' target")
    why = "no device found"
    try:
        found = rt.get_driver(target.driver).query_available_devices()
    except RuntimeError as e:
        found, why = [], str(e).splitlines()[0]
    if not found:
        raise LaminaError(f"backend 'iree': target '{name}' needs a device of IREE's "
                          f"'{target.driver}' driver: {why}")
    return target


@cache
def device_config(driver: str) -> rt.Config:
    """One IREE device (and VM instance) per driver for the process: every program shares it,
    so a local-task device's worker threads are started once."""
    return rt.Config(driver)


class IreeProgram:
    """One function exported, compiled (or loaded from the cache) and loaded into its own IREE
    context once; a call runs the compiled function (see the module docstring)."""

    def __init__(self, func: FuncOp, options: IreeOptions):
        target = check_target(options.iree_target)
        self.func = func
        self.symbol = func.sym_name.data
        self.mesh = placed_mesh(func)
        # one program, or one per pipeline stage of a staged function (each compiled once)
        parts = placed_texts(func, self.mesh) if self.mesh is not None else [
            (None, wrap_module([export_function(func)]), [])]
        self.texts = [text for _, text, _ in parts]
        self.modules: list[CachedModule] = [
            compiled_module(text, options.iree_target, COMMON_FLAGS + target.flags)
            for text in self.texts]
        self.module = self.modules[0]
        self.config = config = device_config(target.driver)
        vm_modules = [rt.VmModule.mmap(config.vm_instance, str(m.path)) for m in self.modules]
        self.vm_module = vm_module = vm_modules[0]
        if self.mesh is not None:
            self.devices = DeviceGroup(self.mesh.mesh, config, [
                StageModule(stage, vm, tuple(decls))
                for (stage, _, decls), vm in zip(parts, vm_modules, strict=True)])
        else:
            self.context = rt.SystemContext(config=config)
            self.context.add_vm_module(vm_module)
            self.entry = self.context.modules[vm_module.name][self.symbol]
        self.storage = [STORAGE[tensor_info(t).dtype] for t in func.function_type.outputs.data]
        self.boundary = [boundary_dtype(tensor_info(t).dtype) for t in func.function_type.inputs.data]
        self.stats: dict[str, Any] = {
            "backend": "iree", "iree_target": options.iree_target, "iree_version": VERSION,
            "module_compiled": any(m.compiled for m in self.modules),
            "module_seconds": sum(m.seconds for m in self.modules),
            "module_path": str(self.module.path)}
        if len(self.modules) > 1:   # a staged program: stage i's module is module_paths[i]
            self.stats["module_paths"] = [str(m.path) for m in self.modules]

    def __call__(self, inputs: Sequence[Any]) -> RunResult:
        # C order for IREE's buffers (not np.ascontiguousarray: it makes rank-0 arrays rank 1);
        # bf16 from its float32 storage to bfloat16 (exact: the values are bf16's)
        args = [np.asarray(a, dtype=d, order="C")
                for a, d in zip(check_inputs(self.func, inputs), self.boundary, strict=True)]
        start = time.perf_counter()
        if self.mesh is not None:
            outs = [np.asarray(o, dtype=d) for o, d in
                    zip(self.devices.run(self.func, args), self.storage, strict=True)]
            return RunResult(outs, {**self.stats, "devices": self.mesh.mesh.devices,
                                    "run_seconds": time.perf_counter() - start})
        try:
            results = self.entry(*args)
        except (ValueError, RuntimeError) as e:   # the runtime's own check of what it was given
            raise LaminaError(f"backend 'iree': @{self.symbol} failed in IREE's runtime: "
                              f"{str(e).splitlines()[0]}") from None
        outs = self._fetch(results)
        return RunResult(outs, {**self.stats, "run_seconds": time.perf_counter() - start})

    def _fetch(self, results: Any) -> list[np.ndarray]:
        """The results (None, one array or a tuple, as IREE's invoker returns them) copied out
        of IREE's buffers as NumPy arrays in their storage dtypes."""
        if results is None:
            results = ()
        elif not isinstance(results, tuple | list):
            results = (results,)
        return [np.array(r.to_host() if hasattr(r, "to_host") else r, dtype=d)
                for r, d in zip(results, self.storage, strict=True)]


class IreeBackend:
    """Lamina programs exported to linalg and compiled by IREE (see the module docstring)."""

    name: ClassVar[str] = "iree"
    features: ClassVar[frozenset[Feature]] = frozenset(
        {Feature.FUSED, Feature.TIERS, Feature.LIFETIMES, Feature.PLACED})
    Options: ClassVar[type[IreeOptions]] = IreeOptions

    def compile(self, module: ModuleOp, func: FuncOp, options: IreeOptions,
                donate: frozenset[int] = frozenset(), warmup: bool = True) -> IreeProgram:
        """The function exported and compiled now (`donate` and `warmup` change nothing: see the
        module docstring)."""
        return IreeProgram(func, options)
