"""The groups `fuse-elementwise` grows while it walks a function: what they are, and the cycle check.

`fuse_elementwise` decides whether an op may join a producer's group (its legality rule); this
module holds the groups themselves. A `Groups` keeps one function's groups: which group an op is
in (a union-find over the ops' program positions), each group's iteration space (`Space`),
placement, size and span of positions, and the ops computed once per kernel ("hoisted"). A merge
is O(1) apart from moving the smaller member list. `find_cycle` asks whether merging two groups
would close a path that leaves the merged group and comes back; it searches the contracted graph
(each multi-op group is one node) and uses the groups' spans to stop early (`Groups.bound`).
"""

from __future__ import annotations

from dataclasses import dataclass

from lamina.analysis.graph import UnionFind
from xdsl.ir import Operation

# How many ops one cycle search may visit before it gives up (and the merge is refused)
SEARCH_LIMIT = 1024


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
    """One group under construction; `root` is its union-find root (a position)."""

    root: int
    space: Space
    size: int
    first: int           # position of the earliest member
    key: object          # placement_key: the mesh and tier every member shares
    members: list[Operation]
    last: int = -1       # position of the latest member


class _MinTree:
    """Range-minimum over positions with point updates (a segment tree), for `Groups.bound`.

    Slot i holds the `first` of the multi-member group whose latest member is at position i."""

    def __init__(self, n: int) -> None:
        self.size = 1
        while self.size < max(n, 1):
            self.size *= 2
        self.inf = n
        self.tree = [n] * (2 * self.size)

    def set(self, i: int, value: int) -> None:
        i += self.size
        self.tree[i] = value
        i //= 2
        while i:
            self.tree[i] = min(self.tree[2 * i], self.tree[2 * i + 1])
            i //= 2

    def min_from(self, lo: int) -> int:
        """min over slots lo .. n-1."""
        res = self.inf
        lo += self.size
        hi = 2 * self.size
        while lo < hi:
            if lo & 1:
                res = min(res, self.tree[lo])
                lo += 1
            if hi & 1:
                hi -= 1
                res = min(res, self.tree[hi])
            lo //= 2
            hi //= 2
        return res


class Groups:
    """The groups of one function's ops (`ops` in program order; positions index it)."""

    def __init__(self, ops: list[Operation]) -> None:
        self.ops = ops
        self.pos: dict[Operation, int] = {op: i for i, op in enumerate(ops)}
        self.uf: UnionFind[int] = UnionFind()
        self.by_root: dict[int, Group] = {}
        self.members: set[Operation] = set()     # ops in some group (singletons included)
        self.hoisted: set[Operation] = set()     # members computed once per kernel, not per tile
        self.spans = _MinTree(len(ops))

    def add(self, op: Operation, space: Space, key: object) -> None:
        """Start `op`'s own group."""
        i = self.pos[op]
        self.members.add(op)
        self.by_root[i] = Group(i, space, 1, i, key, [op], i)

    def root_of(self, op: Operation) -> int:
        """The root of a member's group."""
        return self.uf.find(self.pos[op])

    def of(self, op: Operation | None) -> Group | None:
        """The group `op` is in, or None when it is in none."""
        if op is None or op not in self.members:
            return None
        return self.by_root.get(self.uf.find(self.pos[op]))

    def in_roots(self, p: Operation, roots: set[int]) -> bool:
        return p in self.members and self.uf.find(self.pos[p]) in roots

    def merge(self, mine: Group, other: Group, space: Space, hoist: Group | None) -> None:
        """Make one group over `space` of `mine` and `other` (the lower root stays the root);
        `hoist`, one of the two, becomes computed once per kernel."""
        if hoist is not None:
            self.hoisted.update(hoist.members)
        keep, drop = (mine, other) if mine.root < other.root else (other, mine)
        self.uf.union(keep.root, drop.root)
        del self.by_root[drop.root]
        keep.space = space
        keep.size = mine.size + other.size
        for g in (mine, other):  # the merged group replaces both in the span index
            self.spans.set(g.last, self.spans.inf)
        keep.first = min(mine.first, other.first)
        keep.last = max(mine.last, other.last)
        self.spans.set(keep.last, keep.first)
        small, big = sorted((mine.members, other.members), key=len)
        big.extend(small)
        keep.members = big

    def bound(self, lo: int) -> int:
        """The lowest position a descendant of ops at positions >= `lo` can have.

        Plain edges only go forward, but in the contracted graph a group is one node: entering
        it at a late member leads to the users of its earliest member. So every group that has a
        member at or after the bound pulls the bound down to its first member, to a fixpoint.
        Ops before the bound cannot lie on a cycle through the merged groups, which is what lets
        the cycle search stop there."""
        while (first := self.spans.min_from(lo)) < lo:
            lo = first
        return lo

    def members_by_root(self) -> dict[int, list[Operation]]:
        """Every group's members in program order, groups by their first member."""
        out: dict[int, list[Operation]] = {}
        for op in self.ops:
            if op in self.members:
                out.setdefault(self.root_of(op), []).append(op)
        return out


