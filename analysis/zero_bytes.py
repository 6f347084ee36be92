"""Per-device bytes of a training step as ZeRO counts them, and ZeRO's communication formulas.

Memory (`step_bytes`, read off the IR of a step at any point of the pipeline: after
shard-optimizer, after insert-collectives, after annotate-lifetimes): per device,

- parameters: the local bytes of the arguments with role `parameter` (`lamina.role`),
- optimizer state: those of the arguments with a per-parameter state role (`first_moment`,
  `second_moment`, `momentum_buffer`; the step count and the learning rate are not counted),
- gradients: for each parameter, the bytes its gradient holds between the backward that makes it
  and the update that reads it. Its sources are the ops derive-backward marks `lamina.gradient`
  that reach the parameter's new value through values of its shape (one per parameter, or one
  per micro-batch after accumulate-gradients). A source whose every use is a split placement
  (reshard or reduce_scatter) following it directly (nothing but other placements and frees
  between) is held as that shard: ZeRO stage 2's reduce-scatter as the gradient is made;
  otherwise the whole value (a pending sum) is held until the update reduces it: stage 1. With
  several sources (micro-batches) the held value is the one accumulator they are summed into,
  at the accumulator's element type (accumulate-gradients sums in f32 or wider).

Communication (`formula_bytes`, `Traffic`): ZeRO's per-device, per-step counts for a data axis of
N devices and Psi bytes of parameters per device: stages 1 and 2 send 2 Psi (N-1)/N (a
reduce-scatter of the gradients and an all-gather of the updated parameters: an all-reduce's
bytes), stage 3 3 Psi (N-1)/N (the parameters gathered for the forward and again for the
backward). `Traffic` holds what each parameter's collectives send as a pass placed them (and the
one scalar all-reduce grad-clip's global norm makes when it reads split gradients), and
`Traffic.why` says where that differs from ZeRO's assumption (a parameter the backward does not
read is gathered once, not twice; a gradient reduced once per micro-batch; a gradient all-reduced
rather than reduce-scattered on a mesh with more axes; the norm's all-reduce).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lamina.analysis.sizes import local_bytes
from lamina.ir.buffers.memory import FreeOp
from lamina.ir.buffers.updates import GRADIENT_ATTR, OPTIMIZER_STATE, roles_of, updates_of
from lamina.ir.core.dtypes import ITEMSIZE, tensor_dtype, tensor_shape
from lamina.ir.mesh.collectives import PlacementOp
from lamina.ir.ops.lamina import CastOp
from xdsl.dialects.builtin import TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import OpResult, SSAValue


@dataclass(frozen=True)
class StepBytes:
    """Per-device bytes of a step's parameters, gradients and optimizer state (module docstring)."""

    params: int
    grads: int
    state: int

    def as_stats(self) -> dict[str, int]:
        """The `--stats-json` fields (README, "Run statistics")."""
        return {"param_bytes": self.params, "grad_bytes": self.grads,
                "optimizer_state_bytes": self.state}


def _shape(v: SSAValue) -> tuple[int, ...] | None:
    return tuple(tensor_shape(v.type)) if isinstance(v.type, TensorType) else None


def marked_sources(v: SSAValue) -> list[OpResult]:
    """The values marked `lamina.gradient` that `v` is computed from through values of its
    shape (`v` itself when marked), in program order."""
    shape = _shape(v)
    found: list[OpResult] = []
    seen: set[SSAValue] = set()
    todo = [v]
    while todo:
        u = todo.pop()
        if u in seen or not isinstance(u, OpResult) or _shape(u) != shape:
            continue
        seen.add(u)
        if GRADIENT_ATTR in u.op.attributes:
            found.append(u)
            continue
        todo.extend(u.op.operands)
    block = found[0].op.parent_block() if found else None
    return sorted(found, key=lambda g: block.get_operation_index(g.op)) if block else found


def gradient_sources(func: FuncOp) -> dict[int, list[OpResult]]:
    """Parameter argument index -> the marked gradients its new value is computed from."""
    ret = func.body.block.last_op
    assert isinstance(ret, ReturnOp)
    params = {i for i, r in roles_of(func).items() if r.name == "parameter"}
    return {arg: marked_sources(ret.operands[res]) for res, arg in updates_of(func).items()
            if arg in params}


