"""Placement facts about a function that every backend running it on a mesh needs.

- `placed_mesh`: the one mesh a function's values are placed on (None when none is; a function on
  several meshes, or on an unknown one, is an error);
- `first_unplaced`: the first op of a partially placed function, one whose unplaced value read as
  replicated breaks the op's sharding rule (e.g. a matmul result of split operands left
  unplaced), and what is unplaced there; None when the mesh can run the function as placed
  (unplaced values read as replicated, `lamina.ir.mesh.placement.spec_or_replicated`);
- `check_placed`: that as an error at the op, telling the user to run propagate-sharding;
- `partly_placed_note`: the note a backend gives when it ran a partly placed function on one
  device with its placements ignored.
"""

from __future__ import annotations

from lamina.ir.buffers.memory import value_label
from lamina.ir.core.diagnostics import error_at, op_loc
from lamina.ir.mesh.placement import MeshOp, find_mesh, place_of, spec_of, spec_or_replicated
from lamina.ir.mesh.sharding import ShardingError, infer
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, Operation


def placed_mesh(func: FuncOp) -> MeshOp | None:
    """The mesh the function's values are placed on (None when nothing is on a mesh)."""
    names: set[str] = set()

    def note(t: Attribute) -> None:
        p = place_of(t)
        if p is not None and p.mesh_name is not None:
            names.add(p.mesh_name)

    for t in (*func.function_type.inputs.data, *func.function_type.outputs.data):
        note(t)
    for op in func.walk():
        for r in op.results:
            note(r.type)
    if not names:
        return None
    if len(names) > 1:
        raise error_at(func, f"@{func.sym_name.data} uses several meshes ({', '.join(sorted(names))});"
                       " the SPMD interpreter runs one mesh per function")
    mesh = find_mesh(func, names.pop())
    if mesh is None:
        raise error_at(func, "placement refers to an unknown mesh")
    return mesh


def check_placed(func: FuncOp) -> None:
    """Reject, at the first offending op, a value left unplaced where reading it as replicated
    would not follow the op's sharding rule (a partially placed program: the user must run
    propagate-sharding). Unplaced values whose replicated reading is consistent are accepted."""
    gap = first_unplaced(func)
    if gap is not None:
        raise error_at(gap[0], f"{gap[1]}; run -p propagate-sharding first")


def partly_placed_note(func: FuncOp, gap: tuple[Operation, str]) -> str:
    """The note a backend gives when it ran partly placed `func` (`first_unplaced` found `gap`)
    on one device with its placements ignored, as every backend does."""
    loc = op_loc(gap[0])
    return (f"@{func.sym_name.data} is only partly placed ({gap[1]}"
            f"{f', at {loc}' if loc else ''}): it ran on one device with its placements "
            "ignored; run -p propagate-sharding to run it on its mesh")


def first_unplaced(func: FuncOp) -> tuple[Operation, str] | None:
    """The first op of a partially placed `func` (see `check_placed`) and what is unplaced
    there, or None when the mesh can run it as placed."""
    for op in func.walk():
        if not isinstance(op, LaminaOp) or not op.results:
            continue
        slots = op.operand_slots()
        vals = [v for v in slots if v is not None]
        r = op.results[0]
        unplaced = [v for v in vals if spec_of(v.type) is None]
        r_unplaced = spec_of(r.type) is None
        if not unplaced and not r_unplaced:
            continue  # fully placed: the verifier checked its rule
        if r_unplaced and len(unplaced) == len(vals):
            continue  # nothing placed here: replicated throughout
        specs = [None if v is None else spec_or_replicated(v.type) for v in slots]
        try:
            want = infer(op.info, op.operand_infos(), specs, op.attr_values(),
                         tensor_info(r.type))
        except ShardingError:
            want = None
        if want == spec_or_replicated(r.type):
            continue
        what = f"{value_label(r)} = {op.name}" if r.name_hint else f"the result of {op.name}"
        if r_unplaced:
            return op, f"{what} is not placed while its operands are"
        return op, (f"operand {value_label(unplaced[0])} of {what} is not placed while the "
                    f"result is (read as replicated it breaks the {op.info.sharding.name} rule)")
    return None
