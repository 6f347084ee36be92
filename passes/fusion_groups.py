"""The groups `fuse-elementwise` grows while it walks a function: what they are, and the cycle check.

`fuse_elementwise` decides whether an op may join a producer's group (its legality rule); this
module holds the groups themselves. A `Groups` keeps one function's groups: which group an op is
in, each group's iteration space (`Space`), placement and size, and the ops computed once per
kernel ("hoisted").

Merging two groups must not close a path that leaves the merged group and comes back (rule 5 of
the pass). The groups live in a `ContractedDag` over the ops' positions (each group one node),
which keeps a topological order of the contracted graph as groups merge; a merge is checked and
made by `Groups.merge`, exactly: it is refused if and only if such a path exists, and the op it
names lies on one. The check searches only the nodes between the two groups in that order, so
on a chain, or on a stack of layers whose groups take turns, it visits a handful of nodes per
merge instead of the whole function.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lamina.analysis.graph import ContractedDag
from lamina.analysis.sizes import local_bytes
from lamina.ir.buffers.memory import FreeOp
from lamina.ir.ops.opbase import LaminaOp
from lamina.ir.ops.optable import Fusion
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, SSAValue


@dataclass
class Space:
    """A group's iteration space: loop over `full`, or rows `lead` x reduced `trail`."""

    lead: tuple[int, ...]
    trail: tuple[int, ...] | None  # None: a loop group (lead is the whole domain)

    @property
    def rows(self) -> bool:
        return self.trail is not None

    @property
    def full(self) -> tuple[int, ...]:
        return self.lead + (self.trail or ())

    def form(self, s: tuple[int, ...]) -> str | None:
        """How a value of shape `s` lines up with the space: "full", "rowscalar" (rows x 1s),
        "rowvec" (rows only) or None (it does not)."""
        if self.trail is None:
            return "full" if s == self.lead else None
        if s == self.lead + self.trail:
            return "full"
        if s == self.lead + (1,) * len(self.trail):
            return "rowscalar"
        if s == self.lead:
            return "rowvec"
        return None

    def __str__(self) -> str:
        if self.trail is None:
            return "loop over " + "x".join(map(str, self.lead))
        return ("rows " + "x".join(map(str, self.lead)) + " reducing " +
                "x".join(map(str, self.trail)))


def join_spaces(a: Space, b: Space) -> Space | None:
    """The one space both groups fit in, or None: equal spaces, or a loop group over one of a
    row group's three forms (which then runs on the row group's rows)."""
    if not a.rows and not b.rows:
        return a if a.lead == b.lead else None
    if a.rows and b.rows:
        return a if (a.lead, a.trail) == (b.lead, b.trail) else None
    r, lp = (a, b) if a.rows else (b, a)
    return r if r.form(lp.lead) is not None else None


def broadcasts_into(s: tuple[int, ...], d: tuple[int, ...]) -> bool:
    """Whether shape `s` broadcasts to `d` (NumPy's trailing-aligned rule)."""
    if len(s) > len(d):
        return False
    return all(a == 1 or a == b for a, b in zip(reversed(s), reversed(d), strict=False))


@dataclass
class Group:
    """One group under construction; `root` is its node's root in the `ContractedDag` (the
    position of its earliest member)."""

    root: int
    space: Space
    size: int
    key: object          # placement_key: the mesh and tier every member shares
    members: list[Operation]
    inner: int = 0       # bytes of the kernel's intermediates (see `Groups.inner_after`)
    consts: set[Operation] = field(default_factory=set)   # constants it reads (cloned into it)
    matmul: bool = False     # its root is a row-tiled opaque op (a matmul by a weight matrix)
    view_only: bool = False  # only layout ops reading outside values: input views so far
    views_in: list[Operation] = field(default_factory=list)   # layout ops it reads through
    views_out: list[Operation] = field(default_factory=list)  # layout ops it writes through
    kept: int = 1 << 30      # leading domain dims every output view keeps one to one


