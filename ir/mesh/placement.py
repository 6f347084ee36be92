"""Placement in the type: device meshes and the `#lamina.place` tensor encoding.

A mesh is declared once at module level, with named axes and their sizes:

    lamina.mesh @m [data = 2, model = 4]

A tensor value states where it lives in its type's encoding:

    tensor<2048x1024xf32, #lamina.place<@m, [[data], []], partial = sum[model], tier = hbm>>

- the list has one entry per tensor dimension: the mesh axes that split that dimension, major to
  minor (`[data, model]` splits a dimension over both, data-major); axes named nowhere replicate;
- `partial = sum[axes]` (or `max[...]`) says the value on each device is a pending sum (max) over
  those axes: the true value is the reduction of the per-device values, not yet performed;
- `stage = AXIS[i]` (a pipeline stage, issue 28) says the value lives only on the devices whose
  coordinate on mesh axis AXIS is i: stages run different ops (MPMD), so the stage is part of the
  contract like the splits; AXIS then appears in no split and in no `partial`, and the ops that read
  and write stage-i values run on those devices only;
- `tier = sram|hbm|host|nvme` is the memory tier the value lives in;
- `#lamina.place<tier = host>` places an unsharded value in a tier; a type without an encoding is
  "not yet placed". The syntax follows MLIR's `mesh`/`shard` sharding attributes and Shardy, with
  mesh axes named as in Shardy.

The rules a placement must satisfy against its mesh (checked by `placement_problem`): the mesh
exists, one split list per dimension, every axis exists and appears at most once across splits and
`partial`, and every split dimension divides evenly by the product of its axes' sizes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, cast

from lamina.ir.core.attrs import (
    INTEGER_ARRAY,
    STRING_LIST,
    AttrRule,
    is_integer_array,
    is_string,
    is_string_list,
)
from lamina.ir.mesh.collective_kinds import REDUCE_KINDS
from lamina.ir.mesh.sharding import OpInfo, ShardingError, Spec, infer
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    IntAttr,
    IntegerType,
    NoneAttr,
    StringAttr,
    SymbolNameConstraint,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Operation, ParametrizedAttribute
from xdsl.irdl import IRDLOperation, irdl_attr_definition, irdl_op_definition, prop_def, traits_def
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import SymbolOpInterface, SymbolTable
from xdsl.utils.exceptions import VerifyException

TIERS = ("sram", "hbm", "host", "nvme")
# lamina-run simulates every device of a mesh, and passes enumerate its device groups: a mesh of
# more devices is refused by the verifier, up front, instead of running for hours. The largest
# shipped target (h100-cluster) has 32 devices.
MAX_MESH_DEVICES = 4096
COMPUTE_TIERS = ("sram", "hbm")
PARTIAL_KINDS = tuple(REDUCE_KINDS)   # what `partial = KIND[...]` may say


@dataclass(frozen=True)
class Mesh:
    """A device mesh as plain Python: named axes and their sizes, devices numbered row-major.

    The one shape in which passes, cost models and backends hold a mesh. The device with
    coordinates (c0, c1, ...) on axes (a0, a1, ...) is number c0 * size(a1) * ... + c1 * ... (the
    last axis varies fastest), the numbering `Target.axis_level` and JAX's `Mesh` of
    `devices.reshape(sizes)` both use."""

    name: str
    axes: tuple[str, ...]
    sizes: tuple[int, ...]

    @property
    def devices(self) -> int:
        return math.prod(self.sizes)

    @property
    def axis_sizes(self) -> dict[str, int]:
        return dict(zip(self.axes, self.sizes, strict=True))

    def size(self, axes: Sequence[str]) -> int:
        """Devices along `axes` together (1 for none)."""
        return math.prod(self.sizes[self.axes.index(a)] for a in axes)

    def coords(self, dev: int) -> dict[str, int]:
        out: dict[str, int] = {}
        for a, s in zip(reversed(self.axes), reversed(self.sizes), strict=True):
            out[a] = dev % s
            dev //= s
        return out

    def index(self, coords: dict[str, int], axes: Sequence[str]) -> int:
        """Mixed-radix index of a device along `axes` (major to minor)."""
        i = 0
        for a in axes:
            i = i * self.sizes[self.axes.index(a)] + coords[a]
        return i

    def groups(self, axes: Sequence[str]) -> list[list[int]]:
        """Devices grouped by their coordinates off `axes`, each group ordered by `axes`' index."""
        by_rest: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        rest = [a for a in self.axes if a not in axes]
        for d in range(self.devices):
            c = self.coords(d)
            by_rest.setdefault(tuple(c[a] for a in rest), []).append((self.index(c, axes), d))
        return [[d for _, d in sorted(g)] for g in by_rest.values()]


