"""A test fixture that puts a program's ops on pipeline stages, independently of the
pipeline-stages pass, so the backends' MPMD execution is checked against programs it did not make.

`stage_program(module, cuts, axis)` adds mesh axis `axis` of size len(cuts) + 1 to the program's
mesh (or declares `lamina.mesh @m [axis = P]` when it has none), keeps every value's splits and
puts it on one stage: the top-level ops before cuts[0] on stage 0, then up to cuts[1] on stage 1,
and so on; an argument goes on the stage of its first user; a value read on another stage is
moved there by one `lamina.reshard` (per value and stage) placed right before its first reader
there, the form insert-collectives is handed.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from lamina.backends.interface import find_entry
from lamina.ir.mesh.collectives import ReshardOp
from lamina.ir.mesh.collectives import build as build_placement
from lamina.ir.mesh.placement import MeshOp, PlaceAttr, place_of
from xdsl.dialects.builtin import FunctionType, ModuleOp, TensorType
from xdsl.dialects.func import ReturnOp
from xdsl.ir import Attribute, Operation, SSAValue


def staged_type(t: Attribute, mesh: str, stage: tuple[str, int]) -> Attribute:
    """`t` on `stage` of `mesh`, its splits, pending sum and tier kept (unplaced: replicated)."""
    assert isinstance(t, TensorType)
    old = place_of(t)
    rank = len(t.get_shape())
    if old is None or old.mesh_name is None:
        enc = PlaceAttr.make(mesh, [[]] * rank, tier=old.tier_name if old else None,
                             stage=stage)
    else:
        enc = PlaceAttr.make(mesh, old.splits, old.partial_axes, old.partial_kind.data,
                             old.tier_name, stage)
    return TensorType(t.element_type, t.get_shape(), enc)


def _with_axis(module: ModuleOp, axis: str, stages: int) -> str:
    """Add `axis` to the module's mesh (declare one when there is none); its name."""
    meshes = [op for op in module.body.block.ops if isinstance(op, MeshOp)]
    if not meshes:
        first = module.body.block.first_op
        assert first is not None
        module.body.block.insert_op_before(MeshOp("m", [(axis, stages)]), first)
        return "m"
    (old,) = meshes
    m = old.mesh
    new = MeshOp(m.name, [*zip(m.axes, m.sizes, strict=True), (axis, stages)])
    module.body.block.insert_op_before(new, old)
    old.detach()
    old.erase()
    return m.name


def stage_program(module: ModuleOp, cuts: Sequence[int], axis: str = "pp") -> ModuleOp:
    """Put the entry function's ops on len(cuts) + 1 stages (see the module docstring)."""
    mesh = _with_axis(module, axis, len(cuts) + 1)
    func = find_entry(module, None)
    block = func.body.block
    ops = [op for op in block.ops if not isinstance(op, ReturnOp)]
    stage_of_op = {op: bisect_right(list(cuts), i) for i, op in enumerate(ops)}
    home: dict[SSAValue, int] = {}
    for arg in block.args:
        users = [u.operation for u in arg.uses if u.operation in stage_of_op]
        home[arg] = min((stage_of_op[u] for u in users), default=0)
        arg._type = staged_type(arg.type, mesh, (axis, home[arg]))  # noqa: SLF001
    moved: dict[tuple[SSAValue, int], SSAValue] = {}
    for op in ops:
        s = stage_of_op[op]
        for i, v in enumerate(op.operands):
            if home[v] != s:
                op.operands[i] = _moved(v, s, op, moved, mesh, axis)
        for r in op.results:
            home[r] = s
            r._type = staged_type(r.type, mesh, (axis, s))  # noqa: SLF001
    ret = block.last_op
    assert isinstance(ret, ReturnOp)
    func.properties["function_type"] = FunctionType.from_lists(
        [a.type for a in block.args], [v.type for v in ret.operands])
    return module


def _moved(v: SSAValue, stage: int, before: Operation,
           moved: dict[tuple[SSAValue, int], SSAValue], mesh: str, axis: str) -> SSAValue:
    key = (v, stage)
    if key not in moved:
        op = build_placement(ReshardOp, [v], [staged_type(v.type, mesh, (axis, stage))])
        assert before.parent is not None
        before.parent.insert_op_before(op, before)
        moved[key] = op.results[0]
    return moved[key]
