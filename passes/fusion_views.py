"""Layout ops and matmul roots in `fuse-elementwise` groups: rules 8 and 9 of the pass.

A layout op joins a kernel at one of its edges, never in the middle:

- as an *output view* of a group G, when every operand is a value G computes tile by tile (or
  another output view of G): the kernel writes the op's result directly, each tile of G's rows
  carried through the op's index map (`lamina.ir.view_rules`) into its place, so the operand is
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

from lamina.analysis.fusion import Positions, kept_prefix, placement_key, view_positions
from lamina.analysis.sizes import fmt_bytes
from lamina.ir.opbase import LaminaOp
from lamina.passes.explain import ExplainLog
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


class LayoutPlacement:
    """Rule 8's walk step, mixed into fuse-elementwise's per-function walk: where a layout op
    goes (an output view of the group it reads, a view-only group of input views, or a concat
    joining its operands' groups first). It uses the walk's groups, options and explain channel
    and its `try_merge` (declared here, defined by the walk)."""

    groups: Groups
    sram: tuple[str, int] | None
    rowpos: dict[SSAValue, Positions]
    log: ExplainLog | None

    def explain(self, op: Operation, msg: str) -> None:
        raise NotImplementedError

    def group_limit(self) -> int:
        """The pass's max-group-size."""
        raise NotImplementedError

    def nm(self, op: Operation) -> str:
        raise NotImplementedError

    def short(self, op: Operation) -> str:
        raise NotImplementedError

    def try_merge(self, op: LaminaOp, mine: Group, other: Group) -> str | None:
        raise NotImplementedError

    def place_layout(self, op: LaminaOp) -> None:
        """Rule 8: a layout op joins the group whose tile values it reads as an output view,
        else it starts a view-only group, an input view of the kernel that will read it."""
        key, why = placement_key(op)
        if why is not None:
            self.explain(op, f"not fused: {self.nm(op)} {why}")
            return
        owners = [self.groups.of(v.owner if isinstance(v.owner, Operation) else None)
                  for v in op.operands]
        if len({id(o) for o in owners}) > 1 and all(o is not None and not o.view_only
                                                    for o in owners):
            self.join_siblings(op, [o for o in owners if o is not None])
            owners = [self.groups.of(v.owner if isinstance(v.owner, Operation) else None)
                      for v in op.operands]
        g = owners[0]
        self.groups.add(op, Space(_shape(op.results[0]), None), key)
        mine = self.groups.of(op)
        assert mine is not None
        if g is not None and not g.view_only and all(o is g for o in owners):
            why = self.try_output_view(op, mine, g)
            if why is None:
                self.explain(op, f"fused {self.nm(op)} into the kernel of "
                             f"{self.short(g.members[0])} as an output view")
                return
            self.explain(op, f"not fused as an output view: {why}")
        mine.view_only = True
        mine.views_in.append(op)
        self.groups.input_views.add(op)
        for v, o in zip(op.operands, owners, strict=True):
            mine = self.groups.of(op)
            assert mine is not None
            if o is None or not o.view_only or o.root == mine.root:
                continue
            assert isinstance(v.owner, Operation)
            why = self.try_merge(op, mine, o)
            if why is not None:
                self.explain(op, f"not fused with {self.short(v.owner)}: {why}")

    def join_siblings(self, op: LaminaOp, owners: list[Group]) -> None:
        """Merge the groups whose values a concat joins into one, so that it can write them as
        one multi-input output view: groups over the same space, checked like any merge."""
        firsts = [o.members[0] for o in owners]   # groups merge as this goes: find them anew
        for first in firsts[1:]:
            base_now, g = self.groups.of(firsts[0]), self.groups.of(first)
            assert base_now is not None and g is not None
            if g.root == base_now.root:
                continue
            why = None
            if g.key != base_now.key:
                why = "different meshes or memory tiers"
            elif g.size + base_now.size > self.group_limit():
                why = f"group would exceed max-group-size={self.group_limit()}"
            elif g.space != base_now.space:
                why = f"different iteration spaces ({g.space} vs {base_now.space})"
            else:
                why = view_problem(self.groups, base_now, g, self.short) or root_problem(
                    base_now, g, base_now.space) or prologue_problem(self.groups, base_now, g)
            if why is None:
                through = self.groups.merge(g, base_now, base_now.space, None, siblings=True)
                if through is not None:
                    why = f"would create a cycle through {self.short(through)}"
            if why is not None:
                self.explain(op, f"not joined for a multi-input write: {why}")
                return

    def try_output_view(self, op: LaminaOp, mine: Group, g: Group) -> str | None:
        """Merge the layout op's own group `mine` into `g` as an output view, or say why not."""
        if mine.key != g.key:
            return "different meshes or memory tiers"
        if mine.size + g.size > self.group_limit():
            return f"group would exceed max-group-size={self.group_limit()}"
        full = g.space.full
        pos: list[tuple[int | None, ...]] = []
        for v in op.operands:
            p = self.rowpos.get(v)
            if p is None:
                if v.owner in self.groups.hoisted:
                    return f"{self.short(v.owner)} is computed once per kernel"  # type: ignore
                if _shape(v) != full:
                    return (f"{'x'.join(map(str, _shape(v))) or 'scalar'} is not the kernel's "
                            f"whole domain ({g.space})")
                p = tuple(range(len(full)))
            pos.append(p)
        res = view_positions(op, pos)
        if res is None:
            return "its operands' rows would land in different places"
        kept = min(g.kept, kept_prefix(res, full))
        inner = self.groups.inner_after(mine, g)
        tile = -(-inner[0] // least_tiles_kept(g.space, kept))
        if self.sram is not None and tile > self.sram[1]:
            return (f"split here: the kernel's least tile would hold {fmt_bytes(tile)} "
                    f"({tile} B) of intermediates, over the {fmt_bytes(self.sram[1])} sram of "
                    f"target '{self.sram[0]}'")
        through = self.groups.merge(mine, g, g.space, None, inner)
        if through is not None:
            return f"would create a cycle through {self.short(through)}"
        merged = self.groups.of(op)
        assert merged is not None
        merged.kept = kept
        merged.views_out.append(op)
        self.rowpos[op.results[0]] = res
        return None
