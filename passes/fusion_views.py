"""The checks of rules 8 and 9 of `fuse-elementwise`: layout ops and matmul roots in its groups.

Each check reads only the groups and the ops' facts and says why a merge would break a rule (or
None). The walk that asks them, and that decides where a layout op goes (`place_layout`), is the
pass's own `fuse_elementwise._FuncFusion`: these are what it asks, not part of it.

A layout op joins a kernel at one of its edges, never in the middle:

- as an *output view* of a group G, when every operand is a value G computes tile by tile (or
  another output view of G): the kernel writes the op's result directly, each tile of G's rows
  carried through the op's index map (`lamina.ir.ops.view_rules`) into its place, so the operand is
  never stored. That needs the rows a tile covers in part to map one to one through the op:
  `view_positions` follows where each of G's domain dims lands, and G keeps tiling only over the
  leading dims that every output view keeps (`Group.kept`). Nothing in G may read an output view
  (its value exists only in the kernel's result).
- as an *input view* of the group that reads it, when its operands come from outside (or from
  other input views): the kernel reads its input through the op. Such layout ops first form a
  view-only group, which the reading op's group absorbs when every use of the views is that op.
  A kernel never reads its own values through an input view (that would be a layout op in the
  middle of the kernel, whose domain it does not share).

A row-tiled opaque op (a matmul whose right operand is a weight matrix, `OpInfo.row_tiled`)
roots a "matmul" kernel: a block of result rows needs only the same rows of the left operand, so
elementwise ops on the result (bias, GeLU, dropout, residual adds) and row reductions over its
trailing dims (a LayerNorm of the result) run on each block as the matmul's epilogue. A kernel has
one such root; the matmul reads its operands whole (by rows), so it takes input views but no
elementwise prologue.
"""

from __future__ import annotations

from collections.abc import Callable

from lamina.ir.ops.opbase import LaminaOp
from lamina.passes.fusion_groups import Group, Groups, Space
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, SSAValue


def _shape(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def row_tiled_problem(op: LaminaOp) -> str | None:
    """None when `op` may root a kernel run by blocks of its result rows, else why not."""
    if not op.info.row_tiled:
        return "is opaque"
    ranks = [len(_shape(v)) for v in op.operand_slots() if v is not None]
    if not ranks or ranks[0] < 2 or any(r != 2 for r in ranks[1:]):
        return ("is opaque here (a batched matmul: a block of its result rows needs more than "
                "the same rows of its left operand)")
    return None


def least_tiles_kept(space: Space, kept: int) -> int:
    """How many tiles a kernel over `space` can be cut into at most when its output views keep
    only its first `kept` domain dims (`lamina.analysis.fusion.least_tiles`, coarsened)."""
    dims = space.lead if space.rows or len(space.lead) <= 1 else space.lead[:-1]
    n = 1
    for d in dims[:kept]:
        n *= d
    return max(1, n)


def root_problem(mine: Group, other: Group, space: Space) -> str | None:
    """Why the groups' merge over `space` breaks rule 9 (one matmul root, whose result rows are
    the kernel's rows), or None."""
    if mine.matmul and other.matmul:
        return "a kernel has one matmul at its root"
    if (mine.matmul or other.matmul) and space.rows:
        roots = [m for g in (mine, other) if g.matmul for m in g.members
                 if isinstance(m, LaminaOp) and m.info.row_tiled]
        if roots and space.form(_shape(roots[0].results[0])) not in ("full", "rowscalar"):
            return "the matmul's result rows do not line up with the reduction's rows"
    return None


def prologue_problem(groups: Groups, mine: Group, other: Group) -> str | None:
    """Why the groups' merge would give a matmul root an elementwise prologue (rule 9: it reads
    its operands whole, so only input views and values computed once per kernel may produce them
    inside its kernel), or None. Checked on every merge: a concat joining siblings or an epilogue
    reading both the matmul and its operand would otherwise pull the operand's op in."""
    for a, b in ((mine, other), (other, mine)):
        if not a.matmul:
            continue
        for m in a.members:
            if not (isinstance(m, LaminaOp) and m.info.row_tiled):
                continue
            for v in m.operands:
                p = v.owner
                if isinstance(p, Operation) and p not in groups.input_views and \
                        p not in groups.hoisted and groups.in_group(p, b):
                    return ("a matmul reads its operands whole, so an elementwise prologue stays "
                            "its own kernel")
    return None


def view_problem(groups: Groups, mine: Group, other: Group,
                 name: Callable[[Operation], str]) -> str | None:
    """Why the groups may not merge under rule 8 (layout ops only at a kernel's edges), or None."""
    for a, b in ((mine, other), (other, mine)):
        for v in a.views_out:
            for u in v.results[0].uses:
                if groups.in_group(u.operation, b):
                    return (f"{name(u.operation)} reads {name(v)}, which the kernel writes "
                            "through a layout op")
        for v in a.views_in:
            for x in v.operands:
                if isinstance(x.owner, Operation) and x.owner not in groups.input_views and \
                        groups.in_group(x.owner, b):
                    return f"the kernel would read its own {name(x.owner)} through {name(v)}"
        if a.view_only:
            if b.view_only:
                continue   # a chain of input views: checked when a kernel absorbs it
            for m in a.members:
                for u in m.results[0].uses:
                    if not (groups.in_group(u.operation, a) or groups.in_group(u.operation, b)):
                        return (f"{name(m)} is also read outside (an input view is read only by "
                                "its kernel)")
    return None
