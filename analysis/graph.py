"""Graph helpers for passes that group ops: a union-find, and the topological order of a block
whose ops are contracted into groups.

Both fusion (`fuse-elementwise`) and sharding (`propagate-sharding`, when it re-forms the fused
groups a reshard splits) merge ops into groups and must then re-order a block so that every group,
as one op, comes after everything it reads. `contracted_order` does that in O(ops + edges) with a
heap keyed on each group's first position, so the order is deterministic and as close to the
original as the edges allow.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import Generic, Literal, TypeVar

from xdsl.ir import Operation

T = TypeVar("T", bound=Hashable)


class UnionFind(Generic[T]):
    """Disjoint sets over hashable items, with path compression."""

    def __init__(self) -> None:
        self.parent: dict[T, T] = {}

    def find(self, x: T) -> T:
        parent = self.parent
        root = x
        while (p := parent.get(root, root)) != root:
            root = p
        while (p := parent.get(x, x)) != root:
            parent[x] = root
            x = p
        return root

    def union(self, keep: T, drop: T) -> T:
        """Merge the sets of `keep` and `drop`; the root of `keep`'s set stays the root."""
        a, b = self.find(keep), self.find(drop)
        if a != b:
            self.parent[b] = a
        return a


N = TypeVar("N", bound=Hashable)


def contracted_order(ops: Sequence[Operation], node_of: Callable[[Operation], N],
                     after: Callable[[Operation], Iterable[Operation]] | None = None
                     ) -> tuple[list[N], list[N], dict[N, set[N]]]:
    """Topologically order the nodes that `node_of` maps `ops` onto (a group of ops is one node).

    An edge runs from the node of an operand's producer (when it is among `ops`) to the node of
    its user, and from the node of every op in `after(op)` to op's (ordering that is not data
    flow: a value's `lamina.free` comes after every user of the value). Nodes come out earliest
    first position first among those ready. Returns the order, the nodes left out because they
    lie on or after a cycle, and every node's successors."""
    node: list[N] = [node_of(op) for op in ops]
    index = {op: i for i, op in enumerate(ops)}
    first: dict[N, int] = {}
    for i, n in enumerate(node):
        first.setdefault(n, i)
    succs: dict[N, set[N]] = {n: set() for n in first}
    indeg: dict[N, int] = dict.fromkeys(first, 0)
    for i, op in enumerate(ops):
        b = node[i]
        preds = [v.owner for v in op.operands if isinstance(v.owner, Operation)]
        if after is not None:
            preds.extend(after(op))
        for p in preds:
            j = index.get(p)
            if j is None:
                continue
            a = node[j]
            if a != b and b not in succs[a]:
                succs[a].add(b)
                indeg[b] += 1
    by_pos = {pos: n for n, pos in first.items()}
    heap = [first[n] for n, d in indeg.items() if d == 0]
    heapq.heapify(heap)
    order: list[N] = []
    while heap:
        n = by_pos[heapq.heappop(heap)]
        order.append(n)
        for s in succs[n]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, first[s])
    left = [n for n, d in indeg.items() if d > 0]
    return order, left, succs


