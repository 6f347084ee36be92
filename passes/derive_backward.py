"""`derive-backward`: reverse-mode differentiation, as a new ordinary Lamina function.

    -p 'derive-backward{func=mlp loss=0 wrt=w1,w2 data=x,y}'

For function `@NAME` (option `func`; every function of the module when empty) whose result number
`loss` is the loss, adds `@NAME_grad` right after it, returning (the loss, the gradient of each
differentiated argument, in argument order). Which arguments: those named by `wrt` (comma-separated
argument names: `w1` for `%w1` as written, or `argN` by position), or by default every float
argument not named in `data` (the inputs and labels, which get no gradient; integer arguments, such
as a dropout seed, never do) and without role `frozen` (model state that is read, never trained:
the torch importer's buffers, such as a rotary table's inv_freq; torch gives them no gradient).
A frozen argument named in `wrt` is differentiated all the same: an explicit request is the
user's. `@NAME_grad` keeps every argument's role (`lamina.role`). A loss with one element is
seeded with 1, a `lamina.constant` marked with the discardable attribute `lamina.loss_seed`
(`SEED_ATTR`), so that `mixed-precision` can put the loss scale in its place (the op of each
gradient result is marked `GRADIENT_ATTR`, so that pass finds the backward's end after
append-optimizer); for any other result `@NAME_grad` takes one more argument, `%d_<result name>`,
the cotangent to pull back (the upstream gradient `dy`), typed as the result (placement included).

How: the ops the loss depends on are copied (the other results' ops are dropped), then walked in
reverse; each op's row states its VJP (`lamina.ir.autodiff.vjp`, written in Lamina ops through the typed
builder), cotangents of a value used several times are summed. An argument the loss does not depend
on gets zeros; one it depends on only through non-differentiable edges (a compare, select's
condition, a cast to an integer type: `lamina.ir.autodiff.vjp`) is an error at that op, since a silent zero
would hide a mistake (name it in `data`). The new ops carry the location of the forward op they
differentiate. `@NAME_grad` records its gradients' argument indices in `lamina.gradients`
(`passes/train_common.py`), which `append-optimizer` reads.

Order: derive-backward runs on the program as written, before fuse-elementwise and
insert-collectives: a `lamina.fused` or a collective on the way to the loss is a one-line error
saying so (ops off that way are not copied, and neither are `lamina.free`s: run annotate-lifetimes
after it). A `lamina.move` (hand-written offload, or an earlier plan) is the identity on values, so
its cotangent passes through unmoved: the backward computes in HBM and a later
assign-memory-tiers plans it. Fusing, placing and planning the derived program then treat forward
and backward together. Placed programs: the copied forward
keeps its placements, the backward is unplaced, and each gradient is returned placed like its
argument, so `propagate-sharding,insert-collectives` place the backward and reduce each
data-parallel gradient (a pending sum over the data axis) to its parameter's placement
(all_reduce, or reduce_scatter when the parameter is split; buckets by `bucket-bytes`).
What the backward holds of the forward (`save_narrow`, also run by mixed-precision on the casts
it inserts): a widening cast the forward computes (bf16 -> f32, an i1 mask -> f32) is computed
again where the backward reads it, so the narrow source is held rather than the wide copy; a
narrowing cast only the backward reads moves into the forward. A cast gives the same bits
wherever it runs, so every value is unchanged.
With `--explain`: what is differentiated, each op's VJP, the cotangents summed over uses, and
the casts save_narrow recomputed or moved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from lamina.analysis.naming import Namer
from lamina.ir.autodiff.vjp import NotDifferentiable, VjpCall
from lamina.ir.buffers.memory import MoveOp
from lamina.ir.buffers.updates import FROZEN, GRADIENT_ATTR, roles_of, set_roles
from lamina.ir.builder import Builder, is_float_value
from lamina.ir.core.diagnostics import error_at, note_at
from lamina.ir.core.dtypes import ITEMSIZE, nbytes, tensor_dtype
from lamina.ir.core.shapes import info_of
from lamina.ir.ops.fused import FusedOp
from lamina.ir.ops.lamina import CastOp
from lamina.ir.ops.opbase import LaminaOp
from lamina.passes.explain import ExplainLog, LaminaPass
from lamina.passes.train_common import (
    arg_names,
    finish,
    mark_gradients,
    named_functions,
    new_function,
    resolve_names,
    returned_as,
)
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Operation, OpResult, SSAValue

PASS = "derive-backward"
SEED_ATTR = "lamina.loss_seed"   # on the constant 1 that seeds the backward (module docstring)


@dataclass
class _Plan:
    """What to differentiate: the function, its loss result and the arguments."""

    func: FuncOp
    names: list[str]
    wrt: list[int]
    data: list[int]
    loss: SSAValue
    loss_index: int

    @property
    def seeded(self) -> bool:
        """A loss of more than one element is pulled back from a cotangent argument."""
        return info_of(self.loss).shape != () and any(d != 1 for d in info_of(self.loss).shape)


def _return_of(func: FuncOp) -> ReturnOp:
    ret = func.body.block.last_op
    if not isinstance(ret, ReturnOp):
        raise error_at(func, f"{PASS}: @{func.sym_name.data} does not end in func.return")
    return ret


def _check_slice(func: FuncOp, ops: Sequence[Operation]) -> None:
    """Only op-table ops on the way to the loss: the other ops come from later passes."""
    for op in ops:
        if isinstance(op, FusedOp):
            raise error_at(op, f"{PASS} runs before fuse-elementwise: @{func.sym_name.data} holds "
                           "a lamina.fused kernel; differentiate the unfused program, then fuse "
                           "forward and backward together")
        if not isinstance(op, LaminaOp | MoveOp):
            raise error_at(op, f"{PASS}: {op.name} has no VJP (only op-table ops and tier moves "
                           "are differentiated): derive the backward before insert-collectives")


def _plan(func: FuncOp, p: DeriveBackward) -> _Plan:
    ret = _return_of(func)
    name = func.sym_name.data
    if p.loss >= len(ret.operands):
        raise error_at(func, f"{PASS}: loss={p.loss}, but @{name} has {len(ret.operands)} "
                       "result(s)")
    loss = ret.operands[p.loss]
    if not is_float_value(loss):
        raise error_at(func, f"{PASS}: result {p.loss} of @{name} is {info_of(loss)}; a loss must "
                       "have a float element type")
    args = func.body.block.args
    data = resolve_names(func, p.data, "data", PASS)
    wrt = resolve_names(func, p.wrt, "wrt", PASS)
    for i in wrt:
        if i in data:
            raise error_at(func, f"{PASS}: argument %{arg_names(func)[i]} is named both in wrt "
                           "and in data")
        if not is_float_value(args[i]):
            raise error_at(func, f"{PASS}: argument %{arg_names(func)[i]} is "
                           f"{info_of(args[i])}; only float arguments have gradients")
    if not p.wrt:
        frozen = {i for i, r in roles_of(func).items() if r.name == FROZEN}
        wrt = [i for i, a in enumerate(args)
               if is_float_value(a) and i not in data and i not in frozen]
    return _Plan(func, arg_names(func), sorted(wrt), data, loss, p.loss)


def _loss_slice(func: FuncOp, loss: SSAValue) -> list[Operation]:
    """The ops `loss` depends on, in program order (never a `lamina.free`: it has no result)."""
    needed = {loss}
    kept: list[Operation] = []
    for op in reversed(list(func.body.block.ops)[:-1]):
        if any(r in needed for r in op.results):
            kept.append(op)
            needed.update(op.operands)
    kept.reverse()
    _check_slice(func, kept)
    return kept


Forward = LaminaOp | MoveOp   # the ops derive-backward differentiates


def _edge(op: Forward, v: SSAValue) -> bool:
    """Whether a gradient flows from `op`'s result into its operand `v` (`lamina.ir.autodiff.vjp`; a tier
    move is the identity on values, so on cotangents)."""
    if isinstance(op, MoveOp):
        return is_float_value(v)
    vjp = op.info.vjp
    return vjp is not None and not isinstance(vjp, NotDifferentiable) and is_float_value(v) \
        and is_float_value(op.results[0])


def _why_not(op: Forward) -> str:
    if isinstance(op, MoveOp):
        return "its operand is not a float"
    vjp = op.info.vjp
    if isinstance(vjp, NotDifferentiable):
        return vjp.reason
    if vjp is None:
        return "its row states no VJP"
    return f"its result is {info_of(op.results[0]).dtype}: gradients flow only through floats"


def _activity(ops: Sequence[Forward], args: Sequence[SSAValue], wrt: Sequence[int]
              ) -> tuple[dict[SSAValue, int], dict[SSAValue, int]]:
    """Per value, bit k set when it depends on argument wrt[k]: through differentiable edges
    only (`diff`), and through any edge (`dep`). One walk; the masks are Python ints."""
    diff = {args[i]: 1 << k for k, i in enumerate(wrt)}
    dep = dict(diff)
    for op in ops:
        d = a = 0
        for v in op.operands:
            a |= dep.get(v, 0)
            if _edge(op, v):
                d |= diff.get(v, 0)
        if a:
            dep[op.results[0]] = a
        if d:
            diff[op.results[0]] = d
    return diff, dep


def _check_blocked(plan: _Plan, ops: Sequence[Forward], loss: SSAValue,
                   diff: dict[SSAValue, int], dep: dict[SSAValue, int]) -> None:
    blocked = dep.get(loss, 0) & ~diff.get(loss, 0)
    if not blocked:
        return
    k = (blocked & -blocked).bit_length() - 1
    arg = plan.names[plan.wrt[k]]
    for op in ops:
        if any(diff.get(v, 0) >> k & 1 and not _edge(op, v) for v in op.operands):
            raise error_at(op, f"{PASS}: the loss of @{plan.func.sym_name.data} depends on %{arg} "
                           f"only through this {op.name}, which is not differentiable "
                           f"({_why_not(op)}); name %{arg} in data= or leave it out of wrt=",
                           (note_at(plan.func, f"%{arg} is an argument of "
                                    f"@{plan.func.sym_name.data}"),))
    raise AssertionError("a blocked argument without a blocking op")


class _Sweep:
    """The reverse walk: cotangents by value, each op's VJP emitted at the end of the block."""

    def __init__(self, block, diff: dict[SSAValue, int], log: ExplainLog | None,
                 origin: dict[Operation, Operation], namer: Namer) -> None:
        self.block, self.diff, self.log = block, diff, log
        self.origin, self.namer = origin, namer
        self.ct: dict[SSAValue, SSAValue] = {}
        self.uses: dict[SSAValue, int] = {}
        self.scalars: dict[tuple[float, str], SSAValue] = {}

    def builder(self, op: Operation) -> Builder:
        return Builder.at_end(self.block, op.location, self.scalars)

    def add(self, v: SSAValue, c: SSAValue, b: Builder) -> None:
        want = info_of(v)
        if info_of(c) != want:
            raise AssertionError(f"VJP gave a {info_of(c)} cotangent for a {want} operand")
        got = self.ct.get(v)
        self.ct[v] = c if got is None else b.add(got, c)
        self.uses[v] = self.uses.get(v, 0) + 1

    def op(self, op: Forward) -> None:
        r = op.results[0]
        g = self.ct.get(r)
        if g is None:
            return
        if isinstance(op, MoveOp):  # the cotangent stays where it was computed
            if self.diff.get(op.source, 0):
                self.add(op.source, g, self.builder(op))
            return
        slots = op.operand_slots()
        wanted = [v is not None and self.diff.get(v, 0) != 0 and _edge(op, v) for v in slots]
        if not any(wanted):
            return
        rule = op.info.vjp
        assert rule is not None and not isinstance(rule, NotDifferentiable)
        b = self.builder(op)
        cts = rule(VjpCall(b, slots, r, g, op.attr_values(), wanted))
        for v, w, c in zip(slots, wanted, cts, strict=True):
            if w and c is not None and v is not None:
                self.add(v, c, b)
        if self.log is not None:
            which = ", ".join(str(i) for i, w in enumerate(wanted) if w)
            summed = self.uses.get(r, 0)
            over = f"; its result's cotangent sums {summed} uses" if summed > 1 else ""
            self.log.add(op, f"VJP of {self.namer.op(self.origin[op])}: {len(b.emitted)} op(s) "
                         f"for operand(s) {which}{over}")


