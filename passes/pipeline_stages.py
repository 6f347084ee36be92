"""`pipeline-stages`: cut a gradient step into P pipeline stages and make its micro-batch schedule
explicit in the IR (issue 28).

    -p 'derive-backward{data=x,y},pipeline-stages{stages=4 micro-batches=8 schedule=1f1b}'
    -p 'derive-backward{data=x,y},pipeline-stages{stages=4 micro-batches=8 schedule=interleaved virtual=2}'

Input: a gradient function as derive-backward makes it (`lamina.gradients`, one loss seed), which
the pass first splits into `micro-batches` = M micro-batches with accumulate-gradients' own
rewrite; or a function accumulate-gradients already split (one `lamina.loss_seed` per micro-batch:
then M is that count, and the option must agree or be left out); or a step of either after
append-optimizer; or a forward (no seed: M must be 1). Placed or not: an unplaced program gets
`lamina.mesh @pp [AXIS = P]`, a placed one has AXIS (of size P) appended to its mesh, every other
axis and every split kept.

How the IR says it (MPMD stages in the type): every value's placement names its stage,
`#lamina.place<@m, [[data], []], stage = pp[1]>`; an op runs on the stage of its result (the
verifier refuses an op reading another stage's value), and a value crosses by one
`lamina.collective_permute` per (value, stage that reads it), placed before its first reader there
(an op that reads nothing, a constant, is copied onto that stage instead). The schedule is the
order of the ops (a global order that is each stage's local order of micro-steps) plus
`lamina.micro_step = "F3"` / `"B3"` on the ops of micro-batch 3's forward / backward ("F3.1":
micro-batch 3 through the stage's model chunk 1, where V > 1) and the function attribute
`lamina.pipeline = {axis = "pp", stages = 4, micro_batches = 8, schedule = "1f1b"}` (interleaved
adds `virtual = V`), which the timeline and `--stats-json` read.

The cut: the forward ops of micro-batch 0 in program order are split into V*P consecutive runs,
the model chunks (V = `virtual`, 1 but for interleaved), the same for every micro-batch (op j of
each micro-batch's forward in the same chunk); chunk c runs on stage c % P, so with V > 1 the
activations wrap from the last stage back to stage 0 (one collective_permute, like any other).
`split=auto`: cut j is chosen among the positions whose modeled compute before it (per forward
op, `lamina.analysis.step_cost.op_seconds` on `target` of it and of the backward ops that
differentiate it) is within an eighth of a chunk of j/(V*P) of the total,
the one whose crossing bytes (forward values made before it and read after it) are smallest,
ties to the most balanced; `split=ops`: before each op marked `lamina.stage_boundary` (V*P-1 of
them). The loss seed runs in the last chunk; a backward op in the chunk of the forward op it
differentiates (derive-backward gives it that op's location); one whose location names no
forward op of its micro-batch runs in the latest chunk among the forward values it reads, or
else the earliest among its other operands.
Ops that read only arguments and constants (slices of the batch, transposes of a weight,
constants) run in the chunk of their first reader; ops combining micro-batches (the gradient
sums, the loss, the optimizer update) in the chunk of their first staged operand. An argument
lives on the stage of its first reader.

The order: each stage's local sequence of micro-steps (`local_order`) is the schedule's, `gpipe`
all M forwards then all M backwards; `1f1b` P-s-1 warm-up forwards on stage s, then one forward
and one backward in turn, then the remaining backwards; `interleaved` Megatron-LM's
(`forward_backward_pipelining_with_interleaving`): the stage's forward micro-step i
(0 <= i < M*V) is its chunk (i // P) % V of micro-batch (i // (P*V)) * P + i % P, backward i the
same with the chunk V-1-(i // P) % V, min((P-s-1)*2 + (V-1)*P, M*V) warm-up forwards, then one
forward and one backward in turn, then the rest (V = 1 is 1f1b's order). The micro-steps are
timed on unit steps (`step_times`: one at a time per stage; F(c, k) after F(c-1, k), B(c, k)
after B(c+1, k), the last chunk's B(k) after its F(k)) and the ops listed in that order (ties:
the stage, then the original order), keeping every operand before its use. With equal chunks
and free transfers each stage idles 2(P-1) unit steps and works 2*V*M: the bubble is
(P-1)/(V*M+P-1) (`bubble_formula`; GPipe's and 1F1B's with V = 1), and stage s holds at most
min(warm-up + 1, V*M) chunk steps of saved activations (`held_steps`: 1F1B P-s, interleaved on
stage 0 (P-1)*2 + (V-1)*P + 1, Megatron's figure). Refusals, one located diagnostic each:
stages < 1, more chunks than forward ops, an unknown schedule or split, a boundary count that is
not V*P-1, virtual > 1 without schedule=interleaved, interleaved with M not a multiple of P
(Megatron's order runs the micro-batches in groups of P), M disagreeing with an existing split,
M > 1 on a forward or on a step without micro-batches, and whatever accumulate-gradients refuses
(M not dividing the batch).
With `--explain`: each cut and its crossing bytes, each stage's modeled compute, the schedule.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

from lamina.analysis.placed import first_unplaced, placed_mesh
from lamina.analysis.sizes import fmt_bytes, local_bytes, type_bytes
from lamina.analysis.step_cost import op_seconds
from lamina.analysis.timeline import schedule
from lamina.ir.buffers.updates import GRADIENTS_ATTR, roles_of
from lamina.ir.core.diagnostics import error_at
from lamina.ir.mesh.collective_kinds import SUM
from lamina.ir.mesh.collectives import CollectivePermuteOp as PermuteOp
from lamina.ir.mesh.collectives import PlacementOp, build, with_stage
from lamina.ir.mesh.placement import MeshOp, PlaceAttr, place_of, stage_devices, stage_of
from lamina.ir.mesh.target import Target, load_target
from lamina.passes.accumulate_gradients import AccumulateGradients, accumulate
from lamina.passes.derive_backward import SEED_ATTR
from lamina.passes.explain import ExplainLog, LaminaPass
from xdsl.context import Context
from xdsl.dialects.builtin import (
    DenseArrayBase,
    DictionaryAttr,
    FunctionType,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    UnknownLoc,
    i64,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue

PASS = "pipeline-stages"
PIPELINE_ATTR = "lamina.pipeline"
MICRO_STEP_ATTR = "lamina.micro_step"
BOUNDARY_ATTR = "lamina.stage_boundary"
SCHEDULES = ("gpipe", "1f1b", "interleaved")
MESH_NAME = "pp"

Stage = tuple[str, int]


@dataclass
class _Roles:
    """What each op of the function is: micro-batch k's forward ("F") or backward ("B"), a
    free op (reads only arguments and free ops), or a tail op (combines micro-batches)."""

    micro: dict[Operation, tuple[str, int]] = field(default_factory=dict)
    free: set[Operation] = field(default_factory=set)
    tail: set[Operation] = field(default_factory=set)

    def forward(self, k: int, ops: Sequence[Operation]) -> list[Operation]:
        return [op for op in ops if self.micro.get(op) == ("F", k)]


def _reads_data(op: Operation, data: set[SSAValue]) -> bool:
    return any(v in data for v in op.operands)


def roles(ops: Sequence[Operation], seeds: list[int], data: set[SSAValue]) -> _Roles:
    """The role of every op (see `_Roles`), from the seeds' positions and the dataflow: an op is
    of micro-batch k when it reads the batch or micro-batch k's values only and lies in its part
    of the program (from its first read of the batch to the next micro-batch's), forward before
    k's loss seed and backward from it."""
    starts = [0]
    for k in range(1, len(seeds)):
        starts.append(next((i for i in range(seeds[k - 1] + 1, seeds[k])
                            if _reads_data(ops[i], data)), seeds[k - 1] + 1))
    r = _Roles()
    made: dict[SSAValue, Operation] = {}
    for i, op in enumerate(ops):
        if isinstance(op, ReturnOp):
            continue
        k = max((j for j, s in enumerate(starts) if s <= i), default=0)
        phase = "B" if seeds and i >= seeds[k] else "F"
        micro = [made[v] for v in op.operands if v in made and made[v] not in r.free]
        if op.attributes.get(SEED_ATTR) is not None:
            r.micro[op] = ("B", k)
        elif not micro and not _reads_data(op, data):
            r.free.add(op)
        elif all(p not in r.tail and r.micro[p][1] == k for p in micro):
            r.micro[op] = (phase, k)
        else:
            r.tail.add(op)
        made.update(dict.fromkeys(op.results, op))
    return r


def data_arguments(func: FuncOp) -> set[SSAValue]:
    """The batch: the arguments neither differentiated (`lamina.gradients`) nor given a role."""
    attr = func.attributes.get(GRADIENTS_ATTR)
    wrt = set(attr.get_values()) if isinstance(attr, DenseArrayBase) else set()
    roles_ = roles_of(func)
    return {a for i, a in enumerate(func.body.block.args) if i not in wrt and i not in roles_}


def _crossing(fwd: Sequence[Operation], cut: int) -> int:
    """Bytes of the forward values made before position `cut` and read at or after it."""
    later = set(fwd[cut:])
    return sum(type_bytes(r.type) for op in fwd[:cut] for r in op.results
               if any(u.operation in later for u in r.uses))


def auto_cuts(fwd: Sequence[Operation], seconds: Sequence[float], stages: int) -> list[int]:
    """P-1 cut positions (see the module docstring: balanced compute, fewest crossing bytes)."""
    total = sum(seconds)
    before = [sum(seconds[:i]) for i in range(len(fwd) + 1)]
    cuts: list[int] = []
    for j in range(1, stages):
        low = (cuts[-1] if cuts else 0) + 1
        high = len(fwd) - (stages - j)
        want = total * j / stages
        window = [c for c in range(low, high + 1) if abs(before[c] - want) <= total / (8 * stages)]
        pick = min(window or range(low, high + 1),
                   key=lambda c: (_crossing(fwd, c) if window else 0, abs(before[c] - want), c))
        cuts.append(pick)
    return cuts


class MicroStep(NamedTuple):
    """One micro-step of a stage: phase "F" or "B" of micro-batch `micro` through the stage's
    model chunk `chunk` (0 .. V-1, Megatron's model chunk id: global chunk chunk * P + stage)."""

    phase: str
    micro: int
    chunk: int = 0

    def name(self, virtual: int) -> str:
        """Its `lamina.micro_step`: "F3" with one chunk per stage, "F3.1" (micro-batch 3,
        chunk 1) with virtual > 1."""
        return f"{self.phase}{self.micro}" + (f".{self.chunk}" if virtual > 1 else "")


def warm_up(stages: int, micro: int, virtual: int, s: int) -> int:
    """Stage s's warm-up forwards before its first backward (1F1B and interleaved): P-s-1 with
    one chunk per stage, Megatron's (P-s-1)*2 + (V-1)*P with V > 1, at most all M*V."""
    want = stages - s - 1 if virtual == 1 else (stages - s - 1) * 2 + (virtual - 1) * stages
    return min(want, micro * virtual)


def _nth(phase: str, i: int, stages: int, virtual: int) -> MicroStep:
    """A stage's i-th forward (backward) micro-step in Megatron's interleaved order: groups of
    P micro-batches through chunk 0, 1, .., V-1 (backward: V-1 .. 0), then the next P."""
    v = (i // stages) % virtual
    k = (i // (stages * virtual)) * stages + i % stages
    return MicroStep(phase, k, v if phase == "F" else virtual - 1 - v)


def local_order(schedule: str, stages: int, micro: int, s: int, virtual: int = 1
                ) -> list[MicroStep]:
    """Stage s's micro-steps in the order the schedule runs them (module docstring); 1f1b is
    interleaved with V = 1."""
    if schedule == "gpipe":
        return [MicroStep("F", k) for k in range(micro)] + [MicroStep("B", k) for k in range(micro)]
    n, warm = micro * virtual, warm_up(stages, micro, virtual, s)
    out = [_nth("F", i, stages, virtual) for i in range(warm)]
    for j in range(n - warm):
        out += [_nth("F", warm + j, stages, virtual), _nth("B", j, stages, virtual)]
    return out + [_nth("B", j, stages, virtual) for j in range(n - warm, n)]


StepKey = tuple[int, str, int]   # (global chunk, phase, micro-batch)


def _after(key: StepKey, chunks: int) -> StepKey | None:
    """The micro-step `key` waits for: F(c, k) for F(c-1, k), B(c, k) for B(c+1, k), the last
    chunk's B(k) for its F(k); micro-batch k's first forward for nothing."""
    c, phase, k = key
    if phase == "F":
        return None if c == 0 else (c - 1, "F", k)
    return (c, "F", k) if c == chunks - 1 else (c + 1, "B", k)


def step_times(schedule: str, stages: int, micro: int, virtual: int = 1) -> dict[StepKey, int]:
    """When each (global chunk, phase, micro-batch) starts, on unit micro-steps: each stage
    runs its local order one micro-step at a time, each as soon as the one it waits for ended."""
    orders = [local_order(schedule, stages, micro, s, virtual) for s in range(stages)]
    done: dict[StepKey, int] = {}
    start: dict[StepKey, int] = {}
    pos, free = [0] * stages, [0] * stages
    while any(pos[s] < len(orders[s]) for s in range(stages)):
        moved = False
        for s in range(stages):
            if pos[s] >= len(orders[s]):
                continue
            step = orders[s][pos[s]]
            key = (step.chunk * stages + s, step.phase, step.micro)
            dep = _after(key, stages * virtual)
            if dep is not None and dep not in done:
                continue
            t = max(free[s], done[dep] if dep is not None else 0)
            start[key] = t
            done[key] = free[s] = t + 1
            pos[s] += 1
            moved = True
        assert moved, "pipeline schedule deadlocked"
    return start


def bubble_formula(stages: int, micro: int, virtual: int = 1) -> float:
    """The modeled bubble with equal chunks and free transfers: (P-1)/(V*M + P-1). Every
    stage idles (P-1) chunk micro-steps of each phase (the warm-up's ramp and the cool-down's)
    and is busy V*M of them; GPipe and 1F1B are V = 1."""
    return (stages - 1) / (virtual * micro + stages - 1)


def held_steps(schedule: str, stages: int, micro: int, s: int, virtual: int = 1) -> int:
    """Chunk micro-steps of saved activations stage s holds at its peak: GPipe all M; 1F1B
    and interleaved its warm-up forwards and the first steady forward, min(warm + 1, M*V)."""
    if schedule == "gpipe":
        return micro
    return min(warm_up(stages, micro, virtual, s) + 1, micro * virtual)


@dataclass(frozen=True)
class PipelineStages(LaminaPass):
    """Cut a step into pipeline stages and list its ops in the micro-batch schedule."""

    name: ClassVar[str] = PASS
    minimums: ClassVar[dict[str, int]] = {"stages": 1, "micro_batches": 0, "virtual": 0}
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"schedule": SCHEDULES,
                                                     "split": ("auto", "ops")}
    stages: int = 2
    micro_batches: int = 0      # 0: the split accumulate-gradients made, or 1
    schedule: str = "1f1b"
    virtual: int = 0            # model chunks per stage; 0: 2 with interleaved, else 1
    axis: str = "stage"
    split: str = "auto"
    func: str = ""
    target: str = "h100-node"
    data: str = ""

    def run(self, ctx: Context, module: ModuleOp, log: ExplainLog | None) -> None:
        funcs = [op for op in module.ops if isinstance(op, FuncOp)]
        chosen = [f for f in funcs if f.sym_name.data == self.func] if self.func else \
            [f for f in funcs if GRADIENTS_ATTR in f.attributes] or funcs[-1:]
        if not chosen:
            raise error_at(funcs[0] if funcs else None,
                           f"{PASS}: no function named '{self.func}' in the module")
        for f in chosen:
            _Staging(self, module, f, log).run()


class _Staging:
    """One function's staging (the pass's steps, in order)."""

    def __init__(self, p: PipelineStages, module: ModuleOp, func: FuncOp,
                 log: ExplainLog | None) -> None:
        self.p, self.module, self.func, self.log = p, module, func, log
        self.P = p.stages
        self.V = p.virtual or (2 if p.schedule == "interleaved" else 1)

    def run(self) -> None:
        p, func = self.p, self.func
        if self.V > 1 and p.schedule != "interleaved":
            raise error_at(func, f"{PASS}: virtual={self.V} (model chunks per stage) needs "
                           f"schedule=interleaved; {p.schedule} runs one chunk per stage")
        if (gap := first_unplaced(func)) is not None:   # stages would pin them replicated
            raise error_at(gap[0], f"{PASS}: @{func.sym_name.data} is partly placed ({gap[1]}): "
                           "place it whole first (propagate-sharding, insert-collectives), then "
                           "run pipeline-stages, or run pipeline-stages before placing anything")
        micro = self._micro_batches()
        if p.schedule == "interleaved" and micro % self.P:
            raise error_at(func, f"{PASS}: schedule=interleaved needs the micro-batches to be a "
                           f"multiple of the stages (Megatron's interleaved order runs them in "
                           f"groups of P): micro-batches={micro}, stages={self.P}")
        ops = list(func.body.block.ops)
        seeds = [i for i, op in enumerate(ops) if op.attributes.get(SEED_ATTR) is not None]
        data = data_arguments(func)
        r = roles(ops, seeds, data)
        fwd0 = r.forward(0, ops)
        cuts = self._cuts(fwd0, [op for op in ops if r.micro.get(op) == ("B", 0)])
        crossing = [_crossing(fwd0, c) for c in cuts]   # before the permutes take the uses
        chunk = self._chunks(ops, r, micro, cuts)
        stage = {op: c % self.P for op, c in chunk.items()}
        order = self._order(ops, r, chunk, micro)
        mesh, stage_axis = self._mesh()
        self._retype(order, chunk, mesh, stage_axis, r)
        self._permutes(stage_axis)
        attrs: dict[str, Attribute] = {
            "axis": StringAttr(stage_axis), "stages": IntegerAttr(self.P, i64),
            "micro_batches": IntegerAttr(micro, i64), "schedule": StringAttr(p.schedule)}
        if p.schedule == "interleaved":
            attrs["virtual"] = IntegerAttr(self.V, i64)
        func.attributes[PIPELINE_ATTR] = DictionaryAttr(attrs)
        if self.log is not None:
            self._explain(fwd0, cuts, crossing, stage, micro)

    # -- micro-batches --
    def _micro_batches(self) -> int:
        p, func = self.p, self.func
        seeds = sum(1 for op in func.body.block.ops if op.attributes.get(SEED_ATTR) is not None)
        if seeds > 1:
            if p.micro_batches not in (0, seeds):
                raise error_at(func, f"{PASS}: micro-batches={p.micro_batches}, but "
                               f"accumulate-gradients already split @{func.sym_name.data} into "
                               f"{seeds} micro-batches (leave the option out or say {seeds})")
            return seeds
        want = max(p.micro_batches, 1)
        if want == 1:
            return 1
        if seeds == 0:
            raise error_at(func, f"{PASS}: micro-batches={want} on a forward (no loss seed): "
                           "micro-batches need a gradient step; run derive-backward first")
        if GRADIENTS_ATTR not in func.attributes:
            raise error_at(func, f"{PASS}: micro-batches={want} on a step without micro-batches: "
                           "run accumulate-gradients before append-optimizer, or this pass "
                           "before append-optimizer")
        accumulate(func, AccumulateGradients(micro_batches=want, data=p.data), None)
        return want

    # -- the cut --
    def _cuts(self, fwd: list[Operation], back: list[Operation]) -> list[int]:
        """The V*P-1 cut positions in micro-batch 0's forward `fwd` (`back`: its backward)."""
        n = self.P * self.V
        what = f"stages={self.P}" + (f" x virtual={self.V}" if self.V > 1 else "")
        if len(fwd) < n:
            raise error_at(self.func, f"{PASS}: {what}, but the forward of a micro-batch "
                           f"has only {len(fwd)} ops to cut")
        if self.p.split == "ops":
            cuts = [i for i, op in enumerate(fwd) if op.attributes.get(BOUNDARY_ATTR) is not None
                    and i > 0]
            if len(cuts) != n - 1:
                raise error_at(self.func, f"{PASS}: split=ops with {what} needs {n - 1} ops "
                               f"marked {BOUNDARY_ATTR}, found {len(cuts)}")
            return cuts
        return auto_cuts(fwd, self._forward_and_backward_seconds(fwd, back), n)

    def _forward_and_backward_seconds(self, fwd: list[Operation], back: list[Operation]
                                      ) -> list[float]:
        """Each forward op's modeled seconds plus those of the backward ops that differentiate
        it (derive-backward gives them its location): what its stage will run per micro-batch."""
        target = load_target(self.p.target)
        by_loc: dict[Attribute, float] = {}
        for op in back:
            if not isinstance(op.location, UnknownLoc):
                by_loc[op.location] = by_loc.get(op.location, 0.0) + \
                    op_seconds(op, target, self.func)
        seen: set[Attribute] = set()
        out: list[float] = []
        for op in fwd:
            t = op_seconds(op, target, self.func)
            if op.location not in seen and op.location in by_loc:
                seen.add(op.location)
                t += by_loc[op.location]
            out.append(t)
        return out

    def _chunks(self, ops: list[Operation], r: _Roles, micro: int, cuts: list[int]
                ) -> dict[Operation, int]:
        """Each op's global model chunk (its stage: chunk % P), as the module docstring says."""
        chunk: dict[Operation, int] = {}
        index = {op: i for i, op in enumerate(ops)}
        by_loc: dict[int, dict[Attribute, int]] = {}
        n, last = len(r.forward(0, ops)), self.P * self.V - 1
        for k in range(micro):
            fwd = r.forward(k, ops)
            if len(fwd) != n:
                raise error_at(self.func, f"{PASS}: micro-batch {k} has {len(fwd)} forward ops, "
                               f"micro-batch 0 has {n}; the micro-batches must be alike")
            locs: dict[Attribute, int] = {}
            for j, op in enumerate(fwd):
                chunk[op] = sum(1 for c in cuts if j >= c)
                locs.setdefault(op.location, chunk[op]) if not isinstance(op.location, UnknownLoc) \
                    else None
            by_loc[k] = locs
        producer: dict[SSAValue, Operation] = {v: op for op in ops for v in op.results}
        for op in ops:
            role = r.micro.get(op)
            if role is None or role[0] == "F":
                continue
            c = last if op.attributes.get(SEED_ATTR) is not None else \
                by_loc[role[1]].get(op.location)
            if c is None:
                fwd_in = [chunk[producer[v]] for v in op.operands
                          if v in producer and r.micro.get(producer[v], ("", -1))[0] == "F"]
                other = [chunk[producer[v]] for v in op.operands
                         if v in producer and producer[v] in chunk]
                c = max(fwd_in) if fwd_in else min(other) if other else last
            chunk[op] = c
        for op in ops:
            if op in r.tail:
                staged = [chunk[producer[v]] for v in op.operands
                          if v in producer and producer[v] in chunk]
                chunk[op] = staged[0] if staged else last
        for op in reversed(ops):   # free ops: the chunk of their first reader
            if op in r.free:
                readers = [u.operation for v in op.results for u in v.uses
                           if u.operation in chunk]
                first = min(readers, key=index.__getitem__) if readers else None
                chunk[op] = chunk[first] if first is not None else 0
        return chunk

    # -- the order --
    def _order(self, ops: list[Operation], r: _Roles, chunk: dict[Operation, int],
               micro: int) -> list[Operation]:
        """The ops in the schedule's order: by their micro-step's start (`step_times`), then
        stage, then the original order, each after its operands."""
        times = step_times(self.p.schedule, self.P, micro, self.V)
        index = {op: i for i, op in enumerate(ops)}
        key: dict[Operation, tuple[float, int]] = {}
        producer: dict[SSAValue, Operation] = {v: op for op in ops for v in op.results}
        for op in ops:
            role = r.micro.get(op)
            if role is not None:
                key[op] = (float(times[(chunk[op], role[0], role[1])]), chunk[op] % self.P)
            elif op in r.tail or isinstance(op, ReturnOp):
                # after the micro-step it follows, not inside it: an accumulation add there
                # would delay the values the micro-step sends to the next stage
                t, s = max([key[producer[v]] for v in op.operands
                            if v in producer and producer[v] in key], default=(0.0, 0))
                key[op] = (math.floor(t) + 0.5, s)
        for op in reversed(ops):
            if op in r.free:
                readers = [u.operation for v in op.results for u in v.uses if u.operation in key]
                key[op] = min((key[u] for u in readers), default=(-1.0, 0))
        deps = {op: {producer[v] for v in op.operands if v in producer} for op in ops}
        users: dict[Operation, list[Operation]] = {op: [] for op in ops}
        for op, ds in deps.items():
            for d in ds:
                users[d].append(op)
        waiting = {op: len(ds) for op, ds in deps.items()}
        ret = ops[-1]
        assert isinstance(ret, ReturnOp)
        waiting[ret] += 1   # the return goes last, whatever its key
        heap = [(key[op], index[op], op) for op in ops if not waiting[op]]
        heapq.heapify(heap)
        order: list[Operation] = []
        while heap:
            _, _, op = heapq.heappop(heap)
            order.append(op)
            for u in users[op]:
                waiting[u] -= 1
                if not waiting[u]:
                    heapq.heappush(heap, (key[u], index[u], u))
        assert len(order) == len(ops) - 1, "the function's ops are not a DAG"
        return [*order, ret]

    # -- the mesh and the types --
    def _mesh(self) -> tuple[str, str]:
        """The mesh the staged program runs on (existing + the stage axis, or a new one)."""
        axis = self.p.axis
        for op in self.module.ops:
            if isinstance(op, MeshOp):
                m = op.mesh
                if axis in m.axes:
                    raise error_at(op, f"{PASS}: mesh @{m.name} already has an axis '{axis}'; "
                                   "name the stage axis with axis=")
                new = MeshOp(m.name, [*zip(m.axes, m.sizes, strict=True), (axis, self.P)])
                new.location = op.location
                self.module.body.block.insert_op_before(new, op)
                op.detach()
                op.erase()
                return m.name, axis
        new = MeshOp(MESH_NAME, [(axis, self.P)])
        first = self.module.body.block.first_op
        if first is None:
            self.module.body.block.add_op(new)
        else:
            self.module.body.block.insert_op_before(new, first)
        return MESH_NAME, axis

    def _retype(self, order: list[Operation], chunk: dict[Operation, int], mesh: str,
                axis: str, r: _Roles) -> None:
        block = self.func.body.block
        stage = {op: c % self.P for op, c in chunk.items()}
        for op in order:
            op.detach()
            block.add_op(op)
            if isinstance(op, ReturnOp):
                continue
            for v in op.results:
                v._type = _staged(v.type, mesh, (axis, stage[op]))  # noqa: SLF001 - retyping in place
            role = r.micro.get(op)
            if role is not None and not isinstance(op, PlacementOp):
                step = MicroStep(role[0], role[1], chunk[op] // self.P)
                op.attributes[MICRO_STEP_ATTR] = StringAttr(step.name(self.V))
        first_use: dict[SSAValue, int] = {}
        for op in order:
            for v in op.operands:
                if isinstance(v, BlockArgument) and v not in first_use and op in stage:
                    first_use[v] = stage[op]
        for a in block.args:
            a._type = _staged(a.type, mesh, (axis, first_use.get(a, 0)))  # noqa: SLF001

    def _permutes(self, axis: str) -> None:
        """One collective_permute per (value, stage reading it), before its first reader."""
        block = self.func.body.block
        moved: dict[tuple[SSAValue, int], SSAValue] = {}
        for op in list(block.ops):
            if isinstance(op, ReturnOp):
                continue
            here = stage_of(op.results[0].type) if op.results else None
            if here is None:
                continue
            for i, v in enumerate(op.operands):
                there = stage_of(v.type)
                if there is None or there == here or (isinstance(op, PlacementOp) and
                                                      op.COLLECTIVE.moves_stage):
                    continue
                key = (v, here[1])
                if key not in moved:
                    moved[key] = _made_here(v, here, op, axis)
                op.operands[i] = moved[key]
        ret = block.last_op
        assert isinstance(ret, ReturnOp)
        self.func.function_type = FunctionType.from_lists(
            [a.type for a in block.args], [v.type for v in ret.operands])

    # -- explain --
    def _explain(self, fwd0: list[Operation], cuts: list[int], crossing: list[int],
                 stage: dict[Operation, int], micro: int) -> None:
        assert self.log is not None
        target = load_target(self.p.target)
        for j, (c, n) in enumerate(zip(cuts, crossing, strict=True)):
            where = f" (chunk {j + 1}, on stage {(j + 1) % self.P})" if self.V > 1 else ""
            self.log.add(fwd0[c], f"{PASS}: cut before this op{where}, {fmt_bytes(n)} cross "
                         "per micro-batch")
        busy = [0.0] * self.P
        for op in fwd0:
            busy[stage[op]] += op_seconds(op, target, self.func)
        shares = ", ".join(f"stage {s}: {t * 1e6:.4g} us" for s, t in enumerate(busy))
        orders = "; ".join(
            f"stage {s}: " + " ".join(m.name(self.V) for m in
                                      local_order(self.p.schedule, self.P, micro, s, self.V))
            for s in range(self.P))
        chunks = f" with {self.V} model chunks per stage" if self.V > 1 else ""
        self.log.add(self.func, f"{PASS}: forward compute per micro-batch {shares}; "
                     f"{self.p.schedule} schedule{chunks} {orders}")


def _made_here(v: SSAValue, here: Stage, reader: Operation, axis: str) -> SSAValue:
    """`v` on stage `here`, before `reader`: a copy of its op when that reads nothing (a
    constant is made again rather than sent), else a collective_permute of it."""
    block = reader.parent_block()
    assert block is not None
    owner = v.owner
    if isinstance(owner, Operation) and not owner.operands and len(owner.results) == 1 \
            and not isinstance(owner, PlacementOp):
        copy = owner.clone()
        copy.attributes.pop(MICRO_STEP_ATTR, None)
        copy.results[0]._type = with_stage(v.type, here)  # noqa: SLF001 - retyping in place
        block.insert_op_before(copy, reader)
        return copy.results[0]
    perm = build(PermuteOp, [v], [with_stage(v.type, here)], axes=[axis])
    perm.location = reader.location
    block.insert_op_before(perm, reader)
    return perm.outputs[0]


def pipeline_stats(func: FuncOp, target: Target) -> dict[str, object] | None:
    """`--stats-json`'s view of a staged step (None for an unstaged one): the modeled bubble
    fraction of its timeline on `target` (`lamina.analysis.timeline.schedule`, the idle share of
    the compute lanes) beside the schedule's formula (`bubble_formula`: (P-1)/(M+P-1) for GPipe
    and 1F1B, (P-1)/(V*M+P-1) interleaved), and each stage's busy seconds (its first device's
    compute lane; every device of a stage runs the same ops)."""
    d = func.attributes.get(PIPELINE_ATTR)
    mesh_op = placed_mesh(func)
    if not isinstance(d, DictionaryAttr) or mesh_op is None:
        return None
    axis, stages, micro = d.data["axis"], d.data["stages"], d.data["micro_batches"]
    assert isinstance(axis, StringAttr) and isinstance(stages, IntegerAttr)
    assert isinstance(micro, IntegerAttr)
    virtual = d.data.get("virtual")
    V = virtual.value.data if isinstance(virtual, IntegerAttr) else 1
    P, M = stages.value.data, micro.value.data
    tl = schedule(func, target)
    busy = [tl.busy[stage_devices(mesh_op.mesh, (axis.data, s))[0]] for s in range(P)]
    return {"bubble_fraction": tl.bubble_fraction,
            "bubble_fraction_formula": bubble_formula(P, M, V), "stage_busy_seconds": busy}


def _saved(func: FuncOp, stage: int, step: str | None) -> list[tuple[Operation, SSAValue]]:
    """(op, value) of every forward value on `stage` that a backward op reads (received ones
    too), of micro-step `step` or of every forward step (None)."""
    out: list[tuple[Operation, SSAValue]] = []
    for op in func.body.block.ops:
        got = micro_step_of(op)
        if got is None or not got.startswith("F") or step is not None and got != step:
            continue
        for v in op.results:
            st = stage_of(v.type)
            if st is not None and st[1] == stage and any(_is_backward(u.operation)
                                                         for u in v.uses):
                out.append((op, v))
    return out


def saved_bytes(func: FuncOp, stage: int, step: str) -> int:
    """Bytes of micro-step `step`'s (say "F0", or "F0.1" for chunk 1 of an interleaved step)
    saved activations on one device of `stage`."""
    return sum(local_bytes(v, func) for _, v in _saved(func, stage, step))


def activation_peak(func: FuncOp, stage: int) -> int:
    """The most bytes of saved activations one device of `stage` holds at once in the staged
    step's order (`_saved`), each live from its op to its last reader. 1F1B keeps
    min(P - s, M) micro-batches' of them on stage s, GPipe all M, interleaved
    min((P-s-1)*2 + (V-1)*P + 1, V*M) chunk micro-steps' (`held_steps`)."""
    index = {op: i for i, op in enumerate(func.body.block.ops)}
    events: list[tuple[int, int, int]] = []   # (position, frees after makes, bytes)
    for op, v in _saved(func, stage, None):
        n = local_bytes(v, func)
        events += [(index[op], 1, n), (max(index[u.operation] for u in v.uses), 2, -n)]
    live = peak = 0
    for _, _, n in sorted(events):
        live += n
        peak = max(peak, live)
    return peak


def micro_step_of(op: Operation) -> str | None:
    """An op's micro-step. A permute's is the one of the value it sends, but of the chunk of its
    first reader when that runs the same phase of the same micro-batch (the activation chunk
    c-1 sends is chunk c's input, kept there; with one chunk per stage the names agree)."""
    if not isinstance(op, PermuteOp):
        step = op.attributes.get(MICRO_STEP_ATTR)
        return step.data if isinstance(step, StringAttr) else None
    owner = op.inputs[0].owner
    sent = micro_step_of(owner) if isinstance(owner, Operation) else None
    reader = _first_reader(op)
    read = micro_step_of(reader) if reader is not None else None
    if sent is not None and read is not None and sent.split(".")[0] == read.split(".")[0]:
        return read
    return sent


def _first_reader(op: Operation) -> Operation | None:
    """The first op after `op` in its block that reads its result (pipeline-stages puts a
    permute right before its first reader, so this walks a step or two)."""
    users = {u.operation for r in op.results for u in r.uses}
    nxt = op.next_op
    while nxt is not None and nxt not in users:
        nxt = nxt.next_op
    return nxt


def _is_backward(op: Operation) -> bool:
    """A backward op, or a permute sending to one."""
    if isinstance(op, PermuteOp):
        return any(_is_backward(u.operation) for u in op.outputs[0].uses)
    return (micro_step_of(op) or "F").startswith("B")


def _staged(t: Attribute, mesh: str, stage: Stage) -> Attribute:
    """Type `t` on `stage` of `mesh` (an unplaced one replicated there, its tier kept)."""
    if not isinstance(t, TensorType):
        return t
    p = place_of(t)
    if p is not None and p.mesh_name is not None:
        return with_stage(t, stage)
    tier = p.tier_name if p is not None else None
    rank = len(t.get_shape())
    return TensorType(t.element_type, t.get_shape(),
                      PlaceAttr.make(mesh, [[] for _ in range(rank)], (), SUM.name, tier, stage))

