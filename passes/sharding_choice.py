"""How `propagate-sharding` chooses between placements when operands disagree: by modeled cost.

When an op's operands break its sharding rule, every placement that satisfies it is a candidate:
- each placed operand as the leader the others follow (`ShardingRule.follow`);
- the operands with some of their splits dropped, fewest first (a breadth-first search that
  removes the minor-most axis of one operand's dimension at a time and stops at the first
  placements the rule accepts): this keeps the splits the operands agree on, such as the batch
  split of `matmul(p [[data], [model], []], v [[data], [], [model]])`, where following a leader
  cannot (M and N would both be on model) and dropping splits from the end replicates everything.
Each candidate costs the time of the reshards it needs on the target (the very plans
`insert-collectives` will emit, `analysis.reshard_plan`) plus the op's compute time on the local
shards (its op-table FLOPs over the target's FLOP/s); the cheapest wins, ties to fewer dropped
splits, then to the order above. Unplaced arguments cost nothing to place (inputs are
distributed, not communicated).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lamina.analysis.comm_cost import estimate, levels_of
from lamina.analysis.reshard_plan import plan_reshard
from lamina.analysis.sizes import type_bytes
from lamina.ir.core.shapes import TensorInfo
from lamina.ir.mesh.placement import Mesh
from lamina.ir.mesh.sharding import Spec
from lamina.ir.mesh.target import Target
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from xdsl.dialects.builtin import TensorType
from xdsl.ir import SSAValue

MAX_DROP_STATES = 256      # placements the drop search looks at, per op


@dataclass
class Candidate:
    specs: list[Spec | None]
    label: str
    dropped: int = 0
    comm: float = 0.0      # seconds
    compute: float = 0.0   # seconds

    @property
    def seconds(self) -> float:
        return self.comm + self.compute

    def describe(self) -> str:
        return (f"{self.label}: {us(self.seconds)} (communication {us(self.comm)} + compute "
                f"{us(self.compute)})")


def us(seconds: float) -> str:
    """Microseconds to 3 significant digits: compute times are often nanoseconds."""
    return f"{seconds * 1e6:.3g} us"


class Coster:
    """Prices candidates on one target and mesh; plans are cached per (value, from, to)."""

    def __init__(self, target: Target, mesh: Mesh):
        self.target = target
        self.mesh = mesh
        self.sizes = dict(zip(mesh.axes, mesh.sizes, strict=True))
        self._plans: dict[tuple[SSAValue, Spec, Spec], float] = {}

    def reshard_seconds(self, v: SSAValue, cur: Spec, new: Spec) -> float:
        key = (v, cur, new)
        if key not in self._plans:
            t = v.type
            assert isinstance(t, TensorType)

            def cost(kind: str, axes: tuple[str, ...], b: float) -> tuple[float, float]:
                e = estimate(kind, b, levels_of(self.target, self.mesh, axes), self.target)
                return e.seconds, e.sent

            plan = plan_reshard(cur, new, t.get_shape(), type_bytes(t), self.sizes, cost)
            self._plans[key] = math.inf if plan is None else plan.seconds
        return self._plans[key]

    def local(self, info: TensorInfo, s: Spec) -> TensorInfo:
        shape = tuple(n // math.prod(self.sizes[a] for a in axes)
                      for n, axes in zip(info.shape, s.splits, strict=True))
        return TensorInfo(shape, info.dtype)

    def choose(self, op: LaminaOp, cands: list[Candidate], slots: Sequence[SSAValue | None],
               present: list[int], current: Callable[[SSAValue], Spec | None],
               result: Callable[[list[Spec | None]], Spec | None]) -> tuple[Candidate, str]:
        """The cheapest of `cands` (duplicates dropped) and the explain line naming the others.
        `current(v)` is v's placement now (None: an unplaced argument, free to place)."""
        unique: dict[tuple[Spec | None, ...], Candidate] = {}
        for c in cands:
            unique.setdefault(tuple(c.specs), c)
        options = list(unique.values())
        for c in options:
            for i in present:
                v, new = slots[i], c.specs[i]
                assert v is not None and new is not None
                cur = current(v)
                if cur is not None and cur != new:
                    c.comm += self.reshard_seconds(v, cur, new)
            res = result(c.specs)
            assert res is not None
            c.compute = self.compute_seconds(op, c.specs, res)
        order = sorted(range(len(options)),
                       key=lambda k: (round(options[k].seconds, 12), options[k].dropped, k))
        best = options[order[0]]
        others = [options[k].describe() for k in order[1:]]
        return best, (f"operands of {op.name} disagree under the {op.info.sharding.name} rule: "
                      f"{best.describe()}" + (f"; alternatives: {'; '.join(others)}" if others
                                              else ""))

    def compute_seconds(self, op: LaminaOp, specs: Sequence[Spec | None], result: Spec) -> float:
        infos = [None if i is None or s is None else self.local(i, s)
                 for i, s in zip(op.operand_infos(), specs, strict=True)]
        res = self.local(tensor_info(op.results[0].type), result)
        return op.info.flops(infos, res, op.attr_values()) / self.target.flops


def drop_candidates(specs: list[Spec | None], present: list[int],
                    accepts: Callable[[list[Spec | None]], bool]) -> list[Candidate]:
    """The placements the rule accepts with the fewest splits dropped (see the module docstring),
    each labelled with what it drops."""
    start = tuple(specs)
    seen = {start}
    frontier: list[tuple[tuple[Spec | None, ...], tuple[str, ...]]] = [(start, ())]
    found: list[Candidate] = []
    while frontier and not found and len(seen) < MAX_DROP_STATES:
        nxt: list[tuple[tuple[Spec | None, ...], tuple[str, ...]]] = []
        for state, what in frontier:
            for i in present:
                s = state[i]
                assert s is not None
                for d, axes in enumerate(s.splits):
                    if not axes:
                        continue
                    splits = list(s.splits)
                    splits[d] = tuple(axes[:-1])
                    trial = list(state)
                    trial[i] = Spec(tuple(splits), s.partial, s.partial_kind)
                    key = tuple(trial)
                    if key in seen:
                        continue
                    seen.add(key)
                    did = (*what, f"[{axes[-1]}] of operand {i} dimension {d}")
                    if accepts(trial):
                        found.append(Candidate(trial, "drop " + ", ".join(did), len(did)))
                    else:
                        nxt.append((key, did))
        frontier = nxt
    return found


def drop_from_end(specs: list[Spec | None], shapes: Sequence[tuple[int, ...] | None],
                  present: list[int], accepts: Callable[[list[Spec | None]], bool]
                  ) -> list[Spec | None]:
    """The last resort (rule 5): the other operands replicated, the main operand's splits dropped
    from its last dimension backwards until the rule holds (replicated operands always do)."""
    trial = [None if s is None else Spec(s.splits) for s in specs]
    for i in present[1:]:
        shape = shapes[i]
        assert shape is not None
        trial[i] = Spec.replicated(len(shape))
    x = trial[0]
    assert x is not None
    splits = list(x.splits)
    d = len(splits) - 1
    while not accepts(trial) and d >= 0:
        splits[d] = ()
        trial[0] = Spec(tuple(splits))
        d -= 1
    return trial
