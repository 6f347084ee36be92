"""Collective ops of the `lamina` dialect: the only ops that change a value's placement.

    %r = lamina.all_reduce %p {axes = ["model"], kind = "sum", algorithm = "ring"} : T -> R
    %r, %s = lamina.all_reduce %p, %q {axes = ["data"]} : (T1, T2) -> (R1, R2)     // a bucket
    %g = lamina.all_gather %x {dim = 1 : i64, axes = ["model"]} : T -> R
    %s = lamina.reduce_scatter %p {dim = 1 : i64, axes = ["model"], kind = "sum"} : T -> R
    %a = lamina.all_to_all %x {split_dim = 0 : i64, concat_dim = 1 : i64, axes = ["model"]} : T -> R
    %l = lamina.all_slice %x {dim = 0 : i64, axes = ["data"]} : T -> R
    %t = lamina.reshard %x : T -> R
    %n = lamina.collective_permute %x {axes = ["pp"]} : T(stage = pp[0]) -> R(stage = pp[1])

Every op keeps the global value unchanged (its single-device meaning is the identity); only the
placement changes, and each op verifies that its result type is exactly the placement it produces
from its operand's:

- all_reduce (axes, kind): every axis must be pending (`partial`) in the operand with the same kind;
  the result drops them from `partial`. Several operands make one bucket (one launch, one latency).
- all_gather (dim, axes): `axes` must be the minor-most split axes of dimension `dim`; the result
  no longer splits `dim` over them.
- reduce_scatter (dim, axes, kind): all_reduce over `axes`, each device keeping its slice: the
  result drops `axes` from `partial` and appends them (minor-most) to the split of `dim`.
- all_to_all (split_dim, concat_dim, axes): moves `axes` from the minor end of `concat_dim`'s split
  to the minor end of `split_dim`'s (each device splits its block along split_dim, sends piece j to
  device j of the group and concatenates what it receives along concat_dim; MLIR's convention).
- all_slice (dim, axes): no communication: each device keeps its slice of a value replicated over
  `axes` (appended minor-most to `dim`'s split). MLIR's `shard.all_slice`.
- collective_permute (axes = [the stage axis]): point to point between pipeline stages: the
  operand lives on stage i of the axis (`stage = pp[i]`), the result on stage j != i, with the same
  splits and `partial`; each device of stage i sends its block to the device of stage j with the
  same coordinates on the other axes (XLA's collective_permute, MLIR's send/recv pair).
- reshard: any placement change on one mesh, not yet decided (written by `propagate-sharding`,
  lowered to the collectives above by `insert-collectives`). It may not introduce a `partial`.
  It may move a value between two stages of one stage axis (lowered to a collective_permute).

Every other placement op keeps its operand's stage (`check_stages`).

`algorithm` (optional, "ring" | "tree" | "hierarchical", or "direct", the one send of a
point-to-point kind: collective_permute) records the implementation the cost model chose
(`insert-collectives`); it does not change the meaning.

What differs between the kinds besides their placement rule (`produce`), their attributes, arity,
cost facts, is each op's `COLLECTIVE` record in `lamina.ir.mesh.collective_kinds`; `OP_CLASS` maps a
record's kind back to its op class. `PlacementOp.verify_` runs `VERIFY_CHECKS`, small named
checks, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from lamina.ir.core.attrs import (
    INTEGER,
    AttrRule,
    check_attributes,
    is_integer,
    is_string,
    is_string_list,
    wrong_kind,
)
from lamina.ir.mesh.collective_kinds import (
    ALGORITHM,
    ALGORITHMS,
    ALL_GATHER,
    ALL_REDUCE,
    ALL_SLICE,
    ALL_TO_ALL,
    AXES,
    COLLECTIVE_KINDS,
    COLLECTIVE_PERMUTE,
    CONCAT_DIM,
    DIM,
    HIERARCHICAL,
    INNER,
    KIND,
    REDUCE_KINDS,
    REDUCE_SCATTER,
    RESHARD,
    SPLIT_DIM,
    SUM,
    Collective,
)
from lamina.ir.mesh.placement import (
    MeshOp,
    PlaceAttr,
    find_mesh,
    place_of,
    placement_problem,
    spec_of,
    stage_of,
)
from lamina.ir.mesh.sharding import Spec
from xdsl.dialects.builtin import (
    AnyTensorType,
    ArrayAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    AnyAttr,
    IRDLOperation,
    irdl_op_definition,
    opt_prop_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException


def _fmt(axes: Sequence[str]) -> str:
    return "[" + ", ".join(axes) + "]"


def with_spec(t: Attribute, mesh: str, spec: Spec) -> TensorType:
    """Tensor type `t` placed by `spec` on `mesh` (its memory tier and pipeline stage, if any,
    are kept: a spec says how a value is split, not on which stage it lives)."""
    assert isinstance(t, TensorType)
    old = place_of(t)
    tier = old.tier_name if old is not None else None
    stage = old.stage if old is not None and old.mesh_name == mesh else None
    return TensorType(t.element_type, t.get_shape(),
                      PlaceAttr.make(mesh, spec.splits, spec.partial, spec.partial_kind, tier,
                                     stage))


def with_stage(t: Attribute, stage: tuple[str, int] | None) -> TensorType:
    """Tensor type `t` (placed on a mesh) moved to pipeline stage `stage` (None: every stage),
    its splits, partial and tier kept."""
    assert isinstance(t, TensorType)
    p = place_of(t)
    assert p is not None and p.mesh_name is not None
    return TensorType(t.element_type, t.get_shape(),
                      PlaceAttr.make(p.mesh_name, p.splits, p.partial_axes, p.partial_kind.data,
                                     p.tier_name, stage))


class PlacementOp(IRDLOperation):
    """Base of the ops that change placement: shared syntax and verification."""

    inputs = var_operand_def(AnyTensorType)
    outputs = var_result_def(AnyTensorType)
    axes = opt_prop_def(AnyAttr())
    algorithm = opt_prop_def(AnyAttr())
    inner = opt_prop_def(AnyAttr())
    traits = traits_def(Pure())

    COLLECTIVE: ClassVar[Collective]      # this op's record in the table of collective kinds
    ATTRIBUTES: ClassVar[tuple[AttrRule, ...]]   # attribute_rules(COLLECTIVE), per class

    # -- facts --
    @property
    def short(self) -> str:
        return self.COLLECTIVE.kind

    def axis_names(self) -> tuple[str, ...]:
        a = self.properties.get(AXES)
        if not isinstance(a, ArrayAttr):
            return ()
        return tuple(x.data for x in a.data if isinstance(x, StringAttr))

    def int_attr(self, key: str) -> int:
        a = self.properties.get(key)
        assert isinstance(a, IntegerAttr)
        return a.value.data

    def reduce_kind(self) -> str:
        a = self.properties.get(KIND)
        return a.data if isinstance(a, StringAttr) else SUM.name

    def inner_group(self) -> int | None:
        """Devices per inner-level group of a hierarchical collective."""
        a = self.properties.get(INNER)
        return a.value.data if isinstance(a, IntegerAttr) else None

    def algorithm_name(self) -> str | None:
        a = self.properties.get(ALGORITHM)
        return a.data if isinstance(a, StringAttr) else None

    def set_algorithm(self, algorithm: str, inner: int | None) -> None:
        """Record the cost model's choice (`insert-collectives`); the meaning stays the same."""
        self.properties[ALGORITHM] = StringAttr(algorithm)
        if inner is not None:
            self.properties[INNER] = IntegerAttr(inner, i64)

    def mesh_name(self) -> str:
        p = place_of(self.operands[0].type)
        assert p is not None and p.mesh_name is not None
        return p.mesh_name

    # -- rule --
    def produce(self, src: Spec, rank: int) -> Spec:
        """The placement this op gives an operand placed `src` (VerifyException if it cannot)."""
        raise NotImplementedError

    def verify_(self) -> None:
        for check in VERIFY_CHECKS:
            check(self)

    # -- syntax --
    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list(self.inputs, printer.print_ssa_value)
        if self.properties:
            printer.print_op_attributes(dict(self.properties))
        printer.print_string(" : ")
        if len(self.inputs) == 1:
            printer.print_attribute(self.inputs[0].type)
            printer.print_string(" -> ")
            printer.print_attribute(self.outputs[0].type)
        else:
            printer.print_string("(")
            printer.print_list([v.type for v in self.inputs], printer.print_attribute)
            printer.print_string(") -> (")
            printer.print_list([v.type for v in self.outputs], printer.print_attribute)
            printer.print_string(")")

    @classmethod
    def parse(cls, parser: Parser) -> PlacementOp:
        pos = parser.pos
        operands = parser.parse_comma_separated_list(Parser.Delimiter.NONE,
                                                     parser.parse_unresolved_operand)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        if parser.parse_optional_punctuation("("):
            types = parser.parse_comma_separated_list(Parser.Delimiter.NONE, parser.parse_type)
            parser.parse_punctuation(")")
            parser.parse_punctuation("->")
            parser.parse_punctuation("(")
            results = parser.parse_comma_separated_list(Parser.Delimiter.NONE, parser.parse_type)
            parser.parse_punctuation(")")
        else:
            types = [parser.parse_type()]
            parser.parse_punctuation("->")
            results = [parser.parse_type()]
        if len(types) != len(operands):
            parser.raise_error(f"{cls.name}: {len(operands)} operands but {len(types)} types",
                               at_position=pos)
        allowed = cls.COLLECTIVE.attrs
        for key in attrs:
            if key not in allowed:
                parser.raise_error(f"{cls.name} has no attribute '{key}' (it takes "
                                   f"{', '.join(allowed)})", at_position=pos)
        values = parser.resolve_operands(operands, types, pos)
        return cls.build(operands=[values], result_types=[results], properties=dict(attrs))