def _seed(b: Builder, loss: SSAValue) -> SSAValue:
    """The cotangent 1 of a one-element loss, marked `SEED_ATTR`."""
    one = b.splat(1.0, info_of(loss))
    assert isinstance(one, OpResult)
    one.op.attributes[SEED_ATTR] = UnitAttr()
    return one


def derive(func: FuncOp, p: DeriveBackward, log: ExplainLog | None) -> FuncOp:
    """`@NAME_grad` for `func` (see the module docstring)."""
    plan = _plan(func, p)
    name = func.sym_name.data
    args = func.body.block.args
    types = [a.type for a in args]
    names: list[str | None] = [a.name_hint for a in args]
    loss_name = plan.loss.name_hint or f"out{plan.loss_index}"
    if plan.seeded:
        types.append(plan.loss.type)
        names.append(f"d_{loss_name}")
    grad, block = new_function(f"{name}_grad", types, names)
    grad.location = func.location
    mapping: dict[SSAValue, SSAValue] = dict(zip(args, block.args, strict=False))
    origin: dict[Operation, Operation] = {}
    ops: list[Forward] = []
    for op in _loss_slice(func, plan.loss):
        new = op.clone(value_mapper=mapping)
        block.add_op(new)
        origin[new] = op
        assert isinstance(new, LaminaOp | MoveOp)
        ops.append(new)
    loss = mapping.get(plan.loss, plan.loss)
    forward_end = block.last_op
    diff, dep = _activity(ops, block.args, plan.wrt)
    _check_blocked(plan, ops, loss, diff, dep)
    if log is not None:
        wrt = ", ".join(f"%{plan.names[i]}" for i in plan.wrt) or "nothing"
        data = ", ".join(f"%{plan.names[i]}" for i in plan.data) or "none"
        seed = f"cotangent argument %d_{loss_name}" if plan.seeded else "1"
        log.add(func, f"@{name}_grad: d(result {plan.loss_index}: {info_of(loss)})/d({wrt}), "
                f"seeded with {seed}; data arguments (no gradient): {data}; "
                f"{len(ops)} forward op(s) copied")
    sweep = _Sweep(block, diff, log, origin, Namer(func))
    tail = sweep.builder(func)
    if diff.get(loss, 0):
        sweep.ct[loss] = block.args[-1] if plan.seeded else _seed(tail, loss)
        for op in reversed(ops):
            sweep.op(op)
    results = [loss]
    for i in plan.wrt:
        g = sweep.ct.get(block.args[i])
        if g is None:
            g = tail.zeros(info_of(args[i]))
            if log is not None:
                log.add(func, f"%{plan.names[i]}: the loss does not depend on it; its gradient "
                        "is zeros")
        elif log is not None and sweep.uses.get(block.args[i], 0) > 1:
            log.add(func, f"%{plan.names[i]}: gradient summed over {sweep.uses[block.args[i]]} "
                    "uses")
        g = returned_as(tail, g, args[i].type)
        if not g.name_hint and g.owner is not None and g not in block.args:
            g.name_hint = f"d_{plan.names[i]}"
        if isinstance(g, OpResult):
            g.op.attributes[GRADIENT_ATTR] = UnitAttr()
        results.append(g)
    start = block.first_op if forward_end is None else forward_end.next_op
    if start is not None:
        narrowed = save_narrow(block, [start])
        if log is not None and (narrowed.recomputed or narrowed.moved):
            log.add(func, f"@{name}_grad: the backward recomputes {narrowed.recomputed} "
                    f"cast(s) and {narrowed.moved} narrowing cast(s) move into the forward: "
                    f"{narrowed.saved_bytes} bytes of copies not held for the backward")
    finish(grad, block, results)
    mark_gradients(grad, plan.wrt)
    if roles := roles_of(func):   # what each argument holds is unchanged by differentiating
        set_roles(grad, {i: r.name for i, r in roles.items()})
    return grad


