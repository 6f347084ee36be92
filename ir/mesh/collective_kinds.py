"""The table of collective kinds: one record of facts per placement op, and the reduce kinds.

Everything that differs from one collective kind to another and is not its verifier lives here:
its op name, its attributes, what it reduces, whether it communicates, which side of it the cost
model's payload B is, its ring bytes formula and which algorithms it has. `insert-collectives`,
`reshard_plan`, the cost model (`lamina.analysis.comm_cost`) and the backends read these records
instead of spelling kinds as strings, so a new collective is one record here, one op class in
`lamina.ir.mesh.collectives` (`COLLECTIVE` names its record; `produce` is its placement rule) and one
lowering per backend, registered against the record in the backend's own folder (`Lowerings`).

Bytes each device sends by a ring over n devices: `ring_factor` (n-1)/n B, and `ring_factor`
(n-1) message latencies (all_reduce is a reduce-scatter pass and an all-gather pass: 2).
The hierarchical algorithm over two link levels (n1 devices per inner group) runs `hierarchical`,
phases that are each a ring at one level, the outer ones on B/n1.

A point-to-point kind (`collective_permute`, pipeline stages) sends the whole local block B once,
to one peer: B bytes and one alpha, whatever the size of the axis.

The reduce kinds (`REDUCE_KINDS`) are what a pending `partial` value and a reducing collective's
`kind` attribute may be.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

# -- attribute names of the placement ops --
AXES = "axes"                # the mesh axes a collective communicates over
KIND = "kind"                # the reduce kind of a reducing collective
ALGORITHM = "algorithm"      # the cost model's choice (`ALGORITHMS`); no change of meaning
INNER = "inner"              # hierarchical: devices per group of the inner link level
DIM = "dim"                  # the gathered / scattered / sliced dimension
SPLIT_DIM = "split_dim"      # all_to_all: the dimension the moved axes split afterwards
CONCAT_DIM = "concat_dim"    # all_to_all: the dimension they split before
COMMON_ATTRS = (AXES, ALGORITHM, INNER, KIND)   # attributes every placement op accepts

# -- algorithms --
RING = "ring"
TREE = "tree"
HIERARCHICAL = "hierarchical"
DIRECT = "direct"             # a point-to-point kind's one send to its peer
ALGORITHMS = (RING, TREE, HIERARCHICAL, DIRECT)


@dataclass(frozen=True)
class ReduceKind:
    """How a pending value's parts combine into the true value."""

    name: str
    idempotent: bool   # combining equal parts gives the part: a whole value on every device is
    #                    already a valid partial (max); otherwise non-owners hold zeros (sum)
    widens: bool       # narrow floats (f16, bf16) are combined in float32 and rounded once (a
    #                    sum accumulates rounding; a max is exact in any type)


SUM = ReduceKind("sum", idempotent=False, widens=True)
MAX = ReduceKind("max", idempotent=True, widens=False)
REDUCE_KINDS: dict[str, ReduceKind] = {r.name: r for r in (SUM, MAX)}


class Phase(NamedTuple):
    """One ring of a hierarchical collective: `kind` inside the inner link level's groups, or,
    `outer`, across them on 1/n1 of the payload."""

    kind: str
    outer: bool