# -- verification: small named checks, run in this order (the first failure is the error) --

def check_operand_count(op: PlacementOp) -> None:
    """One result per operand, at least one; only a variadic kind (a bucket) takes several."""
    if not op.inputs or len(op.inputs) != len(op.outputs):
        raise VerifyException(f"{op.name}: needs one result per operand, at least one operand")
    if not op.COLLECTIVE.variadic and len(op.inputs) != 1:
        raise VerifyException(f"{op.name} takes exactly one operand")


def attribute_rules(c: Collective) -> tuple[AttrRule, ...]:
    """The attributes kind `c` takes and the kind of each (checked before anything reads them;
    their values are judged by the checks below)."""
    common = {
        AXES: AttrRule(AXES, AXES_WANT, is_string_list, required=c.needs_axes),
        ALGORITHM: AttrRule(ALGORITHM, ALGORITHM_WANT, is_string),
        INNER: AttrRule(INNER, "an integer >= 2", is_integer),
        KIND: AttrRule(KIND, KIND_WANT, is_string),
    }
    return tuple(common.get(k) or AttrRule(k, INTEGER, is_integer, required=True) for k in c.attrs)


AXES_WANT = 'a non-empty list of mesh axis names, like ["model"]'
ALGORITHM_WANT = "one of " + ", ".join(f'"{a}"' for a in ALGORITHMS)
KIND_WANT = " or ".join(f'"{k}"' for k in REDUCE_KINDS)


