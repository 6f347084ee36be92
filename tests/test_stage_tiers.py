"""assign-memory-tiers on pipeline-staged steps (issue 28): one capacity per stage.

A value placed `stage = AXIS[i]` occupies only the devices of stage i, so the planner fits each
stage's devices on their own. The planner's per-stage HBM peaks equal what the SPMD interpreter
holds on each stage's first device (measured from its arrays, `device_peaks`); at a capacity
between the two schedules' peaks the schedule with the lower peak (1F1B where activations
dominate) runs without a move where the other needs moves or is refused at a located op naming
the stage; and the staged, tiered step equals the unstaged one, verifies and round-trips.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from typing import Any
from unittest import mock

import lamina
import lamina.backends.numpy.memory  # noqa: F401  (registers lamina.move / lamina.free)
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.backends.interface import RunResult, find_entry
from lamina.backends.numpy import runner as base
from lamina.backends.numpy.runner import ExecutionObserver, run_function
from lamina.backends.numpy.spmd import run_spmd
from lamina.ir.buffers.memory import MoveOp
from lamina.ir.mesh.placement import tier_of
from lamina.passes.assign_memory_tiers import assign_function, build_model
from lamina.passes.explain import ExplainLog
from lamina.passes.tier_plan.greedy import solve_greedy
from lamina.passes.tier_plan.ilp import solve_ilp
from lamina.passes.tier_plan.problem import (
    Infeasible,
    Plan,
    Problem,
    Value,
    check_plan,
    gaps_of,
    peaks,
)
from memtools import target_with
from strategies import examples
from strategies.tiers import need_and_live, random_values
from test_accumulate_gradients import Mlp, _assert_close, _inputs
from xdsl.dialects.func import FuncOp
from xdsl.ir import SSAValue

BATCH = 24   # divisible by every micro-batch count drawn (2, 3, 4)


def device_peaks(func: FuncOp, inputs: Sequence[np.ndarray]) -> tuple[RunResult, dict[tuple[int, str], int]]:
    """Run `func` on the SPMD interpreter and measure, per (device, tier), the most bytes of the
    arrays it holds at once. The interpreter's own `peak_live_bytes` is device 0's, all tiers
    together; this wraps its op loop to size every device's array of each live value (a device
    off a value's stage holds an empty one), by the tier in the value's type."""
    real = base.drive
    measured: dict[tuple[int, str], int] = {}

    def drive(f: FuncOp, args: list[Any], execute: Any, nbytes: Any, finish: Any, stats: Any,
              observer: ExecutionObserver | None = None) -> Any:
        arrays: dict[SSAValue, list[np.ndarray]] = {}
        live: dict[tuple[int, str], int] = {}
        arrays_in = args

        def count(v: SSAValue, sign: int) -> None:
            tier = tier_of(v.type) or "hbm"
            for d, a in enumerate(arrays[v]):
                live[d, tier] = live.get((d, tier), 0) + sign * a.nbytes
                measured[d, tier] = max(measured.get((d, tier), 0), live[d, tier])

        class Sizes(ExecutionObserver):
            def on_start(self, func: FuncOp, args: Sequence[SSAValue]) -> None:
                for v, a in zip(args, arrays_in, strict=True):
                    arrays[v] = a
                    count(v, 1)

            def on_result(self, value: SSAValue, index: int) -> None:
                count(value, 1)

            def on_free(self, value: SSAValue, index: int) -> None:
                count(value, -1)
                del arrays[value]

        def sized(op: Any, operands: Any) -> Any:
            results = execute(op, operands)
            arrays.update(zip(op.results, results, strict=True))
            return results

        assert observer is None
        return real(f, args, sized, nbytes, finish, stats, Sizes())

    with mock.patch.object(base, "drive", drive):
        result = run_spmd(func, inputs)
    return result, measured


def _staged(mlp: Mlp, stages: int, micro: int, sched: str) -> tuple[Any, FuncOp]:
    module = lamina.parse(mlp.text())
    lamina.apply(module, f"derive-backward{{data=x,y}},pipeline-stages{{stages={stages} "
                 f"micro-batches={micro} schedule={sched}}},annotate-lifetimes")
    return module, find_entry(module, "f_grad")


def _keep_all(prob: Problem) -> Plan:
    return Plan([None] * len(prob.values),
                [[None] * len(gaps_of(v, i)) for i, v in enumerate(prob.values)])


def _modeled_peaks(func: FuncOp) -> list[float]:
    """Per stage, the planner's HBM peak of the step as it is (nothing moved)."""
    prob = build_model(func, target_with(hbm=1e18)).problem
    return peaks(prob, _keep_all(prob))


def _one_device_peak(func: FuncOp) -> float:
    """The peak the planner once planned against: every stage's values on one device."""
    prob = build_model(func, target_with(hbm=1e18)).problem
    flat = dataclasses.replace(prob, values=[dataclasses.replace(v, stage=None)
                                             for v in prob.values], stage_names=[""],
                               staged_fixed={})
    return max(peaks(flat, _keep_all(flat)))