@irdl_op_definition
class MeshOp(IRDLOperation):
    """`lamina.mesh @m [data = 2, model = 4]`: a named device mesh with named axes."""

    name = "lamina.mesh"

    sym_name = prop_def(SymbolNameConstraint())
    axes = prop_def(ArrayAttr[StringAttr])
    shape = prop_def(DenseArrayBase)

    traits = traits_def(SymbolOpInterface())
    # checked before IRDL's constraints (`lamina.ir.core.attrs`)
    ATTRIBUTES: ClassVar[tuple[AttrRule, ...]] = (
        AttrRule("sym_name", "a symbol name string", is_string, required=True),
        AttrRule("axes", STRING_LIST, is_string_list, required=True),
        AttrRule("shape", INTEGER_ARRAY, is_integer_array, required=True))

    def __init__(self, name: str, axes: Sequence[tuple[str, int]]):
        super().__init__(properties={
            "sym_name": StringAttr(name),
            "axes": ArrayAttr([StringAttr(a) for a, _ in axes]),
            "shape": DenseArrayBase.from_list(i64, [n for _, n in axes]),
        })

    def shape_values(self) -> tuple[int, ...]:
        return cast(DenseArrayBase[IntegerType], self.shape).get_values()

    @property
    def mesh(self) -> Mesh:
        """This mesh as a plain `Mesh`."""
        return Mesh(self.sym_name.data, tuple(a.data for a in self.axes.data),
                    tuple(int(s) for s in self.shape_values()))

    @property
    def axis_sizes(self) -> dict[str, int]:
        return self.mesh.axis_sizes

    def verify_(self) -> None:
        names = [a.data for a in self.axes.data]
        sizes = list(self.shape_values())
        if not names:
            raise VerifyException("lamina.mesh: a mesh needs at least one axis")
        if len(names) != len(sizes):
            raise VerifyException("lamina.mesh: one size per axis")
        if len(set(names)) != len(names):
            raise VerifyException(f"lamina.mesh: axis names repeat: {names}")
        for a, s in zip(names, sizes, strict=True):
            if s < 1:
                raise VerifyException(f"lamina.mesh: axis '{a}' has size {s}, must be >= 1")
        if (devices := math.prod(sizes)) > MAX_MESH_DEVICES:
            raise VerifyException(f"lamina.mesh: {devices} devices is more than the "
                                  f"{MAX_MESH_DEVICES} Lamina supports")

    def print(self, printer: Printer) -> None:
        printer.print_string(f" @{self.sym_name.data} [")
        printer.print_list(self.axis_sizes.items(),
                           lambda kv: printer.print_string(f"{kv[0]} = {kv[1]}"))
        printer.print_string("]")

    @classmethod
    def parse(cls, parser: Parser) -> MeshOp:
        name = parser.parse_symbol_name().data

        def axis() -> tuple[str, int]:
            a = parser.parse_identifier("mesh axis name")
            parser.parse_punctuation("=")
            pos = parser.pos
            size = parser.parse_integer(allow_boolean=False, allow_negative=False)
            if size >= 1 << 63:  # the verifier's limit is far lower; the size is stored as i64
                parser.raise_error(f"lamina.mesh: axis '{a}' has more than the "
                                   f"{MAX_MESH_DEVICES} devices Lamina supports", pos, parser.pos)
            return a, size

        axes = parser.parse_comma_separated_list(Parser.Delimiter.SQUARE, axis)
        return cls(name, axes)