@dataclass(frozen=True)
class Collective:
    """The facts of one collective kind (see the module docstring)."""

    kind: str                          # the op's name without the dialect prefix
    semantics: str                     # what it does to the placement (one line, for docs)
    int_attrs: tuple[str, ...] = ()    # integer attributes the op needs
    reduces: bool = False              # removes pending `partial` axes (takes a reduce `kind`)
    variadic: bool = False             # several operands are one bucket (one launch)
    needs_axes: bool = True            # states its `axes` (reshard: implied by its types)
    communicates: bool = True          # sends data (all_slice is local)
    payload_is_result: bool = False    # B is the result's local bytes, not the operand's
    ring_factor: float = 1.0           # ring: ring_factor (n-1)/n B sent, ring_factor (n-1) alphas
    tree: bool = False                 # has a tree algorithm (between nodes)
    hierarchical: tuple[Phase, ...] = ()   # its hierarchical algorithm's phases (none: no such)
    point_to_point: bool = False       # one send of the local block B to one peer, one alpha
    #                                    (not a ring: `ring_factor` does not apply)
    moves_stage: bool = False          # its result is on another pipeline stage than its operand

    @property
    def op_name(self) -> str:
        return f"lamina.{self.kind}"

    @property
    def default_algorithm(self) -> str:
        """What it runs as when no `algorithm` says otherwise: `direct` for a point-to-point
        kind (its only algorithm), else `ring`."""
        return DIRECT if self.point_to_point else RING

    def has_algorithm(self, name: str) -> bool:
        """Whether `name` is an algorithm of this kind (a point-to-point kind has only
        `direct`, which no other kind has)."""
        return name == DIRECT if self.point_to_point else name in ALGORITHMS and name != DIRECT

    @property
    def attrs(self) -> tuple[str, ...]:
        """Every attribute the op accepts, in the order its messages list them."""
        return (*COMMON_ATTRS, *self.int_attrs)


def _two_level(kind: str) -> tuple[Phase, ...]:
    return (Phase(kind, outer=False), Phase(kind, outer=True))


ALL_GATHER = Collective(
    "all_gather", "the minor-most `axes` of `dim`'s split stop splitting it",
    int_attrs=(DIM,), payload_is_result=True, hierarchical=_two_level("all_gather"))
REDUCE_SCATTER = Collective(
    "reduce_scatter", "`axes` leave `partial` and split `dim` (minor-most)",
    int_attrs=(DIM,), reduces=True, hierarchical=_two_level("reduce_scatter"))
ALL_REDUCE = Collective(
    "all_reduce", "`axes` leave `partial`",
    reduces=True, variadic=True, ring_factor=2.0, tree=True,
    hierarchical=(Phase(REDUCE_SCATTER.kind, outer=False), Phase("all_reduce", outer=True),
                  Phase(ALL_GATHER.kind, outer=False)))
ALL_TO_ALL = Collective(
    "all_to_all", "`axes` move from the minor end of `concat_dim`'s split to `split_dim`'s",
    int_attrs=(SPLIT_DIM, CONCAT_DIM))
ALL_SLICE = Collective(
    "all_slice", "`axes` (replicated) split `dim` (minor-most), locally",
    int_attrs=(DIM,), communicates=False, ring_factor=0.0)
RESHARD = Collective(
    "reshard", "any placement change on one mesh that adds no `partial` (not yet lowered)",
    needs_axes=False)   # priced as at most its local block, (n-1)/n of it sent

COLLECTIVE_PERMUTE = Collective(
    "collective_permute", "the value moves from pipeline stage i on mesh axis `axes` to stage j, "
    "on the same devices of the other axes, splits and `partial` unchanged",
    point_to_point=True, moves_stage=True)   # MLIR's shard.send/recv pair, XLA's collective_permute

COLLECTIVE_KINDS: dict[str, Collective] = {c.kind: c for c in (
    ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, ALL_SLICE, RESHARD, COLLECTIVE_PERMUTE)}

F = TypeVar("F")


class Lowerings(Generic[F]):
    """One backend's implementation of every collective kind, filled in the backend's folder:

        LOWERINGS: Lowerings[MyFn] = Lowerings("mybackend")

        @LOWERINGS.register(ALL_GATHER)
        def _all_gather(...): ...

    `missing()` names the kinds of the table it has none for (a test keeps it empty)."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self._by_kind: dict[str, F] = {}

    def register(self, *kinds: Collective) -> Callable[[F], F]:
        def add(fn: F) -> F:
            for c in kinds:
                assert c.kind not in self._by_kind, f"{self.backend}: {c.kind} lowered twice"
                self._by_kind[c.kind] = fn
            return fn
        return add

    def get(self, kind: Collective) -> F | None:
        return self._by_kind.get(kind.kind)

    def missing(self, kinds: Iterable[Collective] = COLLECTIVE_KINDS.values()) -> list[str]:
        return [c.kind for c in kinds if c.kind not in self._by_kind]