# ---- what the backward keeps of the forward: the narrow side of each cast ------------------------

@dataclass
class Narrowed:
    """What `save_narrow` changed: casts recomputed in a backward (`recomputed`), casts moved into
    the forward (`moved`), and the bytes of the copies no longer held into a backward."""

    recomputed: int = 0
    moved: int = 0
    saved_bytes: int = 0
    made: list[Operation] = field(default_factory=list)   # the recomputing casts


def _width(v: SSAValue) -> int:
    return ITEMSIZE[tensor_dtype(v.type)]


def save_narrow(block: Block, starts: Sequence[Operation]) -> Narrowed:
    """Make each backward (beginning at an op of `starts`) read the narrow side of the forward's
    casts, so that no cast's wide copy, and no copy of a value held anyway, stays live across the
    forward's end:

    - a cast computed in the forward and read in a backward is computed again before its first
      reader there when that costs no memory: its source is narrower (bf16 -> f32, i1 -> f32:
      the forward keeps the narrow source, the wide copy dies with its last forward reader) or
      is a forward value the backward reads itself (held anyway). A narrowing cast of an
      argument stays once (mixed-precision's bf16 copy of a master weight, held as torch.autocast's weight
      cache holds it: casting again in the backward would trade a cast per weight for it);
    - a narrowing cast of a forward value that only a backward reads (its source has no other
      reader there) moves into the forward, just after the source's last reader before the
      backward (or its definition), so the narrow copy is held instead of the source.

    Both are rematerialisations of a deterministic op: a cast of the same value gives the same
    bits wherever it runs, so every value of the function is unchanged (the tests compare bits).
    A value from before a backward is read in the first backward after it (accumulate-gradients'
    micro-batches each have theirs)."""
    ops = list(block.ops)
    pos = {op: i for i, op in enumerate(ops)}
    bounds = sorted(pos[s] for s in starts)
    out = Narrowed()
    for c in ops:
        if not isinstance(c, CastOp):
            continue
        src, res = c.operands[0], c.results[0]
        after = next((b for b in bounds if b > pos[c]), None)    # the backward this cast precedes
        within = next((b for b in reversed(bounds) if b <= pos[c]), None)  # the one it is in
        if after is not None and _held_anyway(c, after, pos):
            _recompute(c, after, pos, out)
        elif within is not None and _width(src) > _width(res) and isinstance(src, OpResult):
            _move_forward(c, within, pos, out)
    return out


