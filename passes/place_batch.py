"""`place-batch`: place a function's data on a data-parallel mesh axis, everything else replicated.

    -p 'place-batch{data=x,y axis=data size=8}'

Data parallelism written as placements: the data arguments named in `data` (the batch: inputs
and labels) get their batch dimension (`dim`, default 0) split over the mesh axis `axis`, and
every other argument (the parameters) is replicated on the same mesh. Nothing else is placed:
`propagate-sharding` places the ops from these arguments, and after `derive-backward` and
`append-optimizer` each parameter's gradient is a pending sum over the axis, which
`insert-collectives` reduces once per step (one bucketed all_reduce for replicated parameters).
That is why the pass runs on the forward function, before derive-backward: the gradients then
come back placed like their (replicated) parameters, which is where the reduction belongs.

The mesh: the program's own when it has one (`mesh=` names it among several; its `axis` must
exist, and `size`, when given, must be that axis's size), else a new `lamina.mesh @mesh
[axis = size]` (`mesh` default `dp`) at the top of the module, for which `size` is required.
`lamina-train --mesh data=8` and `lamina.Trainer(mesh="data=8")` apply it.

Refusals, each one located diagnostic: a batch dimension that does not divide by the axis size
(every device must hold an equal block, as the SPMD interpreter and shard_map both require), a
data argument of rank 0 or with `dim` out of range, a data argument already placed otherwise, an
unknown argument name, an axis the program's mesh lacks. An argument other than the data that
is already placed keeps its placement (a ZeRO-style split parameter stays split).

Option `func` picks the function (default: every function of the module). With `--explain`:
the mesh used or declared, and each argument's placement with why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lamina.ir.builder import retype
from lamina.ir.core.diagnostics import LaminaError, error_at
from lamina.ir.core.shapes import info_of
from lamina.ir.mesh.collectives import with_spec
from lamina.ir.mesh.placement import MeshOp, place_of, spec_of
from lamina.ir.mesh.sharding import Spec
from lamina.passes.explain import ExplainLog, LaminaPass
from lamina.passes.train_common import arg_names, resolve_names
from xdsl.context import Context
from xdsl.dialects.builtin import FunctionType, ModuleOp
from xdsl.dialects.func import FuncOp

PASS = "place-batch"


def _is_identifier(text: str) -> bool:
    return bool(text) and (text[0].isalpha() or text[0] == "_") and \
        all(c.isalnum() or c in "_$." for c in text)


@dataclass(frozen=True)
class PlaceBatch(LaminaPass):
    """Split the data arguments' batch dim over a mesh axis, replicate the rest (data parallel)."""

    name: ClassVar[str] = PASS
    minimums: ClassVar[dict[str, int]] = {"size": 0, "dim": 0}
    func: str = ""
    data: str = ""
    axis: str = "data"
    size: int = 0
    dim: int = 0
    mesh: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not _is_identifier(self.axis):
            raise LaminaError(f"option 'axis' for {PASS} must be a mesh axis name, got "
                              f"'{self.axis}'")
        if self.mesh and not _is_identifier(self.mesh):
            raise LaminaError(f"option 'mesh' for {PASS} must be a symbol name, got "
                              f"'{self.mesh}'")

    def run(self, ctx: Context, module: ModuleOp, log: ExplainLog | None) -> None:
        funcs = [op for op in module.ops if isinstance(op, FuncOp)]
        if self.func:
            funcs = [f for f in funcs if f.sym_name.data == self.func]
            if not funcs:
                raise LaminaError(f"{PASS}: no function @{self.func} in the module")
        if not funcs:
            return   # nothing to place: no mesh is declared either
        mesh = self._mesh(module, funcs, log)
        for func in funcs:
            self._place(func, mesh, log)

    def _mesh(self, module: ModuleOp, funcs: list[FuncOp], log: ExplainLog | None) -> MeshOp:
        """The program's mesh with `axis`, or a new one declared at the top of the module."""
        meshes = [op for op in module.ops if isinstance(op, MeshOp)]
        if self.mesh:
            meshes = [m for m in meshes if m.sym_name.data == self.mesh]
        anchor = funcs[0] if funcs else None
        if len(meshes) > 1:
            raise error_at(meshes[1], f"{PASS}: the module declares meshes "
                           f"{', '.join('@' + m.sym_name.data for m in meshes)}; name one with "
                           "mesh=")
        if meshes:
            (mesh,) = meshes
            sizes = mesh.axis_sizes
            if self.axis not in sizes:
                raise error_at(mesh, f"{PASS}: mesh @{mesh.sym_name.data} has no axis "
                               f"'{self.axis}' (axes: {', '.join(sizes)})")
            if self.size and sizes[self.axis] != self.size:
                raise error_at(mesh, f"{PASS}: size={self.size}, but axis '{self.axis}' of mesh "
                               f"@{mesh.sym_name.data} has {sizes[self.axis]} devices")
            if log is not None:
                log.add(mesh, f"the program's mesh @{mesh.sym_name.data}: the batch goes on axis "
                        f"'{self.axis}' of {sizes[self.axis]} devices")
            return mesh
        if not self.size:
            raise error_at(anchor, f"{PASS}: the module has no mesh{f' @{self.mesh}' if self.mesh else ''}"
                           f" to place on; give size=N to declare one with axis '{self.axis}'")
        name = self.mesh or "dp"
        mesh = MeshOp(name, [(self.axis, self.size)])
        first = module.body.block.first_op
        if first is None:
            module.body.block.add_op(mesh)
        else:
            module.body.block.insert_op_before(mesh, first)
        if log is not None:
            log.add(anchor, f"declared lamina.mesh @{name} [{self.axis} = {self.size}]: the "
                    "module had no mesh")
        return mesh

    def _place(self, func: FuncOp, mesh: MeshOp, log: ExplainLog | None) -> None:
        name = func.sym_name.data
        mesh_name = mesh.sym_name.data
        size = mesh.axis_sizes[self.axis]
        data = resolve_names(func, self.data, "data", PASS)
        if not data:
            raise error_at(func, f"{PASS}: option data names no argument of @{name}: give the "
                           "batch arguments, e.g. data=x,y")
        names = arg_names(func)
        args = func.body.block.args
        for i, a in enumerate(args):
            info = info_of(a)
            rank = len(info.shape)
            old = place_of(a.type)
            if old is not None and old.mesh_name not in (None, mesh_name):
                raise error_at(func, f"{PASS}: argument %{names[i]} of @{name} is placed on mesh "
                               f"@{old.mesh_name}, not @{mesh_name}")
            placed = spec_of(a.type)
            if i in data:
                if rank == 0 or self.dim >= rank:
                    raise error_at(func, f"{PASS}: data argument %{names[i]} of @{name} is "
                                   f"{a.type}, which has no dimension {self.dim} to split "
                                   "(option dim)")
                batch = info.shape[self.dim]
                if batch % size:
                    raise error_at(func, f"{PASS}: the batch of %{names[i]} (dimension "
                                   f"{self.dim} of {a.type}) is {batch}, which does not divide "
                                   f"by the {size} devices of axis '{self.axis}'")
                splits = [[] for _ in range(rank)]
                splits[self.dim] = [self.axis]
                want = Spec(tuple(tuple(s) for s in splits))
                if placed is not None and placed != want:
                    raise error_at(func, f"{PASS}: data argument %{names[i]} of @{name} is "
                                   f"already placed {placed}; place-batch would place it {want}")
                why = f"batch dimension {self.dim} split over '{self.axis}' ({batch // size} " \
                      "rows per device)"
            else:
                want = placed if placed is not None else Spec.replicated(rank)
                why = "kept as written" if placed is not None else "replicated"
            retype(a, with_spec(a.type, mesh_name, want))
            if log is not None:
                log.add(func, f"@{name} %{names[i]}: {want}: {why}")
        ftype = func.function_type
        func.properties["function_type"] = FunctionType.from_lists(
            [a.type for a in args], list(ftype.outputs.data))
