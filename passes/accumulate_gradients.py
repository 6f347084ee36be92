"""`accumulate-gradients`: one training step as K micro-batch forward + backward passes.

    -p 'derive-backward{data=x,y},accumulate-gradients{micro-batches=4 axis=0},append-optimizer'

Input: a gradient function as derive-backward makes it (`@NAME_grad`: the loss, then the gradient
of each argument `lamina.gradients` names; option `func` picks one, by default every function
with `lamina.gradients`). Output: the same function, same signature, computing the same loss and
gradients from `micro-batches` = K slices of its data: each data argument is cut along dimension
`axis` into K equal micro-batches, and micro-batch k gets its own forward and backward, emitted
after micro-batch k-1's (its rows sliced right before its forward), so annotate-lifetimes frees
one micro-batch's activations before the next starts (peak activation memory about 1/K). The
gradients (and the loss) are summed over the micro-batches in f32, or in their own type when it
is wider (f64): a bf16/f16 gradient is cast up before the sum and back after it. Each value is
added into its running sum right after the op that makes it (the last micro-batch's sum scaled
and cast back there too), so a micro-batch's gradient dies at once rather than all of them
living, beside the running sums, until its backward ends. And each micro-batch's backward makes
the forward's batch-free layout values it reads again (a weight's transpose or reshape, a
broadcast bias: layout and broadcast ops on non-data arguments) where it first reads them, so the
forward's copies die after the forward's last read instead of living through the micro-batch:
they are parameter-sized, and the running sums already hold one parameter-sized value per
gradient (the GPT-2 sample at full size: the step's modeled peak 467 MiB instead of 565, below
the full batch's 522). A loss that is a mean over the batch has its sums scaled by
1/K, a sum keeps them; then the full-batch step's loss and gradients are the accumulated ones up
to summation order (the micro-batches are equal, so a mean of means is the mean).
`append-optimizer` then makes one update from them. Each micro-batch's gradients keep
derive-backward's `lamina.gradient` mark (their f32 sum is unmarked: shard-optimizer finds it as
the sum of marked gradients and reduces it once per step at ZeRO stage 1, or each micro-batch's
into a sharded accumulator at stage 2; mixed-precision computes only what the marks depend on in
its low type, so the sums stay f32). Which one: `loss=auto` (the default) reads
it off the ops that reduce the batch (reduce_mean: a mean; reduce_sum, a matmul contracting the
batch: a sum; a sum divided by a sum: a mean, cross-entropy's losses over their count, exact when
every micro-batch counts the same rows), and what follows them must be linear (scaling, adding
like with like, casts); a max over the batch, a log of the mean, a batch statistic used by the
rows, a sum added to a mean or a batch-free term added to a sum is refused at its op.
`loss=mean|sum` says it instead (and accepts mixed or batch-free terms).

The data arguments: `data=` names them (as derive-backward's data= did); by default every
argument that is neither differentiated nor `frozen` and has a dimension `axis` (what
derive-backward's default `wrt` leaves as data). Name them when derive-backward had an explicit
`wrt=`, since an argument neither named in wrt nor data would otherwise be taken as data; a
default whose arguments disagree on the batch size is refused for that reason.

How: the forward part of `@NAME_grad` (the ops its loss depends on) is rebuilt at the micro-batch
shape, through the op table's shape rules (a reshape that merges or splits the batch dimension,
a broadcast or a cast of a batch value follow it, and so does a value of the batch's shape made
without the batch, an iota across it, a splat constant or a broadcast, where it meets batch
values in an elementwise op: a one-hot's index grid), and derive-backward differentiates it again,
so every constant the backward bakes in (reduce_mean's 1/N) is the micro-batch's. An op whose
shape does not follow the batch (an iota along the batch, a slice of part of the batch, a
reshape moving the batch off its group's major dimension) is a located error.

Placed programs (place-batch first): a data argument whose `axis` is split over mesh axes of n
devices keeps its rows local: micro-batch k is the k-th chunk of each device's block (reshape
[B, ...] -> [n, K, B/(nK), ...], take k, reshape back), which propagate-sharding places without
communication; the micro-batch ops are left unplaced (propagate-sharding places them from the
arguments; placements written on intermediate values are not kept), the accumulated gradients
stay pending sums, and each is placed like its parameter once, after the last micro-batch, so
insert-collectives reduces it once per step, as many collectives as the full-batch step.
`sync=micro-batch` places each micro-batch's gradients instead, so they are reduced K times a
step (as a loop calling the full step's backward per micro-batch would): the contrast, for
measuring what reducing once saves.

Order (ORDER below): after derive-backward, before append-optimizer (a step with
`lamina.updates` is refused, naming the order), propagate-sharding (a pending sum placed),
fuse-elementwise, insert-collectives and the tier passes (a fused kernel, a collective, a tier
move or a `lamina.free` in the function is refused), and once: a function whose data argument is
already read as micro-batches (two or more slices of parts of its batch, as this pass takes them)
is refused, since running it twice would only split each micro-batch again (give the product as
micro-batches=). Refusals, each one
located diagnostic: K < 1, `axis` beyond a data argument's rank, K not dividing a data
argument's batch (per device, on a placed one), a loss of more than one element, a function
without `lamina.gradients`, the loss forms above. With `--explain`: each data argument's
micro-batch and how it is taken, how the loss and gradients are combined (and why) and in which
type, the ops per micro-batch, and the layout values each backward makes again (count, bytes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from lamina.ir.buffers.updates import FROZEN, GRADIENTS_ATTR, UPDATES_ATTR, roles_of
from lamina.ir.builder import Builder, Operand
from lamina.ir.core.diagnostics import error_at
from lamina.ir.core.dtypes import nbytes, tensor_type
from lamina.ir.core.shapes import ShapeError, TensorInfo, info_of
from lamina.ir.mesh.collective_kinds import SUM
from lamina.ir.mesh.collectives import ReshardOp
from lamina.ir.mesh.placement import find_mesh, place_of, spec_of
from lamina.ir.mesh.sharding import Linearity
from lamina.ir.ops.fused import FusedOp
from lamina.ir.ops.lamina import (
    BroadcastInDimOp,
    CastOp,
    ConstantOp,
    DivOp,
    IotaOp,
    MatmulOp,
    ReduceMeanOp,
    ReduceSumOp,
    ReshapeOp,
    SliceOp,
)
from lamina.ir.ops.opbase import LaminaOp
from lamina.ir.ops.optable import Fusion
from lamina.passes.derive_backward import SEED_ATTR, DeriveBackward, derive
from lamina.passes.explain import ExplainLog, LaminaPass
from lamina.passes.train_common import (
    arg_names,
    check_unplanned,
    finish,
    gradient_args,
    named_functions,
    new_function,
    resolve_names,
    returned_as,
)
from xdsl.context import Context
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, ModuleOp
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Operation, SSAValue

PASS = "accumulate-gradients"
ORDER = ("after derive-backward, before append-optimizer, propagate-sharding, insert-collectives, "
         "fuse-elementwise and annotate-lifetimes")
AUTO, MEAN = "auto", "mean"   # the loss option: infer, or say, how the loss reduces the batch
WIDE = {"f32", "f64"}   # accumulated in their own type; any narrower float is summed in f32
MOVES = {Fusion.LAYOUT, Fusion.BROADCAST}   # ops a micro-batch's backward may remake (_Remat)


@dataclass
class _Data:
    """One data argument: its index, full shape, and the devices its batch dim is split over."""

    index: int
    shape: tuple[int, ...]
    devices: int


# ---- checks -------------------------------------------------------------------------------


def _check_function(func: FuncOp) -> ReturnOp:
    """The function is a gradient function of derive-backward, before the later passes."""
    name = func.sym_name.data
    if UPDATES_ATTR in func.attributes:
        raise error_at(func, f"{PASS}: @{name} is a training step (it has {UPDATES_ATTR}): run "
                       f"{PASS} on the gradient function, after derive-backward and before "
                       "append-optimizer")
    if gradient_args(func) is None:
        raise error_at(func, f"{PASS}: @{name} has no {GRADIENTS_ATTR}: run derive-backward "
                       f"first; {PASS} splits a gradient function's step")
    check_unplanned(func, PASS, ORDER)
    for op in func.body.block.ops:
        if isinstance(op, FusedOp):
            raise error_at(op, f"{PASS} runs before fuse-elementwise: @{name} holds a "
                           "lamina.fused kernel")
        if not isinstance(op, LaminaOp | ReshardOp | ReturnOp):
            raise error_at(op, f"{PASS}: {op.name} in @{name}: accumulate gradients right after "
                           "derive-backward, before insert-collectives and the tier passes")
    ret = func.body.block.last_op
    assert isinstance(ret, ReturnOp)
    loss = ret.operands[0]
    if math.prod(info_of(loss).shape) != 1:
        raise error_at(func, f"{PASS}: the loss of @{name} is {info_of(loss)}; micro-batches "
                       "are summed into one loss of one element")
    return ret


def _devices(func: FuncOp, t: Attribute, axis: int) -> int:
    """How many blocks the batch dim of a value of type `t` is split into (1 when unsplit)."""
    spec, place = spec_of(t), place_of(t)
    if spec is None or place is None or place.mesh_name is None or not spec.splits[axis]:
        return 1
    mesh = find_mesh(func, place.mesh_name)
    assert mesh is not None, "a verified placement names a declared mesh"
    return math.prod(mesh.axis_sizes[a] for a in spec.splits[axis])


def _data(func: FuncOp, p: AccumulateGradients) -> list[_Data]:
    """The data arguments (option `data`, else the module docstring's default), checked."""
    args = func.body.block.args
    names = arg_names(func)
    if p.data:
        chosen = resolve_names(func, p.data, "data", PASS)
    else:
        skip = set(gradient_args(func) or []) | \
            {i for i, r in roles_of(func).items() if r.name == FROZEN}
        chosen = [i for i, a in enumerate(args)
                  if i not in skip and len(info_of(a).shape) > p.axis]
        batches = {info_of(args[i]).shape[p.axis] for i in chosen}
        if len(batches) > 1:
            listed = ", ".join(f"%{names[i]} {info_of(args[i])}" for i in chosen)
            raise error_at(func, f"{PASS}: the arguments taken as data ({listed}) disagree on "
                           f"dimension {p.axis}; name the data arguments with data=")
    if not chosen:
        raise error_at(func, f"{PASS}: @{func.sym_name.data} has no data argument with a "
                       f"dimension {p.axis} to split; name them with data=")
    out: list[_Data] = []
    for i in chosen:
        shape = info_of(args[i]).shape
        if p.axis >= len(shape):
            raise error_at(func, f"{PASS}: axis={p.axis}, but data argument %{names[i]} is "
                           f"{info_of(args[i])}, of rank {len(shape)}")
        _check_not_micro_batched(func, i, p.axis)
        n = _devices(func, args[i].type, p.axis)
        local = shape[p.axis] // n
        if local % p.micro_batches:
            where = f" on each of {n} devices" if n > 1 else ""
            raise error_at(func, f"{PASS}: micro-batches={p.micro_batches} does not divide the "
                           f"batch of %{names[i]} (dimension {p.axis} of {info_of(args[i])}: "
                           f"{local} rows{where})")
        out.append(_Data(i, shape, n))
    return out


def _partial_slices(v: SSAValue, axis: int) -> int:
    """How many slices of part of dimension `axis` read `v`, directly or through one reshape
    (how `_select` takes micro-batches of an unsplit or a split batch)."""
    count = 0
    for use in v.uses:
        op = use.operation
        if isinstance(op, ReshapeOp):
            count += sum(_partial_slices(r, axis + 1) for r in op.results)
        elif isinstance(op, SliceOp) and \
                info_of(op.results[0]).shape[axis] < info_of(v).shape[axis]:
            count += 1
    return count


def _check_not_micro_batched(func: FuncOp, index: int, axis: int) -> None:
    """Refuse a data argument read as micro-batches already (module docstring, Order)."""
    arg = func.body.block.args[index]
    if (n := _partial_slices(arg, axis)) > 1:
        raise error_at(func, f"{PASS}: @{func.sym_name.data} already reads %{arg_names(func)[index]} "
                       f"as micro-batches ({n} slices of parts of dimension {axis}): {PASS} ran "
                       "already; run it once, with micro-batches= the product of the counts")


# ---- the forward at the micro-batch shape -------------------------------------------------


def _loss_slice(block: Block, loss: SSAValue) -> list[LaminaOp]:
    """The ops `loss` depends on, in program order: the forward part of a gradient function."""
    needed = {loss}
    kept: list[LaminaOp] = []
    for op in reversed(list(block.ops)):
        if isinstance(op, LaminaOp) and any(r in needed for r in op.results):
            kept.append(op)
            needed.update(op.operands)
    kept.reverse()
    return kept


def _reshape_to(op: LaminaOp, old: TensorInfo, new: TensorInfo) -> tuple[int, ...]:
    """A reshape's result shape for its operand's micro-batch shape: the one changed operand
    dim must be the major-most of the dims the reshape merges or splits with it."""
    out = info_of(op.results[0]).shape
    changed = [d for d, (a, b) in enumerate(zip(old.shape, new.shape, strict=True)) if a != b]
    if not changed:
        return out
    (c,) = changed
    ratio = old.shape[c] // new.shape[c]
    before = math.prod(old.shape[:c])
    for j, size in enumerate(out):
        if math.prod(out[:j]) == before and size > 1 and size % ratio == 0:
            return (*out[:j], size // ratio, *out[j + 1:])
    raise error_at(op, f"{PASS}: this reshape {old} -> {info_of(op.results[0])} mixes the batch "
                   "dimension with the dimensions before it; it cannot be run on a micro-batch")


def _declared(op: LaminaOp, old: list[TensorInfo | None], new: list[TensorInfo | None]
              ) -> TensorInfo | None:
    """The result type an op that declares it (cast, reshape, broadcast_in_dim) gets when its
    operand is a micro-batch: the batch dim follows the operand's."""
    if not op.info.declares_result:
        return None
    res = info_of(op.results[0])
    src, dst = old[0], new[0]
    if src is None or dst is None or src == dst:
        return res
    if isinstance(op, CastOp):
        return TensorInfo(dst.shape, res.dtype)
    if isinstance(op, ReshapeOp):
        return TensorInfo(_reshape_to(op, src, dst), res.dtype)
    if isinstance(op, BroadcastInDimOp):
        shape = list(res.shape)
        for i, d in enumerate(op.attr_values()["broadcast_dimensions"]):
            if src.shape[i] == res.shape[d]:
                shape[d] = dst.shape[i]
        return TensorInfo(tuple(shape), res.dtype)
    return res


def _attrs(op: LaminaOp, old: list[TensorInfo | None], new: list[TensorInfo | None]
           ) -> dict[str, Any]:
    """The op's written attributes; a slice of a whole batch dim takes the whole micro-batch."""
    attrs = {k: v for k, v in op.attr_values().items() if k in op.properties}
    src, dst = old[0], new[0]
    if not isinstance(op, SliceOp) or src is None or dst is None or src == dst:
        return attrs
    values = op.attr_values()
    start, limit, strides = list(values["start"]), list(values["limit"]), values["strides"]
    for d, (a, b) in enumerate(zip(src.shape, dst.shape, strict=True)):
        if a == b:
            continue
        if start[d] != 0 or limit[d] != a or (strides is not None and strides[d] != 1):
            raise error_at(op, f"{PASS}: this slice takes part of batch dimension {d}; it "
                           "cannot be run on a micro-batch")
        limit[d] = b
    attrs["limit"] = tuple(limit)
    return attrs


class _LossForm:
    """How the loss reduces the batch, read off the forward while it is rebuilt: the ops where
    the batch dim disappears (reduce_mean: a mean, reduce_sum or a matmul contracting it: a sum,
    a sum divided by a sum: a mean, cross-entropy's sum of losses over its count of rows, exact
    when every micro-batch counts the same rows), and what follows them, which must be linear in
    them (scaling, adding like with like, casts) for the micro-batches' losses to combine into
    the full batch's; anything else is refused at its op."""

    def __init__(self, given: str) -> None:
        self.given = given
        self.kind_of: dict[SSAValue, str] = {}   # (micro forward) value from a reduction -> kind
        self.loss: SSAValue | None = None          # the micro forward's loss, once rebuilt

    def see(self, op: LaminaOp, old: list[TensorInfo | None], new: list[TensorInfo | None],
            slots: list[SSAValue | None], result: SSAValue) -> None:
        batch = [i for i, (a, b) in enumerate(zip(old, new, strict=True))
                 if a is not None and b is not None and a.shape != b.shape]
        reduced = [i for i, v in enumerate(slots) if v is not None and v in self.kind_of]
        shrinks = info_of(op.results[0]).shape == info_of(result).shape
        if batch and shrinks:
            self._reduction(op, reduced, result)
        elif reduced:
            if batch:
                raise error_at(op, f"{PASS}: this {op.name} combines a statistic of the whole "
                               "batch with its rows, so the micro-batches' losses would not add "
                               "up to the full batch's")
            self._after(op, [self.kind_of[v] for v in slots if v is not None and v in self.kind_of], reduced,
                        slots, result)

    def _reduction(self, op: LaminaOp, reduced: list[int], result: SSAValue) -> None:
        kind = MEAN if isinstance(op, ReduceMeanOp) else \
            SUM.name if isinstance(op, ReduceSumOp | MatmulOp) else None
        if kind is None or reduced:
            raise error_at(op, f"{PASS}: the loss reduces the batch with this {op.name}; "
                           "accumulation needs a sum or a mean over the rows")
        self.kind_of[result] = kind

    def _after(self, op: LaminaOp, kinds: list[str], reduced: list[int],
               slots: list[SSAValue | None], result: SSAValue) -> None:
        infos = [None if v is None else info_of(v) for v in slots]
        linearity = op.info.linearity_for(infos, info_of(result))
        if isinstance(op, DivOp) and reduced == [0, 1] and kinds == [SUM.name, SUM.name]:
            self.kind_of[result] = MEAN   # a sum over a count: a mean
            return
        if isinstance(op, CastOp) or linearity is Linearity.ADDITIVE:
            self._check_terms(op, kinds, len(reduced) < sum(v is not None for v in slots))
        elif linearity is not Linearity.ONE_SIDED or len(reduced) > 1 or \
                reduced[0] not in op.info.linear_operands:
            raise error_at(op, f"{PASS}: the loss is not linear in the batch's {kinds[0]} after "
                           f"this {op.name}, so the micro-batches' losses would not combine "
                           "into the full batch's")
        self.kind_of[result] = kinds[0]

    def _check_terms(self, op: LaminaOp, kinds: list[str], lone: bool) -> None:
        """Terms added together: all means or all sums, and no batch-free term added to a sum
        (each micro-batch would add it again), unless loss= says how to combine."""
        if self.given != AUTO:
            return
        if len(set(kinds)) > 1:
            raise error_at(op, f"{PASS}: this {op.name} adds a sum and a mean over the batch; "
                           "say which to accumulate with loss=mean|sum")
        if lone and kinds[0] == SUM.name:
            raise error_at(op, f"{PASS}: this {op.name} adds a term that does not depend on the "
                           "batch to a sum over it, which each micro-batch would add again; say "
                           "loss=sum to accept that")

    def kind(self) -> str:
        """mean or sum: the option when given, else what the reductions say of the loss."""
        if self.given != AUTO:
            return self.given
        return self.kind_of.get(self.loss, MEAN) if self.loss is not None else MEAN


def _followed(op: LaminaOp, want: tuple[int, ...], b: Builder,
              mapping: dict[SSAValue, SSAValue]) -> SSAValue | None:
    """Batch-free `op` (an iota across the resized dims, a splat constant, a broadcast along
    them) made at shape `want`, or None when its values would change."""
    info = info_of(op.results[0])
    resized = {d for d, (a, w) in enumerate(zip(info.shape, want, strict=True)) if a != w}
    if isinstance(op, IotaOp):
        dim: int = op.attr_values()["dim"]
        return None if dim in resized else b.iota(want, info.dtype, dim)
    if isinstance(op, BroadcastInDimOp):
        dims: tuple[int, ...] = op.attr_values()["broadcast_dimensions"]
        src = op.operands[0]
        if any(d in resized and info_of(src).shape[i] != 1 for i, d in enumerate(dims)):
            return None
        return b.broadcast_in_dim(mapping.get(src, src), want, dims)
    value = op.properties.get("value")
    if isinstance(op, ConstantOp) and isinstance(value, DenseIntOrFPElementsAttr) and \
            value.is_splat():
        return b.splat(float(value.get_values()[0]), TensorInfo(want, info.dtype))
    return None


def _follow_batch(op: LaminaOp, b: Builder, mapping: dict[SSAValue, SSAValue]) -> None:
    """Before elementwise `op` is rebuilt: an operand made without the batch (an iota, a splat
    constant, a broadcast: a one-hot's index grid) at the full batch's shape is made again at
    the shape its other operands now have, along the dims where they follow the micro-batch."""
    if op.info.fusion is not Fusion.ELEMENTWISE:
        return
    out = info_of(op.results[0]).shape
    want = list(out)
    for v in op.operands:
        old, new = info_of(v).shape, info_of(mapping.get(v, v)).shape
        for i, (a, c) in enumerate(zip(old, new, strict=True)):
            if a != c:
                want[len(out) - len(old) + i] = c
    for v in op.operands:
        src = v.owner
        shape = info_of(v).shape
        if not isinstance(src, LaminaOp) or len(shape) != len(out) or \
                info_of(mapping.get(v, v)).shape != shape or \
                any(info_of(mapping.get(u, u)) != info_of(u) for u in src.operands):
            continue
        target = tuple(w if s_ == d else s_ for s_, d, w in zip(shape, out, want, strict=True))
        if target != shape and (made := _followed(src, target, b, mapping)) is not None:
            mapping[v] = made


def _rebuild(op: LaminaOp, b: Builder, mapping: dict[SSAValue, SSAValue], form: _LossForm
             ) -> None:
    """`op` on the mapped operands, its result typed by its row's shape rule (unplaced), seen
    by `form`."""
    if not op.operands:
        new = op.clone()
        b.block.add_op(new)
        mapping[op.results[0]] = new.results[0]
        return
    _follow_batch(op, b, mapping)
    groups: list[Operand] = []
    for spec in op.info.operands:
        got: SSAValue | Sequence[SSAValue] | None = getattr(op, spec.name)
        if isinstance(got, SSAValue):
            groups.append(mapping.get(got, got))
        else:
            groups.append(None if got is None else [mapping.get(v, v) for v in got])
    old = op.operand_infos()
    new = [None if v is None else info_of(mapping.get(v, v)) for v in op.operand_slots()]
    try:
        r = b.op(type(op), *groups, result=_declared(op, old, new), **_attrs(op, old, new))
    except ShapeError as e:
        raise error_at(op, f"{PASS}: this op's shape does not follow the micro-batch ({e}); "
                       "its loss is not a sum or mean over independent rows") from None
    assert isinstance(r.owner, LaminaOp)
    r.owner.attributes.update(op.attributes)
    if op.results[0].name_hint:
        r.name_hint = op.results[0].name_hint
    mapping[op.results[0]] = r
    form.see(op, old, new, [None if v is None else mapping.get(v, v) for v in op.operand_slots()],
             r)


def _micro_forward(func: FuncOp, ret: ReturnOp, data: list[_Data], p: AccumulateGradients,
                   form: _LossForm) -> FuncOp:
    """The forward part of `func` on one micro-batch, every value unplaced: a function of
    `func`'s arguments returning the loss, for derive-backward to differentiate again."""
    args = func.body.block.args
    types: list[Attribute] = [tensor_type(info_of(a).shape, info_of(a).dtype) for a in args]
    for d in data:
        shape = list(d.shape)
        shape[p.axis] //= p.micro_batches
        types[d.index] = tensor_type(tuple(shape), info_of(args[d.index]).dtype)
    micro, block = new_function(f"{func.sym_name.data}_micro", types, [a.name_hint for a in args])
    micro.location = func.location
    mapping: dict[SSAValue, SSAValue] = dict(zip(args, block.args, strict=True))
    b = Builder.at_end(block, func.location)
    for op in _loss_slice(func.body.block, ret.operands[0]):
        b.location = op.location
        _rebuild(op, b, mapping, form)
    form.loss = mapping.get(ret.operands[0], ret.operands[0])
    finish(micro, block, [form.loss])
    return micro


def _micro_gradient(func: FuncOp, ret: ReturnOp, data: list[_Data], p: AccumulateGradients,
                    form: _LossForm) -> FuncOp:
    """derive-backward's gradient function of the micro-batch forward, same gradients."""
    micro = _micro_forward(func, ret, data, p, form)
    names = arg_names(micro)
    wrt = ",".join(f"arg{i}" if names.count(names[i]) > 1 else names[i]
                   for i in gradient_args(func) or [])
    opts = DeriveBackward(func=micro.sym_name.data, wrt=wrt)
    return derive(micro, opts, None)


# ---- the accumulated function -------------------------------------------------------------


def _select(b: Builder, x: SSAValue, d: _Data, k: int, p: AccumulateGradients) -> SSAValue:
    """Micro-batch k of data argument `x`: rows [k B/K, (k+1) B/K) of an unsplit batch, the
    k-th chunk of each device's block of a split one (module docstring)."""
    K, a, shape = p.micro_batches, p.axis, d.shape
    size = shape[a] // K
    if d.devices == 1:
        start = [0] * len(shape)
        start[a] = k * size
        limit = list(shape)
        limit[a] = (k + 1) * size
        return b.slice(x, start, limit)
    n = d.devices
    split = (*shape[:a], n, K, shape[a] // (n * K), *shape[a + 1:])
    y = b.reshape(x, split)
    start = [0] * len(split)
    start[a + 1] = k
    limit = list(split)
    limit[a + 1] = k + 1
    y = b.slice(y, start, limit)
    return b.reshape(y, (*shape[:a], size, *shape[a + 1:]))


class _Sums:
    """The running sums of the loss and gradients, each in f32 or its own wider type. Each
    micro-batch's value is added where it is made, so it dies at once instead of living (with
    every other gradient of its micro-batch) until the micro-batch's backward ends; the last
    micro-batch's sum is scaled and cast back right there too."""

    def __init__(self, b: Builder, like: Sequence[SSAValue], scale: float) -> None:
        self.b, self.like, self.scale = b, list(like), scale
        self.acc: list[SSAValue | None] = [None] * len(like)

    def add(self, j: int, v: SSAValue, last: bool) -> None:
        b = self.b
        wide = v if info_of(v).dtype in WIDE else b.cast(v, "f32")
        got = self.acc[j]
        total = wide if got is None else b.add(got, wide)
        if last:
            if self.scale != 1.0:
                total = b.mul(total, b.scalar(self.scale, info_of(total).dtype))
            dtype = info_of(self.like[j]).dtype
            total = total if info_of(total).dtype == dtype else b.cast(total, dtype)
        self.acc[j] = total

    def results(self) -> list[SSAValue]:
        """The finished sums (after the last micro-batch's `add`s)."""
        assert all(v is not None for v in self.acc)
        return [v for v in self.acc if v is not None]


@dataclass
class _Remat:
    """The batch-free layout values of a micro-batch's forward (a weight's transpose or
    reshape, a broadcast of a bias: layout and broadcast ops on non-data arguments, `MOVES`)
    that its backward reads again. Each copy remakes them where its backward first
    reads them, so the forward's own ones die after the forward's last read instead of living
    through the whole micro-batch: a weight's transpose is parameter-sized, and the running sums
    already hold one parameter-sized value per gradient."""

    seed: int                      # index of the op seeding the backward (derive-backward's mark)
    cheap: set[SSAValue]           # forward values the backward remakes
    backward_only: set[Operation]  # cheap forward ops no forward op reads: made only there

    @staticmethod
    def of(grad: FuncOp, data: list[_Data]) -> _Remat:
        ops = list(grad.body.block.ops)
        seed = next((i for i, op in enumerate(ops) if SEED_ATTR in op.attributes), len(ops))
        args = grad.body.block.args
        free = {args[i] for i in range(len(args))} - {args[d.index] for d in data}
        cheap: set[SSAValue] = set()
        for op in ops[:seed]:
            if isinstance(op, LaminaOp) and op.info.fusion in MOVES and not op.regions and \
                    all(v in free or v in cheap for v in op.operands):
                cheap.update(op.results)
        pos = {op: i for i, op in enumerate(ops)}
        kept: set[Operation] = set()   # forward ops the forward itself needs
        for op in reversed(ops[:seed]):
            if not all(r in cheap for r in op.results) or any(
                    _keeps(u.operation, pos, seed, kept) for r in op.results for u in r.uses):
                kept.add(op)
        backward_only = {op for op in ops[:seed] if op not in kept}
        read_back = {v for op in ops[seed + 1:] for v in op.operands if v in cheap}
        return _Remat(seed, read_back | _chains(read_back, cheap), backward_only)

    def bytes(self) -> int:
        """The bytes each micro-batch's backward makes again."""
        return sum(nbytes(v.type) for v in self.cheap)


def _keeps(user: Operation, pos: dict[Operation, int], seed: int, kept: set[Operation]) -> bool:
    """Whether a read by `user` needs the forward's own value: a forward op the forward needs,
    the return, or an op outside the block's list (inside a region)."""
    at = pos.get(user)
    return at is None or at == len(pos) - 1 or (at < seed and user in kept)


def _chains(values: set[SSAValue], cheap: set[SSAValue]) -> set[SSAValue]:
    """The cheap values `values` are made from (remaking a transpose of a reshape remakes both)."""
    out: set[SSAValue] = set()
    todo = list(values)
    while todo:
        v = todo.pop()
        owner = v.owner
        if isinstance(owner, Operation):
            for u in owner.operands:
                if u in cheap and u not in out:
                    out.add(u)
                    todo.append(u)
    return out


def _clone(op: Operation, block: Block, mapping: dict[SSAValue, SSAValue], k: int) -> Operation:
    """`op` appended to `block` on the mapped operands, its values named `NAME_mbK`."""
    new = op.clone(value_mapper=mapping)
    block.add_op(new)
    for r in new.results:
        r.name_hint = f"{r.name_hint}_mb{k}" if r.name_hint else None
    return new


def _remake(v: SSAValue, block: Block, mapping: dict[SSAValue, SSAValue], remade: set[SSAValue],
            k: int) -> None:
    """Cheap forward value `v` (and the cheap values it is made from) made again at the end of
    `block`, for the backward's reads (`mapping` then maps `v` to the new one)."""
    owner = v.owner
    if v in remade or not isinstance(owner, Operation):
        return
    for u in owner.operands:
        _remake(u, block, mapping, remade, k)
    _clone(owner, block, mapping, k)
    remade.update(owner.results)


def _emit_copy(block: Block, grad: FuncOp, args: Sequence[SSAValue],
               inputs: dict[SSAValue, SSAValue], k: int, remat: _Remat,
               made: Callable[[int, SSAValue], None]) -> None:
    """Micro-batch `grad`'s body appended to `block` on `inputs`, its values named `NAME_mbK`
    (the step's own names go to its results), the backward reading remade layout values
    (`_Remat`); `made(j, value)` is called for `grad`'s result j right after the op making it."""
    mapping: dict[SSAValue, SSAValue] = dict(zip(grad.body.block.args, args, strict=True))
    mapping.update(inputs)
    ret = grad.body.block.last_op
    assert isinstance(ret, ReturnOp)
    wanted: dict[SSAValue, list[int]] = {}
    for j, v in enumerate(ret.operands):
        wanted.setdefault(v, []).append(j)
    remade: set[SSAValue] = set()
    for i, op in enumerate(grad.body.block.ops):
        if op is ret or op in remat.backward_only:
            continue
        if i > remat.seed:
            for v in op.operands:
                if v in remat.cheap:
                    _remake(v, block, mapping, remade, k)
        new = _clone(op, block, mapping, k)
        for r, got in zip(op.results, new.results, strict=True):
            for j in wanted.pop(r, []):
                made(j, got)
    for v, js in wanted.items():   # results that are arguments of `grad`
        for j in js:
            made(j, mapping.get(v, v))


def accumulate(func: FuncOp, p: AccumulateGradients, log: ExplainLog | None) -> None:
    """Rewrite gradient function `func` in place (module docstring)."""
    ret = _check_function(func)
    data = _data(func, p)
    form = _LossForm(p.loss)
    micro = _micro_gradient(func, ret, data, p, form)
    kind = form.kind()
    outputs = list(func.function_type.outputs.data)
    old = list(ret.operands)
    block = func.body.block
    args = list(block.args)
    ops = list(block.ops)
    b = Builder.at_end(block, func.location)
    sums = _Sums(b, old, 1.0 / p.micro_batches if kind == MEAN else 1.0)
    remat = _Remat.of(micro, data)
    for k in range(p.micro_batches):
        def made(j: int, v: SSAValue, k: int = k) -> None:
            if p.sync == "micro-batch" and j:   # each micro-batch's gradients placed at once
                v = returned_as(b, v, outputs[j])
            sums.add(j, v, k == p.micro_batches - 1)
        # micro-batch k's rows are taken right before its forward
        picked: dict[SSAValue, SSAValue] = {
            micro.body.block.args[d.index]: _select(b, args[d.index], d, k, p) for d in data}
        _emit_copy(block, micro, args, picked, k, remat, made)
    results = [returned_as(b, v, t) for v, t in zip(sums.results(), outputs, strict=True)]
    for v, was in zip(results, old, strict=True):   # the step's results keep their names
        if v not in block.args and was.name_hint:
            v.name_hint = was.name_hint
    for op in reversed(ops):
        op.detach()
        op.erase()
    finish(func, block, results)
    assert list(func.function_type.outputs.data) == outputs, "the signature is kept"
    if log is not None:
        _explain(func, micro, data, p, kind, remat, log)


def _explain(func: FuncOp, micro: FuncOp, data: list[_Data], p: AccumulateGradients,
             kind: str, remat: _Remat, log: ExplainLog) -> None:
    names = arg_names(func)
    args = func.body.block.args
    for d in data:
        how = f"the k-th chunk of each of {d.devices} devices' blocks (rows stay local)" \
            if d.devices > 1 else "a slice"
        log.add(func, f"%{names[d.index]} {info_of(args[d.index])}: {p.micro_batches} "
                f"micro-batches of {d.shape[p.axis] // p.micro_batches} along dimension "
                f"{p.axis}, each {how}")
    outs = func.body.block.last_op
    assert outs is not None
    kinds = sorted({info_of(v).dtype if info_of(v).dtype in WIDE else f"f32 (from {info_of(v).dtype})"
                    for v in outs.operands})
    combine = f"the mean (sum / {p.micro_batches})" if kind == MEAN else "the sum"
    combine += f" (loss={p.loss})" if p.loss != AUTO else \
        f" (loss=auto: the loss is a {kind} over the batch)"
    log.add(func, f"@{func.sym_name.data}: loss and gradients are {combine} over the "
            f"micro-batches, accumulated in {', '.join(kinds)}; "
            f"{len(list(micro.body.block.ops)) - 1} op(s) per micro-batch (forward and backward "
            "derived at the micro-batch shape), micro-batch after micro-batch, each gradient "
            "added into its running sum where it is made")
    if remat.cheap:
        log.add(func, f"@{func.sym_name.data}: {len(remat.cheap)} batch-free layout value(s) of "
                f"the forward ({remat.bytes()} bytes: weights' transposes, reshapes, broadcasts) "
                "made again where each micro-batch's backward reads them, so they do not live "
                "through its forward next to the running sums")


@dataclass(frozen=True)
class AccumulateGradients(LaminaPass):
    """Split a gradient function's step into micro-batches, summing their gradients."""

    name: ClassVar[str] = PASS
    minimums: ClassVar[dict[str, int]] = {"micro_batches": 1, "axis": 0}
    # how the loss reduces the batch; a sum loss adds like a collective's `sum` reduce kind
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"loss": (AUTO, MEAN, SUM.name),
                                                     "sync": ("step", "micro-batch")}
    func: str = ""
    micro_batches: int = 1
    axis: int = 0
    data: str = ""
    loss: str = AUTO
    sync: str = "step"

    def run(self, ctx: Context, module: ModuleOp, log: ExplainLog | None) -> None:
        funcs = [op for op in module.ops if isinstance(op, FuncOp)]
        if self.func:
            chosen = named_functions(funcs, self.func, PASS)
        else:
            chosen = [f for f in funcs if GRADIENTS_ATTR in f.attributes]
            if not chosen:
                steps = [f for f in funcs if UPDATES_ATTR in f.attributes]
                if steps:
                    raise error_at(steps[0], f"{PASS}: @{steps[0].sym_name.data} is a training "
                                   "step already (append-optimizer ran) and the module has no "
                                   f"gradient function left; run {PASS} {ORDER}")
                raise error_at(None, f"{PASS}: no gradient function (lamina.gradients) in the "
                               "module: run derive-backward first, and this pass before "
                               "append-optimizer")
        for f in chosen:
            accumulate(f, self, log)
