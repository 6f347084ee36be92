"""Collective ops of the `lamina` dialect: the only ops that change a value's placement.

    %r = lamina.all_reduce %p {axes = ["model"], kind = "sum", algorithm = "ring"} : T -> R
    %r, %s = lamina.all_reduce %p, %q {axes = ["data"]} : (T1, T2) -> (R1, R2)     // a bucket
    %g = lamina.all_gather %x {dim = 1 : i64, axes = ["model"]} : T -> R
    %s = lamina.reduce_scatter %p {dim = 1 : i64, axes = ["model"], kind = "sum"} : T -> R
    %a = lamina.all_to_all %x {split_dim = 0 : i64, concat_dim = 1 : i64, axes = ["model"]} : T -> R
    %l = lamina.all_slice %x {dim = 0 : i64, axes = ["data"]} : T -> R
    %t = lamina.reshard %x : T -> R

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
- reshard: any placement change on one mesh, not yet decided (written by `propagate-sharding`,
  lowered to the collectives above by `insert-collectives`). It may not introduce a `partial`.

`algorithm` (optional, "ring" | "tree" | "hierarchical") records the implementation the cost model
chose (`insert-collectives`); it does not change the meaning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from lamina.ir.placement import PlaceAttr, find_mesh, place_of, placement_problem, spec_of
from lamina.ir.sharding import Spec
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

ALGORITHMS = ("ring", "tree", "hierarchical")
REDUCE_KINDS = ("sum", "max")


def _fmt(axes: Sequence[str]) -> str:
    return "[" + ", ".join(axes) + "]"


def with_spec(t: Attribute, mesh: str, spec: Spec) -> TensorType:
    """Tensor type `t` placed by `spec` on `mesh` (its memory tier, if any, is kept)."""
    assert isinstance(t, TensorType)
    old = place_of(t)
    tier = old.tier_name if old is not None else None
    return TensorType(t.element_type, t.get_shape(),
                      PlaceAttr.make(mesh, spec.splits, spec.partial, spec.partial_kind, tier))


class PlacementOp(IRDLOperation):
    """Base of the ops that change placement: shared syntax and verification."""

    inputs = var_operand_def(AnyTensorType)
    outputs = var_result_def(AnyTensorType)
    axes = opt_prop_def(AnyAttr())
    algorithm = opt_prop_def(AnyAttr())
    inner = opt_prop_def(AnyAttr())
    traits = traits_def(Pure())

    KEYS: ClassVar[tuple[str, ...]] = ()      # integer attributes this op needs
    VARIADIC: ClassVar[bool] = False
    NEEDS_AXES: ClassVar[bool] = True

    # -- facts --
    @property
    def short(self) -> str:
        return self.name[len("lamina."):]

    def axis_names(self) -> tuple[str, ...]:
        a = self.properties.get("axes")
        if not isinstance(a, ArrayAttr):
            return ()
        return tuple(x.data for x in a.data if isinstance(x, StringAttr))

    def int_attr(self, key: str) -> int:
        a = self.properties.get(key)
        assert isinstance(a, IntegerAttr)
        return a.value.data

    def reduce_kind(self) -> str:
        a = self.properties.get("kind")
        return a.data if isinstance(a, StringAttr) else "sum"

    def inner_group(self) -> int | None:
        """Devices per inner-level group of a hierarchical collective."""
        a = self.properties.get("inner")
        return a.value.data if isinstance(a, IntegerAttr) else None

    def algorithm_name(self) -> str | None:
        a = self.properties.get("algorithm")
        return a.data if isinstance(a, StringAttr) else None

    def mesh_name(self) -> str:
        p = place_of(self.operands[0].type)
        assert p is not None and p.mesh_name is not None
        return p.mesh_name

    # -- rule --
    def produce(self, src: Spec, rank: int) -> Spec:
        """The placement this op gives an operand placed `src` (VerifyException if it cannot)."""
        raise NotImplementedError

    def verify_(self) -> None:
        name = self.name
        if not self.inputs or len(self.inputs) != len(self.outputs):
            raise VerifyException(f"{name}: needs one result per operand, at least one operand")
        if not self.VARIADIC and len(self.inputs) != 1:
            raise VerifyException(f"{name} takes exactly one operand")
        for key in self.properties:
            if key not in ("axes", "algorithm", "inner", "kind", *self.KEYS):
                raise VerifyException(f"{name} has no attribute '{key}'")
        for key in self.KEYS:
            a = self.properties.get(key)
            if not (isinstance(a, IntegerAttr)):
                raise VerifyException(f"{name}: missing integer attribute '{key}'")
        kind = self.properties.get("kind")
        if kind is not None and not (isinstance(kind, StringAttr) and kind.data in REDUCE_KINDS):
            raise VerifyException(f"{name}: 'kind' must be \"sum\" or \"max\", got {kind}")
        alg = self.properties.get("algorithm")
        if alg is not None and not (isinstance(alg, StringAttr) and alg.data in ALGORITHMS):
            raise VerifyException(f"{name}: 'algorithm' must be one of "
                                  f"{', '.join(ALGORITHMS)}, got {alg}")
        inner = self.properties.get("inner")
        hierarchical = isinstance(alg, StringAttr) and alg.data == "hierarchical"
        if hierarchical and inner is None:
            raise VerifyException(f"{name}: algorithm \"hierarchical\" needs 'inner', the number "
                                  "of devices per group of the inner link level")
        if inner is not None:
            if not hierarchical:
                raise VerifyException(f"{name}: 'inner' goes only with algorithm \"hierarchical\"")
            if not (isinstance(inner, IntegerAttr) and inner.value.data >= 2):
                raise VerifyException(f"{name}: 'inner' must be an integer >= 2, got {inner}")
        axes_attr = self.properties.get("axes")
        if self.NEEDS_AXES:
            if not (isinstance(axes_attr, ArrayAttr) and axes_attr.data
                    and all(isinstance(a, StringAttr) for a in axes_attr.data)):
                raise VerifyException(f"{name}: 'axes' must be a non-empty list of mesh axis "
                                      f"names, like [\"model\"]")
        meshes = set()
        for v in (*self.inputs, *self.outputs):
            t = v.type
            if (problem := placement_problem(t, self)) is not None:
                raise VerifyException(f"{name}: {problem}")
            p = place_of(t)
            if p is None or p.mesh_name is None:
                raise VerifyException(f"{name}: operands and results must be placed on a mesh, "
                                      f"got {t}")
            meshes.add(p.mesh_name)
        if len(meshes) != 1:
            raise VerifyException(f"{name}: operands and results must be on one mesh, got "
                                  f"{sorted(meshes)}")
        mesh = find_mesh(self, meshes.pop())
        assert mesh is not None
        sizes = mesh.axis_sizes
        axes = self.axis_names()
        for a in axes:
            if a not in sizes:
                raise VerifyException(f"{name}: mesh @{mesh.sym_name.data} has no axis '{a}'")
        if len(set(axes)) != len(axes):
            raise VerifyException(f"{name}: axes repeat: {_fmt(axes)}")
        for i, (x, r) in enumerate(zip(self.inputs, self.outputs, strict=True)):
            xt, rt = x.type, r.type
            assert isinstance(xt, TensorType) and isinstance(rt, TensorType)
            if xt.element_type != rt.element_type or xt.get_shape() != rt.get_shape():
                raise VerifyException(f"{name}: result {i} must have the operand's shape and "
                                      f"element type ({xt} vs {rt})")
            xp, rp = place_of(xt), place_of(rt)
            assert xp is not None and rp is not None
            if xp.tier_name != rp.tier_name:
                raise VerifyException(f"{name}: a collective does not move between memory "
                                      f"tiers ({xp.tier_name} vs {rp.tier_name})")
            src, got = spec_of(xt), spec_of(rt)
            assert src is not None and got is not None
            expected = self.produce(src, len(xt.get_shape()))
            if expected != got:
                raise VerifyException(f"{name}: result {i} is placed {got}, but {self.short} "
                                      f"over {_fmt(axes)} of an operand placed {src} gives "
                                      f"{expected}")

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
        allowed = ("axes", "algorithm", "inner", "kind", *cls.KEYS)
        for key in attrs:
            if key not in allowed:
                parser.raise_error(f"{cls.name} has no attribute '{key}' (it takes "
                                   f"{', '.join(allowed)})", at_position=pos)
        values = parser.resolve_operands(operands, types, pos)
        return cls.build(operands=[values], result_types=[results], properties=dict(attrs))


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


def _drop_partial(name: str, src: Spec, axes: tuple[str, ...], kind: str) -> tuple[tuple, str]:
    missing = [a for a in axes if a not in src.partial]
    if missing:
        raise VerifyException(f"{name}: the operand is not pending over {_fmt(missing)} (its "
                              f"placement is {src}); only partial axes can be reduced")
    if src.partial_kind != kind:
        raise VerifyException(f"{name}: kind is {kind} but the operand is a pending "
                              f"{src.partial_kind}")
    rest = tuple(a for a in src.partial if a not in axes)
    return rest, (src.partial_kind if rest else "sum")


@irdl_op_definition
class AllReduceOp(PlacementOp):
    name = "lamina.all_reduce"
    kind = opt_prop_def(AnyAttr())
    VARIADIC: ClassVar[bool] = True

    def produce(self, src: Spec, rank: int) -> Spec:
        partial, kind = _drop_partial(self.name, src, self.axis_names(), self.reduce_kind())
        return Spec(src.splits, partial, kind)


@irdl_op_definition
class AllGatherOp(PlacementOp):
    name = "lamina.all_gather"
    dim = opt_prop_def(AnyAttr())
    KEYS: ClassVar[tuple[str, ...]] = ("dim",)

    def produce(self, src: Spec, rank: int) -> Spec:
        splits = _split_suffix(self.name, src, self.int_attr("dim"), self.axis_names(), rank)
        return Spec(tuple(splits), src.partial, src.partial_kind)


@irdl_op_definition
class ReduceScatterOp(PlacementOp):
    name = "lamina.reduce_scatter"
    dim = opt_prop_def(AnyAttr())
    kind = opt_prop_def(AnyAttr())
    KEYS: ClassVar[tuple[str, ...]] = ("dim",)

    def produce(self, src: Spec, rank: int) -> Spec:
        dim, axes = self.int_attr("dim"), self.axis_names()
        if not 0 <= dim < rank:
            raise VerifyException(f"{self.name}: dimension {dim} is out of range for rank {rank}")
        partial, kind = _drop_partial(self.name, src, axes, self.reduce_kind())
        splits = list(src.splits)
        splits[dim] = tuple(splits[dim]) + axes
        return Spec(tuple(splits), partial, kind)


@irdl_op_definition
class AllToAllOp(PlacementOp):
    name = "lamina.all_to_all"
    split_dim = opt_prop_def(AnyAttr())
    concat_dim = opt_prop_def(AnyAttr())
    KEYS: ClassVar[tuple[str, ...]] = ("split_dim", "concat_dim")

    def produce(self, src: Spec, rank: int) -> Spec:
        sd, cd, axes = self.int_attr("split_dim"), self.int_attr("concat_dim"), self.axis_names()
        if not 0 <= sd < rank or sd == cd:
            raise VerifyException(f"{self.name}: split_dim {sd} must be a dimension other than "
                                  f"concat_dim {cd} (rank {rank})")
        splits = _split_suffix(self.name, src, cd, axes, rank)
        splits[sd] = tuple(splits[sd]) + axes
        return Spec(tuple(splits), src.partial, src.partial_kind)


@irdl_op_definition
class AllSliceOp(PlacementOp):
    name = "lamina.all_slice"
    dim = opt_prop_def(AnyAttr())
    KEYS: ClassVar[tuple[str, ...]] = ("dim",)

    def produce(self, src: Spec, rank: int) -> Spec:
        dim, axes = self.int_attr("dim"), self.axis_names()
        if not 0 <= dim < rank:
            raise VerifyException(f"{self.name}: dimension {dim} is out of range for rank {rank}")
        splits = list(src.splits)
        splits[dim] = tuple(splits[dim]) + axes
        return Spec(tuple(splits), src.partial, src.partial_kind)


@irdl_op_definition
class ReshardOp(PlacementOp):
    name = "lamina.reshard"
    NEEDS_AXES: ClassVar[bool] = False

    def produce(self, src: Spec, rank: int) -> Spec:
        r = self.outputs[0].type
        got = spec_of(r)
        assert got is not None
        if not set(got.partial) <= set(src.partial) or (got.partial and
                                                        got.partial_kind != src.partial_kind):
            raise VerifyException(f"{self.name}: cannot introduce a pending reduction "
                                  f"({src} -> {got})")
        return got


COLLECTIVES: tuple[type[PlacementOp], ...] = (AllReduceOp, AllGatherOp, ReduceScatterOp,
                                              AllToAllOp, AllSliceOp, ReshardOp)


def build(cls: type[PlacementOp], values: Sequence[SSAValue], result_types: Sequence[Attribute],
          *, axes: Sequence[str] = (), algorithm: str | None = None, **ints_or_kind) -> PlacementOp:
    """Build a placement op (for passes and tests): ints for dims, `kind=` as a string."""
    props: dict[str, Attribute] = {}
    if axes:
        props["axes"] = ArrayAttr([StringAttr(a) for a in axes])
    if algorithm is not None:
        props["algorithm"] = StringAttr(algorithm)
    for k, v in ints_or_kind.items():
        if v is None:
            continue
        props[k] = StringAttr(v) if isinstance(v, str) else IntegerAttr(int(v), i64)
    return cls.build(operands=[list(values)], result_types=[list(result_types)], properties=props)
