"""`propagate-sharding`: place every value of a function from the few placements the user wrote.

    -p 'propagate-sharding{target=h100-node explain=false}'

Input: a function some of whose values are placed on a mesh (usually arguments; op results and
function results written with a placement are constraints). Output: every tensor value placed on
that mesh, every op obeying its sharding rule (`lamina.ir.mesh.sharding.infer`, the verifier's), and a
`lamina.reshard` wherever an operand must change placement for its consumer. `insert-collectives`
lowers each reshard to the cheapest collectives for a target.

Two walks, each linear in the number of ops:
1. Backward (hints). From placed function results and placed op results, each op's result hint is
   mapped back onto its operands (elementwise/transpose/broadcast/slice/matmul M,N/reduction kept
   dims); a dimension the rule does not determine stays open. A hint never overrides a placement;
   it only guides the choices of walk 2.
2. Forward (placements). Ops in program order; each op's result placement is what its rule gives
   for its operands' placements. Decisions, by priority:
   1. Placements the user wrote are never changed (arguments, op results, function results); if an
      op's rule gives something else for a written result, a reshard to the written placement
      follows the op.
   2. A pending sum (`partial`) flows through linear ops as long as the rule allows (it is reduced
      as late as possible: once, where it must be). It is reduced before a non-linear op, an
      additive op whose other operands are not partial alike, the second partial operand of a
      one-sided op, and a function result. The reduced placement splits the reduced axes onto the
      dimension the hint asks for, else onto an open (unhinted) dimension, largest first, so the
      reduction is a reduce_scatter and the consumer works on a slice; it stays replicated (an
      all_reduce) when the hint fixes every dimension without those axes or nothing divides.
   3. An unplaced argument is placed at its first use to what the consumer's rule needs given the
      other (placed) operands: for free (inputs are distributed, not communicated). With no
      placed operand it takes its hint, else replicated.
   4. Operands that disagree (elementwise splits, matmul M and N on one axis, a split concat
      dimension, ...): every placement the rule accepts among (a) each placed operand as the
      leader the others follow, (b) the operands with the fewest splits dropped, which keeps the
      splits they agree on (the batch split of a matmul whose M and N collide), and (c) the last
      resort below, is priced on the `target` by the collectives `insert-collectives` will emit
      for it plus the op's compute on its shards (`sharding_choice`); the cheapest wins, ties to
      fewer dropped splits, then to the order (a), (b), (c). With `--explain` the line names the
      choice and every alternative with its cost.
   5. The last resort: the other operands replicated and the main operand's splits dropped from
      its last dimension backwards until the rule holds (replicated operands always do).
   6. Default: a value nothing says anything about is replicated (constants always are).
   7. Refusals: an op whose rule says a placement cannot be fixed by resharding
      (`ShardingRule.refusal`) is an error at the op, not a silent gather: a scan (`cumsum`)
      along a split dimension would need a prefix-sum collective, which Lamina does not have.
   An unplaced function result keeps its value's splits, with any pending sum reduced; one that
   replaces an argument (`lamina.updates`: a training step's new parameter) is placed like it.
`lamina.fused` ops (from fuse-elementwise) are placed through their bodies by the same rules, as if
written inline; a reshard never goes inside a fused op: one needed between two of its ops splits
the group there (see `_refuse`), reshards of its inputs precede it.
With `--explain`, one line per value: its placement and why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from lamina.analysis.fusion import build_fused
from lamina.analysis.graph import UnionFind, contracted_order
from lamina.analysis.naming import Namer
from lamina.analysis.sizes import type_bytes
from lamina.ir.buffers.memory import FreeOp, MoveOp
from lamina.ir.buffers.updates import UPDATES_ATTR, updates_of
from lamina.ir.core.diagnostics import error_at
from lamina.ir.mesh.collective_kinds import SUM
from lamina.ir.mesh.collectives import PlacementOp, ReshardOp, with_spec
from lamina.ir.mesh.collectives import build as build_placement
from lamina.ir.mesh.placement import MeshOp, find_mesh, place_of, spec_of
from lamina.ir.mesh.sharding import Hint, Linearity, ShardingError, Spec, infer
from lamina.ir.mesh.target import Target, load_target
from lamina.ir.ops.fused import FusedOp
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from lamina.passes.explain import ExplainLog, LaminaPass
from lamina.passes.sharding_choice import Candidate, Coster, drop_candidates, drop_from_end, us
from xdsl.context import Context
from xdsl.dialects.builtin import FunctionType, ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation, SSAValue


def _shape(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def mesh_placed(v: SSAValue) -> Spec | None:
    return spec_of(v.type)


@dataclass
class _State:
    func: FuncOp
    mesh: str
    sizes: dict[str, int]
    log: ExplainLog | None
    spec: dict[SSAValue, Spec]
    hint: dict[SSAValue, Hint]
    free: set[SSAValue]
    reshards: dict[tuple[SSAValue, Spec], SSAValue]
    name: Namer
    coster: Coster

    def say(self, op: Operation | None, msg: str) -> None:
        if self.log is not None:
            self.log.add(op, msg)

    # -- placements on this mesh --
    def valid(self, shape: tuple[int, ...], s: Spec) -> bool:
        seen: set[str] = set()
        for d, axes in enumerate(s.splits):
            n = 1
            for a in axes:
                if a in seen:
                    return False
                seen.add(a)
                n *= self.sizes[a]
            if shape[d] % n:
                return False
        return not (seen & set(s.partial))

    def clean(self, shape: tuple[int, ...], splits: list[tuple[str, ...]]) -> Spec:
        """Drop axes that repeat or do not divide, keeping the earlier dimensions' choices."""
        seen: set[str] = set()
        out = []
        for d, axes in enumerate(splits):
            keep: list[str] = []
            n = 1
            for a in axes:
                if a in seen or shape[d] % (n * self.sizes[a]):
                    continue
                keep.append(a)
                n *= self.sizes[a]
            seen.update(keep)
            out.append(tuple(keep))
        return Spec(tuple(out))

    def from_hint(self, v: SSAValue) -> Spec:
        shape = _shape(v)
        h = self.hint.get(v)
        if h is None:
            return Spec.replicated(len(shape))
        return self.clean(shape, [d or () for d in h])

    def set_type(self, v: SSAValue, s: Spec) -> None:
        self.spec[v] = s
        v._type = with_spec(v.type, self.mesh, s)  # noqa: SLF001 - retyping in place

    # -- reshards --
    def reshard(self, v: SSAValue, s: Spec, before: Operation, why: str) -> SSAValue:
        key = (v, s)
        got = self.reshards.get(key)
        if got is not None:
            return got
        op = build_placement(ReshardOp, [v], [with_spec(v.type, self.mesh, s)])
        op.location = before.location
        block = before.parent_block()
        assert block is not None
        block.insert_op_before(op, before)
        self.spec[op.outputs[0]] = s
        self.reshards[key] = op.outputs[0]
        self.say(before, f"reshard {self.name(v)} from {self.spec[v]} to {s}: {why}")
        return op.outputs[0]