class _Labels:
    """Items in one list whose integer labels increase along it (an order-maintenance list):
    comparing two items' places is comparing labels, and a run of items is linked in next to
    another in time proportional to the run. Labels start `_GAP` apart; when a run does not fit
    between its neighbours' labels, the stretch around it widens (doubling) until its labels
    leave `_ROOM` per item, and is spaced out evenly again (an end of the list leaves any room
    needed), so relabelling is rare and local."""

    _GAP = 1 << 32
    _ROOM = 64

    def __init__(self, n: int) -> None:
        self.label = [i * self._GAP for i in range(n)]
        self.prev = [i - 1 for i in range(n)]
        self.next = [i + 1 if i + 1 < n else -1 for i in range(n)]

    def unlink(self, x: int) -> None:
        p, q = self.prev[x], self.next[x]
        if p >= 0:
            self.next[p] = q
        if q >= 0:
            self.prev[q] = p
        self.prev[x] = self.next[x] = -1

    def take_place(self, x: int, y: int) -> None:
        """Put `x` where `y` is and take `y` out of the list (x is not in it)."""
        p, q = self.prev[y], self.next[y]
        self.prev[x], self.next[x], self.label[x] = p, q, self.label[y]
        if p >= 0:
            self.next[p] = x
        if q >= 0:
            self.prev[q] = x
        self.prev[y] = self.next[y] = -1

    def insert_run(self, run: list[int], after: int, before: int) -> None:
        """Link `run` (items not in the list) in order between the neighbours `after` and
        `before` (-1: the list's end), then give the run labels between theirs."""
        prev = after
        for x in run:
            self.prev[x] = prev
            if prev >= 0:
                self.next[prev] = x
            prev = x
        self.next[prev] = before
        if before >= 0:
            self.prev[before] = prev
        self._relabel(run[0], run[-1])

    def _relabel(self, first: int, last: int) -> None:
        """Give the stretch first..last (linked, labels stale) increasing labels between its
        neighbours', widening the stretch over its neighbours while there is too little room."""
        label, prev, nxt = self.label, self.prev, self.next
        lo, hi, count = prev[first], nxt[last], 1
        x = first
        while x != last:
            x = nxt[x]
            count += 1
        # widen until the labels of lo and hi leave room per item (an end of the list leaves
        # all the room needed)
        while lo >= 0 and hi >= 0 and label[hi] - label[lo] < (count + 1) * self._ROOM:
            for _ in range(count):
                if lo >= 0:
                    lo, count = prev[lo], count + 1
                if hi >= 0:
                    hi, count = nxt[hi], count + 1
        if lo < 0 and hi < 0:
            start, step = 0, self._GAP
        elif lo < 0:
            step = self._GAP
            start = label[hi] - (count + 1) * step
        elif hi < 0:
            start, step = label[lo], self._GAP
        else:
            start, step = label[lo], (label[hi] - label[lo]) // (count + 1)
        x = nxt[lo] if lo >= 0 else self._head(first)
        for i in range(count):
            label[x] = start + (i + 1) * step
            x = nxt[x]

    def _head(self, x: int) -> int:
        while self.prev[x] >= 0:
            x = self.prev[x]
        return x


