"""assign-memory-tiers: random programs under random capacities (feasible: verifies, fits in the
checked interpreter, same outputs; infeasible: the diagnostic), greedy vs the ILP, explain."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import run_function
from lamina.ir.diagnostics import LaminaError
from lamina.ir.memory import MoveOp
from lamina.ir.source import verify
from lamina.passes.annotate_lifetimes import annotate
from lamina.passes.assign_memory_tiers import assign_function, build_model
from lamina.passes.explain import ExplainLog
from lamina.passes.pipeline import build_pipeline, run_pipeline
from lamina.passes.tier_plan.greedy import solve_greedy
from lamina.passes.tier_plan.ilp import solve_ilp
from lamina.passes.tier_plan.problem import Plan, Problem, check_plan, plan_cost
from memtools import checked_run, parse, target_with
from strategies import scaled
from strategies.programs import programs
from strategies.tiers import need_and_live, random_values
from xdsl.dialects.builtin import TensorType


def step_need(func, target) -> tuple[int, int]:
    """(lower bound, everything) for the HBM capacity of a freed program."""
    fm = build_model(func, target_with(hbm=1e18))
    p = fm.problem
    need = [0.0] * (p.steps + 1)
    for v in p.values:   # a result is in HBM at the return (step K) as well
        for k in {*v.needs, *([v.define] if v.define >= 0 else []),
                  *([p.steps] if v.end == p.steps else [])}:
            need[k] += v.size
    total = sum(v.size for v in p.values)
    return int(max(need)), int(total)


def prepared(text):
    ctx, m = parse(text)
    annotate(m, None)
    verify(m)
    return m, find_entry(m, None)


@settings(max_examples=scaled(0.4))
@given(programs(min_ops=2, max_ops=14), st.floats(0, 1), st.sampled_from(["greedy", "ilp"]))
def test_feasible_capacity_fits_and_keeps_outputs(p, frac, solver):
    ctx, m0 = parse(p.text)
    ref = run_function(find_entry(m0, None), p.inputs).outputs
    m, func = prepared(p.text)
    lo, hi = step_need(func, target_with(hbm=1e18))
    cap = int(lo + frac * (hi - lo))
    target = target_with(hbm=cap)
    assign_function(func, target, solver)
    verify(m)
    out, checker = checked_run(m, p.inputs, target)  # raises on any overflow
    assert checker.peak["hbm"] <= cap
    for a, b in zip(out.outputs, ref, strict=True):
        np.testing.assert_array_equal(a, b)


@settings(max_examples=scaled(0.3))
@given(programs(min_ops=2, max_ops=10), st.floats(0.05, 0.99))
def test_infeasible_capacity_gives_diagnostic(p, frac):
    m, func = prepared(p.text)
    lo, _ = step_need(func, target_with(hbm=1e18))
    cap = max(1, int(lo * frac))
    with pytest.raises(LaminaError) as e:
        assign_function(func, target_with(hbm=cap), "greedy")
    msg = e.value.message
    assert "assign-memory-tiers: no assignment fits tier 'hbm' at program point" in msg
    assert f"capacity {cap} (target 'tiny')" in msg and "largest live values: %" in msg
    assert e.value.loc is not None


def random_problem(rng: np.random.Generator, n: int, pressure: float) -> Problem:
    """Dense instances (reads anywhere later); HBM between the largest step need and the total."""
    values = random_values(rng, n)
    need, _ = need_and_live(values, n)
    cap = max(need) + pressure * (sum(v.size for v in values) - max(need)) * 0.3
    compute = [float(x) for x in rng.uniform(0.2e-6, 3e-6, size=n)]
    return Problem(n, compute, values, {"hbm": cap, "host": 1e12, "nvme": 1e13},
                   {"host": 20e9, "nvme": 2e9})


@pytest.mark.parametrize("seed", range(6))
def test_ilp_is_optimal_reference(seed):
    prob = random_problem(np.random.default_rng(seed), 20, 0.3)
    g = solve_greedy(prob)
    opt = solve_ilp(prob)
    check_plan(prob, g)
    check_plan(prob, opt)
    assert opt.cost <= g.cost + 1e-12
    assert plan_cost(prob, opt) == pytest.approx(opt.cost)


def test_keep_everything_when_it_fits():
    prob = random_problem(np.random.default_rng(1), 20, 10.0)
    prob.capacity["hbm"] = 1e12
    plan = solve_greedy(prob)
    assert plan.cost == 0 and all(t is None for t in plan.tier)


SAMPLE = open("samples/mlp_training_offload.mlir").read()


@pytest.mark.parametrize("spec", [
    "annotate-lifetimes,assign-memory-tiers{target=tiny}",
    "fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=tiny}",
    "fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=tiny solver=ilp}",
])
def test_training_step_sample_fits_tiny(spec):
    ctx, m0 = parse(SAMPLE)
    rng = np.random.default_rng(0)
    func0 = find_entry(m0, None)
    inputs = []
    for a in func0.body.block.args:
        assert isinstance(a.type, TensorType)
        inputs.append(np.abs(rng.standard_normal([d for d in a.type.get_shape()])).astype(np.float32))
    ref = run_function(func0, inputs).outputs
    ctx, m = parse(SAMPLE)
    with pytest.raises(LaminaError, match="capacity overflow in tier 'hbm'"):
        checked_run(m, inputs, target_with(hbm=1048576))
    run_pipeline(ctx, m, build_pipeline(spec))
    assert any(isinstance(op, MoveOp) for op in m.walk())
    out, ck = checked_run(m, inputs, target_with(hbm=1048576))
    assert ck.peak["hbm"] <= 1048576 and ck.stats()["moved_bytes"]["host->hbm"] > 0
    for a, b in zip(out.outputs, ref, strict=True):
        np.testing.assert_array_equal(a, b)


def test_explain_says_why_each_move():
    ctx, m = parse(SAMPLE)
    annotate(m, None)
    log = ExplainLog("assign-memory-tiers")
    assign_function(find_entry(m, None), target_with(hbm=1048576), "greedy", log)
    moves = [op for op in m.walk() if isinstance(op, MoveOp)]
    lines = [ln for ln in log.lines if "] t.mlir" in ln and (" copy " in ln or " prefetch " in ln)]
    assert len(lines) == len(moves)
    assert all("over capacity" in ln for ln in lines)
    assert "modeled exposed transfer and recompute time" in log.lines[-1]


def test_bad_solver_and_missing_target():
    ctx, m = parse(SAMPLE)
    with pytest.raises(LaminaError, match="option 'solver' for assign-memory-tiers must be greedy or ilp"):
        run_pipeline(ctx, m, build_pipeline("assign-memory-tiers{solver=magic}"))
    with pytest.raises(LaminaError, match="unknown target 'nope'"):
        run_pipeline(ctx, m, build_pipeline("assign-memory-tiers{target=nope}"))


def test_ilp_without_scipy(monkeypatch):
    import builtins

    real = builtins.__import__

    def fake(name, *a, **k):
        if name.startswith("scipy"):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(LaminaError, match=r"needs scipy: pip install 'lamina\[ilp\]'"):
        solve_ilp(random_problem(np.random.default_rng(0), 5, 0.5))


def test_plan_type_is_exposed():
    assert Plan([None], [[None]]).cost == 0.0


def test_greedy_close_to_ilp_on_average():
    # the target is 5% on average on benchmarks/bench_tiers.py's instances (see its table);
    # these denser random instances (reads anywhere later) are harder: 8.5% measured, bound 10%
    gaps = []
    for seed in range(8):
        prob = random_problem(np.random.default_rng(100 + seed), 30, 0.4)
        g, opt = solve_greedy(prob), solve_ilp(prob)
        check_plan(prob, g)
        assert opt.optimal and opt.gap == pytest.approx(0.0, abs=1e-4)
        assert opt.cost <= g.cost + 1e-12
        gaps.append((g.cost - opt.cost) / opt.cost if opt.cost > 0 else 0.0)
    assert sum(gaps) / len(gaps) <= 0.10, gaps


def test_ilp_time_limit_without_solution_is_not_infeasible(monkeypatch):
    import scipy.optimize
    from scipy.optimize import OptimizeResult

    def stopped(*a, **k):
        return OptimizeResult(x=None, status=1, success=False, message="Time limit reached")

    monkeypatch.setattr(scipy.optimize, "milp", stopped)
    with pytest.raises(LaminaError, match="no solution within the time limit of 0.5 s") as e:
        solve_ilp(random_problem(np.random.default_rng(0), 10, 0.5), time_limit=0.5)
    assert "infeasible" not in e.value.message and "no assignment fits" not in e.value.message


def test_ilp_stopped_with_a_solution_reports_its_gap():
    prob = random_problem(np.random.default_rng(7), 60, 0.5)
    full = solve_ilp(prob)
    assert full.optimal and full.gap == pytest.approx(0.0, abs=1e-4)
    try:
        plan = solve_ilp(prob, time_limit=0.3)
    except LaminaError as e:  # stopped before any feasible point: said so, not "infeasible"
        assert "no solution within the time limit of 0.3 s" in e.message
        return
    check_plan(prob, plan)
    assert plan.cost >= full.cost - 1e-12
    if not plan.optimal:
        assert plan.gap is None or plan.gap >= 0.0
