"""`mixed-precision`: compute a training step in bf16 / f16, keep master weights and state in f32.

    -p 'derive-backward{data=x,y},append-optimizer{kind=adamw},mixed-precision{compute=f16
        loss-scale=dynamic init=65536 growth=2 backoff=0.5 interval=2000}'

Where it runs, and why: on the training step (`@NAME_step`, after derive-backward and
append-optimizer), because only there are all three parts of AMP in one function: the forward and
backward, whose ops change type; the optimizer update, which must stay f32 (master weights and
moments: a bf16 weight loses an update smaller than 2^-8 of it); and, with dynamic loss scaling, the
decision to skip that update, which needs both the gradients and the updated state. The
step's *training ops* are the ops the loss and the gradients depend on (derive-backward marks
each gradient's op `lamina.gradient`, `passes/derive_backward.py`; after accumulate-gradients,
each micro-batch's gradients, not their marked f32 sum); every other op before the return is the
optimizer's and is left in f32.

Each training op computes in the type its row's `amp` class names (`lamina.ir.ops.optable.Amp`,
AMP's op lists as a per-row fact): `low` (matmul, elementwise math) in `compute`, `f32` (reductions,
norms, softmax, log_softmax, scans: the loss is built on them) in f32, `follow` (layout ops,
select, gather, compares) in the type of its operands (f32 when they differ), `keep` (cast,
constant, iota) as written; a `low` op with a one-element result (a scale factor, the seed's
chain) stays f32, where low precision saves nothing and a loss scale could overflow f16. A float
operand of another type is cast first (one cast per value and type, placed before its first
reader), so parameters stay f32 arguments and are cast where a
low op reads them; a training value an optimizer op or the return reads is cast back to f32 (the
gradients come back f32, and so does the loss). fuse-elementwise fuses the casts into the
kernels beside them.

What the backward holds (`narrow-saved`, default true): casts placed before their first
reader would leave the backward reading f32 copies of the forward (an f32 softmax or layernorm
output whose transpose a weight gradient reads, the f32 copy of a bf16 residual that a norm's
VJP reads again), so a bf16 step held 0.9x of the f32 step's activations. With the option, a
data-movement op (`follow`: layout, select, gather) whose readers all cast its float result to
`compute` computes in `compute` on cast operands instead (rounding commutes with moving values;
not for one-element values, nor for a backward's move of an argument, whose forward cast it
would hold), and derive-backward's `save_narrow` recomputes in each backward the widening casts
it reads and moves into the forward the narrowing casts only it reads. Every value keeps its
bits (the tests compare them with `narrow-saved=false`); every tensor the backward holds is then
in `compute` (or an integer mask): the GPT-2 sample holds 0.5x of f32.

Loss scaling (`loss-scale`): `none`; `static` (the loss cotangent is the constant `init`, every
gradient is multiplied by 1/init in f32; no skipping, as with a fixed scale in torch: an overflow
reaches the update); `dynamic`, torch.amp.GradScaler's rule in the IR: the step takes
`%loss_scale: tensor<f32>` (role `loss_scale`, first value `init`, recorded as its argument
attribute `lamina.init`, which `lamina.train` starts it at) and `%good_steps: tensor<f32>`
(role `good_steps`, the clean steps since the last change, first value 0) and returns their next
values (`lamina.updates` names which argument each replaces). The scale replaces the cotangent 1
that seeds the backward (derive-backward marks it `lamina.loss_seed`), so every intermediate
cotangent is scaled; each gradient is unscaled in f32 (times 1/scale), and one test over all of
them says whether all are finite (the sum of g * 0 over every gradient is 0 exactly when none
holds an inf or a NaN). Every updated argument (parameters, moments, step count) takes
`select(finite, new, old)`: an overflowing step changes nothing but the scale. As
`torch._amp_update_scale_` (aten/src/ATen/native/cuda/AmpKernels.cu):

    finite:   good + 1 == interval ? (scale' = scale * growth if that is finite, good' = 0)
                                   : (scale' = scale, good' = good + 1)
    overflow: scale' = scale * backoff, good' = 0

The counter is an f32, exact up to 2^24 (interval is limited to that).

Order: after derive-backward and append-optimizer (and accumulate-gradients, which runs between
them), before shard-optimizer, propagate-sharding, insert-collectives, fuse-elementwise and
annotate-lifetimes: those place, fuse and plan the ops and types this pass makes. Each wrong order
is one located error naming the order (ORDER below): no training step in the module (at the
gradient function when there is one), shard-optimizer's reshards of a parameter or a gradient,
a pending sum placed (propagate-sharding ran), a `lamina.free` (annotate-lifetimes ran), a fused
kernel, a collective. Other refusals: a step without the gradient marks (its backward was written
by hand or rebuilt by a pass that dropped them), a step that already computes in f16 / bf16 (the
pass ran twice) or in f64, a non-table op among the training ops, and a loss scale on a step whose
backward is seeded by a cotangent argument rather than the constant 1. Every training op computes
as its own row says, a derived backward op included: layernorm's VJP is reductions (f32) and
elementwise math (`compute`), not layernorm's class.

With `--explain`: how many ops compute in each type, the casts inserted, the bytes of the
training values (f32 against mixed, the activations a step holds), the loss-scale rule, and what
narrow-saved moved (data-movement ops, casts recomputed or moved, the bytes not held).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from lamina.ir.buffers.updates import (
    GRADIENT_ATTR,
    GRADIENTS_ATTR,
    roles_of,
    set_initial_value,
    set_roles,
    set_updates,
    updates_of,
)
from lamina.ir.builder import Builder, is_float_value, set_dtype
from lamina.ir.core.diagnostics import LaminaError, error_at
from lamina.ir.core.dtypes import element_name, nbytes
from lamina.ir.core.shapes import info_of
from lamina.ir.mesh.collectives import ReshardOp
from lamina.ir.ops.fused import FusedOp
from lamina.ir.ops.lamina import CastOp
from lamina.ir.ops.opbase import LaminaOp
from lamina.ir.ops.optable import Amp
from lamina.passes.derive_backward import SEED_ATTR, Narrowed, save_narrow
from lamina.passes.explain import ExplainLog, LaminaPass
from lamina.passes.train_common import check_unplanned, named_functions, returned_as
from xdsl.context import Context
from xdsl.dialects.builtin import Float32Type, FunctionType, ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, BlockArgument, Operation, SSAValue

PASS = "mixed-precision"
ORDER = ("after append-optimizer, before shard-optimizer, propagate-sharding, insert-collectives, "
         "fuse-elementwise and annotate-lifetimes")
LOW_TYPES = ("bf16", "f16")
MAX_INTERVAL = 1 << 24   # the f32 counter counts exactly up to here


def _dtype(v: SSAValue) -> str | None:
    t = v.type
    return element_name(t.element_type) if isinstance(t, TensorType) else None


def _first_gradients(ops: Sequence[Operation]) -> list[SSAValue]:
    """The marked gradients computed from no other marked gradient: derive-backward's, or each
    micro-batch's where accumulate-gradients also marks their f32 sum (left to the optimizer's
    side, so the accumulation stays f32)."""
    downstream: set[SSAValue] = set()
    grads: list[SSAValue] = []
    for op in ops:
        after = any(o in downstream for o in op.operands)
        if GRADIENT_ATTR in op.attributes and not after:
            grads.append(op.results[0])
        if after or GRADIENT_ATTR in op.attributes:
            downstream.update(op.results)
    return grads


def _training_ops(func: FuncOp, ret: ReturnOp, loss: SSAValue) -> tuple[list[Operation],
                                                                        list[SSAValue]]:
    """The ops the loss and the gradients depend on, in program order, and the gradients."""
    ops = list(func.body.block.ops)[:-1]
    grads = _first_gradients(ops)
    if not grads:
        raise error_at(func, f"{PASS}: @{func.sym_name.data} has no op marked {GRADIENT_ATTR} "
                       "(derive-backward marks each gradient; derive the step with it)")
    needed: set[SSAValue] = {loss, *grads}
    kept: list[Operation] = []
    for op in reversed(ops):
        if any(r in needed for r in op.results):
            kept.append(op)
            needed.update(op.operands)
    kept.reverse()
    return kept, grads


def _check_order(func: FuncOp) -> None:
    """Refuse a step a later pass already rewrote (module docstring, Order)."""
    check_unplanned(func, PASS, ORDER)
    args = func.body.block.args
    params = {args[i] for i, r in roles_of(func).items() if r.name == "parameter"}
    for op in func.walk():
        src = op.operands[0] if isinstance(op, ReshardOp) else None
        if src is not None and (src in params or (isinstance(src.owner, Operation)
                                                  and GRADIENT_ATTR in src.owner.attributes)):
            what = f"%{src.name_hint}" if src.name_hint else "a parameter or a gradient"
            raise error_at(op, f"{PASS}: @{func.sym_name.data} reshards {what} (shard-optimizer "
                           f"ran already); run {PASS} {ORDER}")
        if isinstance(op, FusedOp):
            raise error_at(op, f"{PASS} runs before fuse-elementwise: @{func.sym_name.data} "
                           "holds a lamina.fused kernel (fuse the mixed step, which also fuses "
                           "its casts)")


def _check(func: FuncOp, ops: Sequence[Operation]) -> None:
    for op in ops:
        if not isinstance(op, LaminaOp):
            raise error_at(op, f"{PASS}: {op.name} is not an op-table op; run {PASS} {ORDER}")
        for v in (*op.operands, *op.results):
            d = _dtype(v)
            if d in (*LOW_TYPES, "f64"):
                raise error_at(op, f"{PASS}: @{func.sym_name.data} already computes in {d} "
                               f"here; the pass takes an f32 training step (once)")


def _target(op: LaminaOp, low: str) -> str | None:
    """The float type `op` computes in (its row's amp class), or None to leave it as written."""
    amp = op.info.amp
    floats = {_dtype(v) for v in op.operands if is_float_value(v)}
    if amp == Amp.KEEP or not floats:
        return None
    if amp == Amp.LOW:   # a one-element result (a scale factor) gains nothing from low precision
        return "f32" if math.prod(info_of(op.results[0]).shape) == 1 else low
    if amp == Amp.F32 or len(floats) > 1:
        return "f32"
    return floats.pop()


class _Retype:
    """Retypes the training ops in order, with one cast per (value, type)."""

    def __init__(self, low: str) -> None:
        self.low = low
        self.casts: dict[tuple[SSAValue, str], SSAValue] = {}
        self.counts: dict[str, int] = {}
        self.original: dict[SSAValue, str] = {}

    def cast(self, v: SSAValue, dtype: str, before: Operation) -> SSAValue:
        key = (v, dtype)
        got = self.casts.get(key)
        if got is None:
            got = self.casts[key] = Builder.before_op(before, before.location).cast(v, dtype)
        return got

    def op(self, op: LaminaOp) -> None:
        t = _target(op, self.low)
        if t is None:
            return
        for i, v in enumerate(op.operands):
            if is_float_value(v) and _dtype(v) != t:
                op.operands[i] = self.cast(v, t, op)
        r = op.results[0]
        if is_float_value(r) and _dtype(r) != t:
            self.original[r] = _dtype(r) or "f32"
            set_dtype(r, t)
        self.counts[t] = self.counts.get(t, 0) + 1

    def drop(self, c: CastOp) -> None:
        """Forget and erase a cast no op reads any more."""
        key = (c.operands[0], _dtype(c.results[0]) or "")
        if self.casts.get(key) is c.results[0]:
            del self.casts[key]
        c.detach()
        c.erase()

    def narrow_moves(self, ops: Sequence[Operation], starts: Sequence[Operation]) -> int:
        """Compute in the low type each data-movement op (`follow`: layout, select, gather)
        whose float result every reader casts to it, casting its operands instead (a widened
        low value is read as it was). Rounding commutes with moving and picking values, so
        every value read afterwards has the same bits; what changes is the copy a backward reads
        (the forward's f32 softmax, layernorm output or transposed weight becomes its bf16
        cast). Walked from the end, so a chain of moves narrows whole. `starts` are the
        backwards' first ops: a backward's move of an argument stays as it is (it would read
        the forward's cast of the argument, holding it for the backward)."""
        block = ops[0].parent if ops else None
        if block is None:
            return 0
        narrow = _Narrowing(self, block, starts)
        moved = 0
        for op in reversed(ops):
            if op.parent is None or not isinstance(op, LaminaOp) or op.info.amp != Amp.FOLLOW:
                continue
            r = op.results[0]
            casts = [u.operation for u in r.uses]
            if not is_float_value(r) or _dtype(r) == self.low or not casts or not all(
                    isinstance(c, CastOp) and _dtype(c.results[0]) == self.low for c in casts
            ) or narrow.argument_in_backward(op) or _moves_a_scalar(op):
                continue
            for i, v in enumerate(op.operands):
                if is_float_value(v) and _dtype(v) != self.low:
                    op.operands[i] = narrow.operand(v, op)
                    if isinstance(v.owner, CastOp) and not v.uses:
                        self.drop(v.owner)
            self.original.setdefault(r, _dtype(r) or "f32")
            set_dtype(r, self.low)
            for c in set(casts):
                assert isinstance(c, CastOp)
                c.results[0].replace_all_uses_with(r)
                self.drop(c)
            moved += 1
        return moved


def _moves_a_scalar(op: Operation) -> bool:
    """Whether every float operand has one element (a broadcast seed or scale: holding it costs
    nothing, and its chain stays f32 as the module docstring says of one-element values)."""
    return all(math.prod(info_of(v).shape) == 1 for v in op.operands if is_float_value(v))


class _Narrowing:
    """The low operands of the data-movement ops `_Retype.narrow_moves` narrows: positions in
    the block (a new cast takes its reader's) and which backward each op is in."""

    def __init__(self, retype: _Retype, block: Block, starts: Sequence[Operation]) -> None:
        self.retype, self.block = retype, block
        self.pos: dict[Operation, float] = {op: i for i, op in enumerate(block.ops)}
        self.bounds = sorted(self.pos[s] for s in starts)

    def argument_in_backward(self, op: Operation) -> bool:
        """Whether `op` is in a backward and moves an argument: narrowing it would read the
        forward's cast of the argument, held for it, where the f32 argument is held anyway."""
        return any(b <= self.pos[op] for b in self.bounds) and any(
            isinstance(v, BlockArgument) and is_float_value(v) for v in op.operands)

    def operand(self, v: SSAValue, reader: Operation) -> SSAValue:
        """`v` in the low type for `reader`: the low value a cast widened (exact both ways), or
        the cast of `v` made for an earlier reader (moved up to `reader` when it precedes it:
        `v` is defined before `reader`, which reads it), or a new one."""
        w = v.owner
        low = self.retype.low
        if isinstance(w, CastOp) and _dtype(w.operands[0]) == low:
            return w.operands[0]
        got = self.retype.cast(v, low, reader)
        c = got.owner
        assert isinstance(c, Operation)
        if c not in self.pos:
            self.pos[c] = self.pos[reader] - 0.5
        elif self.pos[reader] < self.pos[c]:
            c.detach()
            self.block.insert_op_before(c, reader)
            self.pos[c] = self.pos[reader] - 0.5
        return got


@dataclass
class _Scaling:
    """The loss-scale values of one step: the scale (f32, rank 0) and, when dynamic, the
    counter argument."""

    scale: SSAValue
    good: SSAValue | None


class _Step:
    """Rewrites one training step (module docstring)."""

    def __init__(self, p: MixedPrecision, func: FuncOp) -> None:
        self.p, self.func = p, func
        ret = func.body.block.last_op
        assert isinstance(ret, ReturnOp)
        self.ret = ret
        loose = [r for r in range(len(ret.operands)) if r not in updates_of(func)]
        self.loss = ret.operands[loose[-1]]

    def run(self, log: ExplainLog | None) -> None:
        _check_order(self.func)
        ops, grads = _training_ops(self.func, self.ret, self.loss)
        _check(self.func, ops)
        before = sum(nbytes(r.type) for op in ops for r in op.results)
        retype = _Retype(self.p.compute)
        for op in ops:
            assert isinstance(op, LaminaOp)
            retype.op(op)
        narrowed, moves = Narrowed(), 0
        if self.p.narrow_saved:
            seeds = [op for op in ops if SEED_ATTR in op.attributes]
            moves = retype.narrow_moves(ops, seeds)
            narrowed = save_narrow(self.func.body.block, seeds)
        training = set(ops) | set(narrowed.made)
        training.update(c.owner for c in retype.casts.values() if isinstance(c.owner, Operation))
        scaling = self.scaling(ops)
        outside = self.back_to_f32(retype, training, set(grads), scaling)
        if scaling is not None and scaling.good is not None:
            self.skip_and_update(outside, scaling)
        if log is not None:
            self.explain(log, retype, before, ops)
            self.explain_saved(log, moves, narrowed)

    def scaling(self, ops: Sequence[Operation]) -> _Scaling | None:
        """The scale in place of the loss seed (None without loss scaling)."""
        if self.p.loss_scale == "none":
            return None
        seeds = [op for op in ops if SEED_ATTR in op.attributes]
        if not seeds:
            raise error_at(self.func, f"{PASS}: loss-scale={self.p.loss_scale} needs the constant "
                           f"seed of the backward (derive-backward marks it {SEED_ATTR}); "
                           f"@{self.func.sym_name.data} has none (a loss of more than one "
                           "element is pulled back from a cotangent argument)")
        block = self.func.body.block
        good = None
        if self.p.loss_scale == "dynamic":
            scalar = TensorType(Float32Type(), [])
            scale = block.insert_arg(scalar, len(block.args))
            scale.name_hint = "loss_scale"
            good = block.insert_arg(scalar, len(block.args))
            good.name_hint = "good_steps"
        else:
            scale = Builder.before_op(seeds[0]).scalar(self.p.init, "f32")
        for seed in seeds:
            b = Builder.before_op(seed, seed.location)
            r = seed.results[0]
            value = b.cast(b.broadcast_to(scale, info_of(r).shape), info_of(r).dtype)
            r.replace_all_uses_with(value)
            seed.detach()
            seed.erase()
        return _Scaling(scale, good)

    def back_to_f32(self, retype: _Retype, training: set[Operation], grads: set[SSAValue],
                    scaling: _Scaling | None) -> dict[SSAValue, SSAValue]:
        """Cast each retyped training value back where a non-training op reads it, unscaling a
        gradient; returns the unscaled gradients by gradient."""
        out: dict[SSAValue, SSAValue] = {}
        for v in [*retype.original, *(g for g in grads if g not in retype.original)]:
            uses = [u for u in list(v.uses) if u.operation not in training]
            if not uses:
                continue
            first = min((u.operation for u in uses), key=self.position)
            b = Builder.before_op(first, self.func.location)
            w = b.cast(v, retype.original.get(v, _dtype(v) or "f32"))
            if v in grads and scaling is not None:
                w = b.mul(w, b.div(b.scalar(1.0, "f32"), scaling.scale))
                out[v] = w
            elif v in grads:
                out[v] = w
            for u in uses:
                u.operation.operands[u.index] = w
        return out

    def position(self, op: Operation) -> int:
        return list(self.func.body.block.ops).index(op)

    def skip_and_update(self, unscaled: dict[SSAValue, SSAValue], s: _Scaling) -> None:
        """Select the old state on overflow, and return the next scale and counter."""
        assert s.good is not None
        p, ret, func = self.p, self.ret, self.func
        b = Builder.before_op(ret, func.location)
        zero = b.scalar(0.0, "f32")
        total: SSAValue | None = None
        for g in unscaled.values():
            part = b.reduce_sum(b.mul(g, zero), list(range(len(info_of(g).shape))))
            total = part if total is None else b.add(total, part)
        assert total is not None
        finite = b.eq(total, zero)
        finite.name_hint = "grads_finite"
        args = func.body.block.args
        updates = updates_of(func)
        results = list(ret.operands)
        for r, a in updates.items():
            results[r] = returned_as(b, b.select(finite, results[r], args[a]), args[a].type)
        one = b.scalar(1.0, "f32")
        nxt = b.add(s.good, one)
        at = b.eq(nxt, b.scalar(float(p.interval), "f32"))
        grown = b.mul(s.scale, b.scalar(p.growth, "f32"))
        grown_ok = b.eq(b.sub(grown, grown), zero)
        kept = b.select(at, b.select(grown_ok, grown, s.scale), s.scale)
        scale2 = b.select(finite, kept, b.mul(s.scale, b.scalar(p.backoff, "f32")))
        good2 = b.select(finite, b.select(at, zero, nxt), zero)
        scale2.name_hint, good2.name_hint = "next_loss_scale", "next_good_steps"
        loss_at = results.index(self.loss)
        results[loss_at:loss_at] = [scale2, good2]
        updates = {(r if r < loss_at else r + 2): a for r, a in updates.items()}
        assert isinstance(s.scale, BlockArgument) and isinstance(s.good, BlockArgument)
        updates[loss_at], updates[loss_at + 1] = s.scale.index, s.good.index
        ret.detach()
        ret.erase()
        func.body.block.add_op(ReturnOp(*results))
        func.function_type = FunctionType.from_lists([a.type for a in args],
                                                     [v.type for v in results])
        set_updates(func, updates)
        set_roles(func, {len(args) - 2: "loss_scale", len(args) - 1: "good_steps"})
        set_initial_value(func, len(args) - 2, p.init)   # what lamina.train starts the scale at

    def explain_saved(self, log: ExplainLog, moves: int, narrowed: Narrowed) -> None:
        name = f"@{self.func.sym_name.data}"
        if not self.p.narrow_saved:
            log.add(self.func, f"{name}: narrow-saved=false: each cast stays where its first "
                    "reader is, and the backward reads the forward's wide copies")
            return
        log.add(self.func, f"{name}: what the backward reads of the forward, at the same bits: "
                f"{moves} data-movement op(s) moved to {self.p.compute} ahead of the casts their "
                f"readers made; {narrowed.recomputed} cast(s) recomputed in the backward, "
                f"{narrowed.moved} narrowing cast(s) moved into the forward "
                f"({narrowed.saved_bytes} bytes of copies not held for the backward)")

    def explain(self, log: ExplainLog, retype: _Retype, before: int,
                ops: Sequence[Operation]) -> None:
        after = sum(nbytes(r.type) for op in ops if op.parent is not None for r in op.results)
        after += sum(nbytes(c.type) for c in retype.casts.values())
        counts = ", ".join(f"{n} in {t}" for t, n in sorted(retype.counts.items()))
        log.add(self.func, f"@{self.func.sym_name.data}: {len(ops)} training op(s): {counts}; "
                f"{len(retype.casts)} cast(s) inserted; training values {before} bytes in f32, "
                f"{after} bytes mixed; optimizer ops left in f32")
        rule = {"none": "no loss scaling",
                "static": f"static loss scale {self.p.init} (gradients times 1/{self.p.init})",
                "dynamic": f"dynamic loss scale (%loss_scale from {self.p.init}, growth "
                f"{self.p.growth} after {self.p.interval} clean steps, backoff {self.p.backoff}; "
                "an overflowing step keeps every updated argument)"}[self.p.loss_scale]
        log.add(self.func, f"@{self.func.sym_name.data}: {rule}")


def _steps(module: ModuleOp, name: str) -> list[FuncOp]:
    funcs = [op for op in module.ops if isinstance(op, FuncOp)]
    if name:
        return named_functions(funcs, name, PASS)
    chosen = [f for f in funcs if updates_of(f)]
    if not chosen:
        grads = [f for f in funcs if GRADIENTS_ATTR in f.attributes]
        raise error_at(grads[0] if grads else module,
                       f"{PASS}: the module has no training step (a function with "
                       f"lamina.updates): run derive-backward and append-optimizer first; {PASS} "
                       f"runs {ORDER}")
    return chosen


@dataclass(frozen=True)
class MixedPrecision(LaminaPass):
    """Compute a training step's forward and backward in bf16 / f16 (see the module docstring)."""

    name: ClassVar[str] = PASS
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"compute": LOW_TYPES, "master": ("f32",),
                                                     "loss_scale": ("none", "static", "dynamic")}
    minimums: ClassVar[dict[str, int]] = {"interval": 1}
    func: str = ""
    compute: str = "bf16"
    master: str = "f32"
    loss_scale: str = "none"
    init: float = 65536.0
    growth: float = 2.0
    backoff: float = 0.5
    interval: int = 2000
    narrow_saved: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        for option, value, ok, want in (
                ("init", self.init, self.init > 0, "> 0"),
                ("growth", self.growth, self.growth >= 1, ">= 1"),
                ("backoff", self.backoff, 0 < self.backoff <= 1, "in (0, 1]"),
                ("interval", self.interval, self.interval <= MAX_INTERVAL, f"<= {MAX_INTERVAL}")):
            if not ok:
                raise LaminaError(f"option '{option}' for {PASS} must be {want}, got {value}")

    def run(self, ctx: Context, module: ModuleOp, log: ExplainLog | None) -> None:
        for f in _steps(module, self.func):
            _Step(self, f).run(log)