def _held_anyway(c: CastOp, start: int, pos: dict[Operation, int]) -> bool:
    """Whether recomputing `c` from position `start` on holds nothing more than keeping it: its
    source is narrower, or a forward value read from there on by another op."""
    src = c.operands[0]
    return _width(src) < _width(c.results[0]) or isinstance(src, OpResult) and any(
        u.operation is not c and pos.get(u.operation, start) >= start for u in src.uses)


def _recompute(c: CastOp, start: int, pos: dict[Operation, int], out: Narrowed) -> None:
    """A widening cast again before its first reader at or after position `start`."""
    res = c.results[0]
    later = [u for u in res.uses if pos.get(u.operation, -1) >= start]
    if not later:
        return
    first = min((u.operation for u in later), key=lambda o: pos[o])
    again = Builder.before_op(first, first.location).cast(c.operands[0], tensor_dtype(res.type))
    for u in later:
        u.operation.operands[u.index] = again
    if isinstance(again, OpResult):
        out.made.append(again.op)
    out.recomputed += 1
    out.saved_bytes += nbytes(res.type)


def _move_forward(c: CastOp, start: int, pos: dict[Operation, int], out: Narrowed) -> None:
    """A narrowing cast at or after position `start` (a backward's first op) whose source comes
    from before it, and is read there by nothing else, moves into the forward."""
    src = c.operands[0]
    assert isinstance(src, OpResult)
    if pos[src.op] >= start:
        return
    readers = [u.operation for u in src.uses if u.operation is not c]
    if any(pos.get(o, start) >= start for o in readers):
        return   # the backward reads the wide source too: it stays live anyway
    anchor = max([src.op, *readers], key=lambda o: pos[o])
    c.detach()
    block = anchor.parent
    assert block is not None
    block.insert_op_after(c, anchor)
    pos[c] = pos[anchor]
    out.moved += 1
    out.saved_bytes += nbytes(src.type)


@dataclass(frozen=True)
class DeriveBackward(LaminaPass):
    """Add `@NAME_grad` for each function (see the module docstring)."""

    name: ClassVar[str] = PASS
    minimums: ClassVar[dict[str, int]] = {"loss": 0}
    func: str = ""
    loss: int = 0
    wrt: str = ""
    data: str = ""

    def run(self, ctx: Context, module: ModuleOp, log: ExplainLog | None) -> None:
        funcs = [op for op in module.ops if isinstance(op, FuncOp)]
        names = {f.sym_name.data for f in funcs}
        if self.func:
            funcs = named_functions(funcs, self.func, PASS)
        for f in funcs:
            target = f"{f.sym_name.data}_grad"
            if target in names:
                raise error_at(f, f"{PASS}: @{target} already exists")
            grad = derive(f, self, log)
            module.body.block.insert_op_after(grad, f)
            names.add(target)
