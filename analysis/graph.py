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
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Generic, TypeVar

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
