"""`fuse-elementwise`: group op-table ops into `lamina.fused` kernels.

    -p 'fuse-elementwise{max-group-size=256 reduction-fusion=true explain=false}'

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
   dims, i.e. they need every dim from `axis` on whole). OPAQUE (matmul), LAYOUT (transpose,
   reshape, slice, concat) and ops outside the op table are boundaries: never fused, never crossed.
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
4. Same placement. All operand and result types of the ops in a group carry the same
   TensorType encoding (placement / memory tier); an op whose own types disagree stays alone.
5. No cycles. Merging must not create a path that leaves the group and comes back
   (G -> outside op -> c). Checked by a backward search from c's (and, when two groups merge, both
   groups') outside producers, cut off at the group's first op position, bounded in effort
   (when the bound is hit the merge is refused, which is always safe).
6. Size. A group holds at most `max-group-size` ops (constants not counted).

A fused op is left out when its group has a single op (fusion would save nothing), so running the
pass twice changes nothing: `lamina.fused` ops are boundaries for the second run.

With `explain=true` (or the driver's `--explain`) the pass reports every fusion and every kept
boundary, one line each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lamina.analysis.fusion import build_fused, row_split
from lamina.analysis.graph import UnionFind, contracted_order
from lamina.analysis.naming import Namer
from lamina.ir.fused import FusedOp
from lamina.ir.opbase import LaminaOp
from lamina.ir.optable import Fusion
from lamina.passes.explain import ExplainLog, LaminaPass
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, Block, Operation, SSAValue

_SEARCH_LIMIT = 1024


def _shape(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def _encoding(t: Attribute) -> Attribute | None:
    enc = getattr(t, "encoding", None)
    return None if enc is None or type(enc).__name__ == "NoneAttr" else enc


def _broadcasts_into(s: tuple[int, ...], d: tuple[int, ...]) -> bool:
    if len(s) > len(d):
        return False
    return all(a == 1 or a == b for a, b in zip(reversed(s), reversed(d), strict=False))


@dataclass
class _Space:
    """A group's iteration space: loop over `full`, or rows `lead` x reduced `trail`."""

    lead: tuple[int, ...]
    trail: tuple[int, ...] | None  # None: a loop group (lead is the whole domain)

    @property
    def rows(self) -> bool:
        return self.trail is not None

    @property
    def full(self) -> tuple[int, ...]:
        return self.lead + (self.trail or ())

    def form(self, s: tuple[int, ...]) -> str | None:
        if self.trail is None:
            return "full" if s == self.lead else None
        if s == self.lead + self.trail:
            return "full"
        if s == self.lead + (1,) * len(self.trail):
            return "rowscalar"
        if s == self.lead:
            return "rowvec"
        return None

    def __str__(self) -> str:
        if self.trail is None:
            return "loop over " + "x".join(map(str, self.lead))
        return ("rows " + "x".join(map(str, self.lead)) + " reducing " +
                "x".join(map(str, self.trail)))


def _join(a: _Space, b: _Space) -> _Space | None:
    if not a.rows and not b.rows:
        return a if a.lead == b.lead else None
    if a.rows and b.rows:
        return a if (a.lead, a.trail) == (b.lead, b.trail) else None
    r, lp = (a, b) if a.rows else (b, a)
    return r if r.form(lp.lead) is not None else None


@dataclass
class _Group:
    root: int
    space: _Space
    size: int
    first: int           # position of the earliest member
    encoding: Attribute | None
    members: list[Operation]
    last: int = -1       # position of the latest member


class _MinTree:
    """Range-minimum over positions with point updates (a segment tree), for `_FuncFusion.bound`.

    Slot i holds the `first` of the multi-member group whose latest member is at position i."""

    def __init__(self, n: int) -> None:
        self.size = 1
        while self.size < max(n, 1):
            self.size *= 2
        self.inf = n
        self.tree = [n] * (2 * self.size)

    def set(self, i: int, value: int) -> None:
        i += self.size
        self.tree[i] = value
        i //= 2
        while i:
            self.tree[i] = min(self.tree[2 * i], self.tree[2 * i + 1])
            i //= 2

    def min_from(self, lo: int) -> int:
        """min over slots lo .. n-1."""
        res = self.inf
        lo += self.size
        hi = 2 * self.size
        while lo < hi:
            if lo & 1:
                res = min(res, self.tree[lo])
                lo += 1
            if hi & 1:
                hi -= 1
                res = min(res, self.tree[hi])
            lo //= 2
            hi //= 2
        return res


