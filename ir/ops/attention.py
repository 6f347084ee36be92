"""The structure of a `lamina.fused "attention"` body: which op plays which part.

    %s = lamina.matmul %q, %kt          q [..., Tq, Dh], kt [..., Dh, Tk]: block arguments
    %x = f_n(... f_1(%s, w_1) ..., w_n)  score ops: elementwise, the chain once among operands
    %p = lamina.softmax %x {axis = -1}   over the keys (the last axis); `safe` or not
    %y = g_m(... g_1(%p, u_1) ..., u_m)  prob ops: elementwise and homogeneous-linear in the chain
    %o = lamina.matmul %y, %v            v [..., Tk, Dv]: a block argument; %o is the one result

The values from %s to %y are the chain; each is used exactly once, by the next op of the chain, so
none of them has to exist whole: an executor may compute them one block of keys at a time with
an online softmax (running max and sum, the accumulator of %o rescaled when the max grows). That
is exact in real arithmetic only because every prob op g is homogeneous-linear in the chain,
g(a * p) = a * g(p) for a scalar a per query row, so rescaling commutes with it: dropout, a
multiplication by a mask or a constant, a division by a constant. Linearity is read from the op table
(`Linearity`, `linear_operands`), never from op names.

Every other op is a side op: it reads only block arguments, constants and other side values, never
the chain, and broadcasts into the scores' shape [..., Tq, Tk] (the w_i and u_i above: a scale
constant, a causal mask built from constants). An executor computes side values once per kernel
and slices them per block.

A `safe` softmax (0 for a query whose every score is -inf: PyTorch's sdpa with a mask) is the
same row, so it plays the same part; an executor reads the attribute to give such a row 0.

When the last score op is a select between the running scores and a one-element fill, with a
side value as its condition (a causal mask writing -1e9), `masked_fill` names its parts: an
executor may then tell from the mask alone which blocks of scores hold nothing but the fill.

The verifier (`lamina.ir.ops.fused`) and the executors read this one function, so they cannot disagree
on what an attention body is. Matmul and softmax are recognized by their rows' formulas (the
semantics the table gives them), which keeps this module free of op names too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from lamina.ir.buffers.memory import FreeOp, value_label
from lamina.ir.mesh.sharding import Linearity
from lamina.ir.ops import formulas as fm
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from lamina.ir.ops.optable import Fusion
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Block, Operation, SSAValue


@dataclass
class AttentionParts:
    """The ops of an attention body by role (see the module docstring), each list in body order."""

    qk: LaminaOp
    scores: list[LaminaOp]
    softmax: LaminaOp
    probs: list[LaminaOp]
    pv: LaminaOp
    side: list[LaminaOp]

    @property
    def scores_shape(self) -> tuple[int, ...]:
        return shape_of(self.qk.results[0])


@dataclass
class MaskedFill:
    """The last score op when it is `select(mask, scores, fill)` (or with the branches swapped):
    `mask` and `fill` side values, `fill` of one element; `chain_slot` is the scores' operand
    slot, 1 (the true branch: the fill where the mask is false) or 2 (where it is true)."""

    select: LaminaOp
    mask: SSAValue
    fill: SSAValue
    chain_slot: int


class NotAttention(Exception):
    """Why a body (or a candidate pattern) is not an attention kernel; the message says it."""


def shape_of(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def is_matmul(op: Operation) -> bool:
    return isinstance(op, LaminaOp) and op.info.formula is fm.matmul


def is_softmax(op: Operation) -> bool:
    return isinstance(op, LaminaOp) and op.info.formula is fm.softmax


def is_select(op: Operation) -> bool:
    return isinstance(op, LaminaOp) and op.info.formula is fm.select


def softmax_over_last(op: LaminaOp) -> bool:
    """Whether a softmax normalizes over its operand's last axis (the keys)."""
    rank = len(shape_of(op.operands[0]))
    return rank > 0 and op.attr_values()["axis"] % rank == rank - 1


def chain_slots(op: LaminaOp, chain: SSAValue) -> list[int]:
    """The operand slots of `op` that read `chain`."""
    return [i for i, v in enumerate(op.operand_slots()) if v is chain]


def linear_in_chain(op: LaminaOp, chain: SSAValue) -> str | None:
    """None when `op` is homogeneous-linear in `chain`, g(a * p) = a * g(p), from the op table's
    facts; else why not. ONE_SIDED is linear in each listed operand with the others fixed; an
    ADDITIVE op is linear jointly in all its operands, so it counts only when the chain is its
    only operand (neg). An affine op (add of a constant) is neither."""
    slots = chain_slots(op, chain)
    if op.info.fusion != Fusion.ELEMENTWISE:
        return f"is {op.info.fusion.value}, not elementwise"
    if len(slots) != 1:
        return "reads the probabilities more than once"
    if slots[0] not in op.info.linear_operands:
        return "is not linear in the probabilities"
    lin = op.info.linearity_for(op.operand_infos(), tensor_info(op.results[0].type))
    present = [v for v in op.operand_slots() if v is not None]
    if lin == Linearity.ONE_SIDED or (lin == Linearity.ADDITIVE and len(present) == 1):
        return None
    return "is not homogeneous-linear in the probabilities (an affine op)"


def score_op_problem(op: LaminaOp, chain: SSAValue, shape: tuple[int, ...]) -> str | None:
    """Why `op` cannot be a score op on `chain` (None when it can): it must be elementwise and
    keep the scores' shape and element type (that it reads the chain once, `follow_chain`
    checks by counting the chain value's uses)."""
    if op.info.fusion != Fusion.ELEMENTWISE:
        return f"is {op.info.fusion.value}, not elementwise"
    if shape_of(op.results[0]) != shape or op.results[0].type != chain.type:
        return "changes the scores' shape or element type"
    return None


