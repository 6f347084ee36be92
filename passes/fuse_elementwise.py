"""`fuse-elementwise`: group op-table ops into `lamina.fused` kernels.

    -p 'fuse-elementwise{max-group-size=256 reduction-fusion=true target=tiny explain=false}'

Everything the pass knows about an op comes from the op table (`OpInfo.fusion`, its attribute specs
and sharding rule); the pass keeps no list of op names.

How groups are formed
---------------------
One walk over each function's ops in program (topological) order. Each op that may fuse starts as
its own group and then tries to merge, operand by operand, with the groups of its producers
(union-find; each merge is O(1) plus the checks below). Afterwards every group of two or more ops
becomes one `lamina.fused` op, and the function body is re-ordered topologically once. No pattern
is re-run to a fixpoint, so the pass is near-linear in the number of ops.

Legality rule (when op `c` may join the group G of a producer `p`)
-----------------------------------------------------------------
1. Fusible classes. ELEMENTWISE and BROADCAST ops always may; a REDUCTION may only with
   `reduction-fusion=true` and only if it is *row-wise*: it reduces a suffix of its input's dims
   (reduce_* whose `axes` are the trailing k dims; composites whose `axis` starts the trailing
   dims, i.e. they need every dim from `axis` on whole). LAYOUT ops (transpose, reshape, slice,
   concat) join only at a kernel's edges (rule 8); an OPAQUE op joins only as a kernel's root when
   its row says it can be run by blocks of result rows (rule 9: a matmul by a weight matrix).
   Other OPAQUE ops (a batched matmul, gather) and ops outside the op table are boundaries:
   never fused, never crossed.
   SOURCE ops (constants) are not group members; each group that uses a constant gets its own copy
   inside its body (the only duplication the pass does; a constant costs no kernel), and the
   original is erased when nothing else uses it.
2. One iteration space per group. A group without reductions is a "loop" group over one domain D
   (the shape every member produces). A group with reductions is a "row_reduction" group over
   rows L and reduced dims T (every reduction in it has input shape L+T and reduces exactly T);
   its members produce L+T ("full"), L+[1..1] ("row scalars", keepdims) or L ("row vectors").
   Consumers use a row value only where the row index lines up: elementwise ops combine full and
   row-scalar values, or row vectors with row vectors; a row vector reaches the full domain only
   through broadcast_in_dim with broadcast_dimensions = 0..len(L)-1. A loop group over D joins a
   row group when D is one of its three forms. So a prologue (elementwise ops before the
   reduction on the same rows) and an epilogue (elementwise ops after it, on the reduced rows or
   the row results) fuse with the reduction: layernorm(x) * g + b -> gelu -> dropout is one op.
3. Broadcast prologues. An elementwise/broadcast op whose result is smaller than the group's
   domain but broadcasts into it (a mask [T,T] used by [H,T,T] scores, a bias computed from
   [D] vectors) may join when all its in-group operands are such ops too; it is computed once per
   kernel, not per tile, so no work is repeated.
4. One tier, one mesh. Every value of every member lives in the same memory tier, and either
   every value is placed on the same mesh or none is (`placement_key`). Placements may differ
   otherwise: a placed kernel is one body each device runs on its own shards, exactly as the
   members would run one by one, and a verified placed op already satisfies its sharding rule
   (operands agree with the result on the dims they share), with every communication an explicit
   collective or reshard op, which is a boundary. So `gelu(h + b)` with `h` `[[data], [model]]`
   and `b` `[[model]]` is one kernel after propagate-sharding. An op mixing tiers, or placed and
   unplaced values, stays alone.
5. No cycles. Merging must not create a path that leaves the group and comes back
   (G -> outside op -> c). Checked exactly, with no search budget: the groups are nodes of a
   contracted graph kept in topological order as they merge (`fusion_groups`), and a merge is
   refused if and only if such a path exists; the op the refusal names lies on it.
6. Size. A group holds at most `max-group-size` ops (constants not counted).
7. Working set. With `target=NAME` (set by the pipeline from a later pass's target when not
   written, see `lamina.passes.pipeline`), a kernel must be able to run in the target's fastest
   tier, sram. A kernel runs tile by tile, so what must fit is its least tile: the bytes of its
   intermediates (member results nothing outside reads, cloned constants; an upper bound when
   frees inside the body end some early) for one row of its iteration space (`least_tiles`:
   a row-reduction group's rows stay whole). `assign-memory-tiers` then charges the kernel at
   most the whole sram (it sizes its tiles to fit, `lamina.analysis.fusion.sram_bytes`), so a
   program that fits its target unfused still fits fused. A merge whose row would not fit is
   refused, so the group is split there, and `--explain` says so with the bytes. Checked
   before rule 5.

8. Layout ops at the edges (`fusion_views`). A layout op whose operands are all values one group
   computes per tile joins it as an *output view*: the kernel writes its result directly, each
   tile carried through the op's index map (`lamina.ir.ops.view_rules`), so the value before it is
   never stored; the group then tiles only over the leading dims every output view keeps one
   to one (a reshape merging two row dims makes the kernel's tiles cover both whole; the least
   tile of rule 7 grows accordingly). Nothing in the kernel may read an output view. A concat of
   values of several groups over one space first joins them (checked like any merge), then
   writes them as one multi-input output view. A layout op reading outside values (or other
   such layout ops) is an *input view*: the kernel that reads it takes it in when the view is
   read by that kernel only, and a kernel never reads its own values through one. So GPT-2's
   QKV bias add writes q, k^T and v through slice + reshape + transpose, and the head merge
   (transpose + reshape) is the projection's input view.
9. Matmul roots. A matmul whose right operand is a matrix (rank 2: each block of result rows
   needs the same rows of the left operand only) roots a "matmul" kernel: elementwise ops on its
   result and row reductions over its trailing dims (bias, GeLU, dropout, a residual add, the
   next LayerNorm) join as its epilogue, run on each block of result rows. A kernel has one
   root, is never computed once per kernel (rule 3) and takes no elementwise prologue: the
   matmul reads its operands whole, by rows (input views of rule 8 are fine). A reduction over
   the result's rows themselves (across the blocks) never joins: it is not row-wise (rule 1).

A fused op is left out when its group has a single op (fusion would save nothing), so running the
pass twice changes nothing: `lamina.fused` ops are boundaries for the second run.

With `explain=true` (or the driver's `--explain`) the pass reports every fusion and every kept
boundary, one line each.

This file reads in the order the pass works: classifying an op (`_classify`), the walk that grows
groups (`_FuncFusion`, which checks a merge in the order of the rule: placement, size, spaces and
edges (`merged_space`, `_edge_problem`), cycles, and places a layout op by rule 8: `place_layout`),
and building the fused ops and re-ordering the block (`_FuncFusion.build`). The groups themselves,
their spaces and the cycle check live in `fusion_groups`; the checks of rules 8 and 9 that read
only the groups live in `fusion_views`; a group's fused op is built by
`lamina.analysis.fusion.build_fused`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lamina.analysis.fusion import (
    Positions,
    build_fused,
    kept_prefix,
    placement_key,
    row_split,
    view_positions,
)
from lamina.analysis.graph import contracted_order
from lamina.analysis.naming import Namer
from lamina.analysis.sizes import fmt_bytes
from lamina.ir.buffers.memory import FreeOp, ancestor_in
from lamina.ir.mesh.target import load_target
from lamina.ir.ops.fused import FusedOp
from lamina.ir.ops.opbase import LaminaOp
from lamina.ir.ops.optable import Fusion
from lamina.passes.explain import ExplainLog, LaminaPass
from lamina.passes.fusion_groups import Group, Groups, Space, broadcasts_into, join_spaces
from lamina.passes.fusion_views import (
    least_tiles_kept,
    prologue_problem,
    root_problem,
    row_tiled_problem,
    view_problem,
)
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import Block, Operation, SSAValue


@dataclass(frozen=True)
class FuseElementwise(LaminaPass):
    """Fuse elementwise ops (and row-wise reductions with their prologue and epilogue)."""

    name: ClassVar[str] = "fuse-elementwise"
    minimums: ClassVar[dict[str, int]] = {"max_group_size": 1}
    max_group_size: int = 256
    reduction_fusion: bool = True
    target: str = ""

    def run(self, ctx: Context, module: ModuleOp, log: ExplainLog | None) -> None:
        sram = _sram_capacity(self.target) if self.target else None
        for op in list(module.walk()):
            if isinstance(op, FuncOp) and op.body.blocks:
                _FuncFusion(self, op, log, sram).run()


def _sram_capacity(spec: str) -> tuple[str, int] | None:
    """(target name, bytes) of the fastest tier of target `spec`, when it has an sram tier."""
    target = load_target(spec)
    if not any(t.name == "sram" for t in target.tiers):
        return None
    return target.name, int(target.tier("sram").capacity)


# -- classification (rule 1) and an op's own group --

def _classify(op: Operation, reduction_fusion: bool) -> tuple[str, str]:
    """('fuse', '') / ('source', '') / ('boundary', reason), from the op table alone."""
    if not isinstance(op, LaminaOp):
        return "boundary", "is not an op-table op"
    f = op.info.fusion
    if f == Fusion.SOURCE:
        return "source", ""
    if f in (Fusion.ELEMENTWISE, Fusion.BROADCAST):
        return "fuse", ""
    if f == Fusion.REDUCTION:
        if not reduction_fusion:
            return "boundary", "is a reduction and reduction-fusion=false"
        if row_split(op) is None:
            return "boundary", "is a reduction over non-trailing dims"
        return "fuse", ""
    if f == Fusion.OPAQUE:
        why = row_tiled_problem(op)
        return ("fuse", "") if why is None else ("boundary", why)
    if f == Fusion.LAYOUT:
        return ("fuse", "") if op.info.view is not None else ("boundary", "is a layout op")
    if f == Fusion.SCAN:
        return "boundary", ("is a scan (each element needs every one before it along the axis, "
                            "which a fused loop does not visit in order)")
    return "boundary", f"is {f.value}"


def _shape(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def _own_space(op: LaminaOp) -> Space:
    """The space of `op` alone: a row-wise reduction's rows x reduced dims, else its result."""
    if op.info.fusion == Fusion.REDUCTION:
        k = row_split(op)
        assert k is not None
        s = _shape(op.operand_slots()[0])  # type: ignore[arg-type]
        return Space(s[: len(s) - k], s[len(s) - k:])
    return Space(_shape(op.results[0]), None)


