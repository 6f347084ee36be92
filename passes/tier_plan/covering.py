"""The greedy tier planner's index of which gaps cover a step (`Covering`).

At an overflowing step the sweep offloads gaps that hold their value in HBM there without needing
it; this module answers "which gaps are those" without listing them per step, which would cost
the sum of the gaps' spans (quadratic in a program whose values live long).
"""

from __future__ import annotations

from lamina.analysis.segments import RangeCover
from lamina.passes.tier_plan.problem import Gap


class Covering:
    """For each step, the gaps that hold their value in HBM there without needing it (the
    victims at an overflowing step: a < k < b, or a < k <= b for a tail), in (value, gap)
    order.

    Listing them per step would take bytes in the sum of the gaps' spans, quadratic in the
    program when values have no lifetimes (each one lives to the return). The gaps do not
    change (only their prefetch points do), so they go into a segment tree over the steps
    instead, built on the first question (a program that never overflows HBM asks none): each
    gap sits in the O(log K) nodes that cover its span, and the gaps over step k are those in
    the nodes on the path from k's leaf to the root, O(log K + answer). A pipeline-staged program
    has one per stage, over the gaps of the values its devices hold (each staged value in one)."""

    def __init__(self, gaps: list[list[Gap]], K: int, values: list[int] | None = None) -> None:
        """Index the gaps of `values` (value indices, in order; None: every value), e.g. those a
        device of one pipeline stage holds."""
        self.gaps, self.K = gaps, K
        self.values = range(len(gaps)) if values is None else values
        self.tree: RangeCover | None = None
        self.keys: list[tuple[int, int]] = []

    def _build(self) -> RangeCover:
        size = 1
        while size < self.K + 1:
            size *= 2
        tree = RangeCover(size)
        keys = self.keys
        for vi in self.values:
            for gi, g in enumerate(self.gaps[vi]):
                lo, hi = g.a + 1, min(g.b if g.tail else g.b - 1, self.K)
                if lo > hi:
                    continue
                tree.add(lo, hi, len(keys))
                keys.append((vi, gi))
        return tree

    def at(self, k: int) -> list[tuple[int, int]]:
        """The gaps over step k, in (value, gap) order."""
        if self.tree is None:
            self.tree = self._build()
        found = self.tree.at(k)
        found.sort()
        keys = self.keys
        return [keys[j] for j in found]
