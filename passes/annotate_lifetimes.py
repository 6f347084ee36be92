"""`annotate-lifetimes`: insert `lamina.free %v` right after the last use of every value.

    -p 'annotate-lifetimes{explain=false}'

For every block of every region in the module (function bodies, and the blocks of any region op
whose body may hold non-compute ops), each value defined there (block arguments and op results)
gets one `lamina.free` right after the op in that block that uses it last. A use inside a nested
region counts as a use by the op that holds the region, so a value is never freed while a region
that reads it is still running. Values that are never used are freed right after their definition
(arguments: at the top of the block). Not freed: values the block's terminator returns or yields
(function results are never freed), and values that already have a `lamina.free`. Inside a
`lamina.fused` body the frees end the SRAM tile buffers of its block arguments and intermediates
(the values it yields are its results and are not freed there); the checked interpreter and
assign-memory-tiers charge a fused op the peak of its live intermediates, not their sum.

One walk per block: O(ops + uses). With `explain=true` (or `--explain`) the pass prints each
value's live range: where it is defined, the op that uses it last, how many ops it spans and its
bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lamina.ir.buffers.memory import FreeOp, ancestor_in
from lamina.ir.core.diagnostics import op_loc
from lamina.ir.core.dtypes import nbytes
from lamina.passes.explain import ExplainLog, LaminaPass
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Block, Operation, SSAValue
from xdsl.traits import IsTerminator


def _name(v: SSAValue, names: dict[SSAValue, str]) -> str:
    return "%" + (v.name_hint or names.setdefault(v, str(len(names))))


def annotate_block(block: Block, log: ExplainLog | None, names: dict[SSAValue, str]) -> int:
    """Insert the frees of `block`'s values; returns how many were inserted."""
    ops = list(block.ops)
    pos = {op: i for i, op in enumerate(ops)}
    term = ops[-1] if ops and ops[-1].has_trait(IsTerminator) else None
    values: list[tuple[SSAValue, int]] = [(a, -1) for a in block.args]
    values += [(r, i) for i, op in enumerate(ops) for r in op.results]
    after: dict[int, list[SSAValue]] = {}
    for v, d in values:
        if not isinstance(v.type, TensorType):
            continue
        last = d
        skip = False
        for use in v.uses:
            anc = ancestor_in(use.operation, block)
            if anc is None:
                continue
            if isinstance(use.operation, FreeOp) or anc is term:
                skip = True
                break
            last = max(last, pos[anc])
        if skip:
            continue
        after.setdefault(last, []).append(v)
        if log is not None:
            where = ops[last] if last >= 0 else None
            defined = "argument" if d < 0 else f"defined by {ops[d].name}"
            loc = op_loc(where) if where is not None else None
            end = f"last used by {where.name}" + (f" at {loc}" if loc else "") \
                if where is not None and last > d else "never used"
            log.add(ops[d] if d >= 0 else block.parent_op(),
                    f"live range of {_name(v, names)}: {defined}, {end}; spans {last - d} op(s), "
                    f"{nbytes(v.type)} bytes; freed after it")
    count = 0
    for i in sorted(after, reverse=True):
        frees = [FreeOp(v) for v in after[i]]
        if i < 0:
            if ops:
                block.insert_ops_before(frees, ops[0])
            else:
                block.add_ops(frees)
        else:
            nxt = ops[i].next_op
            if nxt is None:
                block.add_ops(frees)
            else:
                block.insert_ops_before(frees, nxt)
        count += len(frees)
    return count


def annotate(root: Operation, log: ExplainLog | None) -> int:
    count = 0
    names: dict[SSAValue, str] = {}
    for op in list(root.walk()):
        for region in op.regions:
            for block in region.blocks:
                count += annotate_block(block, log, names)
    return count


@dataclass(frozen=True)
class AnnotateLifetimes(LaminaPass):
    """Free every value right after its last use (see the module docstring)."""

    name: ClassVar[str] = "annotate-lifetimes"

    def run(self, ctx: Context, module: ModuleOp, log: ExplainLog | None) -> None:
        annotate(module, log)