def _scattered(g: OpResult) -> SSAValue | None:
    """The shard `g` is held as when it is split right where it is made (module docstring),
    through a chain of such splits (a reduce_scatter over `model`, then one over `data`)."""
    shard = _split_at_once(g)
    while shard is not None and isinstance(shard, OpResult) and \
            (smaller := _split_at_once(shard)) is not None:
        shard = smaller
    return shard


def _split_at_once(g: OpResult) -> SSAValue | None:
    """The smallest result of the split placements that read `g` right after its op, when
    they are all its readers and smaller than it."""
    users = {u.operation for u in g.uses}
    if not users or not all(isinstance(o, PlacementOp) for o in users):
        return None
    pending, op = set(users), g.op.next_op
    while pending and isinstance(op, PlacementOp | FreeOp):
        pending.discard(op)
        op = op.next_op
    if pending:
        return None
    shard = min((o.results[0] for o in users), key=lambda r: local_bytes(r, g.op))
    return shard if local_bytes(shard, g.op) < local_bytes(g, g.op) else None


def _held(sources: list[OpResult], as_made: int | None = None) -> int:
    """Bytes one parameter's gradient holds per device (module docstring); `as_made`: the bytes
    of a gradient whose split will be an all_reduce, not a reduce_scatter (held as made)."""
    if as_made is not None:
        return as_made
    held = 0
    for g in sources:
        kept = _scattered(g) or g
        dtype = tensor_dtype(kept.type)
        if len(sources) > 1:  # the accumulator the micro-batches are summed into
            users = [u.operation for u in kept.uses]
            if len(users) == 1 and isinstance(users[0], CastOp):
                dtype = tensor_dtype(users[0].results[0].type)
        size = local_bytes(kept, g.op) // ITEMSIZE[tensor_dtype(kept.type)] * ITEMSIZE[dtype]
        held = max(held, size)
    return held


def step_bytes(func: FuncOp, whole: Mapping[int, int] | None = None) -> StepBytes | None:
    """The step's per-device bytes (module docstring), or None for a function without
    parameter roles (not a training step). `whole`: parameter argument index -> the bytes its
    gradient is held as, for one split right after it is made that insert-collectives will make
    an all_reduce and a slice (shard-optimizer's explain, before propagate-sharding placed it)."""
    whole = whole or {}
    roles = roles_of(func)
    args = func.body.block.args
    params = [i for i, r in roles.items() if r.name == "parameter"]
    if not params:
        return None
    state = [i for i, r in roles.items() if r.name in OPTIMIZER_STATE]
    sources = gradient_sources(func)
    return StepBytes(sum(local_bytes(args[i], func) for i in params),
                     sum(_held(sources.get(i, []), whole.get(i)) for i in params),
                     sum(local_bytes(args[i], func) for i in state))


def step_stats(func: FuncOp) -> dict[str, int]:
    """The run statistics `param_bytes`, `grad_bytes` and `optimizer_state_bytes` of a training
    step (README, "Run statistics"), none for another function: what `lamina.run(...).stats`
    and `lamina-run --stats-json` both report."""
    got = step_bytes(func)
    return got.as_stats() if got is not None else {}


def formula_bytes(stage: int, psi: int, n: int) -> int:
    """ZeRO's bytes sent per device and step: 2 Psi (N-1)/N for stages 1 and 2, 3 Psi (N-1)/N
    for stage 3 (module docstring)."""
    return (2 if stage < 3 else 3) * psi * (n - 1) // n