def find_cycle(groups: Groups, mine: Group, other: Group) -> Operation | None:
    """An outside op on a path other -> outside -> mine, or mine -> outside -> other: merging
    the two groups would make that path a cycle. None when there is none.

    Also returns an op (where the search started) when the search runs out of its budget, so a
    merge is refused rather than risked."""
    return _CycleSearch(groups, mine, other).run()


class _CycleSearch:
    """A backward search from the merged group's outside producers for either group.

    It runs on the contracted graph: reaching any member of another multi-op group reaches the
    whole group (it becomes one op), so all its members' operands are followed. Ops before
    `groups.bound(...)` of the two groups' first position cannot be on such a path and are not
    followed. Every visited op (and every member of an entered group) costs one unit of a budget
    of SEARCH_LIMIT shared by all starts."""

    def __init__(self, groups: Groups, mine: Group, other: Group) -> None:
        self.groups = groups
        self.roots = {mine.root, other.root}
        self.lo = groups.bound(min(mine.first, other.first))
        self.seen: set[Operation] = set()
        self.seen_groups: set[int] = set()
        self.budget = SEARCH_LIMIT
        # when both are single ops, only paths from `other` back to mine's op matter
        self.searched = list(mine.members)
        if other.size > 1 or mine.size > 1:
            self.searched += other.members

    def run(self) -> Operation | None:
        for s in self._starts():
            if self._reaches(s):
                return s
        return None

    def _starts(self) -> list[Operation]:
        pos, roots = self.groups.pos, self.roots
        starts: list[Operation] = []
        for m in self.searched:
            for v in m.operands:
                p = v.owner
                if isinstance(p, Operation) and p in pos and not self.groups.in_roots(p, roots):
                    starts.append(p)
        return starts

    def _reaches(self, s: Operation) -> bool:
        """Whether the search from `s` reaches either group (or exhausts the budget)."""
        pos, members, roots, lo = self.groups.pos, self.groups.members, self.roots, self.lo
        seen = self.seen
        stack = [s]
        while stack:
            u = stack.pop()
            if u in seen:
                continue
            seen.add(u)
            self.budget -= 1
            if self.budget < 0:
                return True
            for w in self._expand(u):
                for v in w.operands:
                    p = v.owner
                    if not isinstance(p, Operation) or p not in pos:
                        continue
                    if self.groups.in_roots(p, roots):
                        return True
                    if p not in seen and (p in members or pos[p] >= lo):
                        stack.append(p)
        return False

    def _expand(self, u: Operation) -> list[Operation]:
        """The ops whose operands the search follows from `u`: its whole group when `u` is in a
        multi-op group not entered before, nothing when the search stops at `u`, else `u`."""
        groups = self.groups
        if u in groups.members:
            g = groups.root_of(u)
            grp = groups.by_root[g]
            if grp.size > 1:
                if g in self.seen_groups:
                    return []
                self.seen_groups.add(g)
                self.budget -= len(grp.members)
                return grp.members
        if groups.pos[u] < self.lo:
            return []
        return [u]