# -- the walk --

class _FuncFusion:
    """One function: grow groups in one walk over its ops, then build their fused ops."""

    def __init__(self, opts: FuseElementwise, func: FuncOp, log: ExplainLog | None,
                 sram: tuple[str, int] | None = None) -> None:
        self.opts = opts
        self.sram = sram
        self.log = log
        self.block: Block = func.body.block
        self.ops: list[Operation] = list(self.block.ops)
        self.groups = Groups(self.ops)
        self.name = Namer(func) if log is not None else None
        self.dropped: set[Operation] = set()   # frees that ended inside a kernel
        # per output-view value, where its kernel's domain dims lie in it (rule 8)
        self.rowpos: dict[SSAValue, Positions] = {}

    def run(self) -> None:
        for op in self.ops:
            self.groups.enter(op)
            if self.classify(op)[0] != "fuse":
                continue
            assert isinstance(op, LaminaOp)
            if op.info.fusion == Fusion.LAYOUT:
                self.place_layout(op)
            elif self.start_group(op):
                self.merge_with_producers(op)
        self.build()

    def classify(self, op: Operation) -> tuple[str, str]:
        return _classify(op, self.opts.reduction_fusion)

    def explain(self, op: Operation, msg: str) -> None:
        if self.log is not None:
            self.log.add(op, msg)

    def nm(self, op: Operation) -> str:
        return self.name.op(op) if self.name is not None else op.name

    def short(self, op: Operation) -> str:
        """An op's result name (`%q`), for reasons."""
        return self.nm(op).split(" = ")[0]

    def start_group(self, op: LaminaOp) -> bool:
        """Give a fusible op its own group, unless its types mix placements (then it stays
        alone: False)."""
        key, why = placement_key(op)
        if why is not None:
            self.explain(op, f"not fused: {self.nm(op)} {why}")
            return False
        self.groups.add(op, _own_space(op), key)
        if op.info.fusion == Fusion.OPAQUE:
            g = self.groups.of(op)
            assert g is not None
            g.matmul = True
        return True

    def merge_with_producers(self, op: LaminaOp) -> None:
        """Try to merge `op`'s group with each producer's group, operand by operand, saying why
        at every boundary and every refused merge."""
        seen: set[int] = set()
        for v in op.operands:
            prod = v.owner if isinstance(v.owner, Operation) else None
            if prod is None:
                continue
            pk, preason = self.classify(prod)
            if pk == "boundary":
                if prod.parent_block() is self.block:
                    self.explain(op, f"not fused: {self.nm(prod)} {preason}")
                continue
            if pk == "source":
                continue
            g = self.groups.of(prod)
            if g is None:
                continue
            mine = self.groups.of(op)
            assert mine is not None
            if g.root == mine.root or g.root in seen:
                continue
            seen.add(g.root)
            why = self.try_merge(op, mine, g)
            if why is None:
                merged = self.groups.of(op)
                assert merged is not None
                self.explain(op, f"fused {self.nm(op)} with {self.nm(prod)} ({merged.space})")
            else:
                self.explain(op, f"not fused with {self.nm(prod)}: {why}")

    def try_merge(self, op: LaminaOp, mine: Group, other: Group) -> str | None:
        """Merge `other` (a producer's group) into `mine` (op's group), or say why not.

        The checks run in the legality rule's order, cheapest first; the cycle check, the only
        one that is not O(1), runs last, with the merge itself."""
        if mine.key != other.key:
            return "different meshes or memory tiers"
        if mine.size + other.size > self.opts.max_group_size:
            return f"group would exceed max-group-size={self.opts.max_group_size}"
        in_other = [v for v in op.operands
                    if isinstance(v.owner, Operation) and v.owner in self.groups.members
                    and self.groups.root_of(v.owner) == other.root]
        why = view_problem(self.groups, mine, other, self.short) or \
            prologue_problem(self.groups, mine, other)
        if why is not None:
            return why
        if op.info.fusion in (Fusion.OPAQUE, Fusion.LAYOUT):
            # rule 9: a matmul root takes input views only; rule 8: a chain of input views
            if not other.view_only:
                return ("a matmul reads its operands whole, so an elementwise prologue stays "
                        "its own kernel")
            merged: tuple[Space, Group | None] | str = (mine.space, None)
        else:
            merged = self.merged_space(op, mine, other, in_other)
        if isinstance(merged, str):
            return merged
        space, hoist = merged
        if hoist is not None and (hoist.views_in or hoist.views_out or hoist.matmul):
            return ("a matmul's result is not broadcast inside a kernel" if hoist.matmul else
                    "a layout op cannot be part of what a kernel computes once")
        why = root_problem(mine, other, space)
        if why is not None:
            return why
        inner = self.groups.inner_after(mine, other)
        tile = -(-inner[0] // least_tiles_kept(space, min(mine.kept, other.kept)))
        if self.sram is not None and tile > self.sram[1]:
            return (f"split here: one row of the kernel would hold {fmt_bytes(tile)} "
                    f"({tile} B) of intermediates, over the {fmt_bytes(self.sram[1])} sram of "
                    f"target '{self.sram[0]}'")
        through = self.groups.merge(mine, other, space, hoist, inner)
        if through is not None:
            return f"would create a cycle through {self.nm(through).split(' = ')[0]}"
        return None

    def merged_space(self, op: LaminaOp, mine: Group, other: Group, in_other: list[SSAValue]
                     ) -> tuple[Space, Group | None] | str:
        """The merged group's space and the group that becomes computed once per kernel (if
        any), or why the two do not share an iteration space (rules 2 and 3).

        Groups with one space (`join_spaces`) merge when op's edges from `other` line up with
        the rows; otherwise a smaller loop group that broadcasts into the other's domain may
        join as a broadcast prologue, computed once per kernel, so no work is repeated."""
        space = join_spaces(mine.space, other.space)
        if space is not None:
            why = _edge_problem(op, in_other, space, self.groups.hoisted, self.name)
            return (space, None) if why is None else why
        full_m, full_o = mine.space.full, other.space.full
        if (not other.space.rows and broadcasts_into(full_o, full_m)
                and op.info.fusion == Fusion.ELEMENTWISE):
            return mine.space, other
        if (not mine.space.rows and mine.size == 1 and broadcasts_into(full_m, full_o)
                and all(v.owner in self.groups.hoisted for v in in_other)):
            return other.space, mine
        return f"different iteration spaces ({other.space} vs {mine.space})"

    # -- layout ops (rule 8) --

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
            elif g.size + base_now.size > self.opts.max_group_size:
                why = f"group would exceed max-group-size={self.opts.max_group_size}"
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
        if mine.size + g.size > self.opts.max_group_size:
            return f"group would exceed max-group-size={self.opts.max_group_size}"
        full = g.space.full
        pos: list[tuple[int | None, ...]] = []
        for v in op.operands:
            p = self.rowpos.get(v)
            if p is None:
                if isinstance(v.owner, Operation) and v.owner in self.groups.hoisted:
                    return f"{self.short(v.owner)} is computed once per kernel"
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

    # -- building --

    def build(self) -> None:
        """Replace every group of two or more ops by its `lamina.fused` op and re-order the block
        topologically (each fused op as one node), then drop constants nothing uses any more."""
        fused_groups = {r: ms for r, ms in self.groups.members_by_root().items()
                        if len(ms) > 1 and not self.groups.by_root[r].view_only}
        if not fused_groups:
            return
        term = self.block.last_op
        order = self.block_order(fused_groups)
        self.drop_inner_frees(fused_groups)
        new_ops = {r: self.make_fused(members) for r, members in fused_groups.items()}
        self.reorder(order, new_ops, term)
        for op in self.ops:
            if op.parent is self.block and self.classify(op)[0] == "source" \
                    and all(not r.uses for r in op.results):
                op.detach()
                op.erase()

    def block_order(self, fused_groups: dict[int, list[Operation]]) -> list[int]:
        """The block's order with each group contracted to one node.

        The walk merged only groups whose contraction keeps the graph acyclic (rule 5; the
        check is exact), and a `lamina.free` (ordered after its value's users) has no users of
        its own, so no node can be left out."""
        groups, pos = self.groups, self.groups.pos

        def node_of(op: Operation) -> int:
            r = groups.root_of(op) if op in groups.members else -1
            return r if r in fused_groups else -(pos[op] + 2)

        order, left, _ = contracted_order(self.ops, node_of, _free_after)
        assert not left, "fuse-elementwise formed groups that make a cycle"
        return order

    def drop_inner_frees(self, fused_groups: dict[int, list[Operation]]) -> None:
        """A `lamina.free` (annotate-lifetimes) of a value every user of which is in the value's
        own group ends a tile buffer inside the kernel: it goes, instead of making the value a
        result of the fused op that only its free would read."""
        for op in self.ops:
            if not isinstance(op, FreeOp) or op.parent is not self.block:
                continue
            owner = op.value.owner
            if not isinstance(owner, Operation) or owner not in self.groups.members:
                continue
            root = self.groups.root_of(owner)
            if root not in fused_groups:
                continue
            users = [u.operation for u in op.value.uses if u.operation is not op]
            if all(u in self.groups.members and self.groups.root_of(u) == root for u in users):
                op.detach()
                op.erase()
                self.dropped.add(op)

    def reorder(self, order: list[int], new_ops: dict[int, FusedOp], term: Operation | None
                ) -> None:
        """Put the block's ops back in `order` (a group's node is its fused op, an op's node
        -(position + 2)), the terminator `term` last."""
        for op in self.ops:
            if op.parent is self.block:
                op.detach()
        for n in order:
            if n >= 0:
                self.block.add_op(new_ops[n])
            else:
                op = self.ops[-n - 2]
                if op.parent is None and op not in self.dropped:
                    self.block.add_op(op)
        if term is not None and term.parent is self.block and self.block.last_op is not term:
            term.detach()
            self.block.add_op(term)

    def make_fused(self, members: list[Operation]) -> FusedOp:
        fused = build_fused(members)
        if self.log is not None:
            self.log.add(fused, f"group of {len(members)} ops -> lamina.fused \"{fused.fusion_kind}\" "
                         f"with {len(fused.inputs)} inputs, {len(fused.outputs)} outputs")
        return fused


def _free_after(op: Operation) -> list[Operation]:
    """A free is ordered after every other user of its value (top-level ancestors: a use in a
    fused body is a use by the fused op)."""
    if not isinstance(op, FreeOp):
        return []
    block = op.parent_block()
    out: list[Operation] = []
    for u in op.value.uses:
        if u.operation is not op and block is not None:
            anc = ancestor_in(u.operation, block)
            if anc is not None:
                out.append(anc)
    return out


# -- the edge checks of rule 2 --

def _edge_problem(op: LaminaOp, internal: list[SSAValue], space: Space,
                  hoisted: set[Operation], name: Namer | None) -> str | None:
    """Why an in-group operand of `op` (one in `internal`) would not line up with the rows of
    `space`, or None when all do: a consumer may only read a row value where the row index
    matches, and a value computed once per kernel only elementwise."""
    fusion = op.info.fusion
    out_form = space.form(_shape(op.results[0])) if fusion != Fusion.REDUCTION else "full"
    for v in internal:
        if v.owner in hoisted:
            if fusion == Fusion.ELEMENTWISE:
                continue
            return f"{name(v) if name else 'operand'} is computed once per kernel"
        s = _shape(v)
        f = space.form(s)
        if fusion == Fusion.REDUCTION:
            if f != "full":
                return "reduction input does not cover the group's rows"
            continue
        if out_form is None or f is None:
            return f"{'x'.join(map(str, s)) or 'scalar'} does not fit {space}"
        if fusion == Fusion.BROADCAST:
            if not _broadcast_keeps_rows(op, s, f, out_form, space):
                return "broadcast_in_dim does not keep the rows in place"
            continue
        if (f == "rowvec") != (out_form == "rowvec"):
            return "a row vector would broadcast along the reduced dims"
    return None


def _broadcast_keeps_rows(op: LaminaOp, s: tuple[int, ...], f: str, out_form: str,
                          space: Space) -> bool:
    """Whether broadcast_in_dim of an operand of shape `s` (form `f`) keeps every row's values
    in that row: an identity, a row vector spread along the reduced dims, or row scalars spread
    to the full domain."""
    dims = list(op.attr_values().get("broadcast_dimensions", ()))
    return (s == _shape(op.results[0]) and dims == list(range(len(s)))) or \
        (f == "rowvec" and space.rows and dims == list(range(len(space.lead)))) or \
        (f == "rowscalar" and out_form == "full" and dims == list(range(len(s))))