def _reduction_target(st: _State, v: SSAValue, s: Spec) -> Spec:
    """Where the pending axes of `v` go when it must be reduced (see rule 2)."""
    shape = _shape(v)
    axes = s.partial
    n = math.prod(st.sizes[a] for a in axes)
    h = st.hint.get(v)
    used = {a for d in s.splits for a in d}

    def fits(d: int) -> bool:
        return shape[d] % (math.prod(st.sizes[a] for a in s.splits[d]) * n) == 0 and \
            not (used & set(axes))

    dims: list[int] = []
    if h is not None:
        dims += [d for d, hd in enumerate(h) if hd is not None and set(axes) <= set(hd)]
        dims += sorted((d for d, hd in enumerate(h) if hd is None), key=lambda d: -shape[d])
    else:
        dims += sorted(range(len(shape)), key=lambda d: -shape[d])
    for d in dims:
        if fits(d):
            splits = list(s.splits)
            splits[d] = tuple(splits[d]) + axes
            return Spec(tuple(splits))
    return Spec(s.splits)


def _follow(op: LaminaOp, i: int, leader: int, specs: list[Spec | None], st: _State,
            slots: list[SSAValue | None]) -> Spec:
    """The placement operand `i` needs so that it agrees with operand `leader` under op's rule."""
    info = op.info
    v = slots[i]
    L = slots[leader]
    assert v is not None and L is not None
    shape, lshape = _shape(v), _shape(L)
    ls = specs[leader]
    assert ls is not None
    own = st.from_hint(v) if specs[i] is None else specs[i]
    assert own is not None
    splits = info.sharding.follow(i, shape, lshape, ls, own, _shape(op.results[0]))
    if splits is None:
        return Spec.replicated(len(shape))
    return st.clean(shape, splits)


