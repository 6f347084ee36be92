"""`lamina.analysis.timeline.schedule`: dependencies and lane exclusivity on random programs
(placed and not), measured times override the model, and GPipe's bubble on a staged program."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lamina.analysis.step_cost import step_costs
from lamina.analysis.timeline import Timeline, schedule
from lamina.backends.interface import find_entry
from lamina.ir.mesh.target import Target, load_target
from lamina.ir.text.source import make_context, parse_text, verify
from lamina.passes.pipeline import build_pipeline, run_pipeline
from strategies import examples
from strategies.programs import programs
from test_spmd import meshes, place_args, placed_or_scan_refused
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, SSAValue

H100 = load_target("h100-node")
EPS = 1e-15


def fast_links(t: Target) -> Target:
    """`t` with infinitely fast links: every collective takes no time."""
    return dataclasses.replace(t, links=tuple(dataclasses.replace(lv, alpha=0.0, beta=math.inf)
                                              for lv in t.links))


def check_schedule(func: FuncOp, tl: Timeline) -> None:
    """The invariants every schedule keeps: each op starts after its operands' producers end
    (through ops that launch nothing), no two bars overlap on one lane, the step time covers
    every device's busy time, and the bubble fraction is the idle share of the compute lanes."""
    ops = list(func.body.block.ops)
    pos = {op: i for i, op in enumerate(ops)}
    end: dict[int, float] = {}
    start: dict[int, float] = {}
    for b in tl.bars:
        end[b.index] = b.end
        start[b.index] = b.start

    def ready(v: SSAValue) -> float:
        owner = v.owner
        if not isinstance(owner, Operation) or owner not in pos:
            return 0.0
        if pos[owner] in end:
            return end[pos[owner]]
        return max((ready(x) for x in owner.operands), default=0.0)

    for i, s in start.items():
        assert all(ready(v) <= s + EPS for v in ops[i].operands), f"op {i} starts too early"
    lanes: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    for b in tl.bars:
        assert b.end >= b.start
        lanes[(b.device, b.lane)].append((b.start, b.end))
    for spans in lanes.values():
        spans.sort()
        for (_, e0), (s1, _) in zip(spans, spans[1:], strict=False):
            assert s1 >= e0 - EPS, "two bars overlap on one lane"
    assert all(tl.step_time >= busy - EPS for busy in tl.busy.values())
    if tl.step_time > 0:
        idle = 1 - sum(tl.busy.values()) / (tl.devices * tl.step_time)
        assert tl.bubble_fraction == pytest.approx(max(0.0, idle), abs=1e-12)
    assert {b.index for b in tl.bars} == {k.index for k in step_costs(func, H100)}


def _placed(prog, mesh, draw, fuse: bool) -> FuncOp | None:
    ctx = make_context()
    m = parse_text(prog.text, "gen.mlir", ctx)
    place_args(m, mesh, draw)
    verify(m)
    p = ("fuse-elementwise," if fuse else "") + \
        "propagate-sharding,insert-collectives{target=h100-node},annotate-lifetimes"
    if not placed_or_scan_refused(lambda: run_pipeline(ctx, m, build_pipeline(p)), prog.text):
        return None
    return find_entry(m, None)


@settings(max_examples=examples(10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs(max_ops=10), mesh=meshes(), fuse=st.booleans(), data=st.data())
def test_random_placed_programs_schedule_keeps_every_invariant(prog, mesh, fuse, data) -> None:
    func = _placed(prog, mesh, data.draw, fuse)
    if func is None:
        return
    tl = schedule(func, H100)
    check_schedule(func, tl)
    assert tl.devices == math.prod(n for _, n in mesh)
    assert len(tl.lane_labels) == tl.devices
    assert tl == schedule(func, H100)   # deterministic


@settings(max_examples=examples(15), deadline=None)
@given(prog=programs(max_ops=10), scale=st.sampled_from([0.5, 3.0, 1e3]))
def test_measured_seconds_replace_the_modeled_ones(prog, scale) -> None:
    """One device, measured times `scale` x the model's: every bar lasts its measured time and
    the step is the sum of the kernels (one compute lane, no collectives)."""
    func = find_entry(parse_text(prog.text, "gen.mlir"), None)
    costs = step_costs(func, H100)
    measured = {k.index: k.seconds * scale + 1e-6 for k in costs}
    tl = schedule(func, H100, measured)
    check_schedule(func, tl)
    assert all(b.end - b.start == pytest.approx(measured[b.index]) for b in tl.bars)
    assert tl.step_time == pytest.approx(sum(measured.values()))
    assert tl.lane_labels == {0: "device 0"}
    assert tl.bubble_fraction == pytest.approx(0.0, abs=1e-9)


def staged_program(stages: int, micro: int) -> str:
    """A forward pass of `micro` micro-batches through `stages` pipeline stages in GPipe order
    (stage s runs micro-batch m after m - 1), an equal gelu per stage, a reshard between
    stages, on a [data = 2, pp = stages] mesh."""
    def t(s: int) -> str:
        return f"tensor<8x8xf32, #lamina.place<@m, [[], []], stage = pp[{s}]>>"

    last = ", ".join(t(stages - 1) for _ in range(micro))
    lines = [f"lamina.mesh @m [data = 2, pp = {stages}]",
             f"func.func @f({', '.join(f'%x{m}: {t(0)}' for m in range(micro))}) -> ({last}) {{"]
    outs = []
    for m in range(micro):
        v = f"%x{m}"
        for s in range(stages):
            if s:
                lines.append(f"  %r{m}_{s} = lamina.reshard {v} : {t(s - 1)} -> {t(s)}")
                v = f"%r{m}_{s}"
            lines.append(f"  %h{m}_{s} = lamina.gelu {v} : {t(s)}")
            v = f"%h{m}_{s}"
        outs.append(v)
    lines += [f"  func.return {', '.join(outs)} : {last}", "}"]
    return "\n".join(lines) + "\n"


@settings(max_examples=examples(12), deadline=None)
@given(stages=st.integers(1, 4), micro=st.integers(1, 6))
def test_gpipe_bubble_is_p_minus_1_over_m_plus_p_minus_1(stages: int, micro: int) -> None:
    m = parse_text(staged_program(stages, micro), "staged.mlir")
    verify(m)
    func = find_entry(m, None)
    tl = schedule(func, fast_links(H100))
    check_schedule(func, tl)
    assert tl.devices == 2 * stages
    assert tl.bubble_fraction == pytest.approx((stages - 1) / (micro + stages - 1), abs=1e-9)
    gelu = next(k.seconds for k in step_costs(func, H100) if k.name == "gelu")
    assert tl.step_time == pytest.approx((micro + stages - 1) * gelu)
    # each stage's gelus run on its two devices only, labelled with their coordinates
    assert {b.device for b in tl.bars if b.name == "gelu" and b.index == 0} == {0, stages}
    assert tl.lane_labels[stages] == "device " + str(stages) + " (data=1, pp=0)"


def test_slow_links_delay_the_next_stage() -> None:
    """With the target's real links the reshards take time on the comm lanes, and the step
    grows by at least one transfer per stage boundary."""
    m = parse_text(staged_program(3, 2), "staged.mlir")
    func = find_entry(m, None)
    free, slow = schedule(func, fast_links(H100)), schedule(func, H100)
    check_schedule(func, slow)
    reshard = next(k.seconds for k in step_costs(func, H100) if k.name == "reshard")
    assert reshard > 0
    assert slow.step_time >= free.step_time + 2 * reshard - EPS
    assert any(b.lane == "comm" for b in slow.bars)
