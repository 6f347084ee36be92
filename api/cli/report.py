"""`lamina-opt --report` and `--compare`: where a step's modeled time goes, and what a pass bought.

Every number is the cost model's, per device, on one hardware target (`--cost-target`): the
kernels' rooflines and the collectives' alpha-beta times (`lamina.analysis.step_cost`, the
figures `--explain` cites), the step time and bubble of the modeled timeline
(`lamina.analysis.timeline`), and the peak bytes per memory tier of the program as it stands,
from the tier planner's own model (`assign_memory_tiers.build_model`: every value kept where
the program puts it, freed where it is freed, SRAM holding the running fused kernel's tiles).

`--report` prints, per function, one row per kernel, collective and move in program order
(index in the body, kernel, devices, flops, bytes moved, bytes sent, modeled us, share of the
step) and the totals; every total but the step time and the peaks is the sum of its column.
`--compare A B` prints the totals of the two pipelines' results side by side with B / A.

The cost target (`cost_target`): `--cost-target NAME|FILE.toml`, else the `target=` the
pipeline's passes name (the last one written; for --compare, B's, else A's), else `h100-node`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from lamina.analysis.sizes import fmt_bytes
from lamina.analysis.step_cost import COLLECTIVE, COMPUTE, MOVE, KernelCost
from lamina.analysis.timeline import Timeline, schedule
from lamina.backends.interface import functions
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.mesh.target import TIER_ORDER, Target, load_target
from lamina.passes.assign_memory_tiers import build_model
from lamina.passes.pipeline import parse_pipeline_spec
from lamina.passes.tier_plan.problem import Plan, gaps_of, occupancy
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp

DEFAULT_COST_TARGET = "h100-node"


def named_target(pipelines: Sequence[str]) -> str | None:
    """The last `target=` written in `pipelines` (later pipelines first), or None."""
    for spec in reversed(pipelines):
        named = [s.options["target"] for s in parse_pipeline_spec(spec)
                 if s.options.get("target")]
        if named:
            return named[-1]
    return None


def cost_target(given: str | None, pipelines: Sequence[str]) -> Target:
    """The target costs are modeled on (see the module docstring)."""
    return load_target(given or named_target(pipelines) or DEFAULT_COST_TARGET)


def bodies(module: ModuleOp) -> list[FuncOp]:
    """The module's functions that have a body (declarations cost nothing)."""
    return [f for f in functions(module) if f.body.blocks]


def peak_bytes(func: FuncOp, target: Target) -> dict[str, float]:
    """The most bytes per device each tier holds at one step of `func` as it stands (see the
    module docstring), for the tiers `target` has, fastest first."""
    fm = build_model(func, target, recompute=False)
    prob = fm.problem
    tiers: list[str | None] = [v.home for v in prob.values]
    prefetch: list[list[int | None]] = [
        [g.b + 1 if g.tail else g.b for g in gaps_of(v, vi)] if v.home is not None
        else [None] * len(gaps_of(v, vi)) for vi, v in enumerate(prob.values)]
    occ = occupancy(prob, Plan(tiers, prefetch))
    return {t: max(occ[t], default=0.0) for t in TIER_ORDER if t in occ}


@dataclass(frozen=True)
class Totals:
    """A function's totals on one target (per device; see the module docstring)."""

    kernels: int
    moves: int
    collectives: int
    flops: float
    bytes: float
    sent: float
    kernel_seconds: float    # the rows' modeled times added up
    step_time: float         # the timeline's: what overlap and the pipeline leave
    bubble_fraction: float
    peaks: dict[str, float]


def totals(costs: Sequence[KernelCost], tl: Timeline, peaks: dict[str, float]) -> Totals:
    return Totals(sum(k.kind == COMPUTE for k in costs), sum(k.kind == MOVE for k in costs),
                  sum(k.kind == COLLECTIVE for k in costs), math.fsum(k.flops for k in costs),
                  math.fsum(k.bytes for k in costs), math.fsum(k.sent for k in costs),
                  math.fsum(k.seconds for k in costs), tl.step_time, tl.bubble_fraction, peaks)


def analyse(func: FuncOp, target: Target) -> tuple[Timeline, Totals]:
    """The timeline of `func` on `target` and its totals."""
    tl = schedule(func, target)
    return tl, totals(tl.costs, tl, peak_bytes(func, target))


def devices_text(devices: Sequence[int]) -> str:
    """`0-7`, `0,2,4`, `0-3,8-11`: the devices as runs of consecutive numbers."""
    runs: list[list[int]] = []
    for d in devices:
        if runs and d == runs[-1][1] + 1:
            runs[-1][1] = d
        else:
            runs.append([d, d])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.4g}"


