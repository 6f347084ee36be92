"""`fuse-attention`: softmax(f(q k^T)) v as one `lamina.fused "attention"` kernel.

    -p 'fuse-attention{explain=false}'

What it changes. Every match of

    %s = lamina.matmul %q, %kt                 q [..., Tq, Dh], kt [..., Dh, Tk]
    score ops on %s                            elementwise, scores-shaped (scale, causal select)
    %p = lamina.softmax ... {axis = -1}        over the keys
    prob ops on %p                             elementwise, homogeneous-linear in %p (dropout,
                                               a multiplication by a mask or a constant)
    %o = lamina.matmul %p', %v                 v [..., Tk, Dv]

becomes one `lamina.fused "attention"` whose body is exactly those ops, plus the side ops that
build their other operands from constants alone (a causal mask from two index constants) when
nothing else uses them; constants are cloned in, as fuse-elementwise does. The body stays the
semantics: a backend may run it op by op (the JAX backend and the SPMD interpreter do), while the
NumPy interpreter runs it as a flash-style kernel whose scores never exist whole
(`lamina.backends.numpy.attention`). The structure and its rules live in `lamina.ir.ops.attention`,
which the verifier checks on the fused op too, so the pass and the verifier agree by construction.

What it assumes. The roles come from the op table alone: matmul and softmax are recognized by
their rows' formulas, a score op must be ELEMENTWISE, and a prob op homogeneous-linear in the
probabilities by its row's `Linearity` and `linear_operands` (that is what lets the online
softmax rescale the accumulator instead of the probabilities). Run it before fuse-elementwise
(which would otherwise take the softmax into a row-reduction kernel and leave nothing to match)
and before annotate-lifetimes (a `lamina.free` is a second use of a chain value).

What it refuses, leaving the program unchanged and saying why with `--explain` at the first
matmul: a chain value with a use outside the pattern, a softmax not over the last axis, a
non-linear or affine op after the softmax, a score op that is not elementwise or changes the
scores' type, an operand that does not broadcast into the scores, probabilities as the second
matmul's right operand, values on different meshes or memory tiers. Every matmul gets one line,
a match or a refusal. `lamina.fused` ops are not op-table ops, so a second run changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lamina.analysis.fusion import build_fused, placement_key
from lamina.analysis.naming import Namer
from lamina.ir.ops.attention import NotAttention, follow_chain, is_matmul, shape_of
from lamina.ir.ops.opbase import LaminaOp
from lamina.ir.ops.optable import Fusion
from lamina.passes.explain import ExplainLog, LaminaPass
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.ir import Block, Operation, SSAValue


@dataclass(frozen=True)
class FuseAttention(LaminaPass):
    """Fuse q k^T -> scale/mask -> softmax -> dropout -> @ v into one attention kernel."""

    name: ClassVar[str] = "fuse-attention"

    def run(self, ctx: Context, module: ModuleOp, log: ExplainLog | None) -> None:
        for op in list(module.walk()):
            if isinstance(op, FuncOp) and op.body.blocks:
                _fuse_function(op, log)


def _fuse_function(func: FuncOp, log: ExplainLog | None) -> None:
    """Match every matmul of `func`'s body in program order; fuse the matches."""
    block = func.body.block
    name = Namer(func)
    taken: set[Operation] = set()
    for op in list(block.ops):
        if op in taken or not (isinstance(op, LaminaOp) and is_matmul(op)):
            continue
        try:
            members, n_side = _match(op, block, name)
        except NotAttention as e:
            if log is not None:
                log.add(op, f"not fused as attention: {e}")
            continue
        taken.update(members)
        if log is not None:
            scores = "x".join(map(str, shape_of(op.results[0])))
            log.add(op, f"attention: {name.op(op)} ... {name.op(members[-1])} -> lamina.fused "
                        f"\"attention\" ({len(members)} ops, {n_side} of them building side "
                        f"operands; the {scores} scores are never stored)")
        _replace(members, block)


def _match(qk: LaminaOp, block: Block, name: Namer) -> tuple[list[Operation], int]:
    """The members of the attention kernel rooted at matmul `qk`, in program order, and how many
    of them are side ops pulled in; NotAttention when `qk` does not start one."""
    scores, sm, probs, pv = follow_chain(qk, name)
    chain: list[LaminaOp] = [qk, *scores, sm, *probs, pv]
    keys: set[object] = set()
    for o in chain:
        key, why = placement_key(o)
        if why is not None:
            raise NotAttention(f"{name.op(o)} {why}")
        keys.add(key)
    if len(keys) > 1:
        raise NotAttention("its values lie on different meshes or memory tiers")
    side = _side_ops(chain, keys)
    pos = {o: i for i, o in enumerate(block.ops)}
    members: list[Operation] = sorted([*chain, *side], key=lambda o: pos[o])
    return members, len(side)


def _side_ops(chain: list[LaminaOp], keys: set[object]) -> list[LaminaOp]:
    """The ops building the chain's other operands from constants alone (elementwise or
    broadcast ops whose operands are constants or such ops), pulled in when every use of each
    is inside the kernel. Constants themselves are cloned into the body by `build_fused`."""
    cone: set[LaminaOp] = set()
    seen: dict[Operation, bool] = {}   # each op decided once, so a shared subgraph costs once

    def constant_derived(v: SSAValue) -> bool:
        p = v.owner
        if not isinstance(p, LaminaOp):
            return False
        if p.info.fusion == Fusion.SOURCE:
            return True
        if p not in seen:
            seen[p] = p.info.fusion in (Fusion.ELEMENTWISE, Fusion.BROADCAST) and \
                placement_key(p)[0] in keys and all(constant_derived(w) for w in p.operands)
            if seen[p]:
                cone.add(p)
        return seen[p]

    chain_set = set(chain)
    for o in chain[1:-1]:
        for v in o.operands:
            if v.owner not in chain_set:
                constant_derived(v)
    inside: set[Operation] = {*chain, *cone}
    changed = True
    while changed:   # drop every op with a use outside, then what only it kept inside
        changed = False
        for p in list(cone):
            if any(u.operation not in inside for r in p.results for u in r.uses):
                cone.discard(p)
                inside.discard(p)
                changed = True
    return list(cone)


def _replace(members: list[Operation], block: Block) -> None:
    """Put the fused op where the second matmul, the last member, was (every input is defined
    before it, and its one result is used only after it), then drop constants nothing uses any
    more."""
    pv = members[-1]
    consts = {v.owner for m in members for v in m.operands
              if isinstance(v.owner, LaminaOp) and v.owner.info.fusion == Fusion.SOURCE}
    anchor = pv.next_op
    fused = build_fused(members)
    if anchor is not None:
        block.insert_op_before(fused, anchor)
    else:
        block.add_op(fused)
    for c in consts:
        if isinstance(c, Operation) and c.parent is block and all(not r.uses for r in c.results):
            c.detach()
            c.erase()