@irdl_attr_definition
class PlaceAttr(ParametrizedAttribute):
    """`#lamina.place<@mesh, [[axes of dim 0], ...], partial = sum[axes], tier = hbm>`."""

    name = "lamina.place"

    mesh: StringAttr               # "" when the value is not on a mesh (tier only)
    dims: ArrayAttr[ArrayAttr[StringAttr]]
    partial: ArrayAttr[StringAttr]
    partial_kind: StringAttr       # "sum" or "max"
    tier: StringAttr               # "" when no tier is stated
    stage_axis: StringAttr         # "" when the value is on every stage (no `stage =`)
    stage_index: IntAttr           # its coordinate on stage_axis (0 when stage_axis is "")

    @staticmethod
    def make(mesh: str | None, dims: Sequence[Sequence[str]], partial: Sequence[str] = (),
             partial_kind: str = "sum", tier: str | None = None,
             stage: tuple[str, int] | None = None) -> PlaceAttr:
        return PlaceAttr(
            StringAttr(mesh or ""),
            ArrayAttr([ArrayAttr([StringAttr(a) for a in d]) for d in dims]),
            ArrayAttr([StringAttr(a) for a in partial]),
            StringAttr(partial_kind),
            StringAttr(tier or ""),
            StringAttr(stage[0] if stage else ""),
            IntAttr(stage[1] if stage else 0),
        )

    @property
    def mesh_name(self) -> str | None:
        return self.mesh.data or None

    @property
    def splits(self) -> list[list[str]]:
        return [[a.data for a in d.data] for d in self.dims.data]

    @property
    def partial_axes(self) -> list[str]:
        return [a.data for a in self.partial.data]

    @property
    def tier_name(self) -> str | None:
        return self.tier.data or None

    @property
    def stage(self) -> tuple[str, int] | None:
        """(stage axis, index) of a value on one pipeline stage, or None (on every stage)."""
        return (self.stage_axis.data, self.stage_index.data) if self.stage_axis.data else None

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        parser.parse_punctuation("<")
        mesh, dims, partial, kind, tier = "", [], [], "sum", ""
        stage: tuple[str, int] | None = None

        def names() -> list[str]:
            return parser.parse_comma_separated_list(
                Parser.Delimiter.SQUARE, lambda: parser.parse_identifier("mesh axis name"))

        if (sym := parser.parse_optional_symbol_name()) is not None:
            mesh = sym.data
            parser.parse_punctuation(",")
            dims = parser.parse_comma_separated_list(Parser.Delimiter.SQUARE, names)
            while parser.parse_optional_punctuation(","):
                key = parser.parse_identifier("'partial', 'stage' or 'tier'")
                parser.parse_punctuation("=")
                if key == "partial":
                    kind = parser.parse_identifier("partial kind (sum or max)")
                    if kind not in PARTIAL_KINDS:
                        parser.raise_error(f"partial kind must be sum or max, got '{kind}'")
                    partial = names()
                elif key == "stage":
                    stage = _parse_stage(parser)
                elif key == "tier":
                    tier = _parse_tier(parser)
                else:
                    parser.raise_error(
                        f"unknown placement field '{key}' (expected partial, stage or tier)")
        else:
            parser.parse_keyword("tier")
            parser.parse_punctuation("=")
            tier = _parse_tier(parser)
        parser.parse_punctuation(">")
        return PlaceAttr.make(mesh, dims, partial, kind, tier, stage).parameters

    def print_parameters(self, printer: Printer) -> None:
        fields: list[str] = []
        if self.mesh_name is not None:
            fields.append(f"@{self.mesh_name}")
            fields.append("[" + ", ".join("[" + ", ".join(d) + "]" for d in self.splits) + "]")
            if self.partial_axes:
                fields.append(f"partial = {self.partial_kind.data}[{', '.join(self.partial_axes)}]")
            if (stage := self.stage) is not None:
                fields.append(f"stage = {stage[0]}[{stage[1]}]")
        if self.tier_name is not None:
            fields.append(f"tier = {self.tier_name}")
        printer.print_string("<" + ", ".join(fields) + ">")


