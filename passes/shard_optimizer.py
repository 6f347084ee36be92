"""`shard-optimizer`: ZeRO stages 1-3 on a placed training step, as explicit placements.

    -p 'derive-backward{data=x},append-optimizer{kind=adamw},shard-optimizer{stage=1 axis=data},
        propagate-sharding,insert-collectives'

Input: a training step (`@NAME_step` of append-optimizer: `lamina.updates` and `lamina.role` on its
arguments), its arguments on a mesh with axis `axis`, before propagate-sharding (no op result
placed by it yet) and before insert-collectives. For each parameter W (role `parameter`), its
*update* is the part of the step append-optimizer appended: the elementwise ops (and identity
reshapes, casts, moves) of W's shape from W's new value back to W, its optimizer state
(`first_moment`, `second_moment`, `momentum_buffer`) and the values that enter from outside, its
gradient. `axis` is added to the splits of the first dimension of W whose local size it divides
(W stays as written, said in --explain, when none does or W is already split over `axis`):

- stage 1: the state is placed split (arguments and results); the gradient gets the split placement
  where it enters the update (propagate-sharding reduces its pending sum over `axis` there: a
  reduce_scatter), so the full gradient, a pending sum, is live from the op that makes it through
  the rest of the backward (as DeepSpeed's stage 1 keeps full gradients); W is sliced locally for
  the update (a reshard replicated -> split, no communication) and the new W is resharded back to
  W's placement (an all_gather).
- stage 2: also the gradients: each is placed split right after the op that makes it (the op
  derive-backward marks `lamina.gradient`; DeepSpeed reduce-scatters a bucket as it fills), so
  annotate-lifetimes frees the full gradient there and only its 1/N shard lives to the update.
- stage 3: also W itself: its argument and result are split, and every use outside the update
  (forward and backward) reads a fresh all_gather (a reshard split -> W's placement) placed
  right before it, so annotate-lifetimes frees each gathered copy after its one use; gradients
  as in stage 2. A value the forward makes from W alone (its transpose, a reshape, its cast)
  that the backward reads again is made again there from a second gather, so no full-sized copy
  of W lives from the forward through the backward (ZeRO-3's 3 Psi; accumulate-gradients'
  micro-batches remake theirs already). After mixed-precision a use that only casts W to the
  compute type (the cast, or a transpose / reshape every reader of which casts) casts the shard
  and gathers the narrow copy instead, as ZeRO-3 under AMP gathers its fp16 parameters: half
  the bytes for bf16, the same bits (a cast commutes with moving elements).

After accumulate-gradients (K micro-batches, their gradients summed into one f32 accumulator per
parameter, placed like W after the last one): stage 1 starts the update at that accumulator, so
the whole accumulator is reduce_scattered once per step (the same collectives as K = 1); stages
2 and 3 reach through the sum to each micro-batch's gradient, reduce_scatter each right after it
is made and sum the shards, a sharded accumulator (1/N of its bytes), at K reduce_scatters per
parameter: (K + 1) Psi (N-1)/N sent per step instead of 2 Psi (N-1)/N.

Refused (one diagnostic at the function, or at the op that shows the order broken): no step
function, an argument off a mesh or a mesh without `axis`, a pending sum already placed
(propagate-sharding ran), collectives already inserted, a `lamina.free` or a fused kernel
(annotate-lifetimes, fuse-elementwise ran), and a second run: a reshard of a parameter or of a
marked gradient is what this pass places, so the step was sharded already (running it again
would reshard the shards: give the stage you want once).
With --explain: each parameter's decision; per device, the bytes of the parameters, gradients and
optimizer state, read off the step as placed (`lamina.analysis.zero_bytes`, which lamina-run's
`--stats-json` reports too), and the bytes the collectives send per step beside ZeRO's formula
(2 Psi (N-1)/N for stages 1 and 2, an all-reduce's; 3 Psi (N-1)/N for stage 3), with a line
saying why they differ when they do (a parameter the backward does not read gathered once, not
twice; a gradient reduced once per micro-batch; a gradient the low-precision backward makes
and reduces in bf16, a gather of a bf16 cast; grad-clip's global norm, whose shards' summed
squares are one scalar all_reduce a step, counted in the traffic). Each parameter's line says how
its gradient is reduced over `axis`: a reduce_scatter, or, on a mesh with more axes, an
all_reduce and a slice where the backward makes the gradient split over another axis on the
dimension the split takes (a data x model mesh's `model`-split activations; found on a copy of
the module placed by propagate-sharding, so the line says what insert-collectives will make),
its bytes then counted as the gradient is made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from lamina.analysis.sizes import spec_local_bytes
from lamina.analysis.zero_bytes import ParamTraffic, Traffic, marked_sources, step_bytes
from lamina.ir.buffers.memory import FreeOp, MoveOp, with_tier
from lamina.ir.buffers.updates import GRADIENT_ATTR, OPTIMIZER_STATE, roles_of, updates_of
from lamina.ir.builder import Builder, is_float_value, retype, set_dtype
from lamina.ir.core.diagnostics import LaminaError, error_at
from lamina.ir.core.dtypes import ITEMSIZE, element_type, nbytes, tensor_dtype
from lamina.ir.mesh.collectives import PlacementOp, ReshardOp, with_spec
from lamina.ir.mesh.collectives import build as build_placement
from lamina.ir.mesh.placement import Mesh, find_mesh, place_of, spec_of, tier_of
from lamina.ir.mesh.sharding import Spec
from lamina.ir.ops.fused import FusedOp
from lamina.ir.ops.lamina import CastOp, ReshapeOp
from lamina.ir.ops.opbase import LaminaOp
from lamina.ir.ops.optable import Amp, Fusion
from lamina.passes.accumulate_gradients import MOVES
from lamina.passes.derive_backward import SEED_ATTR
from lamina.passes.explain import ExplainLog, LaminaPass
from lamina.passes.propagate_sharding import PropagateSharding
from lamina.passes.train_common import info_type, mesh_type_like, returned_as
from xdsl.context import Context
from xdsl.dialects.builtin import FunctionType, ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import BlockArgument, Operation, OpResult, SSAValue, Use

PASS = "shard-optimizer"
ORDER = ("after append-optimizer and mixed-precision, before propagate-sharding, "
         "insert-collectives, fuse-elementwise and annotate-lifetimes")


@dataclass
class Update:
    """One parameter's update: its ops, the state arguments it reads and the values entering it."""

    w: BlockArgument
    ops: list[Operation] = field(default_factory=list)
    state: list[BlockArgument] = field(default_factory=list)
    entering: list[SSAValue] = field(default_factory=list)