class Groups:
    """The groups of one function's ops (`ops` in program order; positions index it).

    Ops enter the graph one by one in program order (`enter`), each before it starts a group or
    merges, so the graph holds exactly the ops walked so far; ops not walked yet come after all
    of them and cannot lie on a path between two groups."""

    def __init__(self, ops: list[Operation]) -> None:
        self.ops = ops
        self.pos: dict[Operation, int] = {op: i for i, op in enumerate(ops)}
        self.dag = ContractedDag(len(ops))
        self.by_root: dict[int, Group] = {}
        self.members: set[Operation] = set()     # ops in some group (singletons included)
        self.hoisted: set[Operation] = set()     # members computed once per kernel, not per tile
        self.input_views: set[Operation] = set()  # layout ops a kernel reads an input through
        # per member result, its uses by ops outside its group (a `lamina.free` not counted:
        # a free of a value used only inside a kernel moves into it)
        self.outside: dict[SSAValue, int] = {}
        self.anchor = ops[0] if ops else None

    def enter(self, op: Operation) -> None:
        """Add `op`'s edges from its operands' producers in the block to the graph."""
        i, pos = self.pos[op], self.pos
        for v in op.operands:
            p = v.owner
            if isinstance(p, Operation) and p in pos:
                self.dag.add_edge(pos[p], i)

    def add(self, op: Operation, space: Space, key: object) -> None:
        """Start `op`'s own group."""
        i = self.pos[op]
        self.members.add(op)
        inner = 0
        for r in op.results:
            n = sum(1 for u in r.uses if not isinstance(u.operation, FreeOp))
            self.outside[r] = n
            if n == 0:
                inner += self._bytes(r)
        consts: set[Operation] = {v.owner for v in op.operands if isinstance(v.owner, LaminaOp)
                  and v.owner.info.fusion == Fusion.SOURCE}
        inner += sum(self._bytes(r) for c in consts for r in c.results)
        self.by_root[i] = Group(i, space, 1, key, [op], inner, consts)

    def _bytes(self, v: SSAValue) -> int:
        return local_bytes(v, self.anchor) if isinstance(v.type, TensorType) and \
            self.anchor is not None else 0

    def inner_after(self, mine: Group, other: Group) -> tuple[int, dict[SSAValue, int]]:
        """The bytes of the intermediates of the kernel `mine` and `other` would make: member
        results no op outside reads and the constants cloned into it (`intermediate_bytes` of
        its fused op, or an upper bound of it, as frees inside a kernel only lower it), and the
        outside use counts that change. O(the smaller group's members and
        their uses): merges go small into large, so all merges of a walk cost O(uses x log)."""
        small, big = sorted((mine, other), key=lambda g: len(g.members))
        root, find, pos = big.root, self.dag.find, self.pos
        counts: dict[SSAValue, int] = {}

        def in_big(op: Operation) -> bool:
            return op in self.members and find(pos[op]) == root

        for m in small.members:
            for v in m.operands:
                p = v.owner
                if isinstance(p, Operation) and in_big(p):
                    counts[v] = counts.get(v, self.outside[v]) - 1
            for r in m.results:
                for u in r.uses:
                    if in_big(u.operation):
                        counts[r] = counts.get(r, self.outside[r]) - 1
        inner = mine.inner + other.inner + sum(self._bytes(v) for v, n in counts.items() if n == 0)
        inner -= sum(self._bytes(r) for c in small.consts if c in big.consts for r in c.results)
        return inner, counts

    def root_of(self, op: Operation) -> int:
        """The root of a member's group."""
        return self.dag.find(self.pos[op])

    def in_group(self, op: Operation, g: Group) -> bool:
        """Whether `op` is a member of the live group `g`."""
        return op in self.members and self.dag.find(self.pos[op]) == g.root

    def of(self, op: Operation | None) -> Group | None:
        """The group `op` is in, or None when it is in none."""
        if op is None or op not in self.members:
            return None
        return self.by_root.get(self.dag.find(self.pos[op]))

    def merge(self, mine: Group, other: Group, space: Space, hoist: Group | None,
              inner: tuple[int, dict[SSAValue, int]] | None = None,
              siblings: bool = False) -> Operation | None:
        """Make one group over `space` of `mine` and `other` (the lower root stays the root);
        `hoist`, one of the two, becomes computed once per kernel; `inner` is `inner_after`'s
        answer when the caller has it. Unless that would close a
        cycle: then nothing changes and the result is an op outside both groups on such a path.

        `mine` holds the op being walked and `other` a group it reads, so a cycle can only run
        from `other` to a producer of `mine`'s members; the op named is the first such producer
        (members in group order, operands in order), the same the pass always named. Two
        `siblings` (groups a concat joins, neither reading the other) may be linked either way."""
        keep, drop = (mine, other) if mine.root < other.root else (other, mine)
        if not self.dag.contract(keep.root, drop.root):
            return self._through(mine, other, either=siblings)
        if hoist is not None:
            self.hoisted.update(hoist.members)
        total, counts = inner if inner is not None else self.inner_after(mine, other)
        self.outside.update(counts)
        keep.inner = total
        del self.by_root[drop.root]
        keep.space = space
        keep.size = mine.size + other.size
        keep.matmul = mine.matmul or other.matmul
        keep.view_only = mine.view_only and other.view_only
        keep.kept = min(mine.kept, other.kept)
        for attr in ("views_in", "views_out"):   # small into large: O(n log n) over a walk
            a, b = getattr(mine, attr), getattr(other, attr)
            big_l, small_l = (a, b) if len(a) >= len(b) else (b, a)
            big_l.extend(small_l)
            setattr(keep, attr, big_l)
        small, big = sorted((mine, other), key=lambda g: len(g.members))
        big.members.extend(small.members)
        keep.members = big.members
        if len(big.consts) < len(small.consts):
            big, small = small, big
        big.consts |= small.consts
        keep.consts = big.consts
        return None

    def _through(self, mine: Group, other: Group, either: bool = False) -> Operation:
        """The first producer of a member of `mine` (members in group order, operands in
        order) that `other` reaches: the path other -> ... -> producer -> mine is the cycle.
        With `either`, a path the other way round is looked for too (sibling groups)."""
        pos = self.pos
        producers = [pos[v.owner] for m in mine.members for v in m.operands
                     if isinstance(v.owner, Operation) and v.owner in pos]
        item = self.dag.reaches(other.root, mine.root, producers)
        if item is None and either:
            return self._through(other, mine)
        assert item is not None, "a refused merge with no path between the groups"
        return self.ops[item]

    def members_by_root(self) -> dict[int, list[Operation]]:
        """Every group's members in program order, groups by their first member."""
        out: dict[int, list[Operation]] = {}
        for op in self.ops:
            if op in self.members:
                out.setdefault(self.root_of(op), []).append(op)
        return out
