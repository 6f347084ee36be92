"""The alpha-beta cost model of collectives, per link level of a target, and the algorithm choice.

B is the collective's full per-device buffer in bytes (all_reduce: the local buffer; all_gather:
the gathered local result; reduce_scatter: the local input; all_to_all: the local block), n the
number of devices in the group, alpha the latency of one message and beta the bandwidth per device
per direction of the link level the group spans (`Target.axis_level`).

Bytes each device sends (the issue's formulas, ring algorithm):
    all_gather       (n-1)/n B         reduce_scatter  (n-1)/n B
    all_reduce     2 (n-1)/n B         all_to_all      (n-1)/n B

Time of one collective = latency + bytes sent / beta, per algorithm:
    ring          one alpha per step: n-1 steps (2(n-1) for all_reduce), at the slowest level the
                  group spans; the ring's bytes above.
    tree          all_reduce only, and only between nodes (NCCL's trees are chains inside a node):
                  2 ceil(log2 n) alpha, but the whole buffer goes up and down: 2 B bytes sent.
    hierarchical  when the group spans two link levels (inner n1 devices per node, outer n2 nodes):
                  all_reduce = reduce_scatter inside the node + all_reduce of B/n1 across nodes +
                  all_gather inside; reduce_scatter / all_gather = the inner and outer phases in
                  sequence. Each phase is a ring at its own level.
The algorithm with the smallest time wins; ties go to ring (the simplest).
A point-to-point kind (collective_permute between pipeline stages) is one message of its whole
local block B at the link level of its (stage) axis: alpha + B / beta, B bytes sent, whatever n.

Per kind, the factors, which algorithms exist and the hierarchical phases are the kind's record
in `lamina.ir.mesh.collective_kinds` (`ring_factor`, `tree`, `hierarchical`); `kind` arguments are its
names there (an unlowered reshard is priced as at most its local block, (n-1)/n of it sent).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from lamina.analysis.sizes import fmt_bytes
from lamina.ir.mesh.collective_kinds import COLLECTIVE_KINDS, HIERARCHICAL, TREE, Phase
from lamina.ir.mesh.placement import Mesh
from lamina.ir.mesh.target import LinkLevel, Target


@dataclass(frozen=True)
class Estimate:
    kind: str
    algorithm: str
    n: int
    payload: float          # B
    sent: float             # bytes sent per device
    seconds: float
    latency: float = 0.0    # the alpha part of `seconds`
    alternatives: tuple[tuple[str, float], ...] = ()   # (algorithm, seconds) of the others
    inner: int | None = None  # hierarchical: devices per group of the inner link level

    def describe(self) -> str:
        alts = ", ".join(f"{a} {s * 1e6:.1f} us" for a, s in self.alternatives)
        return (f"{self.algorithm}: {fmt_bytes(self.payload)} payload, {fmt_bytes(self.sent)} sent "
                f"per device, {self.seconds * 1e6:.1f} us" + (f" (vs {alts})" if alts else ""))


def ring_sent(kind: str, n: int, payload: float) -> float:
    if n <= 1:
        return 0.0
    c = COLLECTIVE_KINDS[kind]
    if c.point_to_point:
        return payload
    return c.ring_factor * (n - 1) / n * payload


def _phases(kind: str) -> tuple[Phase, ...]:
    """The rings of `kind`'s hierarchical algorithm (a kind without one, as a program may still
    name it: the inner ring, then the outer)."""
    return COLLECTIVE_KINDS[kind].hierarchical or (Phase(kind, False), Phase(kind, True))


def sent_bytes(kind: str, algorithm: str | None, n: int, payload: float,
               inner: int | None = None) -> float:
    """Bytes each device sends for one collective (what `--stats-json` reports)."""
    c = COLLECTIVE_KINDS[kind]
    if n <= 1 or not c.communicates:
        return 0.0
    if algorithm == TREE and c.tree:
        return 2.0 * payload
    if algorithm == HIERARCHICAL and inner and 1 < inner < n:
        outer = n // inner
        sent = 0.0
        for ph in _phases(kind):
            sent += ring_sent(ph.kind, outer, payload / inner) if ph.outer else \
                ring_sent(ph.kind, inner, payload)
        return sent
    return ring_sent(kind, n, payload)


def _ring_lat(kind: str, n: int, level: LinkLevel) -> float:
    c = COLLECTIVE_KINDS[kind]
    if c.point_to_point:
        return level.alpha if n > 1 else 0.0
    return (n - 1) * c.ring_factor * level.alpha


def _ring_time(kind: str, n: int, payload: float, level: LinkLevel) -> float:
    return _ring_lat(kind, n, level) + ring_sent(kind, n, payload) / level.beta


def levels_of(target: Target, mesh: Mesh, axes: Sequence[str]) -> list[tuple[int, LinkLevel]]:
    """(devices, level) per link level the mesh axes `axes` span, innermost first."""
    by_level: dict[str, tuple[int, LinkLevel, int]] = {}
    order = [lv.name for lv in target.links]
    for axis in axes:
        ax = mesh.axes.index(axis)
        lv = target.axis_level(mesh.sizes, ax)
        n, _, _ = by_level.get(lv.name, (1, lv, 0))
        by_level[lv.name] = (n * mesh.sizes[ax], lv, order.index(lv.name))
    return [(n, lv) for n, lv, _ in sorted(by_level.values(), key=lambda t: t[2])]


def estimate(kind: str, payload: float, levels: Sequence[tuple[int, LinkLevel]],
             target: Target) -> Estimate:
    """The cheapest algorithm for one collective over groups spanning `levels`."""
    n = math.prod(k for k, _ in levels) if levels else 1
    c = COLLECTIVE_KINDS[kind]
    base = c.default_algorithm   # ring, or a point-to-point kind's one send (same formulas)
    if n <= 1:
        return Estimate(kind, base, n, payload, 0.0, 0.0, 0.0)
    slowest = max((lv for _, lv in levels), key=lambda lv: (lv.alpha, -lv.beta))
    options: dict[str, tuple[float, float, float]] = {
        base: (_ring_time(kind, n, payload, slowest), ring_sent(kind, n, payload),
               _ring_lat(kind, n, slowest)),
    }
    inter_only = all(lv is not target.links[0] for _, lv in levels)
    if c.tree and inter_only:
        lat = 2 * math.ceil(math.log2(n)) * slowest.alpha
        options[TREE] = (lat + 2 * payload / slowest.beta, 2.0 * payload, lat)
    if len(levels) >= 2 and c.hierarchical:
        (n1, inner), outer_levels = levels[0], levels[1:]
        n2 = n // n1
        outer = max((lv for _, lv in outer_levels), key=lambda lv: (lv.alpha, -lv.beta))
        t, lat = _hierarchical_time(c.hierarchical, payload, (n1, inner), (n2, outer))
        options[HIERARCHICAL] = (t, sent_bytes(kind, HIERARCHICAL, n, payload, n1), lat)
    best = min(options, key=lambda a: (options[a][0], a != base))
    alts = tuple((a, o[0]) for a, o in options.items() if a != best)
    t, sent, lat = options[best]
    inner_n = levels[0][0] if best == HIERARCHICAL else None
    return Estimate(kind, best, n, payload, sent, t, lat, alts, inner_n)


def _hierarchical_time(phases: Sequence[Phase], payload: float, inner: tuple[int, LinkLevel],
                       outer: tuple[int, LinkLevel]) -> tuple[float, float]:
    """(seconds, latency) of the phases: the rings inside the inner level, then those across it
    (on payload / n1)."""
    (n1, lv1), (n2, lv2) = inner, outer
    t = lat = 0.0
    for ph in [p for p in phases if not p.outer]:
        t += _ring_time(ph.kind, n1, payload, lv1)
        lat += _ring_lat(ph.kind, n1, lv1)
    for ph in [p for p in phases if p.outer]:
        t += _ring_time(ph.kind, n2, payload / n1, lv2)
        lat += _ring_lat(ph.kind, n2, lv2)
    return t, lat


def latency_dominated(e: Estimate) -> bool:
    """Whether the collective's latency is at least its bandwidth time (worth bucketing)."""
    return e.n > 1 and e.latency >= e.seconds - e.latency