def _try(op: LaminaOp, specs: list[Spec | None], st: _State) -> Spec | None:
    """The rule's result for `specs`, or None when it breaks the rule or does not divide on the
    mesh (reshape moves a split onto a result dimension the rule cannot check without sizes)."""
    try:
        out = infer(op.info, op.operand_infos(), specs, op.attr_values(),
                    tensor_info(op.results[0].type))
    except ShardingError:
        return None
    return out if st.valid(_shape(op.results[0]), out) else None


def _backward_hints(st: _State, ops: list[Operation]) -> None:
    for op in reversed(ops):
        if not isinstance(op, LaminaOp) or not op.results:
            continue
        r = op.results[0]
        user = mesh_placed(r)
        h: Hint | None = tuple(user.splits) if user is not None else st.hint.get(r)
        if h is None:
            continue
        rule, attrs = op.info.sharding, op.attr_values()
        rshape = _shape(r)
        for i, v in enumerate(op.operand_slots()):
            if v is None or v in st.hint:
                continue
            out = rule.operand_hint(i, _shape(v), rshape, h, attrs)
            if out is not None:
                st.hint[v] = out


def _place_op(st: _State, op: LaminaOp) -> None:
    info = op.info
    slots = op.operand_slots()
    specs: list[Spec | None] = [None if v is None or v in st.free else st.spec[v] for v in slots]
    present = [i for i, v in enumerate(slots) if v is not None]
    known = [i for i in present if specs[i] is not None]
    reasons: list[str] = []

    # rule 2: pending sums that this op cannot take are reduced first
    partial_ops = [i for i in known if specs[i].partial]  # type: ignore[union-attr]
    reduce: list[int] = []
    if partial_ops:
        linearity = info.linearity_for(op.operand_infos(), tensor_info(op.results[0].type))
        if linearity is Linearity.NONE:
            reduce = partial_ops
        elif linearity is Linearity.ADDITIVE:
            axes = {specs[i].partial for i in present if specs[i] is not None}  # type: ignore
            if len(partial_ops) != len(present) or len(axes) != 1:
                reduce = partial_ops
        else:
            keep = next((i for i in partial_ops if i in info.linear_operands), None)
            reduce = [i for i in partial_ops if i != keep]
        reduce += [i for i in partial_ops if specs[i].partial_kind != SUM.name and i not in reduce]  # type: ignore
    for i in reduce:
        v = slots[i]
        assert v is not None and specs[i] is not None
        specs[i] = _reduction_target(st, v, specs[i])  # type: ignore[arg-type]
        reasons.append(f"operand {i} is a pending sum that {op.name} cannot take")

    # rule 3: unplaced arguments follow a placed operand (or their hint)
    leader = max(known, key=lambda i: (type_bytes(slots[i].type), -i)) if known else None  # type: ignore
    for i in present:
        if specs[i] is None:
            v = slots[i]
            assert v is not None
            specs[i] = _follow(op, i, leader, specs, st, slots) if leader is not None \
                else st.from_hint(v)

    refused = info.sharding.refusal(info, specs, op.attr_values())
    if refused is not None:
        raise error_at(op, f"propagate-sharding: {refused}")
    result = _try(op, specs, st)
    if result is None:
        specs, why = _choose(st, op, specs, slots, present, known)
        reasons.append(why)
        result = _try(op, specs, st)
        assert result is not None, f"{op.name}: no placement satisfies its rule"

    for k, (v, s) in enumerate(zip(slots, specs, strict=True)):
        if v is None or s is None:
            continue
        if v in st.free:
            st.free.discard(v)
            st.set_type(v, s)
            st.say(op, f"argument {st.name(v)} placed {s}: its first use, {op.name}, needs it so "
                   "(inputs are distributed, nothing is communicated)")
        elif st.spec[v] != s:
            new = st.reshard(v, s, op, "; ".join(reasons) or f"the {info.sharding.name} rule")
            _set_operand(op, _operand_index(op, k), new)

    r = op.results[0]
    user = mesh_placed(r)
    st.set_type(r, result)
    why = "the " + info.sharding.name + " rule on its operands"
    if result.partial:
        why += " (a pending sum, reduced where a consumer needs it)"
    st.say(op, f"{st.name(r)} placed {result}: {why}")
    if user is not None and user != result:
        # rule 1: the written placement wins; a reshard follows the op
        uses = list(r.uses)
        nxt = op.next_op
        assert nxt is not None
        new = st.reshard(r, user, nxt, "the program states this placement")
        for u in uses:
            _set_operand(u.operation, u.index, new)