def _hbm_by_stage(measured: dict[tuple[int, str], int], stages: int, devices: int) -> list[int]:
    """The measured HBM peak of each stage's first device (a 1-axis mesh: device s is stage s)."""
    assert devices == stages
    return [measured.get((s, "hbm"), 0) for s in range(stages)]


def _reference(mlp: Mlp) -> list[np.ndarray]:
    module = lamina.parse(mlp.text())
    lamina.apply(module, "derive-backward{data=x,y}")
    ref = find_entry(module, "f_grad")
    return run_function(ref, _inputs(ref)).outputs


def _plan_and_check(mlp: Mlp, stages: int, micro: int, sched: str, cap: int) -> str:
    """Stage `mlp`'s step, plan it at `cap` bytes of HBM per device and check the result: the
    planner's per-stage peaks (its explain line) are the SPMD run's, within the capacity; the
    outputs are the unstaged step's; it verifies and round-trips. Returns "kept" (no move),
    "moved", or the diagnostic when no plan fits."""
    module, func = _staged(mlp, stages, micro, sched)
    log = ExplainLog("assign-memory-tiers")
    prob = build_model(func, target_with(hbm=cap)).problem   # the model the pass plans
    try:
        plan = assign_function(func, target_with(hbm=cap), "greedy", log)
    except lamina.LaminaError as e:
        assert e.loc is not None
        return e.message
    for (vi, _gi), why in plan.reasons.items():   # a value moves for its own stage's overflow
        v = prob.values[vi]
        assert v.stage is not None and why.endswith(f" on stage {prob.stage_names[v.stage]}"), why
    fm_peaks = [int(p) for p in _plan_peaks(log)]
    got, measured = device_peaks(func, _inputs(func))
    assert _hbm_by_stage(measured, stages, got.stats["devices"]) == fm_peaks, (sched, cap)
    assert max(fm_peaks) <= cap
    _assert_close(got.outputs, _reference(mlp), "f32")
    assert str(lamina.parse(str(module))) == str(module)   # verifies and round-trips
    moves = sum(isinstance(op, MoveOp) for op in func.walk())
    return "moved" if moves else "kept"


def _plan_peaks(log: ExplainLog) -> list[int]:
    """The per-stage peaks of the planner's explain line (`pp[0] 123 B, pp[1] 456 B; ...`)."""
    (line,) = [ln for ln in log.lines if "modeled hbm peak per device by stage: " in ln]
    per = line.split("by stage: ")[1].split(";")[0]
    return [int(part.split()[1]) for part in per.split(", ")]


@settings(max_examples=examples(3), deadline=None)
@given(st.lists(st.integers(1, 6), min_size=3, max_size=4), st.sampled_from((2, 3)),
       st.sampled_from((2, 3, 4)), st.floats(0.0, 1.0))
def test_the_lower_schedule_fits_where_the_higher_moves(widths: list[int], stages: int,
                                                        micro: int, frac: float) -> None:
    """Random MLP steps, both schedules: at a capacity between their per-stage peaks the one
    with the lower peak keeps everything in HBM; the other moves values or is refused naming the
    stage whose capacity binds (its diagnostic located at an op)."""
    mlp = Mlp(BATCH, tuple(widths), ("tanh",) * (len(widths) - 1), "mean", "f32")
    peak = {s: max(_modeled_peaks(_staged(mlp, stages, micro, s)[1])) for s in ("gpipe", "1f1b")}
    lo, hi = sorted(peak.values())
    cap = int(lo + frac * (hi - lo))
    for sched in ("gpipe", "1f1b"):
        got = _plan_and_check(mlp, stages, micro, sched, cap)
        if peak[sched] <= cap:
            assert got == "kept", (sched, got)
        else:
            assert got == "moved" or re.search(r"no assignment fits tier 'hbm' on stage \w+\[\d\] ",
                                               got), got


@pytest.mark.parametrize(("widths", "stages", "micro"), [((1, 6, 2), 2, 3), ((1, 6, 2), 3, 4)])
def test_1f1b_fits_where_gpipe_offloads(widths: tuple[int, ...], stages: int, micro: int) -> None:
    """Activations dominate (a narrow MLP on a large batch): at a capacity between the per-stage
    peaks of 1F1B and GPipe, 1F1B runs without a move, GPipe with moves; counting every stage's
    values on one device (the planner before per-stage capacities) would not fit 1F1B there."""
    mlp = Mlp(BATCH, widths, ("tanh",) * (len(widths) - 1), "mean", "f32")
    one_f = max(_modeled_peaks(_staged(mlp, stages, micro, "1f1b")[1]))
    gpipe = max(_modeled_peaks(_staged(mlp, stages, micro, "gpipe")[1]))
    assert one_f < gpipe
    cap = int(one_f + gpipe) // 2
    assert _one_device_peak(_staged(mlp, stages, micro, "1f1b")[1]) > cap
    assert _plan_and_check(mlp, stages, micro, "1f1b", cap) == "kept"
    assert _plan_and_check(mlp, stages, micro, "gpipe", cap) == "moved"


