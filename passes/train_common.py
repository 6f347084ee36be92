"""What derive-backward and append-optimizer share: argument names, new functions, placed results.

- Arguments are named as `lamina-run --inputs` names them: `x` for `%x` as written, or `argN` by
  position (argument N, counted from 0); option lists (`wrt=w1,w2`, `data=x,arg1`) use those.
- A gradient function (derive-backward's `@NAME_grad`) returns (loss, gradient of each argument
  it differentiates) and records which: the function attribute `lamina.gradients` holds the
  argument index of each gradient result, in result order (results 1, 2, ...). append-optimizer
  reads it, so the two passes also compose across separate `lamina-opt` runs.
- Order: accumulate-gradients and mixed-precision rewrite the step's ops and types, so they run
  before the passes that plan them: `check_unplanned` refuses a function propagate-sharding
  (a pending sum placed on a result) or annotate-lifetimes (a `lamina.free`) already rewrote,
  naming the pass and where it belongs.
- A result that must be placed like a function argument (a parameter's gradient, its update) is
  given that mesh placement, without tier or pending sum, on its own value (`returned_as`), so
  `propagate-sharding` treats it as a written placement: the pending sum over the data axis of a
  data-parallel gradient is reduced exactly there, to the parameter's placement (an all_reduce
  for a replicated parameter, a reduce_scatter for one split as ZeRO splits it).
"""

from __future__ import annotations

from collections.abc import Sequence

from lamina.ir.buffers.memory import FreeOp
from lamina.ir.buffers.updates import GRADIENTS_ATTR
from lamina.ir.builder import Builder, retype
from lamina.ir.core.diagnostics import error_at
from lamina.ir.core.shapes import info_of
from lamina.ir.mesh.collectives import ReshardOp, with_spec
from lamina.ir.mesh.collectives import build as build_placement
from lamina.ir.mesh.placement import place_of, spec_of
from lamina.ir.mesh.sharding import Spec
from lamina.ir.ops.lamina import ReshapeOp
from lamina.ir.ops.opbase import LaminaOp
from xdsl.dialects.builtin import DenseArrayBase, FunctionType, IntegerType, TensorType, i64
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, OpResult, Region, SSAValue


def arg_names(func: FuncOp) -> list[str]:
    """Each argument's name: its name as written (`x` for `%x`), else `argN`."""
    return [a.name_hint or f"arg{i}" for i, a in enumerate(func.body.block.args)]


def resolve_names(func: FuncOp, text: str, option: str, pass_name: str) -> list[int]:
    """The argument indices a comma-separated option value names (in the order written)."""
    names = arg_names(func)
    out: list[int] = []
    for raw in text.split(","):
        name = raw.strip().lstrip("%")
        if not name:
            continue
        if name in names:
            index = names.index(name)
        elif name.startswith("arg") and name[3:].isdigit() and int(name[3:]) < len(names):
            index = int(name[3:])
        else:
            raise error_at(func, f"{pass_name}: option {option} names '{name}', which is not an "
                           f"argument of @{func.sym_name.data} (arguments: {', '.join(names)})")
        if index not in out:
            out.append(index)
    return out


def new_function(name: str, arg_types: Sequence[Attribute], names: Sequence[str | None]
                 ) -> tuple[FuncOp, Block]:
    """An empty `func.func @name` with these arguments (its results are set by `finish`)."""
    block = Block(arg_types=list(arg_types))
    for a, n in zip(block.args, names, strict=True):
        if n:
            a.name_hint = n
    return FuncOp(name, (list(arg_types), []), Region(block)), block


def finish(func: FuncOp, block: Block, values: Sequence[SSAValue]) -> None:
    """End `func` with `func.return values` and give it the matching signature."""
    block.add_op(ReturnOp(*values))
    func.function_type = FunctionType.from_lists([a.type for a in block.args],
                                                 [v.type for v in values])


def named_functions(funcs: Sequence[FuncOp], name: str, pass_name: str) -> list[FuncOp]:
    """The function a pass's `func=` option names (a list of it), or the error naming the
    module's functions."""
    chosen = [f for f in funcs if f.sym_name.data == name]
    if not chosen:
        names = ", ".join(sorted(f.sym_name.data for f in funcs)) or "none"
        raise error_at(None, f"{pass_name}: option func names @{name}, which is not a function "
                       f"of the module (functions: {names})")
    return chosen


def check_unplanned(func: FuncOp, pass_name: str, order: str) -> None:
    """Refuse `func` when propagate-sharding or annotate-lifetimes ran on it already: the new ops
    and types `pass_name` makes would have no placement or no lifetime (`order` says where the
    pass belongs)."""
    name = f"@{func.sym_name.data}"
    for op in func.walk():
        if any((sp := spec_of(r.type)) is not None and sp.partial for r in op.results):
            raise error_at(op, f"{pass_name}: {name} has a pending sum placed ({op.name}): "
                           f"propagate-sharding ran already; run {pass_name} {order}")
        if isinstance(op, FreeOp):
            raise error_at(op, f"{pass_name}: {name} holds a lamina.free: annotate-lifetimes ran "
                           f"already; run {pass_name} {order}")


def gradient_args(func: FuncOp) -> list[int] | None:
    """The argument index of each gradient result of a gradient function, or None."""
    attr = func.attributes.get(GRADIENTS_ATTR)
    if not isinstance(attr, DenseArrayBase) or not isinstance(attr.elt_type, IntegerType):
        return None
    return [int(i) for i in attr.get_values()]


def mark_gradients(func: FuncOp, args: Sequence[int]) -> None:
    func.attributes[GRADIENTS_ATTR] = DenseArrayBase.from_list(i64, list(args))


def mesh_type_like(v: SSAValue, like: Attribute) -> Attribute | None:
    """`v`'s type placed on `like`'s mesh with `like`'s splits (no tier, no pending sum), or None
    when `like` is not on a mesh."""
    place = place_of(like)
    spec = spec_of(like)
    if place is None or spec is None or place.mesh_name is None:
        return None
    plain = TensorType(info_type(v).element_type, info_type(v).get_shape())
    return with_spec(plain, place.mesh_name, Spec(spec.splits))


def info_type(v: SSAValue) -> TensorType:
    t = v.type
    assert isinstance(t, TensorType)
    return t


def returned_as(b: Builder, v: SSAValue, like: Attribute) -> SSAValue:
    """`v`, placed like argument type `like` when that is on a mesh (module docstring).

    An unplaced result of an op with an unplaced operand is retyped in place (the op is not fully
    placed, so the verifier does not check its rule before propagate-sharding does); any other
    unplaced value goes through an identity reshape that carries the placement; a placed one
    through a `lamina.reshard`."""
    want = mesh_type_like(v, like)
    if want is None or v.type == want:
        return v
    place = place_of(v.type)
    if spec_of(v.type) is not None:
        if place is not None and place.tier_name is not None:
            raise error_at(v.owner if isinstance(v, OpResult) else None,
                           f"cannot return a value in tier '{place.tier_name}' placed as {want}")
        op = build_placement(ReshardOp, [v], [want])
        if b.before is not None:
            b.block.insert_op_before(op, b.before)
        else:
            b.block.add_op(op)
        return op.outputs[0]
    owner = v.owner if isinstance(v, OpResult) else None
    if isinstance(owner, LaminaOp) and not v.uses and \
            any(spec_of(o.type) is None for o in owner.operands):
        retype(v, want)
        return v
    r = b.op(ReshapeOp, v, result=info_of(v))  # the generic entry: an identity, on purpose
    retype(r, want)
    return r