def _row(k: KernelCost, step: float) -> str:
    share = 100.0 * k.seconds / step if step > 0 else 0.0
    name = k.name if len(k.name) <= 36 else k.name[:33] + "..."
    return (f"{k.index:>5}  {name:<36} {k.kind:<10} {devices_text(k.devices):<10} "
            f"{k.flops:>11.4g} {fmt_bytes(k.bytes):>11} {fmt_bytes(k.sent):>11} "
            f"{_us(k.seconds):>10} {share:>6.1f}%")


HEADER = (f"{'op':>5}  {'kernel':<36} {'kind':<10} {'devices':<10} {'flops':>11} "
          f"{'bytes':>11} {'sent':>11} {'us':>10} {'share':>7}")


def totals_lines(t: Totals) -> list[str]:
    """The totals as `name: value` lines (what --report ends with)."""
    peaks = ", ".join(f"{tier} {fmt_bytes(b)}" for tier, b in t.peaks.items())
    return [f"kernels: {t.kernels}, collectives: {t.collectives}, moves: {t.moves}",
            f"flops: {t.flops:.6g}, bytes moved: {fmt_bytes(t.bytes)}, bytes sent: "
            f"{fmt_bytes(t.sent)}",
            f"peak per tier: {peaks}",
            f"kernel time: {_us(t.kernel_seconds)} us, modeled step: {_us(t.step_time)} us, "
            f"bubble: {t.bubble_fraction * 100:.1f}%"]


def report_text(module: ModuleOp, target: Target) -> str:
    """`--report`'s text for every function of `module` (see the module docstring)."""
    out: list[str] = []
    for func in bodies(module):
        tl, t = analyse(func, target)
        out.append(f"// report: @{func.sym_name.data} on cost target '{target.name}' "
                   f"({tl.devices} device{'s' if tl.devices > 1 else ''}; numbers per device)")
        out.append(HEADER)
        out.extend(_row(k, t.step_time) for k in tl.costs)
        out.extend(totals_lines(t))
    return "\n".join(out) + "\n"


def _ratio(a: float, b: float) -> str:
    if a == 0:
        return "-" if b == 0 else "inf"
    return f"{b / a:.3g}x"


def compare_rows(a: Totals, b: Totals) -> list[tuple[str, str, str, str]]:
    """(quantity, A, B, B / A) for every total `--compare` shows."""
    rows: list[tuple[str, float, float, str]] = [
        ("kernels", a.kernels, b.kernels, "n"), ("collectives", a.collectives, b.collectives, "n"),
        ("moves", a.moves, b.moves, "n"), ("flops", a.flops, b.flops, "g"),
        ("bytes moved", a.bytes, b.bytes, "B"), ("bytes sent", a.sent, b.sent, "B")]
    for tier in [t for t in TIER_ORDER if t in a.peaks or t in b.peaks]:
        rows.append((f"peak {tier}", a.peaks.get(tier, 0.0), b.peaks.get(tier, 0.0), "B"))
    rows += [("kernel time us", a.kernel_seconds * 1e6, b.kernel_seconds * 1e6, "g"),
             ("modeled step us", a.step_time * 1e6, b.step_time * 1e6, "g"),
             ("bubble %", a.bubble_fraction * 100, b.bubble_fraction * 100, "g")]

    def fmt(v: float, unit: str) -> str:
        return str(int(v)) if unit == "n" else fmt_bytes(v) if unit == "B" else f"{v:.4g}"

    return [(q, fmt(x, u), fmt(y, u), _ratio(x, y)) for q, x, y, u in rows]


def compare_text(a: ModuleOp, b: ModuleOp, pipelines: tuple[str, str], target: Target) -> str:
    """`--compare`'s text: per function (matched by name), the totals after pipeline A and
    after pipeline B side by side."""
    funcs_b = {f.sym_name.data: f for f in bodies(b)}
    out: list[str] = [f"// compare on cost target '{target.name}' (numbers per device)",
                      f"// A: -p '{pipelines[0]}'", f"// B: -p '{pipelines[1]}'"]
    for fa in bodies(a):
        name = fa.sym_name.data
        fb = funcs_b.get(name)
        if fb is None:
            raise LaminaError(f"--compare: pipeline B left no function @{name}")
        rows = compare_rows(analyse(fa, target)[1], analyse(fb, target)[1])
        width = max(len(r[1]) for r in rows) + 2
        out.append(f"@{name}")
        out.append(f"  {'':<16}{'A':>{width}}{'B':>{width}}{'B/A':>10}")
        out.extend(f"  {q:<16}{x:>{width}}{y:>{width}}{r:>10}" for q, x, y, r in rows)
    return "\n".join(out) + "\n"