@dataclass
class ParamTraffic:
    """One parameter's collectives per step: its per-device bytes (unsplit by the data axis),
    how many times its gradient is reduced and how many times it is gathered."""

    name: str
    full: int
    reduces: int
    gathers: int
    all_reduce: bool = False   # left unsplit: its gradient's all-reduce (2 Psi_p (N-1)/N)

    def sent_units(self) -> int:
        """The payload bytes its ring collectives carry, each sending (N-1)/N of it: an
        all-reduce counts twice (reduce-scatter and all-gather)."""
        if self.all_reduce:
            return 2 * self.full
        reduced = self.reduces * 2 * self.all_reduced if self.all_reduced else \
            self.grad_units or self.reduces * self.full
        return reduced + (self.gathers - self.narrow_gathers) * self.full + \
            self.narrow_gathers * self.narrow_full
    # split, but its gradient all-reduced before the slice: that all-reduce's per-device bytes
    all_reduced: int = 0
    # stage 3 under mixed precision: of its gathers, those of its narrow cast (cast on the
    # shard, then gathered), and the bytes of that cast (unsplit by the data axis)
    narrow_gathers: int = 0
    narrow_full: int = 0
    # the bytes of its reduced gradients (unsplit by the data axis), each at its own element
    # type (a bf16 backward's gradient is reduced in bf16); 0: `reduces` x `full`
    grad_units: int = 0


@dataclass
class Traffic:
    """What a ZeRO stage's collectives send per device and step, parameter by parameter."""

    stage: int
    n: int
    params: list[ParamTraffic] = field(default_factory=list)
    # grad-clip's global norm over split gradients: the bytes of the one scalar all-reduce of
    # the shards' summed squares a step makes (0: none), beside the formula's parameter bytes
    norm_bytes: int = 0

    def psi(self) -> int:
        return sum(p.full for p in self.params)

    def sent(self) -> int:
        """Ring bytes per device: (N-1)/N of each reduced or gathered payload."""
        return sum(p.sent_units() * (self.n - 1) // self.n for p in self.params) + \
            2 * self.norm_bytes * (self.n - 1) // self.n

    def formula(self) -> int:
        return formula_bytes(self.stage, self.psi(), self.n)

    def why(self) -> list[str]:
        """Where the parameters' collectives depart from the formula's assumption (one reduce
        and one gather per parameter; stage 3 two gathers: forward and backward)."""
        want = 2 if self.stage == 3 else 1
        out: list[str] = []
        groups: dict[tuple[int, int], list[str]] = {}
        if self.norm_bytes:
            out.append(f"a scalar summed from the gradients' shards outside the updates "
                       f"(grad-clip's global norm: their squares) is all_reduced once "
                       f"({self.norm_bytes} B: {2 * self.norm_bytes * (self.n - 1) // self.n} B "
                       "sent)")
        low = [p for p in self.params if p.grad_units and p.grad_units < p.reduces * p.full]
        if low:
            out.append(f"{len(low)} parameter(s)' gradients are reduced as the backward makes "
                       f"them, in a narrower type than the parameter "
                       f"({sum(p.grad_units for p in low)} B against "
                       f"{sum(p.reduces * p.full for p in low)} B)")
        narrow = [p for p in self.params if p.narrow_gathers]
        if narrow:
            out.append(f"{sum(p.narrow_gathers for p in narrow)} gather(s) of "
                       f"{len(narrow)} parameter(s) carry the narrow cast the step computes "
                       f"with, cast on the shard ({sum(p.narrow_full for p in narrow)} B "
                       f"against {sum(p.full for p in narrow)} B of the master weights)")
        whole = [f"%{p.name}" for p in self.params if p.all_reduced and not p.all_reduce]
        if whole:
            out.append(f"{', '.join(whole)}: gradient all_reduced (twice its bytes as made, "
                       "(N-1)/N each), not reduce_scattered: the backward makes it split over "
                       "another mesh axis where the shard's split goes")
        for p in self.params:
            if not p.all_reduce and (p.reduces, p.gathers) != (1, want):
                groups.setdefault((p.reduces, p.gathers), []).append(f"%{p.name}")
        for (reduces, gathers), names in sorted(groups.items()):
            out.append(f"{', '.join(names)}: gradient reduced {_times(reduces)}"
                       + (" (once per micro-batch, into a sharded accumulator)" if reduces > 1 else "")
                       + f", parameter gathered {_times(gathers)}"
                       + (" (read by one op outside the update: the backward does not read it)"
                          if self.stage == 3 and gathers < want else ""))
        return out


def _times(k: int) -> str:
    return {1: "once", 2: "twice"}.get(k, f"{k} times")
