"""The cheapest sequence of collectives that turns one placement of a value into another.

Both `insert-collectives` (which emits the sequence) and `propagate-sharding` (which prices the
placements it could choose) ask this module, so the placement a pass picks is priced by exactly
the collectives that will implement it.

A plan is a shortest path over placements (`Spec`s of one value on one mesh). From a placement,
one step is any of:
- all_gather of the minor-most k axes of one dimension's split, axes the source splits there (a
  plan never gathers back what it scattered: reduce_scatter + all_reduce + all_gather is what the
  model's hierarchical all_reduce already prices);
- all_to_all moving the minor-most k axes of dimension d to the minor end of dimension e, when e
  divides (this is what moves data that all_gather + all_slice would move twice: reordering
  `[[data, model], []]` to `[[model], [data]]` is two all_to_alls sending 1.6 blocks instead of a
  gather and an all_to_all sending 5);
- all_reduce of all pending axes the destination does not keep, or reduce_scatter of some of them
  (in some order) onto the minor end of a dimension;
- all_slice of one axis onto the minor end of a dimension the destination splits over it (local:
  free), never of a pending axis.
Each step costs its estimated seconds on the target (`comm_cost.estimate`, through the `cost`
callback); ties (to a picosecond) go to fewer bytes sent, then to fewer communicating steps,
then to the order steps are generated in
(all_to_all, all_gather, reductions, slices), which keeps the plans of the common cases the
familiar ones. The search is Dijkstra's over at most (rank + 1)^axes * axes! placements, a few
hundred for the meshes Lamina runs; past `MAX_STATES` placements (meshes of many axes) it falls
back to the plan that gathers every split the destination does not keep, reduces, then slices.

A reshard that also moves the value to another pipeline stage (`plan_stage_move`) is that plan
plus one collective_permute over the stage axis, placed where the value's local block is smallest
(before the gathers that grow it, after the slices and scatters that shrink it; ties: earliest):
a point-to-point send costs alpha + B / beta, so the smallest B is the cheapest.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from lamina.ir.mesh.collective_kinds import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_SLICE,
    ALL_TO_ALL,
    COLLECTIVE_KINDS,
    COLLECTIVE_PERMUTE,
    REDUCE_SCATTER,
    SUM,
    Collective,
)
from lamina.ir.mesh.sharding import Spec

MAX_STATES = 20000

# (kind, axes, payload bytes per device) -> (seconds, bytes sent per device)
CostFn = Callable[[str, tuple[str, ...], float], tuple[float, float]]


@dataclass(frozen=True)
class Step:
    """One collective of a plan: `kind` over `axes`, taking the value from `src` to `dst`.

    `dim` is the gathered / sliced / scattered dimension; an all_to_all moves `axes` from
    `concat_dim` to `split_dim` (the op's attribute names); `kind` names its record in the table
    of collective kinds (`collective`)."""

    kind: str
    axes: tuple[str, ...]
    src: Spec
    dst: Spec
    dim: int = -1
    split_dim: int = -1
    concat_dim: int = -1

    @property
    def collective(self) -> Collective:
        return COLLECTIVE_KINDS[self.kind]


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    seconds: float
    sent: float             # bytes each device sends, all steps together

    @property
    def communicating(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.collective.communicates)


def local_bytes(total: int, s: Spec, sizes: Mapping[str, int]) -> float:
    """One device's bytes of a value of `total` bytes placed `s`."""
    return total / math.prod(sizes[a] for d in s.splits for a in d)


def payload(step: Step, total: int, sizes: Mapping[str, int]) -> float:
    """The collective's per-device buffer (`comm_cost`'s B): the gathered result for all_gather,
    the local input otherwise."""
    return local_bytes(total, step.dst if step.collective.payload_is_result else step.src, sizes)


def _with(s: Spec, splits: list[tuple[str, ...]], partial: tuple[str, ...] | None = None) -> Spec:
    p = s.partial if partial is None else partial
    return Spec(tuple(splits), p, s.partial_kind if p else SUM.name)


def _steps(src: Spec, cur: Spec, dst: Spec, shape: Sequence[int], sizes: Mapping[str, int],
           axes_in_play: tuple[str, ...], allow_a2a: bool) -> Iterator[Step]:
    rank = len(shape)
    used = {a for d in cur.splits for a in d}

    def divides(e: int, extra: tuple[str, ...]) -> bool:
        n = math.prod(sizes[a] for a in (*cur.splits[e], *extra))
        return shape[e] % n == 0

    for d in range(rank):
        have = cur.splits[d]
        for k in range(len(have), 0, -1):
            tail, head = tuple(have[-k:]), tuple(have[:-k])
            if not allow_a2a:
                continue
            for e in range(rank):
                if e != d and divides(e, tail):
                    splits = list(cur.splits)
                    splits[d], splits[e] = head, tuple(cur.splits[e]) + tail
                    yield Step(ALL_TO_ALL.kind, tail, cur, _with(cur, splits), split_dim=e,
                               concat_dim=d)
    for d in range(rank):
        have = cur.splits[d]
        for k in range(len(have), 0, -1):
            if not set(have[-k:]) <= set(src.splits[d]):
                continue   # never undo a step of the plan (a scatter gathered back, say)
            splits = list(cur.splits)
            splits[d] = tuple(have[:-k])
            yield Step(ALL_GATHER.kind, tuple(have[-k:]), cur, _with(cur, splits), dim=d)
    reduce = tuple(a for a in cur.partial if a not in dst.partial)
    if reduce:
        for n in range(len(reduce), 0, -1):
            for run in itertools.permutations(reduce, n):
                rest = tuple(a for a in cur.partial if a not in run)
                for d in range(rank):
                    if divides(d, run):
                        splits = list(cur.splits)
                        splits[d] = tuple(cur.splits[d]) + run
                        yield Step(REDUCE_SCATTER.kind, run, cur, _with(cur, splits, rest), dim=d)
        rest = tuple(a for a in cur.partial if a in dst.partial)
        yield Step(ALL_REDUCE.kind, reduce, cur, _with(cur, list(cur.splits), rest))
    for a in axes_in_play:
        if a in used or a in cur.partial:
            continue
        for d in range(rank):
            if a in dst.splits[d] and divides(d, (a,)):
                splits = list(cur.splits)
                splits[d] = tuple(cur.splits[d]) + (a,)
                yield Step(ALL_SLICE.kind, (a,), cur, _with(cur, splits), dim=d)


def _key(s: Spec) -> tuple:
    return (s.splits, frozenset(s.partial))


def plan_reshard(src: Spec, dst: Spec, shape: Sequence[int], total: int,
                 sizes: Mapping[str, int], cost: CostFn, allow_a2a: bool = True) -> Plan | None:
    """The cheapest plan from `src` to `dst` for a value of `shape` and `total` bytes (None when
    none exists, e.g. `dst` pends over an axis `src` does not, or the search budget ran out)."""
    if not set(dst.partial) <= set(src.partial):
        return None
    play = tuple(sorted({a for s in (src, dst) for d in s.splits for a in d} | set(src.partial)))
    goal = _key(dst)
    tick = itertools.count()
    # entries: (rounded seconds, sent, steps that communicate, tick), seconds, spec, path
    heap: list[tuple[tuple[float, float, int, int], float, Spec, tuple[Step, ...]]] = [
        ((0.0, 0.0, 0, next(tick)), 0.0, src, ())]
    done: set[tuple] = set()
    while heap:
        (_, sent, ncomm, _), sec, cur, path = heapq.heappop(heap)
        k = _key(cur)
        if k in done:
            continue
        if k == goal:
            if path and path[-1].dst != dst:   # the same pending axes, in dst's order
                path = (*path[:-1], dataclasses.replace(path[-1], dst=dst))
            return Plan(path, sec, sent)
        done.add(k)
        if len(done) > MAX_STATES:
            return _gather_reduce_slice(src, dst, total, sizes, cost)
        for step in _steps(src, cur, dst, shape, sizes, play, allow_a2a):
            if _key(step.dst) in done:
                continue
            if not step.collective.communicates:
                t, b, c = 0.0, 0.0, 0
            else:
                (t, b), c = cost(step.kind, step.axes, payload(step, total, sizes)), 1
            key = (round(sec + t, 12), sent + b, ncomm + c, next(tick))
            heapq.heappush(heap, (key, sec + t, step.dst, (*path, step)))
    return None


def _gather_reduce_slice(src: Spec, dst: Spec, total: int, sizes: Mapping[str, int],
                         cost: CostFn) -> Plan:
    """Always valid, rarely cheapest: per dimension gather what follows the prefix `dst` keeps,
    all_reduce the pending axes `dst` does not keep, then slice what `dst` adds."""
    steps: list[Step] = []
    cur = src
    for d, (have, want) in enumerate(zip(src.splits, dst.splits, strict=True)):
        p = 0
        while p < min(len(have), len(want)) and have[p] == want[p]:
            p += 1
        if have[p:]:
            splits = list(cur.splits)
            splits[d] = tuple(have[:p])
            steps.append(Step(ALL_GATHER.kind, tuple(have[p:]), cur, _with(cur, splits), dim=d))
            cur = steps[-1].dst
    reduce = tuple(a for a in cur.partial if a not in dst.partial)
    if reduce:
        rest = tuple(a for a in cur.partial if a in dst.partial)
        steps.append(Step(ALL_REDUCE.kind, reduce, cur, _with(cur, list(cur.splits), rest)))
        cur = steps[-1].dst
    for d, want in enumerate(dst.splits):
        for a in want[len(cur.splits[d]):]:
            splits = list(cur.splits)
            splits[d] = (*cur.splits[d], a)
            steps.append(Step(ALL_SLICE.kind, (a,), cur, _with(cur, splits), dim=d))
            cur = steps[-1].dst
    if steps:
        steps[-1] = dataclasses.replace(steps[-1], dst=dst)
    sec = sent = 0.0
    for st in steps:
        if st.collective.communicates:
            t, b = cost(st.kind, st.axes, payload(st, total, sizes))
            sec, sent = sec + t, sent + b
    return Plan(tuple(steps), sec, sent)


def plan_stage_move(src: Spec, dst: Spec, shape: Sequence[int], total: int,
                    sizes: Mapping[str, int], cost: CostFn, axis: str) -> Plan | None:
    """`plan_reshard`'s plan from `src` to `dst` with one collective_permute over stage axis
    `axis` where the local block is smallest (see the module docstring); None when no plan."""
    plan = plan_reshard(src, dst, shape, total, sizes, cost)
    if plan is None:
        return None
    points = [src, *(st.dst for st in plan.steps)]
    at = min(range(len(points)), key=lambda k: (local_bytes(total, points[k], sizes), k))
    t, b = cost(COLLECTIVE_PERMUTE.kind, (axis,), local_bytes(total, points[at], sizes))
    move = Step(COLLECTIVE_PERMUTE.kind, (axis,), points[at], points[at])
    return Plan((*plan.steps[:at], move, *plan.steps[at:]), plan.seconds + t, plan.sent + b)