def _choose(st: _State, op: LaminaOp, specs: list[Spec | None], slots: list[SSAValue | None],
            present: list[int], known: list[int]) -> tuple[list[Spec | None], str]:
    """Rules 4 and 5: the cheapest placement of the operands that the op's rule accepts, by the
    target's model (`sharding_choice`); returns it and the reason reshards give."""
    cands: list[Candidate] = []
    for lead in sorted(known, key=lambda i: (-type_bytes(slots[i].type), i)):  # type: ignore
        trial = list(specs)
        for i in present:
            if i != lead:
                trial[i] = _follow(op, i, lead, specs, st, slots)
        if _try(op, trial, st) is not None:
            cands.append(Candidate(trial, f"operands follow operand {lead}"))
    cands += drop_candidates(specs, present, lambda t: _try(op, t, st) is not None)
    shapes = [None if v is None else _shape(v) for v in slots]
    trial = drop_from_end(specs, shapes, present, lambda t: _try(op, t, st) is not None)
    made = ", ".join(str(s) for s in trial if s is not None)
    cands.append(Candidate(trial, f"{op.info.sharding.name} rule: operands made {made}", 99))
    best, line = st.coster.choose(op, cands, slots, present,
                                  lambda v: None if v in st.free else st.spec[v],
                                  lambda specs: _try(op, specs, st))
    st.say(op, line)
    return best.specs, f"{best.label} ({us(best.seconds)} on {st.coster.target.name})"


def _set_operand(op: Operation, index: int, value: SSAValue) -> None:
    ops = list(op.operands)
    ops[index] = value
    op.operands = ops


def _operand_index(op: LaminaOp, slot: int) -> int:
    """Index in op.operands of operand slot `slot` (slots skip absent optionals)."""
    slots = op.operand_slots()
    return sum(1 for v in slots[:slot] if v is not None)