def _passes_through(op: Operation, shape: tuple[int, ...]) -> bool:
    """Whether the update walk continues through `op` (an elementwise op of W's shape)."""
    r = op.results[0] if len(op.results) == 1 else None
    if r is None or not isinstance(r.type, TensorType) or tuple(r.type.get_shape()) != shape:
        return False
    if isinstance(op, MoveOp | ReshapeOp):
        return all(isinstance(o.type, TensorType) and tuple(o.type.get_shape()) == shape
                   for o in op.operands)
    # the op derive-backward marks as a gradient's (a tied weight's sum of two contributions is
    # an elementwise op of W's shape) is where the gradient enters the update, not part of it
    return isinstance(op, LaminaOp) and op.info.fusion == Fusion.ELEMENTWISE \
        and GRADIENT_ATTR not in op.attributes


def _update_of(w: BlockArgument, roots: list[SSAValue], roles: dict[int, str],
               stops: set[SSAValue]) -> Update:
    """The update of parameter `w` reaching back from its new value and state (module
    docstring); a value in `stops` enters the update (stage 1's accumulated gradient)."""
    u = Update(w)
    shape = tuple(info_type(w).get_shape())
    seen: set[SSAValue] = set()
    todo = list(roots)
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if isinstance(v, BlockArgument):
            if roles.get(v.index) in OPTIMIZER_STATE and v not in u.state:  # also at a second visit
                u.state.append(v)
            continue
        op = v.owner
        assert isinstance(op, Operation)
        if v in stops or not _passes_through(op, shape):
            if isinstance(v.type, TensorType) and tuple(v.type.get_shape()) == shape \
                    and v not in u.entering:
                u.entering.append(v)
            continue
        if op not in u.ops:
            u.ops.append(op)
        todo.extend(op.operands)
    return u