Namer = Callable[[SSAValue], str]


def _chain_next(v: SSAValue, name: Namer, frees: bool) -> LaminaOp:
    """The one op that uses chain value `v`; NotAttention when it has other uses (a
    `lamina.free` counts only with `frees`)."""
    uses = [u for u in v.uses if frees or not isinstance(u.operation, FreeOp)]
    if len(uses) != 1:
        raise NotAttention(f"{name(v)} is used {len(uses)} times; every value of the chain must "
                           "be used once, by the next op")
    user = uses[0].operation
    if not isinstance(user, LaminaOp):
        raise NotAttention(f"{name(v)} is used by {user.name}, not by an op-table op")
    return user


def _broadcasts_into(s: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    tail = shape[len(shape) - len(s):]
    return len(s) <= len(shape) and all(a in (1, b) for a, b in zip(s, tail, strict=True))


def _side_problem(op: LaminaOp, chain: SSAValue, shape: tuple[int, ...], name: Namer
                  ) -> str | None:
    for v in op.operands:
        if v is not chain and not _broadcasts_into(shape_of(v), shape):
            return f"reads {name(v)}, which does not broadcast into the scores"
    return None


def follow_chain(qk: LaminaOp, name: Namer = value_label, frees: bool = True
                 ) -> tuple[list[LaminaOp], LaminaOp, list[LaminaOp], LaminaOp]:
    """From the first matmul along the chain (score ops, softmax, prob ops) to the second matmul;
    NotAttention naming the first rule broken. Every chain value must have exactly one use; with
    `frees=False` its `lamina.free` is not one (inside a fused body annotate-lifetimes frees the
    intermediates, which ends their tile buffers; outside, a free is a use the kernel would
    have to keep the value for)."""
    shape = shape_of(qk.results[0])
    if len(shape) < 2:
        raise NotAttention("the scores need a query and a key axis")
    chain: SSAValue = qk.results[0]
    scores: list[LaminaOp] = []
    op = _chain_next(chain, name, frees)
    while not is_softmax(op):
        why = score_op_problem(op, chain, shape) or _side_problem(op, chain, shape, name)
        if why is not None:
            raise NotAttention(f"the scores flow into {name(op.results[0])} = {op.name}, which {why}")
        scores.append(op)
        chain = op.results[0]
        op = _chain_next(chain, name, frees)
    sm = op
    if not softmax_over_last(sm):
        raise NotAttention(f"the softmax {name(sm.results[0])} normalizes over axis "
                           f"{sm.attr_values()['axis']}, not the last axis (the keys)")
    chain = sm.results[0]
    probs: list[LaminaOp] = []
    op = _chain_next(chain, name, frees)
    while not is_matmul(op):
        why = linear_in_chain(op, chain)
        if why is None and (shape_of(op.results[0]) != shape or op.results[0].type != chain.type):
            why = "changes the shape or element type"
        why = why or _side_problem(op, chain, shape, name)
        if why is not None:
            raise NotAttention(f"the probabilities flow into {name(op.results[0])} = {op.name}, "
                               f"which {why}")
        probs.append(op)
        chain = op.results[0]
        op = _chain_next(chain, name, frees)
    if op.operands[0] is not chain:
        raise NotAttention("the probabilities must be the second matmul's left operand")
    if shape_of(op.results[0])[:-1] != shape[:-1]:
        raise NotAttention("v must not broadcast the output past the scores' batch dims")
    return scores, sm, probs, op


def attention_parts(block: Block) -> AttentionParts:
    """The roles of the ops of an attention body; NotAttention naming the first rule broken."""
    ops = [o for o in block.ops if isinstance(o, LaminaOp)]
    qk = next((o for o in ops if is_matmul(o)), None)
    if qk is None:
        raise NotAttention("the body has no matmul")
    scores, sm, probs, pv = follow_chain(qk, frees=False)
    args = set(block.args)
    if any(v not in args for v in (*qk.operands, pv.operands[1])):
        raise NotAttention("q, k^T and v must be block arguments")
    chain = {qk, *scores, sm, *probs, pv}
    side = [o for o in ops if o not in chain]
    for o in side:
        if o.info.fusion not in (Fusion.ELEMENTWISE, Fusion.BROADCAST, Fusion.SOURCE):
            raise NotAttention(f"{o.name} is {o.info.fusion.value} and off the chain")
    term = block.last_op
    assert term is not None
    if list(term.operands) != [pv.results[0]]:
        raise NotAttention("the body must yield the second matmul's result alone")
    return AttentionParts(qk, scores, sm, probs, pv, side)


def masked_fill(parts: AttentionParts) -> MaskedFill | None:
    """The scores' final masking select (`MaskedFill`), or None when the last score op is anything
    else, the fill has more than one element or the mask is the running scores."""
    if not parts.scores or not is_select(last := parts.scores[-1]):
        return None
    chain = parts.scores[-2].results[0] if len(parts.scores) > 1 else parts.qk.results[0]
    cond, a, b = last.operand_slots()
    if cond is None or cond is chain or (a is chain) == (b is chain):
        return None
    fill = b if a is chain else a
    if fill is None or math.prod(shape_of(fill)) != 1:
        return None
    return MaskedFill(last, cond, fill, 1 if a is chain else 2)