def _place_function(func: FuncOp, mesh: MeshOp, target: Target, log: ExplainLog | None) -> None:
    st = _State(func, mesh.sym_name.data, mesh.axis_sizes, log, {}, {}, set(), {}, Namer(func),
                Coster(target, mesh.mesh))
    block = func.body.block
    groups = _dissolve_fused(block)
    for a in block.args:
        s = mesh_placed(a)
        if s is not None:
            st.spec[a] = s
        else:
            st.free.add(a)
    ops = list(block.ops)
    ret = ops[-1] if ops and isinstance(ops[-1], ReturnOp) else None
    if ret is not None:
        for v, t in zip(ret.operands, func.function_type.outputs.data, strict=True):
            s = spec_of(t)
            if s is not None and v not in st.hint:
                st.hint[v] = tuple(s.splits)
    _backward_hints(st, ops)
    for op in ops:
        if isinstance(op, ReturnOp):
            continue
        if isinstance(op, PlacementOp):
            for k, v in enumerate(op.inputs):
                want = spec_of(v.type)
                assert want is not None
                if v in st.free:
                    st.free.discard(v)
                    st.set_type(v, want)
                elif st.spec[v] != want:
                    _set_operand(op, k, st.reshard(v, want, op, f"{op.name} is written for it"))
            for r in op.outputs:
                st.spec[r] = spec_of(r.type)  # type: ignore[assignment]
            continue
        if isinstance(op, FreeOp):
            continue  # ends a lifetime (annotate-lifetimes): no result to place
        if isinstance(op, MoveOp):
            # a tier change keeps the placement: the result takes its operand's splits
            (v,) = op.operands
            if v in st.free:
                st.free.discard(v)
                st.set_type(v, st.from_hint(v))
            st.set_type(op.results[0], st.spec[v])
            continue
        if not isinstance(op, LaminaOp):
            raise error_at(op, f"propagate-sharding cannot place the results of '{op.name}'")
        _place_op(st, op)
    for a in block.args:
        if a in st.free:
            st.set_type(a, st.from_hint(a))
            st.say(func, f"argument {st.name(a)} is unused: placed {st.spec[a]} (its hint or the "
                   "default, replicated)")
    outs = []
    if ret is not None:
        updates = updates_of(func)
        for k, (v, t) in enumerate(zip(ret.operands, func.function_type.outputs.data,
                                       strict=True)):
            want = spec_of(t)
            s = st.spec[v]
            if want is None and k in updates:
                # it replaces an argument (`lamina.updates`): placed like it, for the next call
                want = st.spec[block.args[updates[k]]]
                t = with_spec(t, st.mesh, want)
                st.say(ret, f"result {k} was not placed: placed {want}, like argument "
                       f"{st.name(block.args[updates[k]])}, which it replaces ({UPDATES_ATTR})")
            elif want is None:
                want = _reduction_target(st, v, s) if s.partial else s
                t = with_spec(t, st.mesh, want)
                st.say(ret, f"result {k} was not placed: placed {want} (its value's splits, "
                       "pending sums reduced)")
            if s != want:
                _set_operand(ret, k, st.reshard(v, want, ret, f"function result {k} is declared {want}"))
            outs.append(t)
        func.properties["function_type"] = FunctionType.from_lists(
            [a.type for a in block.args], outs)
    for members in groups:
        _refuse(block, members, st)


# -- lamina.fused: placed through its body, reshards kept outside --
#
# A fused op is placed as if its body were written inline: the body is inlined (block arguments
# become the fused op's operands, its results the yielded values), the walks above place every body
# op by the same op-table rules, and then each group is rebuilt from its ops. A reshard the rules
# need between two ops of one group cannot live in a fused kernel (all its values move in lockstep,
# one placement per value, no communication): such a reshard splits the group there, into the parts
# still connected by direct edges, so the reshard sits between fused ops, on the consumer part's
# input (the fused op's inputs are the boundary where placements change). Reshards of the group's
# inputs simply precede the fused op. A part of one op (constants aside) is left unfused; parts
# whose contraction would form a cycle through reshards are left unfused as well.


def _dissolve_fused(block) -> list[list[Operation]]:
    groups: list[list[Operation]] = []
    for op in list(block.ops):
        if not isinstance(op, FusedOp):
            continue
        body = op.body.block
        y = op.yield_op
        for arg, v in zip(body.args, op.inputs, strict=True):
            arg.replace_all_uses_with(v)
        members: list[Operation] = []
        for inner in list(body.ops):
            if inner is y:
                continue
            inner.detach()
            block.insert_op_before(inner, op)
            members.append(inner)
        for r, v in zip(op.results, y.values, strict=True):
            if r.name_hint and isinstance(v.owner, Operation) and v.owner in members:
                v.name_hint = r.name_hint
            r.replace_all_uses_with(v)
        y.detach()
        y.erase()
        op.detach()
        op.erase()
        if members:
            groups.append(members)
    return groups