def _optimizer_inputs(func: FuncOp) -> set[SSAValue]:
    """The values computed from an argument the optimizer adds (its state, step count, learning
    rate, loss scale): what no gradient depends on."""
    block = func.body.block
    out: set[SSAValue] = {block.args[i] for i, r in roles_of(func).items()
                          if r.name not in ("parameter", "frozen")}
    for op in block.ops:
        if any(o in out for o in op.operands):
            out.update(op.results)
    return out


def _align_moves(u: Update, st: TensorType) -> None:
    """Give each `lamina.move` of the update (state-tier: the state moved to HBM and back) the
    split placement on both sides, each side keeping its own tier."""
    for op in u.ops:
        if not isinstance(op, MoveOp):
            continue
        for v in (op.operands[0], op.results[0]):
            if spec_of(v.type) != spec_of(st) and not isinstance(v, BlockArgument):
                retype(v, with_tier(st, tier_of(v.type)))


class _Step:
    """Shards one step function's updates."""

    def __init__(self, p: ShardOptimizer, func: FuncOp, log: ExplainLog | None,
                 module: ModuleOp, ctx: Context) -> None:
        self.p, self.func, self.log, self.module, self.ctx = p, func, log, module, ctx
        # each split gradient placement: (parameter, its reshard, the split), for the explain
        self.split_grads: list[tuple[BlockArgument, ReshardOp, Spec]] = []
        self.notes: list[tuple[BlockArgument, str, str]] = []   # (W, before, after the reduction)
        self.other_axes = False   # a mesh axis besides `axis` (all_reduced may find gradients)
        self.norm_bytes = 0       # grad-clip's norm: the scalar the shards' squares sum into
        # stage 3: how many of a W's gathers carry its cast to a narrower type, and that type
        self.narrow_gathers: dict[BlockArgument, tuple[int, str]] = {}
        # stage 3: the step's ops in order and the one loss seed's position (None: not one seed)
        self.order: dict[Operation, int] | None = None
        self.seed: int | None = None
        self.block = func.body.block
        ret = self.block.last_op
        assert isinstance(ret, ReturnOp)
        self.ret = ret
        self.traffic: Traffic | None = None
        self.optimizer = _optimizer_inputs(func)
        # placed values by (shape, placement), computed from no optimizer input (stage 1)
        self.placed_values: dict[tuple[tuple[int, ...], Spec | None], list[SSAValue]] | None = None

    def mesh_of(self, w: SSAValue) -> tuple[Mesh, Spec]:
        place, spec = place_of(w.type), spec_of(w.type)
        mesh_op = find_mesh(self.func, place.mesh_name) if place is not None and \
            place.mesh_name is not None else None
        if mesh_op is None or spec is None:
            raise error_at(self.func, f"{PASS}: %{w.name_hint} of @{self.func.sym_name.data} is "
                           "not on a mesh (place the step first: place-batch or written placements)")
        mesh = mesh_op.mesh
        if self.p.axis not in mesh.axes:
            raise error_at(self.func, f"{PASS}: mesh @{mesh.name} has no axis '{self.p.axis}' "
                           f"(axes: {', '.join(mesh.axes)})")
        return mesh, spec

    def split_spec(self, w: SSAValue, mesh: Mesh, spec: Spec) -> Spec | None:
        """`spec` with `axis` added to the first dimension whose local size it divides."""
        if any(self.p.axis in axes for axes in spec.splits) or self.p.axis in spec.partial:
            return None
        n = mesh.axis_sizes[self.p.axis]
        for d, size in enumerate(info_type(w).get_shape()):
            local = size // mesh.size(spec.splits[d])
            if local % n == 0:
                splits = list(spec.splits)
                splits[d] = (*splits[d], self.p.axis)
                return Spec(tuple(splits))
        return None

    def reshard(self, v: SSAValue, to: TensorType, before: Operation) -> SSAValue:
        op = build_placement(ReshardOp, [v], [to])
        self.block.insert_op_before(op, before)
        return op.outputs[0]

    def accumulated(self, w: BlockArgument, roots: list[SSAValue]) -> set[SSAValue]:
        """Stage 1: the values where accumulate-gradients' sums of micro-batch gradients end,
        placed like `w` and computed from no optimizer input, so the update starts there and
        the whole accumulator is reduced once (stages 2, 3 reach through to each micro-batch's
        gradient instead)."""
        if self.p.stage > 1:
            return set()
        if self.placed_values is None:
            self.placed_values = {}
            for op in self.block.ops:
                for r in op.results:
                    if r not in self.optimizer and isinstance(r.type, TensorType) and \
                            spec_of(r.type) is not None:
                        key = (tuple(r.type.get_shape()), spec_of(r.type))
                        self.placed_values.setdefault(key, []).append(r)
        key = (tuple(info_type(w).get_shape()), spec_of(w.type))
        return {r for r in self.placed_values.get(key, [])
                if r not in roots and len(marked_sources(r)) > 1}

    def update(self, w: BlockArgument, result: int) -> Update:
        """W's update (module docstring), its state found from the new value's walk."""
        new = self.ret.operands[result]
        roles = {i: r.name for i, r in roles_of(self.func).items()}
        returned = {a: self.ret.operands[r] for r, a in updates_of(self.func).items()}
        u = _update_of(w, [new], roles, set())
        roots = [new, *(returned[s.index] for s in u.state)]
        return _update_of(w, roots, roles, self.accumulated(w, roots))

    def shard(self, w: BlockArgument, result: int, mesh: Mesh, spec: Spec) -> ParamTraffic:
        u = self.update(w, result)
        wt = w.type
        assert isinstance(wt, TensorType)
        split = self.split_spec(w, mesh, spec)
        full = spec_local_bytes(wt, spec, mesh.axis_sizes)
        if split is None:
            self.notes.append((w, f"%{w.name_hint}: stays as placed ({spec}): '{self.p.axis}' "
                               "divides none of its dimensions' local sizes, or it is split over "
                               "it already", ""))
            return ParamTraffic(w.name_hint or "", full, 1, 1, all_reduce=True)
        st = with_spec(TensorType(wt.element_type, wt.get_shape()), mesh.name, split)
        self.place_gradients(u, st)
        roots = self.place_state(u, st)
        if self.p.stage > 1:
            _split_inside(u, spec, split, mesh.name, {self.ret.operands[result], *roots})
        gathers = self.place_parameter(w, u, set(u.ops), st, result)
        _align_moves(u, st)
        state = ", ".join(f"%{s.name_hint}" for s in sorted(u.state, key=lambda a: a.index))
        where = "right after the op that makes it" if self.p.stage > 1 else \
            "where it enters the update"
        self.notes.append((w, f"%{w.name_hint}: state {state or 'none'} and its update split as "
                           f"{split}; gradient ({len(u.entering)} value(s)) placed split {where}",
                           f"parameter split too, all_gathered before each of its {gathers} use(s)"
                           if self.p.stage == 3 else f"new value all_gathered back to {spec}"))
        narrow, low = self.narrow_gathers.get(w, (0, tensor_dtype(wt)))
        width = ITEMSIZE[tensor_dtype(wt)]
        grads = sum(full * ITEMSIZE[tensor_dtype(g.type)] // width for g in u.entering)
        return ParamTraffic(w.name_hint or "", full, len(u.entering), gathers,
                            narrow_gathers=narrow, narrow_full=full * ITEMSIZE[low] // width,
                            grad_units=grads)

    def place_gradients(self, u: Update, st: TensorType) -> None:
        """Each gradient entering the update gets the split placement, and every reader takes
        it (grad-clip's norm too: a sum of the shards' squares, then a scalar all_reduce):
        stage 1 right before its first reader, the optimizer, so its full pending sum lives
        through the backward; stages 2 and 3 right after the op that makes it, so only the
        shard lives on."""
        for g in u.entering:
            users = [use.operation for use in g.uses]
            if self.p.stage > 1 and isinstance(g, OpResult) or not users:
                where = g.op.next_op if isinstance(g, OpResult) else self.block.first_op
            else:
                where = min(users, key=self.block.get_operation_index)
            assert where is not None
            _place_like_w(g, u.w)
            placed = returned_as(Builder.before_op(where, self.func.location), g, st)
            if isinstance(placed.owner, ReshardOp):
                self.split_grads.append((u.w, placed.owner, spec_of(st) or Spec(())))
            for use in list(g.uses):
                if use.operation is not placed.owner:
                    use.operation.operands[use.index] = placed
            self.norm_bytes = self.norm_bytes or _norm_scalar_bytes(placed, set(u.ops), self.ret)

    def place_state(self, u: Update, st: TensorType) -> list[SSAValue]:
        """The state arguments and their returned new values split (ZeRO-Offload keeps the
        tier); the new values, as returned."""
        state = {s: with_tier(st, tier_of(s.type)) for s in u.state}
        for s, t in state.items():
            retype(s, t)
        out: list[SSAValue] = []
        for k, v in enumerate(self.ret.operands):
            owner = updates_of(self.func).get(k)
            if owner is not None and self.block.args[owner] in state:
                self.ret.operands[k] = self.placed(v, state[self.block.args[owner]])
                out.append(self.ret.operands[k])
        return out

    def placed(self, v: SSAValue, st: TensorType) -> SSAValue:
        """`v` (a returned update value) as the split type `st`: retyped when its own op placed
        it for the return, else through a placed identity."""
        if isinstance(v, BlockArgument) or spec_of(v.type) is None:
            return returned_as(Builder.before_op(self.ret, self.func.location), v, st)
        retype(v, st)
        return v

    def place_parameter(self, w: BlockArgument, u: Update, ops: set[Operation], st: TensorType,
                        result: int) -> int:
        """Slice W for its update and gather the new W (stages 1, 2); or split W and gather it
        before each other use (stage 3). Returns the number of gathers per step."""
        wt = w.type
        assert isinstance(wt, TensorType)
        inside = [use for use in w.uses if use.operation in ops]
        outside = [use for use in w.uses if use.operation not in ops and use.operation is not self.ret]
        new = self.placed(self.ret.operands[result], st)
        if self.p.stage < 3:
            if inside:
                first = min(inside, key=lambda x: self.block.get_operation_index(x.operation))
                local = self.reshard(w, st, first.operation)
                for use in inside:
                    use.operation.operands[use.index] = local
            self.ret.operands[result] = self.reshard(new, wt, self.ret)
            return 1
        retype(w, st)
        outside = self.remake_for_backward(w, ops, outside)
        for use in outside:
            low = _narrowed_to(use.operation)
            if low is None:
                use.operation.operands[use.index] = self.reshard(w, wt, use.operation)
            else:
                self.gather_narrow(w, use.operation, wt, low)
                self.narrow_gathers[w] = (self.narrow_gathers.get(w, (0, low))[0] + 1, low)
        self.ret.operands[result] = new
        return len(outside)

    def remake_for_backward(self, w: BlockArgument, update: set[Operation], outside: list[Use]
                            ) -> list[Use]:
        """Stage 3 frees a gathered W after each use, so a value made from W alone in the
        forward (its transpose, a reshape, its cast: an op of one operand, `MOVES`) that the
        backward reads again is made again from a fresh gather where the backward first reads
        it, rather than held, full-sized, from the forward through the backward (ZeRO-3's
        second gather: 3 Psi (N-1)/N a step). accumulate-gradients' micro-batches remake their
        own (more than one seed: left as they are). Returns W's uses outside its update."""
        if self.order is None:   # once per step: the ops this pass adds are never looked up
            self.order = {op: i for i, op in enumerate(self.block.ops)}
            seeds = [op for op in self.order if op.attributes.get(SEED_ATTR) is not None]
            self.seed = self.order[seeds[0]] if len(seeds) == 1 else None
        pos, seed = self.order, self.seed
        if seed is None:
            return outside
        for use in outside:
            op = use.operation
            if pos.get(op, seed) >= seed or len(op.operands) != 1 or len(op.results) != 1 or \
                    not (isinstance(op, CastOp) or isinstance(op, LaminaOp) and
                         op.info.fusion in MOVES):
                continue
            back = [u for u in op.results[0].uses
                    if pos.get(u.operation, -1) > seed and u.operation not in update]
            if not back or len(back) == len(list(op.results[0].uses)):
                continue
            first = min((u.operation for u in back), key=pos.__getitem__)
            again = op.clone()
            self.block.insert_op_before(again, first)
            for u in back:
                u.operation.operands[u.index] = again.results[0]
        return [use for use in w.uses if use.operation not in update and
                use.operation is not self.ret]

    def gather_narrow(self, w: BlockArgument, op: Operation, wt: TensorType, low: str) -> None:
        """Stage 3 under mixed precision: `op` reads W only to cast it to `low` (the cast, or a
        layout op every reader of which casts), so the shard is cast and the narrow copy
        gathered (half the bytes for bf16 from f32), `op` then moving the narrow copy. Exact:
        a cast of each element commutes with gathering and moving elements."""
        loc = op.location
        shard = Builder.before_op(op, loc).cast(w, low)
        retype(shard, with_spec(info_type(shard), *_mesh_spec(w)))   # the shard's placement
        full = TensorType(element_type(low), wt.get_shape(), wt.encoding)
        gathered = self.reshard(shard, full, op)
        if isinstance(op, CastOp):
            op.results[0].replace_all_uses_with(gathered)
            op.detach()
            op.erase()
            return
        op.operands[0] = gathered
        set_dtype(op.results[0], low)
        for c in {u.operation for u in op.results[0].uses}:
            c.results[0].replace_all_uses_with(op.results[0])
            c.detach()
            c.erase()

    def say(self, message: str) -> None:
        if self.log is not None:
            self.log.add(self.func, message)

    def run(self) -> None:
        params = [i for i, r in roles_of(self.func).items() if r.name == "parameter"]
        results = {a: r for r, a in updates_of(self.func).items()}
        traffic: list[ParamTraffic] = []
        n = 0
        for i in params:
            w = self.block.args[i]
            mesh, spec = self.mesh_of(w)
            n = mesh.axis_sizes[self.p.axis]
            self.other_axes |= any(a != self.p.axis and k > 1 for a, k in mesh.axis_sizes.items())
            traffic.append(self.shard(w, results[i], mesh, spec))
        self.func.function_type = FunctionType.from_lists(
            [a.type for a in self.block.args], [v.type for v in self.ret.operands])
        whole = self.all_reduced() if self.log is not None else {}
        for p in traffic:
            p.all_reduced = next((b for w, b in whole.items() if w.name_hint == p.name), 0)
        self.traffic = Traffic(self.p.stage, n, traffic, self.norm_bytes)
        for w, before, after in self.notes:
            how = "" if not after else (
                f"; insert-collectives all_reduces it over '{self.p.axis}' and slices it (the "
                "backward makes it split over another mesh axis on the dimension split here, so "
                "no reduce_scatter reaches the shard: the full gradient is held, as at stage 1)"
                if w in whole else f"; a reduce_scatter over '{self.p.axis}'")
            self.say(before + how + (f"; {after}" if after else ""))
        self.explain(self.traffic, {w.index: b for w, b in whole.items()})

    def all_reduced(self) -> dict[BlockArgument, int]:
        """The parameters whose gradient reaches its split placement split over another mesh
        axis on the dimension the split adds `axis` to (a model-parallel activation's gradient,
        on a data x model mesh): insert-collectives cannot reduce_scatter that over `axis` into
        the shard, it all_reduces it and slices. Read off a copy of the module placed by
        propagate-sharding (its default target), only where the mesh has axes besides `axis`.
        Each with the per-device bytes its all_reduce carries (the gradient as it is split)."""
        if not self.split_grads or not self.other_axes:
            return {}
        mapping: dict[SSAValue, SSAValue] = {}
        copy = self.module.clone(value_mapper=mapping)
        try:
            PropagateSharding().run(self.ctx, copy, None)
        except LaminaError:
            return {}   # the pipeline's own propagate-sharding reports it
        out: dict[BlockArgument, int] = {}
        for w, reshard, split in self.split_grads:
            src = mapping.get(reshard.outputs[0])
            while src is not None and isinstance(src.owner, ReshardOp):   # insert-collectives
                src = src.owner.operands[0]   # lowers a chain of reshards from its start
            got = spec_of(src.type) if src is not None else None
            if got is None or self.p.axis not in got.partial:
                continue
            d = next(i for i, axes in enumerate(split.splits) if self.p.axis in axes)
            if got.splits[d] != split.splits[d][:split.splits[d].index(self.p.axis)]:
                mesh = find_mesh(self.func, split_mesh(reshard))
                assert mesh is not None and isinstance(w.type, TensorType)
                out[w] = spec_local_bytes(w.type, Spec(got.splits), mesh.mesh.axis_sizes)
        return out

    def explain(self, t: Traffic, whole: dict[int, int]) -> None:
        """The per-device bytes (measured on the IR, a gradient all_reduced counted as made)
        and the traffic beside ZeRO's formula."""
        if self.log is None:
            return
        b = step_bytes(self.func, whole)
        assert b is not None
        psi = "3 Psi" if t.stage == 3 else "2 Psi"
        name = f"@{self.func.sym_name.data}"
        self.say(f"{name} stage {t.stage} over '{self.p.axis}' (N = {t.n}): per device: "
                 f"parameters {b.params} B, gradients {b.grads} B, optimizer state {b.state} B; "
                 f"communicated per step {t.sent()} B, ZeRO's {psi} (N-1)/N {t.formula()} B "
                 f"(Psi {t.psi()} B)")
        if t.sent() != t.formula():
            self.say(f"{name}: {t.sent()} B, not {t.formula()} B, because " + "; ".join(t.why()))


def _narrowed_to(op: Operation) -> str | None:
    """The narrower float type `op` makes of its one float operand, a parameter, when that is
    all it does with it: a cast to it, or a one-operand data-movement op (a transpose, a
    reshape) every reader of which casts its result to it (mixed-precision's casts of the f32
    master weights); else None."""
    src = op.operands[0] if len(op.operands) == 1 else None
    if src is None or not is_float_value(src):
        return None
    if isinstance(op, CastOp):
        low = tensor_dtype(op.results[0].type)
        return low if is_float_value(op.results[0]) and ITEMSIZE[low] < ITEMSIZE[
            tensor_dtype(src.type)] else None
    if not isinstance(op, LaminaOp) or op.info.amp != Amp.FOLLOW or len(op.results) != 1:
        return None
    readers = [u.operation for u in op.results[0].uses]
    lows = {_narrowed_to(c) if isinstance(c, CastOp) else None for c in readers}
    return lows.pop() if readers and len(lows) == 1 and None not in lows else None


def _mesh_spec(w: BlockArgument) -> tuple[str, Spec]:
    """W's mesh name and (split) spec, for a value made from its shard."""
    p = place_of(w.type)
    spec = spec_of(w.type)
    assert p is not None and p.mesh_name is not None and spec is not None
    return p.mesh_name, spec


def _norm_scalar_bytes(g: SSAValue, update: set[Operation], ret: Operation) -> int:
    """The bytes of the rank-0 value a split gradient's reader outside its update makes (the
    sum of its shard's squares grad-clip's global norm adds up, a pending sum over `axis`:
    insert-collectives all_reduces the total once a step), or 0 when no such reader."""
    todo = [use.operation for use in g.uses if use.operation not in update and use.operation is not ret]
    seen: set[Operation] = set()
    while todo:
        op = todo.pop(0)
        if op in seen:
            continue
        seen.add(op)
        for r in op.results:
            if isinstance(r.type, TensorType) and r.type.get_shape() == ():
                return nbytes(r.type)
            todo.extend(use.operation for use in r.uses)
    return 0


def split_mesh(reshard: ReshardOp) -> str:
    """The mesh a reshard places its result on."""
    place = place_of(reshard.outputs[0].type)
    assert place is not None and place.mesh_name is not None
    return place.mesh_name


def _place_like_w(g: SSAValue, w: BlockArgument) -> None:
    """An unplaced gradient (a micro-batch's, accumulate-gradients leaves them unplaced) placed
    like W, as derive-backward places a whole step's, so its split is a reshard right at it
    (a reduce_scatter once propagate-sharding makes it a pending sum), not an identity reshape
    before one. Retyped in place only while an operand is unplaced (the verifier checks a
    fully placed op's rule)."""
    owner = g.owner
    if spec_of(g.type) is not None or not isinstance(owner, Operation) or \
            all(spec_of(o.type) is not None for o in owner.operands):
        return
    want = mesh_type_like(g, w.type)
    if want is not None:
        retype(g, want)


def _split_inside(u: Update, spec: Spec, split: Spec, mesh: str, roots: set[SSAValue]) -> None:
    """Stages 2, 3: a value inside the update placed like W (accumulate-gradients' sum of the
    micro-batch gradients, placed like W for its return) becomes split like the update: the
    accumulator is sharded."""
    for op in u.ops:
        if isinstance(op, MoveOp):
            continue
        for r in op.results:
            if r not in roots and spec_of(r.type) == spec:
                retype(r, with_spec(r.type, mesh, split))


def _resharded_by_zero(v: SSAValue, params: set[BlockArgument]) -> bool:
    """Whether a reshard of `v` is one this pass places: of a parameter (stage 1, 2's local
    slice for the update, stage 3's gathers) or of a gradient derive-backward marks (its split);
    no earlier pass reshards either (they place such values by retyping them or through an
    identity reshape), so finding one means the pass ran already."""
    return v in params or isinstance(v, OpResult) and GRADIENT_ATTR in v.op.attributes


def _check(func: FuncOp) -> None:
    """Refuse what is not an unplaced-op training step (module docstring)."""
    name = f"@{func.sym_name.data}"
    if not updates_of(func) or not any(r.name == "parameter" for r in roles_of(func).values()):
        raise error_at(func, f"{PASS}: {name} is not a training step (run derive-backward and "
                       "append-optimizer first: it needs lamina.updates and parameter roles)")
    args = func.body.block.args
    params = {args[i] for i, r in roles_of(func).items() if r.name == "parameter"}
    for op in func.walk():
        if any((sp := spec_of(r.type)) is not None and sp.partial for r in op.results):
            raise error_at(op, f"{PASS}: {name} has a pending sum placed ({op.name}): "
                           f"propagate-sharding ran already; run {PASS} before it")
        if isinstance(op, ReshardOp) and _resharded_by_zero(op.operands[0], params):
            what = op.operands[0].name_hint
            raise error_at(op, f"{PASS}: {name} reshards "
                           f"{f'%{what}' if what else 'a parameter or a gradient'} ({PASS} ran "
                           f"already); run {PASS} once, {ORDER}")
        if isinstance(op, PlacementOp) and not isinstance(op, ReshardOp):
            raise error_at(op, f"{PASS}: {name} already has collectives ({op.name}); run "
                           f"{PASS} before insert-collectives")
        if isinstance(op, FreeOp):
            raise error_at(op, f"{PASS}: {name} holds a lamina.free: annotate-lifetimes ran "
                           f"already; run {PASS} {ORDER}")
        if isinstance(op, FusedOp):
            raise error_at(op, f"{PASS}: {name} holds a lamina.fused kernel: fuse-elementwise "
                           f"ran already; run {PASS} {ORDER}")


@dataclass(frozen=True)
class ShardOptimizer(LaminaPass):
    """Shard optimizer state, gradients and parameters over a data axis (ZeRO stages 1-3)."""

    name: ClassVar[str] = PASS
    choices: ClassVar[dict[str, tuple[str, ...]]] = {}
    minimums: ClassVar[dict[str, int]] = {"stage": 1}
    stage: int = 1
    axis: str = "data"
    func: str = ""

    def run(self, ctx: Context, module: ModuleOp, log: ExplainLog | None) -> None:
        if self.stage > 3:
            raise error_at(module, f"{PASS}: option 'stage' must be 1, 2 or 3, got {self.stage}")
        steps = [op for op in module.ops if isinstance(op, FuncOp) and
                 (op.sym_name.data == self.func or not self.func and updates_of(op))]
        if not steps:
            target = f"@{self.func}" if self.func else "training step"
            raise error_at(module, f"{PASS}: the module has no {target} (run derive-backward and "
                           "append-optimizer first)")
        for func in steps:
            _check(func)
            _Step(self, func, log, module, ctx).run()