def check_attribute_kinds(op: PlacementOp) -> None:
    """No attribute the kind does not take (a misspelt one would otherwise be ignored), every
    one it needs present, each of its kind (`attribute_rules`)."""
    check_attributes(op, op.ATTRIBUTES)


def check_reduce_kind(op: PlacementOp) -> None:
    """`kind`, when given, is a reduce kind of the table."""
    kind = op.properties.get(KIND)
    if kind is not None and not (isinstance(kind, StringAttr) and kind.data in REDUCE_KINDS):
        raise wrong_kind(op.name, KIND, KIND_WANT, kind)


def check_algorithm(op: PlacementOp) -> None:
    """`algorithm`, when given, is one the cost model knows."""
    alg = op.properties.get(ALGORITHM)
    if alg is not None and not (isinstance(alg, StringAttr) and alg.data in ALGORITHMS):
        raise wrong_kind(op.name, ALGORITHM, ALGORITHM_WANT, alg)
    if isinstance(alg, StringAttr) and not op.COLLECTIVE.has_algorithm(alg.data):
        why = "a point-to-point kind runs as \"direct\", its one send" if \
            op.COLLECTIVE.point_to_point else \
            "\"direct\" is a point-to-point kind's (collective_permute)"
        raise VerifyException(f"{op.name}: algorithm \"{alg.data}\" is not this kind's: {why}")