def _is_source(op: Operation) -> bool:
    return isinstance(op, LaminaOp) and not op.operands


def _refuse(block, members: list[Operation], st: _State) -> None:
    mset = {m for m in members if not _is_source(m)}
    if not mset:
        return
    uf: UnionFind[Operation] = UnionFind()

    # the range of the block the group's ops (and the reshards placed among them) occupy
    pos = {op: i for i, op in enumerate(block.ops)}
    ordered = sorted(members, key=lambda m: pos[m])
    first, last = ordered[0], ordered[-1]
    rng: list[Operation] = []
    op = first
    while op is not None:
        rng.append(op)
        if op is last:
            break
        op = op.next_op
    # stage: how many reshards of the group's own values lie on a path into the op; parts are
    # the direct-edge components within one stage, so the parts and reshards form no cycle
    stage: dict[Operation, int] = {}
    for o in rng:
        preds = [v.owner for v in o.operands if isinstance(v.owner, Operation)
                 and v.owner in stage]
        if o in mset:
            stage[o] = max((stage[p] for p in preds), default=0)
        else:
            stage[o] = max((stage[p] + 1 for p in preds), default=0)
    for m in mset:
        for v in m.operands:
            p = v.owner
            if isinstance(p, Operation) and p in mset and stage[p] == stage[m]:
                uf.union(m, p)
    node = {o: (uf.find(o) if o in mset else o) for o in rng}
    comps: dict[Operation, list[Operation]] = {}
    for o in rng:
        if o in mset:
            comps.setdefault(node[o], []).append(o)
    if len(comps) == 1 and len(rng) == len(members):
        order = [next(iter(comps))]
    else:
        order, left, _ = contracted_order(rng, node.__getitem__)
        if left:
            st.say(first, f"fused group of {len(mset)} ops left unfused: the reshards it needs "
                   "would form a cycle between its parts")
            return
        st.say(first, f"fused group of {len(mset)} ops split into {len(comps)} parts at the "
               "reshards its placements need (no communication inside a fused kernel)")
    anchor = last.next_op
    assert anchor is not None
    for o in rng:
        o.detach()
    whole = len(comps) == 1
    for n in order:
        ops = comps.get(n, [n])
        if n in comps and (len(ops) > 1 or whole):
            block.insert_op_before(build_fused(ops), anchor)
        else:
            for o in ops:
                block.insert_op_before(o, anchor)
    for m in members:
        if _is_source(m) and m.parent is None:
            m.erase()
        elif _is_source(m) and all(not r.uses for r in m.results):
            m.detach()
            m.erase()


@dataclass(frozen=True)
class PropagateSharding(LaminaPass):
    """Place every value on the mesh from the placements written on the inputs."""

    name: ClassVar[str] = "propagate-sharding"
    target: str = "h100-node"

    def run(self, ctx: Context, module: ModuleOp, log: ExplainLog | None) -> None:
        target = load_target(self.target)
        for func in [op for op in module.ops if isinstance(op, FuncOp)]:
            names = set()
            for t in (*func.function_type.inputs.data, *func.function_type.outputs.data):
                p = place_of(t)
                if p is not None and p.mesh_name is not None:
                    names.add(p.mesh_name)
            for op in func.walk():
                for r in op.results:
                    p = place_of(r.type)
                    if p is not None and p.mesh_name is not None:
                        names.add(p.mesh_name)
            if not names:
                if log is not None:
                    log.add(func, f"@{func.sym_name.data}: nothing is placed on a mesh; left as is")
                continue
            if len(names) > 1:
                raise error_at(func, f"propagate-sharding: @{func.sym_name.data} uses several "
                               f"meshes ({', '.join(sorted(names))})")
            mesh = find_mesh(func, names.pop())
            if mesh is None:
                raise error_at(func, "propagate-sharding: placement refers to an unknown mesh")
            _place_function(func, mesh, target, log)
