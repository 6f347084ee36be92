"""`lamina-opt --report / --compare / --timeline / --cost-target` and `lamina-run --timeline`:
totals against the rows, the trace JSON against the schedule, peaks against the checked run, a
fusion that shows as fewer kernels, where each output goes, and one diagnostic per bad flag."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import lamina
import pytest
from hypothesis import HealthCheck, given, settings
from lamina.analysis.step_cost import COLLECTIVE, COMPUTE, MOVE, step_costs
from lamina.analysis.timeline import LANES, Timeline, schedule
from lamina.backends.interface import find_entry
from lamina.cli import opt, run
from lamina.cli.memory_plot import pyplot
from lamina.cli.report import analyse, cost_target, named_target, peak_bytes, report_text
from lamina.cli.timeline_plot import NAMED, OTHER, chrome_trace, legend_colors, timeline_figure
from lamina.ir.mesh.target import load_target
from lamina.ir.text.source import make_context, parse_text
from lamina.passes.pipeline import build_pipeline, run_pipeline
from strategies import examples
from strategies.programs import programs

ROOT = Path(__file__).resolve().parent.parent
MLP = str(ROOT / "samples" / "mlp_block.mlir")
MEGATRON = str(ROOT / "samples" / "mlp_megatron.mlir")
PLACE = "propagate-sharding,insert-collectives{target=h100-node}"
H100 = load_target("h100-node")


def _module(text: str, pipeline: str = "") -> Any:
    ctx = make_context()
    m = parse_text(text, "gen.mlir", ctx)
    if pipeline:
        run_pipeline(ctx, m, build_pipeline(pipeline))
    return m


def events_as_bars(trace: dict[str, Any]) -> list[tuple[str, str, int, str, float, float, int]]:
    return [(e["name"], e["cat"], e["pid"], LANES[e["tid"]], e["ts"], e["ts"] + e["dur"],
             e["args"]["op"]) for e in trace["traceEvents"] if e["ph"] == "X"]


def assert_trace_is(trace: dict[str, Any], tl: Timeline) -> None:
    """The trace's complete events are the timeline's bars, in order, times in microseconds."""
    got = events_as_bars(trace)
    assert len(got) == len(tl.bars)
    for (name, kind, pid, lane, ts, te, op), b in zip(got, tl.bars, strict=True):
        assert (name, kind, pid, lane, op) == (b.name, b.kind, b.device, b.lane, b.index)
        assert ts == pytest.approx(b.start * 1e6, rel=1e-12, abs=1e-12)
        assert te == pytest.approx(b.end * 1e6, rel=1e-12, abs=1e-12)


@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs(max_ops=10))
def test_totals_are_the_sums_of_the_rows_and_the_trace_is_the_schedule(prog) -> None:
    """Random programs, annotated with lifetimes: the report's totals add up its rows, every
    row is printed, the Chrome trace holds exactly the schedule's bars, and the peak per tier
    is at least what the checked run held."""
    m = _module(prog.text, "annotate-lifetimes")
    func = find_entry(m, None)
    tl, t = analyse(func, H100)
    rows = step_costs(func, H100)
    assert (t.kernels, t.collectives, t.moves) == tuple(
        sum(k.kind == kind for k in rows) for kind in (COMPUTE, COLLECTIVE, MOVE))
    assert t.flops == pytest.approx(sum(k.flops for k in rows))
    assert t.bytes == pytest.approx(sum(k.bytes for k in rows))
    assert t.kernel_seconds == pytest.approx(sum(k.seconds for k in rows))
    assert t.step_time == pytest.approx(t.kernel_seconds)   # one device, one lane: no overlap
    text = report_text(m, H100)
    assert len(re.findall(r"^ +\d+  ", text, re.M)) == len(rows)
    assert f"kernels: {t.kernels}," in text
    trace = chrome_trace(tl, "t", "modeled")
    assert_trace_is(trace, tl)
    assert trace["otherData"]["step_time_us"] == pytest.approx(tl.step_time * 1e6)
    run_ = lamina.compile(m, None, "numpy", warmup=False, target=H100)(prog.inputs)
    assert peak_bytes(func, H100)["hbm"] >= run_.stats["peak_bytes"]["hbm"]


def test_cost_target_is_the_flag_else_the_pipelines_else_h100_node() -> None:
    assert named_target(["fuse-elementwise", "assign-memory-tiers{target=tiny}"]) == "tiny"
    assert named_target(["insert-collectives{target=h100-cluster}", "cse"]) == "h100-cluster"
    assert named_target(["cse", ""]) is None
    assert cost_target(None, ["cse"]).name == "h100-node"
    assert cost_target("tiny", ["insert-collectives{target=h100-cluster}"]).name == "tiny"


def test_compare_shows_fusion_as_fewer_kernels(capsys: pytest.CaptureFixture[str]) -> None:
    assert opt.main([MLP, "--compare", "", "fuse-elementwise"]) == 0
    out = capsys.readouterr().out
    kernels = re.search(r"^  kernels +(\d+) +(\d+) ", out, re.M)
    assert kernels is not None
    a, b = int(kernels.group(1)), int(kernels.group(2))
    assert b < a
    assert "builtin.module" not in out and "modeled step us" in out


def test_report_goes_to_stderr_and_to_stdout_with_o(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    assert opt.main([MEGATRON, "-p", PLACE, "--report"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("builtin.module") and "all_reduce" in err and "// report:" not in out
    assert opt.main([MEGATRON, "-p", PLACE, "--report", "-o", str(tmp_path / "o.mlir")]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("// report: @mlp_megatron on cost target 'h100-node'") and not err
    assert (tmp_path / "o.mlir").read_text().startswith("builtin.module")
    assert opt.main([MEGATRON, "-p", PLACE, "--report", "--cost-target", "tiny", "-o",
                     str(tmp_path / "o.mlir")]) == 0
    assert capsys.readouterr().out.startswith("// report: @mlp_megatron on cost target 'tiny'")


def test_opt_timeline_json_is_the_schedule_of_the_result(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    assert opt.main([MEGATRON, "-p", PLACE, "--timeline", str(path), "-o", "/dev/null"]) == 0
    trace = json.loads(path.read_text())
    func = find_entry(_module(Path(MEGATRON).read_text(), PLACE), None)
    tl = schedule(func, H100)
    assert_trace_is(trace, tl)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["name"] == "process_name"}
    assert names[5] == "device 5 (data=1, model=1)"
    assert trace["otherData"]["bubble_fraction"] == pytest.approx(tl.bubble_fraction)


def test_run_timeline_uses_the_measured_kernel_times(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.json"
    stats = tmp_path / "s.json"
    assert run.main([MLP, "--timeline", str(path), "--stats-json", str(stats)]) == 0
    capsys.readouterr()
    trace = json.loads(path.read_text())
    assert trace["otherData"]["times"].startswith("compute measured on --backend numpy")
    func = find_entry(_module(Path(MLP).read_text()), None)
    modeled = {k.index: k.seconds * 1e6 for k in step_costs(func, H100)}
    bars = events_as_bars(trace)
    assert {b[6] for b in bars} == set(modeled)
    # the interpreter on this CPU is far slower than an H100's roofline
    assert all(end - start > 10 * modeled[i] for _, _, _, _, start, end, i in bars)
    assert "kernel_seconds" not in json.loads(stats.read_text())


def test_png_names_at_most_the_longest_kernels_and_groups_the_rest() -> None:
    """60 kernels with distinct names: the legend names `NAMED` of them, the longest, and one
    "other"; the lanes are labelled and the title gives the bubble."""
    t = "tensor<4x4xf32>"
    ops = [f"  %v{i + 1} = lamina.{'exp' if i % 2 else 'tanh'} %v{i} : {t}" for i in range(60)]
    text = f"func.func @f(%v0: {t}) -> {t} {{\n" + "\n".join(ops) + f"\n  func.return %v60 : {t}\n}}\n"
    tl = schedule(find_entry(_module(text), None), H100)
    tl.bars = [dataclasses.replace(b, name=f"k{b.index}", end=b.start + b.index + 1.0)
               for b in tl.bars]
    colors = legend_colors(tl.bars)
    assert sorted(colors) == sorted((COMPUTE, f"k{i}") for i in range(20, 60))
    assert OTHER not in colors.values()
    fig = timeline_figure(tl, "t", "modeled")
    try:
        ax = fig.axes[0]
        labels = [x.get_text() for x in ax.get_legend().get_texts()]
        assert len(labels) == NAMED + 1 and labels[-1] == "other"
        assert "bubble 0%" in ax.get_title()
        assert [x.get_text() for x in ax.get_yticklabels()] == ["comm", "device 0"]
    finally:
        pyplot().close(fig)


@pytest.mark.parametrize(("argv", "message"), [
    ([MLP, "--report", "--cost-target", "h900"], "unknown target 'h900'"),
    ([MLP, "--timeline", "t.xyz"], "--timeline: cannot write 't.xyz': unknown image format 'xyz'"),
    ([MLP, "-p", "cse", "--compare", "", "cse"], "--compare runs its own two pipelines"),
    ([MLP, "--compare", "", "cse", "--report"], "does not go with --report"),
    ([MLP, "--cost-target", "tiny"], "--cost-target applies to --report, --compare and"),
    ([MLP, "--timeline", "t.json", "--split-input-file"], "does not go with --split-input-file"),
    ([MLP, "--timeline", "-"], "--timeline and the IR (stdout) both write '-'"),
])
def test_bad_cost_flags_are_one_diagnostic(argv: list[str], message: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert opt.main(argv) == 1
    out, err = capsys.readouterr()
    assert message in err and "Traceback" not in err and not out
    assert len(err.strip().splitlines()) <= 3