class ContractedDag:
    """A DAG over items 0..n-1 whose nodes can be contracted, kept in a topological order, so
    that "would contracting these two nodes make a cycle?" is answered exactly and cheaply.

    Items are numbered in a topological order of the plain graph (an op's position in its
    block). A node is a set of items; its union-find root stands for it. The nodes sit in a
    list in a topological order of the contracted graph (`_Labels`: comparing places is
    comparing labels). Edges are registered per item (`add_edge`) and kept per node, in lists
    cleaned lazily of the edges a contraction made internal (small list onto large on a merge).

    Contracting a and b (a before b) closes a cycle exactly when a path leaves a and reaches b
    through a third node, and every node on such a path lies strictly between a and b in the
    order; so the searches stay inside that window. When b has no predecessor inside the window
    (or a no successor inside it) there is no such path and the merged node takes a's place
    (b's). Otherwise two searches run in lockstep, one node at a time: backward from b's
    predecessors and forward from a's successors, both inside the window (the two-way search of
    the dynamic topological orders of Pearce-Kelly and Bender-Fineman-Gilbert-Tarjan). A path
    exists iff a search meets the other end; the first search to finish without meeting it
    proves there is none, and its nodes are moved, in their order, just before a (those that
    reach b) or just after b (those a reaches), the merged node taking a's (b's) place. That
    keeps every edge forward, and a contraction costs twice the smaller search, not the
    window."""

    def __init__(self, n: int) -> None:
        self.uf: UnionFind[int] = UnionFind()
        self.order = _Labels(n)
        self.ins: list[list[int]] = [[] for _ in range(n)]
        self.outs: list[list[int]] = [[] for _ in range(n)]

    def find(self, item: int) -> int:
        """The root of the node `item` is in."""
        return self.uf.find(item)

    def add_edge(self, u: int, v: int) -> None:
        """An edge from item u to item v (u before v in the items' order; either may be in a
        contracted node already)."""
        self.outs[self.uf.find(u)].append(v)
        self.ins[self.uf.find(v)].append(u)

    def contract(self, keep: int, drop: int) -> bool:
        """Contract the nodes of roots `keep` and `drop` into one node whose root is `keep`,
        unless a path runs between them through a third node (then nothing changes: False)."""
        label = self.order.label
        a, b = (keep, drop) if label[keep] < label[drop] else (drop, keep)
        lo, hi = label[a], label[b]
        into_b = [r for r in self._edges(b, self.ins) if r != a and lo < label[r]]
        if not into_b:
            self._merge(keep, drop, a)
            return True
        from_a = [r for r in self._edges(a, self.outs) if r != b and label[r] < hi]
        if not from_a:
            self._merge(keep, drop, b)
            return True
        back = self._search(into_b, self.ins, lo, hi, a)
        fore = self._search(from_a, self.outs, lo, hi, b)
        while True:
            for search, side in ((back, "back"), (fore, "fore")):
                step = next(search)
                if step is None:
                    continue
                if step is False:
                    return False
                self._move(keep, drop, a, b, step, side)
                return True

    def reaches(self, src: int, dst: int, items: list[int]) -> int | None:
        """The first of `items` whose node `src` reaches through nodes strictly between src
        and dst in the order (items outside that window are skipped), or None. Backward
        searches from each item in turn, sharing the nodes already found not to lead to src."""
        label = self.order.label
        lo, hi = label[src], label[dst]
        dead: set[int] = set()
        for item in items:
            r = self.uf.find(item)
            if r in (src, dst) or r in dead or not lo < label[r] < hi:
                continue
            seen = {r}
            stack = [r]
            while stack:
                for p in self._edges(stack.pop(), self.ins):
                    if p == src:
                        return item
                    if p not in seen and p not in dead and lo < label[p] < hi:
                        seen.add(p)
                        stack.append(p)
            dead |= seen
        return None

    # -- the searches --

    def _edges(self, node: int, lists: list[list[int]]) -> list[int]:
        """The roots at the other end of `node`'s edges in `lists`, the list cleaned of edges
        inside the node."""
        find = self.uf.find
        kept = [x for x in lists[node] if find(x) != node]
        lists[node] = kept
        return [find(x) for x in kept]

    def _search(self, starts: list[int], lists: list[list[int]], lo: int, hi: int, target: int
                ) -> Iterator[list[int] | Literal[False] | None]:
        """Walk from `starts` through `lists` inside the window (lo, hi), one node per step
        (yielding None); then yield the nodes found, in the list's order, or False as soon as
        one has an edge to `target`."""
        label = self.order.label
        seen = set(starts)
        stack = list(seen)
        while stack:
            for r in self._edges(stack.pop(), lists):
                if r == target:
                    yield False
                    return
                if r not in seen and lo < label[r] < hi:
                    seen.add(r)
                    stack.append(r)
            yield None
        yield sorted(seen, key=label.__getitem__)

    # -- the contraction --

    def _merge(self, keep: int, drop: int, place: int) -> None:
        """Union the two nodes' sets and edge lists; the merged node takes `place`'s place."""
        self.uf.union(keep, drop)
        for lists in (self.ins, self.outs):
            big, small = lists[keep], lists[drop]
            if len(big) < len(small):
                big, small = small, big
            big.extend(small)
            lists[keep], lists[drop] = big, []
        if place == keep:
            self.order.unlink(drop)
        else:
            self.order.unlink(keep)
            self.order.take_place(keep, drop)

    def _move(self, keep: int, drop: int, a: int, b: int, run: list[int], side: str) -> None:
        """Contract after a search proved it safe: the nodes that reach b (side "back") go just
        before a, or those a reaches ("fore") just after b; the merged node takes the place of
        the end they are moved next to."""
        order = self.order
        for r in run:
            order.unlink(r)
        if side == "back":
            order.insert_run(run, order.prev[a], a)
            self._merge(keep, drop, a)
        else:
            order.insert_run(run, b, order.next[b])
            self._merge(keep, drop, b)