def test_modeled_peaks_are_the_spmd_run_s_on_each_stage() -> None:
    """Without moves, the planner's per-stage peaks are the SPMD interpreter's on each stage's
    first device, and device 0's is the interpreter's own `peak_live_bytes`."""
    mlp = Mlp(BATCH, (4, 6, 6, 3), ("tanh", "gelu", "tanh"), "mean", "f32")
    for sched in ("gpipe", "1f1b"):
        _, func = _staged(mlp, 3, 4, sched)
        got, measured = device_peaks(func, _inputs(func))
        modeled = [int(p) for p in _modeled_peaks(func)]
        assert _hbm_by_stage(measured, 3, got.stats["devices"]) == modeled
        assert got.stats["peak_live_bytes"] == modeled[0]


def _two_stages(cap: float) -> Problem:
    """%a on stage 0 and %b on stage 1 (8 B each), both live over steps 0..3 and read at 0 and 3;
    %c (4 B, stage 1) at step 1: each stage holds at most 12 B, one device holding both 20 B."""
    values = [Value("%a", 8, -1, [0, 3], 3, stage=0), Value("%b", 8, -1, [0, 3], 3, stage=1),
              Value("%c", 4, 1, [2], 2, stage=1)]
    return Problem(4, [1e-6] * 4, values, {"hbm": cap, "host": 1e12}, {"host": 20e9},
                   stage_names=["pp[0]", "pp[1]"])


@pytest.mark.parametrize("solve", [solve_greedy, solve_ilp], ids=["greedy", "ilp"])
def test_each_stage_fits_its_own_capacity(solve: Any) -> None:
    """At 12 B each stage fits with nothing moved (a single capacity over both would have to
    move one); at 10 B only stage 1 must move, and it moves its own value %b, not stage 0's %a
    (which would free nothing there)."""
    plan = solve(_two_stages(12))
    assert plan.tier == [None, None, None] and plan.cost == 0.0
    prob = _two_stages(10)
    plan = solve(prob)
    check_plan(prob, plan)
    assert plan.tier[0] is None and plan.tier[1] == "host"
    assert peaks(prob, plan) == [8.0, 8.0]
    with pytest.raises(AssertionError, match="plan overflows hbm at step 1 on stage pp\\[1\\]"):
        check_plan(prob, _keep_all(prob))


@pytest.mark.parametrize("solve", [solve_greedy, solve_ilp], ids=["greedy", "ilp"])
def test_infeasible_names_the_stage(solve: Any) -> None:
    """Under 8 B, stage 1's %b cannot fit at its first use: the error says stage 1 (index 1)."""
    prob = _two_stages(7)
    prob.values[0] = dataclasses.replace(prob.values[0], size=4)
    with pytest.raises(Infeasible) as e:
        solve(prob)
    assert e.value.stage == 1 and e.value.need > 7


def _random_staged(seed: int, n: int, stages: int) -> Problem:
    """tests/strategies/tiers' dense instances with each value on a random stage (a sixth on
    every stage); HBM a third of the way from the largest step need of one stage to the largest
    stage's peak with nothing moved."""
    rng = np.random.default_rng(seed)
    values = [dataclasses.replace(v, stage=None if rng.random() < 1 / 6 else int(rng.integers(stages)))
              for v in random_values(rng, n)]
    need = max(max(need_and_live([v for v in values if v.stage in (None, s)], n)[0])
               for s in range(stages))
    compute = [float(x) for x in rng.uniform(0.2e-6, 3e-6, size=n)]
    prob = Problem(n, compute, values, {"hbm": math.inf, "host": 1e12}, {"host": 20e9},
                   stage_names=[f"pp[{s}]" for s in range(stages)])
    prob.capacity["hbm"] = need + (max(peaks(prob, _keep_all(prob))) - need) / 3
    return prob


@pytest.mark.parametrize("seed", range(4))
def test_greedy_and_ilp_fit_every_stage(seed: int) -> None:
    """Random staged instances: both plans fit every stage's capacity (`check_plan` per stage),
    the ILP is no dearer than the greedy, and each stage's peak is within the capacity."""
    prob = _random_staged(seed, 16, 2 + seed % 2)
    with pytest.raises(AssertionError, match="plan overflows hbm at step .* on stage pp"):
        check_plan(prob, _keep_all(prob))
    g, opt = solve_greedy(prob), solve_ilp(prob)
    for plan in (g, opt):
        check_plan(prob, plan)
        assert max(peaks(prob, plan)) <= prob.capacity["hbm"] + 1e-6
    assert opt.cost <= g.cost + 1e-12