@dataclass(frozen=True)
class FuseElementwise(LaminaPass):
    """Fuse elementwise ops (and row-wise reductions with their prologue and epilogue)."""

    name: ClassVar[str] = "fuse-elementwise"
    minimums: ClassVar[dict[str, int]] = {"max_group_size": 1}
    max_group_size: int = 256
    reduction_fusion: bool = True

    def run(self, ctx: Context, module: ModuleOp, log: ExplainLog | None) -> None:
        for op in list(module.walk()):
            if isinstance(op, FuncOp) and op.body.blocks:
                _FuncFusion(self, op, log).run()


class _FuncFusion:
    def __init__(self, opts: FuseElementwise, func: FuncOp, log: ExplainLog | None):
        self.opts = opts
        self.func = func
        self.log = log
        self.block: Block = func.body.block
        self.ops: list[Operation] = list(self.block.ops)
        self.pos: dict[Operation, int] = {op: i for i, op in enumerate(self.ops)}
        self.uf: UnionFind[int] = UnionFind()
        self.groups: dict[int, _Group] = {}
        self.hoisted: set[Operation] = set()
        self.space_of: dict[Operation, _Space] = {}
        self.name = Namer(func) if log is not None else None
        self.spans = _MinTree(len(self.ops))

    # -- union-find --
    def find(self, i: int) -> int:
        return self.uf.find(i)

    def group_of(self, op: Operation | None) -> _Group | None:
        if op is None or op not in self.space_of:
            return None
        return self.groups.get(self.find(self.pos[op]))

    def explain(self, op: Operation, msg: str) -> None:
        if self.log is not None:
            self.log.add(op, msg)

    # -- classification --
    def kind(self, op: Operation) -> tuple[str, str]:
        """('fuse', '') / ('source', '') / ('boundary', reason)."""
        if not isinstance(op, LaminaOp):
            return "boundary", "is not an op-table op"
        f = op.info.fusion
        if f == Fusion.SOURCE:
            return "source", ""
        if f in (Fusion.ELEMENTWISE, Fusion.BROADCAST):
            return "fuse", ""
        if f == Fusion.REDUCTION:
            if not self.opts.reduction_fusion:
                return "boundary", "is a reduction and reduction-fusion=false"
            if row_split(op) is None:
                return "boundary", "is a reduction over non-trailing dims"
            return "fuse", ""
        if f == Fusion.OPAQUE:
            return "boundary", "is opaque"
        if f == Fusion.LAYOUT:
            return "boundary", "is a layout op"
        return "boundary", f"is {f.value}"

    def own_space(self, op: LaminaOp) -> _Space:
        if op.info.fusion == Fusion.REDUCTION:
            k = row_split(op)
            assert k is not None
            s = _shape(op.operand_slots()[0])  # type: ignore[arg-type]
            return _Space(s[: len(s) - k], s[len(s) - k:])
        return _Space(_shape(op.results[0]), None)

    def encoding_of(self, op: Operation) -> tuple[bool, Attribute | None]:
        encs = {_encoding(v.type) for v in (*op.operands, *op.results)}
        if len(encs) > 1:
            return False, None
        return True, next(iter(encs), None)

    # -- the walk --
    def run(self) -> None:
        for op in self.ops:
            kind, reason = self.kind(op)
            if kind != "fuse":
                continue
            assert isinstance(op, LaminaOp)
            ok, enc = self.encoding_of(op)
            i = self.pos[op]
            if not ok:
                self.explain(op, f"not fused: {self.nm(op)} mixes placements/tiers in its types")
                continue
            space = self.own_space(op)
            self.space_of[op] = space
            self.groups[i] = _Group(i, space, 1, i, enc, [op], i)
            seen: set[int] = set()
            for v in op.operands:
                prod = v.owner if isinstance(v.owner, Operation) else None
                if prod is None:
                    continue
                pk, preason = self.kind(prod)
                if pk == "boundary":
                    if prod.parent_block() is self.block:
                        self.explain(op, f"not fused: {self.nm(prod)} {preason}")
                    continue
                if pk == "source":
                    continue
                g = self.group_of(prod)
                if g is None:
                    continue
                mine = self.groups[self.find(i)]
                if g.root == mine.root or g.root in seen:
                    continue
                seen.add(g.root)
                why = self.try_merge(op, mine, g)
                if why is None:
                    self.explain(op, f"fused {self.nm(op)} with {self.nm(prod)} "
                                     f"({self.groups[self.find(i)].space})")
                else:
                    self.explain(op, f"not fused with {self.nm(prod)}: {why}")
        self.build()

    def nm(self, op: Operation) -> str:
        return self.name.op(op) if self.name is not None else op.name

    def try_merge(self, op: LaminaOp, mine: _Group, other: _Group) -> str | None:
        """Merge `other` (a producer's group) into `mine` (op's group), or say why not."""
        if mine.encoding != other.encoding:
            return "different placement/tier encodings"
        if mine.size + other.size > self.opts.max_group_size:
            return f"group would exceed max-group-size={self.opts.max_group_size}"
        in_other = [v for v in op.operands
                    if isinstance(v.owner, Operation) and v.owner in self.space_of
                    and self.find(self.pos[v.owner]) == other.root]
        space = _join(mine.space, other.space)
        hoist_other = hoist_mine = False
        if space is not None:
            why = self.edges_ok(op, in_other, space)
            if why is not None:
                return why
        else:
            # broadcast prologue: the smaller group is computed once per kernel
            full_m, full_o = mine.space.full, other.space.full
            if (not other.space.rows and _broadcasts_into(full_o, full_m)
                    and op.info.fusion == Fusion.ELEMENTWISE):
                space, hoist_other = mine.space, True
            elif (not mine.space.rows and mine.size == 1 and _broadcasts_into(full_m, full_o)
                  and all(v.owner in self.hoisted for v in in_other)):
                space, hoist_mine = other.space, True
            else:
                return f"different iteration spaces ({other.space} vs {mine.space})"
        through = self.cycle(op, mine, other)
        if through is not None:
            return f"would create a cycle through {self.nm(through).split(' = ')[0]}"
        # commit
        if hoist_other:
            self.mark_hoisted(other.root)
        if hoist_mine:
            self.mark_hoisted(mine.root)
        keep, drop = (mine, other) if mine.root < other.root else (other, mine)
        self.uf.union(keep.root, drop.root)
        del self.groups[drop.root]
        keep.space = space
        keep.size = mine.size + other.size
        for g in (mine, other):  # the merged group replaces both in the span index
            self.spans.set(g.last, self.spans.inf)
        keep.first = min(mine.first, other.first)
        keep.last = max(mine.last, other.last)
        self.spans.set(keep.last, keep.first)
        small, big = sorted((mine.members, other.members), key=len)
        big.extend(small)
        keep.members = big
        return None

    def mark_hoisted(self, root: int) -> None:
        self.hoisted.update(self.groups[root].members)

    def edges_ok(self, op: LaminaOp, internal: list[SSAValue], space: _Space) -> str | None:
        out_form = space.form(_shape(op.results[0])) if op.info.fusion != Fusion.REDUCTION \
            else "full"
        for v in internal:
            if v.owner in self.hoisted:
                if op.info.fusion == Fusion.ELEMENTWISE:
                    continue
                return f"{self.name(v) if self.name else 'operand'} is computed once per kernel"
            s = _shape(v)
            f = space.form(s)
            if op.info.fusion == Fusion.REDUCTION:
                if f != "full":
                    return "reduction input does not cover the group's rows"
                continue
            if out_form is None or f is None:
                return f"{'x'.join(map(str, s)) or 'scalar'} does not fit {space}"
            if op.info.fusion == Fusion.BROADCAST:
                dims = list(op.attr_values().get("broadcast_dimensions", ()))
                ok = (s == _shape(op.results[0]) and dims == list(range(len(s)))) or \
                    (f == "rowvec" and space.rows and dims == list(range(len(space.lead)))) or \
                    (f == "rowscalar" and out_form == "full" and dims == list(range(len(s))))
                if not ok:
                    return "broadcast_in_dim does not keep the rows in place"
                continue
            if (f == "rowvec") != (out_form == "rowvec"):
                return "a row vector would broadcast along the reduced dims"
        return None

    def cycle(self, op: LaminaOp, mine: _Group, other: _Group) -> Operation | None:
        """An outside op on a path other -> outside -> (mine or op), or mine -> outside -> other.

        The search runs on the contracted graph: reaching any member of another group reaches
        the whole group (it becomes one op), so all its members' operands are followed.
        """
        roots = {mine.root, other.root}
        lo = self.bound(min(mine.first, other.first))
        members = [op] if mine.size == 1 else list(mine.members)
        if other.size > 1 or mine.size > 1:
            members += other.members
        starts: list[Operation] = []
        for m in members:
            for v in m.operands:
                p = v.owner
                if isinstance(p, Operation) and p in self.pos and not self.in_roots(p, roots):
                    starts.append(p)
        seen: set[Operation] = set()
        seen_groups: set[int] = set()
        budget = _SEARCH_LIMIT
        for s in starts:
            stack = [s]
            while stack:
                u = stack.pop()
                if u in seen:
                    continue
                seen.add(u)
                budget -= 1
                if budget < 0:
                    return s
                expand = [u]
                if u in self.space_of:
                    g = self.find(self.pos[u])
                    grp = self.groups[g]
                    if grp.size > 1:
                        if g in seen_groups:
                            continue
                        seen_groups.add(g)
                        expand = grp.members
                        budget -= len(expand)
                    elif self.pos[u] < lo:
                        continue
                elif self.pos[u] < lo:
                    continue
                for w in expand:
                    for v in w.operands:
                        p = v.owner
                        if not isinstance(p, Operation) or p not in self.pos:
                            continue
                        if self.in_roots(p, roots):
                            return s
                        if p not in seen and (p in self.space_of or self.pos[p] >= lo):
                            stack.append(p)
        return None

    def bound(self, lo: int) -> int:
        """The lowest position a descendant of ops at positions >= `lo` can have.

        Plain edges only go forward, but in the contracted graph a group is one node: entering
        it at a late member leads to the users of its earliest member. So every group that has a
        member at or after the bound pulls the bound down to its first member, to a fixpoint.
        Ops before the bound cannot lie on a cycle through the merged groups, which is what lets
        the cycle search stop there."""
        while (first := self.spans.min_from(lo)) < lo:
            lo = first
        return lo

    def in_roots(self, p: Operation, roots: set[int]) -> bool:
        return p in self.space_of and self.find(self.pos[p]) in roots

    # -- building --
    def build(self) -> None:
        by_root: dict[int, list[Operation]] = {}
        for op in self.ops:
            if op in self.space_of:
                by_root.setdefault(self.find(self.pos[op]), []).append(op)
        fused_groups = {r: ms for r, ms in by_root.items() if len(ms) > 1}
        if not fused_groups:
            return
        term = self.block.last_op
        while True:
            def node_of(op: Operation, groups: dict[int, list[Operation]] = fused_groups) -> int:
                r = self.find(self.pos[op]) if op in self.space_of else -1
                return r if r in groups else -(self.pos[op] + 2)

            order, left, succs = contracted_order(self.ops, node_of)
            if not left:
                break
            # The position-bounded search missed a path through a group spanning the bound:
            # in every cycle of groups, dissolve the latest group (its ops stay unfused).
            for scc in _cycles(set(left), succs):
                groups = [n for n in scc if n >= 0 and n in fused_groups]
                r = max(groups)
                self.explain(fused_groups[r][0], f"not fused: group of {len(fused_groups[r])} "
                             "ops dissolved, it would form a cycle with another group")
                del fused_groups[r]
            if not fused_groups:
                return
        new_ops: dict[int, Operation] = {}
        for r, members in fused_groups.items():
            new_ops[r] = self.make_fused(members)
        for op in self.ops:
            if op.parent is self.block:
                op.detach()
        for n in order:
            if n >= 0:
                self.block.add_op(new_ops[n])
            else:
                op = self.ops[-n - 2]
                if op.parent is None:
                    self.block.add_op(op)
        # the terminator must stay last
        if term is not None and term.parent is self.block and self.block.last_op is not term:
            term.detach()
            self.block.add_op(term)
        # constants no longer used by anyone
        for op in self.ops:
            if op.parent is self.block and op in self.pos and self.kind(op)[0] == "source" \
                    and all(not r.uses for r in op.results):
                op.detach()
                op.erase()

    def make_fused(self, members: list[Operation]) -> FusedOp:
        fused = build_fused(members)
        if self.log is not None:
            self.log.add(fused, f"group of {len(members)} ops -> lamina.fused \"{fused.fusion_kind}\" "
                         f"with {len(fused.inputs)} inputs, {len(fused.outputs)} outputs")
        return fused


def _cycles(nodes: set[int], succs: dict[int, set[int]]) -> list[list[int]]:
    """Strongly connected components with more than one node (iterative Tarjan), restricted to
    `nodes`, in a deterministic order."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(s for s in succs[start] if s in nodes)))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(s for s in succs[w] if s in nodes))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out