def _parse_stage(parser: AttrParser) -> tuple[str, int]:
    axis = parser.parse_identifier("stage mesh axis name")
    parser.parse_punctuation("[")
    index = parser.parse_integer(allow_boolean=False, allow_negative=False)
    parser.parse_punctuation("]")
    return axis, index


def _parse_tier(parser: AttrParser) -> str:
    tier = parser.parse_identifier("memory tier")
    if tier not in TIERS:
        parser.raise_error(f"unknown memory tier '{tier}' (tiers: {', '.join(TIERS)})")
    return tier


@dataclass(frozen=True)
class Placement:
    """A placement resolved against its mesh: plain Python, for passes and backends."""

    mesh: Mesh
    spec: Spec

    def shards(self, dim: int) -> int:
        return self.mesh.size(self.spec.splits[dim])

    def local_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        return tuple(d // self.shards(i) for i, d in enumerate(shape))


def place_of(t: Attribute) -> PlaceAttr | None:
    if isinstance(t, TensorType) and isinstance(t.encoding, PlaceAttr):
        return t.encoding
    return None


def find_mesh(anchor: Operation, name: str) -> MeshOp | None:
    found = SymbolTable.lookup_symbol(anchor, name)
    return found if isinstance(found, MeshOp) else None


def placement_problem(t: Attribute, anchor: Operation) -> str | None:
    """Why the placement in tensor type `t` is invalid (looked up from `anchor`), or None."""
    place = place_of(t)
    if place is None:
        if isinstance(t, TensorType) and not isinstance(t.encoding, NoneAttr):
            return f"unsupported tensor encoding {t.encoding} (use #lamina.place<...>)"
        return None
    if place.partial_kind.data not in PARTIAL_KINDS:
        return f"partial kind must be sum or max, got '{place.partial_kind.data}'"
    if place.tier_name is not None and place.tier_name not in TIERS:
        return f"unknown memory tier '{place.tier_name}'"
    if place.mesh_name is None:
        return None
    mesh = find_mesh(anchor, place.mesh_name)
    if mesh is None:
        return f"placement refers to unknown mesh @{place.mesh_name}"
    assert isinstance(t, TensorType)
    shape = tuple(t.get_shape())
    splits = place.splits
    if len(splits) != len(shape):
        return (f"placement has {len(splits)} dimension entries for a rank-{len(shape)} tensor "
                f"{t}")
    sizes = mesh.axis_sizes
    seen: set[str] = set()
    for axis in [a for d in splits for a in d] + place.partial_axes:
        if axis not in sizes:
            return f"mesh @{place.mesh_name} has no axis '{axis}' (axes: {', '.join(sizes)})"
        if axis in seen:
            return f"mesh axis '{axis}' is used more than once in placement {place}"
        seen.add(axis)
    for d, axes in enumerate(splits):
        n = 1
        for a in axes:
            n *= sizes[a]
        if shape[d] % n:
            return (f"dimension {d} of size {shape[d]} does not split evenly over "
                    f"{' x '.join(axes)} ({n} shards)")
    return _stage_problem(place, sizes, seen)


def _stage_problem(place: PlaceAttr, sizes: dict[str, int], used: set[str]) -> str | None:
    if (stage := place.stage) is None:
        return None
    axis, index = stage
    if axis not in sizes:
        return f"mesh @{place.mesh_name} has no stage axis '{axis}' (axes: {', '.join(sizes)})"
    if axis in used:
        return f"stage axis '{axis}' also splits or reduces the value in placement {place}"
    if not 0 <= index < sizes[axis]:
        return f"stage {index} is outside mesh axis '{axis}' of size {sizes[axis]}"
    return None


def resolve(t: Attribute, anchor: Operation) -> Placement | None:
    """The `Placement` of a (verified) placed tensor type, or None if it is not on a mesh."""
    place = place_of(t)
    if place is None or place.mesh_name is None:
        return None
    mesh = find_mesh(anchor, place.mesh_name)
    assert mesh is not None, "resolve() on an unverified placement"
    spec = spec_of(t)
    assert spec is not None
    return Placement(mesh.mesh, spec)


def spec_of(t: Attribute) -> Spec | None:
    """The mesh-free `Spec` of a tensor type placed on a mesh, or None."""
    place = place_of(t)
    if place is None or place.mesh_name is None:
        return None
    return Spec(tuple(tuple(d) for d in place.splits), tuple(place.partial_axes),
                place.partial_kind.data)


def spec_or_replicated(t: Attribute) -> Spec:
    """`spec_of(t)`, or replicated for a tensor type not placed on a mesh (how every backend
    reads an unplaced value of a placed program)."""
    s = spec_of(t)
    if s is not None:
        return s
    assert isinstance(t, TensorType)
    return Spec.replicated(len(t.get_shape()))


def sharding_problem(op: Operation, info: OpInfo, operand_types: Sequence[Attribute | None],
                     attrs: dict, operand_infos: Sequence, result_info) -> str | None:
    """Why a fully placed op breaks its sharding rule, or None (also None when not fully placed).
    Its stages are checked first, placed or not (`mixed_stage_problem`)."""
    if (problem := mixed_stage_problem(op)) is not None:
        return problem
    result_type = op.results[0].type
    types = [t for t in operand_types if t is not None] + [result_type]
    meshes = {p.mesh_name if p is not None else None for p in map(place_of, types)}
    if None in meshes:
        return None  # not (yet) fully placed: nothing to check
    if len(meshes) > 1:
        return f"operands and result are placed on different meshes: {sorted(m for m in meshes if m)}"
    specs = [None if t is None else spec_of(t) for t in operand_types]
    try:
        expected = infer(info, operand_infos, specs, attrs, result_info)
    except ShardingError as e:
        return str(e)
    got = spec_of(result_type)
    if got != expected:
        return f"result placement {got} does not follow the {info.sharding.name} rule, " \
               f"which gives {expected}"
    return None


def stage_of(t: Attribute) -> tuple[str, int] | None:
    """(stage axis, index) of a tensor type placed on one pipeline stage, or None."""
    place = place_of(t)
    return place.stage if place is not None else None


def mixed_stage_problem(op: Operation) -> str | None:
    """Why a (non-placement) op mixes pipeline stages, or None. An op runs on the stage of its
    results, so each result is on one stage and each operand on that stage or on every stage
    (a value without `stage =` is held by every device); anything else must cross by a
    `lamina.collective_permute` first."""
    results = {stage_of(r.type) for r in op.results}
    if len(results) > 1:
        return "its results are on different pipeline stages: " + \
            ", ".join(sorted(_stage_name(s) for s in results))
    (runs_on,) = results or {None}
    for i, v in enumerate(op.operands):
        got = stage_of(v.type)
        if got is not None and got != runs_on:
            return (f"operand {i} is on {_stage_name(got)} but the op runs on "
                    f"{_stage_name(runs_on)} (the stage of its result); a value crosses stages "
                    "only by lamina.collective_permute")
    return None


def _stage_name(stage: tuple[str, int] | None) -> str:
    return "every stage" if stage is None else f"stage {stage[0]}[{stage[1]}]"


def stage_devices(mesh: Mesh, stage: tuple[str, int] | None) -> list[int]:
    """The devices (row-major numbers) that hold a value of `stage`: all of them for None."""
    if stage is None:
        return list(range(mesh.devices))
    axis, index = stage
    return [d for d in range(mesh.devices) if mesh.coords(d)[axis] == index]


def tier_of(t: Attribute) -> str | None:
    place = place_of(t)
    return place.tier_name if place is not None else None