def check_inner_group(op: PlacementOp) -> None:
    """`inner` (devices per inner-level group, >= 2) goes with, and only with, hierarchical:
    without it the bytes a hierarchical collective sends are unknown."""
    inner = op.properties.get(INNER)
    hierarchical = op.algorithm_name() == HIERARCHICAL
    if hierarchical and inner is None:
        raise VerifyException(f"{op.name}: algorithm \"hierarchical\" needs 'inner', the number "
                              "of devices per group of the inner link level")
    if inner is None:
        return
    if not hierarchical:
        raise VerifyException(f"{op.name}: 'inner' goes only with algorithm \"hierarchical\"")
    if not (is_integer(inner) and isinstance(inner, IntegerAttr) and inner.value.data >= 2):
        raise wrong_kind(op.name, INNER, "an integer >= 2", inner)


def check_axes_attribute(op: PlacementOp) -> None:
    """A kind that states its axes has a non-empty list of axis names."""
    a = op.properties.get(AXES)
    if op.COLLECTIVE.needs_axes and not (isinstance(a, ArrayAttr) and a.data and
                                         all(isinstance(x, StringAttr) for x in a.data)):
        raise wrong_kind(op.name, AXES, AXES_WANT, a if a is not None else "none")


def _mesh_of(op: PlacementOp) -> MeshOp:
    """The one mesh all operands and results are placed on (VerifyException otherwise)."""
    meshes = set()
    for v in (*op.inputs, *op.outputs):
        if (problem := placement_problem(v.type, op)) is not None:
            raise VerifyException(f"{op.name}: {problem}")
        p = place_of(v.type)
        if p is None or p.mesh_name is None:
            raise VerifyException(f"{op.name}: operands and results must be placed on a mesh, "
                                  f"got {v.type}")
        meshes.add(p.mesh_name)
    if len(meshes) != 1:
        raise VerifyException(f"{op.name}: operands and results must be on one mesh, got "
                              f"{sorted(meshes)}")
    mesh = find_mesh(op, meshes.pop())
    assert mesh is not None
    return mesh


def check_axes_on_mesh(op: PlacementOp) -> None:
    """Every value is validly placed on one mesh, which has each of `axes`, named once."""
    mesh = _mesh_of(op)
    axes = op.axis_names()
    for a in axes:
        if a not in mesh.axis_sizes:
            raise VerifyException(f"{op.name}: mesh @{mesh.sym_name.data} has no axis '{a}'")
    if len(set(axes)) != len(axes):
        raise VerifyException(f"{op.name}: axes repeat: {_fmt(axes)}")


def _check_result(op: PlacementOp, i: int, xt: TensorType, rt: TensorType) -> None:
    if xt.element_type != rt.element_type or xt.get_shape() != rt.get_shape():
        raise VerifyException(f"{op.name}: result {i} must have the operand's shape and "
                              f"element type ({xt} vs {rt})")
    xp, rp = place_of(xt), place_of(rt)
    assert xp is not None and rp is not None
    if xp.tier_name != rp.tier_name:
        raise VerifyException(f"{op.name}: a collective does not move between memory "
                              f"tiers ({xp.tier_name} vs {rp.tier_name})")
    src, got = spec_of(xt), spec_of(rt)
    assert src is not None and got is not None
    expected = op.produce(src, len(xt.get_shape()))
    if expected != got:
        raise VerifyException(f"{op.name}: result {i} is placed {got}, but {op.short} "
                              f"over {_fmt(op.axis_names())} of an operand placed {src} gives "
                              f"{expected}")


def check_results(op: PlacementOp) -> None:
    """Each result is its operand (same shape, element type and memory tier) placed as the
    kind's rule (`produce`) says."""
    for i, (x, r) in enumerate(zip(op.inputs, op.outputs, strict=True)):
        assert isinstance(x.type, TensorType) and isinstance(r.type, TensorType)
        _check_result(op, i, x.type, r.type)


def _stage_text(stage: tuple[str, int] | None) -> str:
    return "every stage" if stage is None else f"stage {stage[0]}[{stage[1]}]"


