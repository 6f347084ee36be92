"""`assign-memory-tiers`: a memory tier for every value, and the moves between tiers.

    -p 'assign-memory-tiers{target=tiny solver=greedy hbm-capacity=0 recompute=true
                            recompute-depth=4 explain=false}'

Run it after `annotate-lifetimes` (without frees every value lives to the end of the function).
`target` is a built-in target name; `hbm-capacity` (bytes, 0 = the target's) overrides the HBM
capacity, e.g. to test a plan under pressure. `solver=ilp` solves the same model exactly with
`scipy.optimize.milp` (HiGHS; `pip install 'lamina[ilp]'`) and is meant for small programs.

This module is the IR side of the pass: it builds a numbers-only model of the function
(`build_model`), has a solver plan it and rewrites the function from the plan (`rewrite`). The
model, what a plan costs and when it fits are in `lamina.passes.tier_plan.problem`; the solvers
are `tier_plan.greedy` (the default) and `tier_plan.ilp` (the exact reference). Both minimize the
modeled exposed transfer time: the time transfers between tiers are not hidden behind compute.

From the function to the model
------------------------------
Program points are the function's top-level ops other than `lamina.free` ("steps" 0..K-1; the
`func.return` is step K). Each step has a compute time from a roofline over the target:
max(flops / target.flops, bytes read and written / HBM bandwidth), per device (a fused op counts
the flops of its body and only its external bytes). Each value has a size (bytes per device: its
local shard), a definition step (-1 for arguments), the steps that read it ("needs": every op
that is not a free, the return or a move to HBM or SRAM, which reads its operand where it is) and
an end (the step of its last use when it has a `lamina.free`, else K: live until the return).
A value the program already put in a tier (the result of an explicit `lamina.move` to host or
nvme, or declared in SRAM) stays where it is and only takes room; SRAM holds only values
declared in SRAM and the intermediates of the `lamina.fused` op that runs at that step.

Pipeline stages
---------------
After `pipeline-stages` a value placed `stage = AXIS[i]` lives only on the devices of stage i,
and the capacity is that of one device: the model gives each value its stage (an unstaged value
is on every device) and the solvers fit each stage's devices on their own (one capacity per
stage, `tier_plan.problem`). A value is moved only for an overflow of a stage that holds it;
`--explain` names the stage in each reason ("step 12 on stage pp[1]") and adds the modeled HBM
peak of each stage, which is what the SPMD interpreter holds on the stage's first device, and
the stage that binds; the diagnostic of a model no plan fits names the overflowing stage.

From the plan to the function
-----------------------------
Compute reads and writes only HBM, so a value is in HBM at its definition and at every use. An
offloaded value is copied to its tier T (host or nvme) by `lamina.move %v to T` right after its
definition; its HBM copy is freed after the last use before it leaves HBM, and a prefetch
`lamina.move ... to hbm {prefetch = N}`, issued N ops before the next use, brings it back for
the uses up to the next time it leaves. An argument may start in any tier (the plan gives the
function's signature its tiers); an argument declared `tier = host` (ZeRO-Offload style) stays
there and is prefetched before each use. A result either stays in HBM after its last use or is
returned from its offload copy; a result that replaces an argument (`lamina.updates`) is then
moved to the tier the argument arrives in, where the plan put them apart (a move the model does
not cost yet). The frees of the planned values are redone for their copies.

Recompute
---------
With `recompute=true` (the default) the plan may also drop a value and run its defining op again
right before a later use, from inputs that are in HBM there (the model's RECOMPUTE option; its
cost is the op's roofline time). Only an op with one result that reads and writes HBM alone (a
Lamina op or a fused op; no moves, no collectives) is recomputed. A value computed from constants
alone (every op on its way is such an op, the sources are constants) is never moved: it is kept
or recomputed, and it is rebuilt (its whole constant chain, freed right after) wherever a
recompute reads it, so it never has to stay live for one. `recompute-depth` bounds that chain:
a value whose chain of constant-derived ops is deeper is planned as an ordinary value, and a
recompute that would need it is not offered. Recomputed ops are exact copies, so the program's
results are unchanged bit for bit. `recompute=false` takes the option away from every other value
(keep or move only), which is how tests show the option is used.

When no assignment fits (the bytes a step's own operands and results need exceed the capacity,
or the offload tiers are full) the pass stops with a diagnostic at that op naming the tier, the
bytes needed and the largest values live there. The ILP reports a run stopped at its time limit
without a feasible point as "no solution within the time limit" (not infeasibility). With
`explain=true` the pass says why each move and each recompute was inserted; a recompute's line
gives its modeled time and that of moving the value out after its previous use and back for
this one (the same HBM room).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lamina.analysis.fusion import sram_bytes
from lamina.analysis.naming import Namer
from lamina.analysis.recompute import chain_of, constant_chains, defining_op, recomputable
from lamina.analysis.sizes import local_bytes
from lamina.analysis.step_cost import op_seconds
from lamina.ir.buffers.memory import FreeOp, MoveOp, ancestor_in, value_label
from lamina.ir.core.diagnostics import LaminaError, error_at
from lamina.ir.mesh.placement import stage_of, tier_of
from lamina.ir.mesh.target import Target, load_target
from lamina.ir.ops.fused import FusedOp
from lamina.passes.explain import ExplainLog, LaminaPass
from lamina.passes.tier_plan.greedy import solve_greedy
from lamina.passes.tier_plan.ilp import solve_ilp
from lamina.passes.tier_plan.problem import (
    OFFLOAD_TIERS,
    Infeasible,
    Plan,
    Problem,
    Value,
    peaks,
)
from lamina.passes.tier_rewrite import FuncModel, rewrite
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Operation, SSAValue

# ---- from IR to the model ----------------------------------------------------------------------


def _recompute_facts(v: SSAValue, fm: FuncModel, index: dict[SSAValue, int],
                     time_of: dict[Operation, float]) -> None:
    """Fill the model value of `v` with what a recompute of it costs and needs."""
    mv = fm.problem.values[index[v]]
    owner = v.owner
    if not isinstance(owner, Operation) or not recomputable(owner):
        return
    chains, depth = fm.chains, fm.depth
    if any(x not in chains and x not in index for x in owner.operands):
        return  # reads a value the program placed itself
    if any(chains[x] > depth for x in owner.operands if x in chains):
        return
    chain = chain_of(v, chains)
    mv.recompute = time_of[owner] + sum(time_of[defining_op(x)] for x in chain)
    mv.inputs = [index[x] for x in owner.operands if x not in chains]
    mv.extra = sum(local_bytes(x, fm.func) for x in chain)
    mv.never_moved = chains.get(v, depth + 1) <= depth


def build_model(func: FuncOp, target: Target, hbm_capacity: float = 0, recompute: bool = True,
                depth: int = 4) -> FuncModel:
    """The model of `func` on `target` (see the module docstring), HBM capacity overridden by
    `hbm_capacity` when it is not 0; with `recompute`, values may be recomputed through chains
    of constant-derived ops at most `depth` deep."""
    block = func.body.block
    ops = list(block.ops)
    ret = ops[-1]
    if not isinstance(ret, ReturnOp):
        raise error_at(func, "assign-memory-tiers: the function must end in func.return")
    steps = [o for o in ops[:-1] if not isinstance(o, FreeOp)]
    index = {o: i for i, o in enumerate(steps)}
    K = len(steps)
    names = Namer(func)
    capacity = {t.name: t.capacity for t in target.tiers}
    if "hbm" not in capacity:
        raise LaminaError(f"target '{target.name}' has no hbm tier to compute from")
    if hbm_capacity:
        capacity["hbm"] = float(hbm_capacity)
    bandwidth = {t: target.transfer_bandwidth("hbm", t) for t in OFFLOAD_TIERS if t in capacity}
    defs = [*((a, -1) for a in block.args), *((r, i) for i, o in enumerate(steps) for r in o.results)]
    stages = _stages([v for v, _ in defs])
    # per (tier, stage index or None: every stage), the bytes per step no plan moves
    fixed: dict[tuple[str, int | None], list[float]] = {(t, None): [0.0] * (K + 1) for t in capacity}
    for i, o in enumerate(steps):
        if isinstance(o, FusedOp) and "sram" in capacity:
            key = ("sram", _stage_index(o.results[0], stages) if o.results else None)
            fixed.setdefault(key, [0.0] * (K + 1))[i] += sram_bytes(o, target)
    values: list[SSAValue] = []
    model: list[Value] = []
    placed: dict[tuple[str, int | None], list[int]] = {}   # the changes of placed bytes per step
    for v, d in defs:
        size = local_bytes(v, func)
        stage = _stage_index(v, stages)
        needs, end = _needs_and_end(v, d, block, ret, index)
        tier = tier_of(v.type)
        declared_off = tier in OFFLOAD_TIERS or tier == "sram"
        if declared_off and (d >= 0 and (isinstance(v.owner, MoveOp) or tier == "sram")):
            # a value the program already put in a tier (an explicit move, or sram): fixed
            assert tier is not None
            # added up at the end from differences: a value that lives to the return would
            # cost O(K) here, O(K^2) over a program of them
            spans = placed.setdefault((tier, stage), [0] * (K + 2))
            spans[d] += size
            spans[min(end, K) + 1] -= size
            continue
        if tier in OFFLOAD_TIERS and tier not in bandwidth:
            raise error_at(func, f"assign-memory-tiers: {names(v)} is in tier '{tier}', which "
                           f"target '{target.name}' does not have")
        values.append(v)
        model.append(Value(names(v), size, d, sorted(n for n in needs if n > d), end,
                           home=tier if d < 0 and tier in OFFLOAD_TIERS else None, stage=stage))
    for key, spans in placed.items():
        ys = fixed.setdefault(key, [0.0] * (K + 1))
        run = 0
        for k in range(K + 1):
            run += spans[k]
            if run:
                ys[k] += run
    # a move step computes nothing: the planner costs transfers on the copy engine, beside
    # compute, and a move counted as compute would hide other transfers behind a transfer
    compute = [0.0 if isinstance(o, MoveOp) else op_seconds(o, target, func) for o in steps]
    prob = Problem(K, compute, model, capacity, bandwidth,
                   {t: ys for (t, s), ys in fixed.items() if s is None},
                   [f"{axis}[{i}]" for axis, i in stages] or [""],
                   {(t, s): ys for (t, s), ys in fixed.items() if s is not None})
    fm = FuncModel(func, steps, ret, values, prob, constant_chains(steps), depth)
    index = {v: i for i, v in enumerate(values)}
    time_of = dict(zip(steps, compute, strict=True))
    for v in values:
        if recompute or v in fm.chains:
            _recompute_facts(v, fm, index, time_of)
    return fm


def _stages(values: list[SSAValue]) -> list[tuple[str, int]]:
    """The pipeline stages the values are placed on (`stage = AXIS[i]`), in order; [] for a
    program without stages. Each is one group of devices with its own capacity to fit."""
    return sorted({s for v in values if (s := stage_of(v.type)) is not None})


def _stage_index(v: SSAValue, stages: list[tuple[str, int]]) -> int | None:
    """The index in `stages` of the stage holding `v`; None when every device holds it."""
    s = stage_of(v.type)
    return None if s is None else stages.index(s)


def _needs_and_end(v: SSAValue, d: int, block: Block, ret: ReturnOp,
                   index: dict[Operation, int]) -> tuple[set[int], int]:
    """The steps that read `v` (defined at step `d`) in HBM, and its end: the step of its last
    use when it is freed, else K (the return)."""
    K = len(index)
    needs: set[int] = set()
    end = d
    freed = False
    for use in v.uses:
        u = ancestor_in(use.operation, block)
        assert u is not None, "a use outside the function it is defined in"
        if isinstance(u, FreeOp):
            freed = True
            continue
        if u is ret:
            end = K
            continue
        if not (isinstance(u, MoveOp) and u.tier not in OFFLOAD_TIERS):
            needs.add(index[u])  # a move to hbm reads its operand where it is
        end = max(end, index[u])
    if not freed:
        end = K
    if d < 0:
        end = max(end, 0)  # an argument is somewhere at the entry: count it at step 0
    return needs, end


def _infeasible_error(fm: FuncModel, e: Infeasible, target: Target) -> LaminaError:
    """The diagnostic for a model no plan fits, at the op of the step that overflows."""
    at: Operation = fm.steps[e.step] if e.step < len(fm.steps) else fm.ret
    what = f"{at.name}" if not at.results else f"{value_label(at.results[0])} = {at.name}"
    stage = {v: mv.stage for v, mv in zip(fm.values, fm.problem.values, strict=True)}
    own = sum(local_bytes(v, fm.func) for v in {*at.operands, *at.results}
              if isinstance(v.type, TensorType) and stage.get(v) in (None, e.stage))
    live = ", ".join(f"{fm.problem.values[vi].name} ({n} B)" for n, vi in e.live[:4])
    return error_at(at, f"assign-memory-tiers: no assignment fits tier '{e.tier}'"
                    f"{fm.problem.on_stage(e.stage)} at program point "
                    f"{e.step} ({what}): {int(e.need)} bytes per device needed, capacity "
                    f"{int(e.capacity)} (target '{target.name}'); the op's own operands and result "
                    f"take {own} bytes" + (f"; largest live values: {live}" if live else "")
                    + _infeasible_why(fm, e, target))


def _infeasible_why(fm: FuncModel, e: Infeasible, target: Target) -> str:
    """What the planner could not change: no tier to offload to, or arguments the program itself
    declared in the overflowing tier."""
    prob = fm.problem
    if e.tier == "hbm" and not prob.tiers():
        return f"; target '{target.name}' has no host or nvme tier to offload values to"
    declared = [v for v in prob.values if v.home == e.tier and v.stage in (None, e.stage)]
    if not declared:
        return ""
    names = ", ".join(f"{v.name} ({int(v.size)} B)" for v in declared[:4])
    return (f"; arguments declared in '{e.tier}' take {int(sum(v.size for v in declared))} bytes "
            f"({names}{', ...' if len(declared) > 4 else ''})")


# ---- the pass ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class AssignMemoryTiers(LaminaPass):
    """Choose tiers and insert moves so every step fits (see the module docstring)."""

    name: ClassVar[str] = "assign-memory-tiers"
    minimums: ClassVar[dict[str, int]] = {"hbm_capacity": 0, "recompute_depth": 1}
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"solver": ("greedy", "ilp")}
    target: str = "h100-node"
    solver: str = "greedy"
    hbm_capacity: int = 0
    recompute: bool = True
    recompute_depth: int = 4

    def run(self, ctx: Context, module: ModuleOp, log: ExplainLog | None) -> None:
        target = load_target(self.target)
        for op in list(module.walk()):
            if isinstance(op, FuncOp) and op.body.blocks:
                assign_function(op, target, self.solver, log, self.hbm_capacity,
                                self.recompute, self.recompute_depth)


def assign_function(func: FuncOp, target: Target, solver: str = "greedy",
                    log: ExplainLog | None = None, hbm_capacity: float = 0,
                    recompute: bool = True, depth: int = 4) -> Plan:
    """Plan `func`'s tiers on `target` with `solver` and rewrite it; returns the plan."""
    fm = build_model(func, target, hbm_capacity, recompute, depth)
    try:
        plan = solve_greedy(fm.problem) if solver == "greedy" else solve_ilp(fm.problem)
    except Infeasible as e:
        raise _infeasible_error(fm, e, target) from None
    n, r = rewrite(fm, plan, log)
    if log is not None:
        log.add(func, f"@{func.sym_name.data}: {n} move(s), {r} recompute(s), modeled exposed "
                f"transfer and recompute time {plan.cost * 1e6:.3g} us ({solver}, target "
                f"'{target.name}', hbm capacity "
                f"{int(fm.problem.capacity['hbm'])} B per device)")
        if fm.problem.stages > 1:
            log.add(func, _stage_peaks(fm.problem, plan))
    return plan


def _stage_peaks(prob: Problem, plan: Plan) -> str:
    """The explain line of a staged program: per stage the modeled HBM peak of one of its devices
    (what the SPMD interpreter measures on the stage's first device), and the stage that binds."""
    got = peaks(prob, plan)
    binding = max(range(len(got)), key=lambda s: (got[s], -s))
    per = ", ".join(f"{name} {int(p)} B" for name, p in zip(prob.stage_names, got, strict=True))
    return (f"modeled hbm peak per device by stage: {per}; stage {prob.stage_names[binding]} "
            f"binds ({int(got[binding])} of {int(prob.capacity['hbm'])} B)")
