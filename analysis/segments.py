"""A segment tree of items over ranges of points, shared by the arena planner and the tier planner.

Both ask, many times, "which of the ranges added so far cover point k", over ranges that are
never removed: listing the ranges per point would cost the sum of their spans (quadratic when
values live long), while the tree puts each range in the O(log n) nodes that cover it and finds
those over k on the path from k's leaf to the root, O(log n + answer).
"""

from __future__ import annotations


class RangeCover:
    """Items added over inclusive ranges [lo, hi] of the points 0..points-1 (a bottom-up tree of
    2 * points nodes; any number of points works for these two operations)."""

    def __init__(self, points: int) -> None:
        self.points = points
        self.nodes: list[list[int]] = [[] for _ in range(2 * points)]

    def add(self, lo: int, hi: int, item: int) -> None:
        """Record `item` over the points lo..hi, both included."""
        nodes = self.nodes
        a, z = lo + self.points, hi + self.points + 1
        while a < z:
            if a & 1:
                nodes[a].append(item)
                a += 1
            if z & 1:
                z -= 1
                nodes[z].append(item)
            a >>= 1
            z >>= 1

    def at(self, k: int) -> list[int]:
        """The items whose ranges hold point k, in the order of the nodes from leaf to root (each
        node's in the order they were added)."""
        found: list[int] = []
        p = k + self.points
        while p >= 1:
            found.extend(self.nodes[p])
            p >>= 1
        return found