def check_stages(op: PlacementOp) -> None:
    """A collective_permute moves its operand from one stage of its one axis to another; a
    reshard keeps the stage or moves between two stages of one axis; every other kind keeps its
    operand's stage (it runs on those devices only)."""
    for x, r in zip(op.inputs, op.outputs, strict=True):
        src, dst = stage_of(x.type), stage_of(r.type)
        if op.COLLECTIVE.moves_stage:
            axes = op.axis_names()
            if len(axes) != 1 or src is None or dst is None or src[0] != axes[0] or \
                    dst[0] != axes[0] or src[1] == dst[1]:
                raise VerifyException(
                    f"{op.name}: moves a value between two stages of its one axis "
                    f"{_fmt(axes)}, got {_stage_text(src)} -> {_stage_text(dst)}")
        elif src != dst and not (op.COLLECTIVE is RESHARD and src is not None and
                                 dst is not None and src[0] == dst[0]):
            raise VerifyException(f"{op.name}: the result must stay on the operand's stage "
                                  f"({_stage_text(src)} -> {_stage_text(dst)})")


VERIFY_CHECKS: tuple[Callable[[PlacementOp], None], ...] = (
    check_operand_count, check_attribute_kinds, check_reduce_kind,
    check_algorithm, check_inner_group, check_axes_attribute, check_axes_on_mesh, check_stages,
    check_results)


def _split_suffix(name: str, src: Spec, dim: int, axes: tuple[str, ...], rank: int) -> list:
    if not 0 <= dim < rank:
        raise VerifyException(f"{name}: dimension {dim} is out of range for rank {rank}")
    have = src.splits[dim]
    if len(have) < len(axes) or tuple(have[len(have) - len(axes):]) != axes:
        raise VerifyException(f"{name}: axes {_fmt(axes)} must be the minor-most split axes of "
                              f"dimension {dim}, which is split {_fmt(have)}")
    splits = list(src.splits)
    splits[dim] = tuple(have[: len(have) - len(axes)])
    return splits


def _split_further(name: str, src: Spec, dim: int, axes: tuple[str, ...], rank: int) -> list:
    """`src`'s splits with `axes` added as the minor-most split of dimension `dim`: what a
    reduce-scatter or a slice leaves (the inverse of `_split_suffix`)."""
    if not 0 <= dim < rank:
        raise VerifyException(f"{name}: dimension {dim} is out of range for rank {rank}")
    splits = list(src.splits)
    splits[dim] = tuple(splits[dim]) + axes
    return splits


def _drop_partial(name: str, src: Spec, axes: tuple[str, ...], kind: str) -> tuple[tuple, str]:
    missing = [a for a in axes if a not in src.partial]
    if missing:
        raise VerifyException(f"{name}: the operand is not pending over {_fmt(missing)} (its "
                              f"placement is {src}); only partial axes can be reduced")
    if src.partial_kind != kind:
        raise VerifyException(f"{name}: kind is {kind} but the operand is a pending "
                              f"{src.partial_kind}")
    rest = tuple(a for a in src.partial if a not in axes)
    return rest, (src.partial_kind if rest else SUM.name)


@irdl_op_definition
class AllReduceOp(PlacementOp):
    name = ALL_REDUCE.op_name
    COLLECTIVE: ClassVar[Collective] = ALL_REDUCE
    ATTRIBUTES: ClassVar[tuple[AttrRule, ...]] = attribute_rules(ALL_REDUCE)
    kind = opt_prop_def(AnyAttr())

    def produce(self, src: Spec, rank: int) -> Spec:
        partial, kind = _drop_partial(self.name, src, self.axis_names(), self.reduce_kind())
        return Spec(src.splits, partial, kind)


@irdl_op_definition
class AllGatherOp(PlacementOp):
    name = ALL_GATHER.op_name
    COLLECTIVE: ClassVar[Collective] = ALL_GATHER
    ATTRIBUTES: ClassVar[tuple[AttrRule, ...]] = attribute_rules(ALL_GATHER)
    dim = opt_prop_def(AnyAttr())

    def produce(self, src: Spec, rank: int) -> Spec:
        splits = _split_suffix(self.name, src, self.int_attr(DIM), self.axis_names(), rank)
        return Spec(tuple(splits), src.partial, src.partial_kind)


@irdl_op_definition
class ReduceScatterOp(PlacementOp):
    name = REDUCE_SCATTER.op_name
    COLLECTIVE: ClassVar[Collective] = REDUCE_SCATTER
    ATTRIBUTES: ClassVar[tuple[AttrRule, ...]] = attribute_rules(REDUCE_SCATTER)
    dim = opt_prop_def(AnyAttr())
    kind = opt_prop_def(AnyAttr())

    def produce(self, src: Spec, rank: int) -> Spec:
        axes = self.axis_names()
        splits = _split_further(self.name, src, self.int_attr(DIM), axes, rank)
        partial, kind = _drop_partial(self.name, src, axes, self.reduce_kind())
        return Spec(tuple(splits), partial, kind)


