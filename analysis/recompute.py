"""Which values a memory plan may recompute, and what a recompute rebuilds on the way.

`assign-memory-tiers` may drop a value and run its defining op again before a later use. That is
only sound for an op with one result that reads and writes HBM alone (a Lamina op or a fused op;
not a move, which is the plan's own business, nor a collective, which other devices take part
in). A value computed from constants alone is cheaper to rebuild than to move, so a recompute
that reads one rebuilds its whole chain instead of asking it to stay live.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lamina.ir.buffers.memory import MoveOp
from lamina.ir.mesh.collectives import PlacementOp
from lamina.ir.mesh.placement import tier_of
from lamina.ir.ops.fused import FusedOp
from lamina.ir.ops.opbase import LaminaOp
from xdsl.ir import Operation, SSAValue

# tiers a value the program placed itself lives in (it is not planned, so not recomputed)
_PLACED = ("host", "nvme", "sram")

def recomputable(op: Operation | None) -> bool:
    """An op the plan may run again: one result, reads and writes HBM only."""
    return isinstance(op, (LaminaOp, FusedOp)) and not isinstance(op, (MoveOp, PlacementOp)) \
        and len(op.results) == 1


def constant_chains(steps: list[Operation]) -> dict[SSAValue, int]:
    """The values computed from constants alone, with the depth of the ops on their way."""
    chains: dict[SSAValue, int] = {}
    for o in steps:
        if recomputable(o) and all(x in chains for x in o.operands) \
                and tier_of(o.results[0].type) not in _PLACED:
            chains[o.results[0]] = 1 + max((chains[x] for x in o.operands), default=0)
    return chains


def chain_of(v: SSAValue, chains: dict[SSAValue, int],
             operands: Mapping[SSAValue, Sequence[SSAValue]] | None = None) -> list[SSAValue]:
    """The constant-derived values a recompute of `v` rebuilds (its operands' chains), in
    definition order, without `v` itself. `operands` gives each value's operands as they were
    before a rewrite rerouted uses to copies (a rerouted operand is no longer in `chains`);
    without it, the defining ops' operands now."""
    out: list[SSAValue] = []
    for x in operands[v] if operands is not None else defining_op(v).operands:
        if x in chains and x not in out:
            out.extend(y for y in chain_of(x, chains, operands) if y not in out)
            out.append(x)
    return out


def defining_op(v: SSAValue) -> Operation:
    """The op that defines a (non-argument) value."""
    owner = v.owner
    assert isinstance(owner, Operation)
    return owner