@irdl_op_definition
class AllToAllOp(PlacementOp):
    name = ALL_TO_ALL.op_name
    COLLECTIVE: ClassVar[Collective] = ALL_TO_ALL
    ATTRIBUTES: ClassVar[tuple[AttrRule, ...]] = attribute_rules(ALL_TO_ALL)
    split_dim = opt_prop_def(AnyAttr())
    concat_dim = opt_prop_def(AnyAttr())

    def produce(self, src: Spec, rank: int) -> Spec:
        sd, cd, axes = self.int_attr(SPLIT_DIM), self.int_attr(CONCAT_DIM), self.axis_names()
        if not 0 <= sd < rank or sd == cd:
            raise VerifyException(f"{self.name}: split_dim {sd} must be a dimension other than "
                                  f"concat_dim {cd} (rank {rank})")
        splits = _split_suffix(self.name, src, cd, axes, rank)
        splits[sd] = tuple(splits[sd]) + axes
        return Spec(tuple(splits), src.partial, src.partial_kind)


@irdl_op_definition
class AllSliceOp(PlacementOp):
    name = ALL_SLICE.op_name
    COLLECTIVE: ClassVar[Collective] = ALL_SLICE
    ATTRIBUTES: ClassVar[tuple[AttrRule, ...]] = attribute_rules(ALL_SLICE)
    dim = opt_prop_def(AnyAttr())

    def produce(self, src: Spec, rank: int) -> Spec:
        splits = _split_further(self.name, src, self.int_attr(DIM), self.axis_names(), rank)
        return Spec(tuple(splits), src.partial, src.partial_kind)


@irdl_op_definition
class ReshardOp(PlacementOp):
    name = RESHARD.op_name
    COLLECTIVE: ClassVar[Collective] = RESHARD
    ATTRIBUTES: ClassVar[tuple[AttrRule, ...]] = attribute_rules(RESHARD)

    def produce(self, src: Spec, rank: int) -> Spec:
        r = self.outputs[0].type
        got = spec_of(r)
        assert got is not None
        if not set(got.partial) <= set(src.partial) or (got.partial and
                                                        got.partial_kind != src.partial_kind):
            raise VerifyException(f"{self.name}: cannot introduce a pending reduction "
                                  f"({src} -> {got})")
        return got


@irdl_op_definition
class CollectivePermuteOp(PlacementOp):
    name = COLLECTIVE_PERMUTE.op_name
    COLLECTIVE: ClassVar[Collective] = COLLECTIVE_PERMUTE
    ATTRIBUTES: ClassVar[tuple[AttrRule, ...]] = attribute_rules(COLLECTIVE_PERMUTE)

    def produce(self, src: Spec, rank: int) -> Spec:
        return src   # only the stage changes (`check_stages`)


COLLECTIVES: tuple[type[PlacementOp], ...] = (AllReduceOp, AllGatherOp, ReduceScatterOp,
                                              AllToAllOp, AllSliceOp, ReshardOp,
                                              CollectivePermuteOp)
OP_CLASS: dict[str, type[PlacementOp]] = {c.COLLECTIVE.kind: c for c in COLLECTIVES}
assert set(OP_CLASS) == set(COLLECTIVE_KINDS), "one op class per record of the collectives table"


def build(cls: type[PlacementOp], values: Sequence[SSAValue], result_types: Sequence[Attribute],
          *, axes: Sequence[str] = (), algorithm: str | None = None, **ints_or_kind) -> PlacementOp:
    """Build a placement op (for passes and tests): ints for dims, `kind=` as a string."""
    props: dict[str, Attribute] = {}
    if axes:
        props[AXES] = ArrayAttr([StringAttr(a) for a in axes])
    if algorithm is not None:
        props[ALGORITHM] = StringAttr(algorithm)
    for k, v in ints_or_kind.items():
        if v is None:
            continue
        props[k] = StringAttr(v) if isinstance(v, str) else IntegerAttr(int(v), i64)
    return cls.build(operands=[list(values)], result_types=[list(result_types)], properties=props)
