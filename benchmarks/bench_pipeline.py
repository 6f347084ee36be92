"""pipeline-stages (issue 28): modeled bubble against the formula, peak activation bytes per
schedule, and jax wall time per step against the unstaged data-parallel step, for a 16-layer MLP
step on P = 4 stages, M = 4..16 micro-batches.

    .venv/bin/python benchmarks/bench_pipeline.py [--micro 4 8 16] [--stages 4] [--width 256]
        [--rows 8] [--repeats 3] [--no-jax] [--timeline OUT.png]

The step: derive-backward of a 16-layer tanh MLP regression loss (width `--width`, `--rows`
rows per micro-batch, so `--rows` x M rows in all, f32), then
`pipeline-stages{stages=P micro-batches=M schedule=S}` with the auto cut; S = gpipe, 1f1b and
interleaved with `virtual=2` (2P chunks, chunk c on stage c % P). Per (schedule, M):
- `bubble (links 0)`: the modeled timeline (`lamina.analysis.timeline.schedule`) on a copy of
  h100-node whose links are free (alpha 1e-30 s, beta 9e18 B/s), against the schedule's formula
  (`bubble_formula`: (P-1)/(M+P-1), interleaved (P-1)/(V*M+P-1));
- `bubble (h100-node)`: the same on h100-node's NVLink (3 us, 450 GB/s): the transfers' share;
- `peak act`: stage 0's peak of saved activations (`activation_peak`; stage 0 holds the most),
  how many micro-batches' worth it is (`saved_bytes` of micro-batch 0's steps on stage 0, all
  its chunks), and the schedule's figure (`held_steps` / V: 1F1B P, GPipe M, interleaved
  ((P-1)*2 + (V-1)*P + 1) / V, Megatron's price for the smaller bubble);
- `jax s/step`: the staged step on 8 host devices, a data = 2 axis x P = 4 stages
  (`place-batch{size=2}`, derive-backward, accumulate-gradients{M}, propagate-sharding,
  insert-collectives, then pipeline-stages: the order the pass accepts on a placed step),
  compiled once by `lamina.compile(backend="jax")`, the median of `--repeats` calls after one
  warm-up; `DP jax s/step`: the anchor, the unstaged step over data = 8 (accumulating M
  micro-batches when M divides each device's rows), timed the same way; `staged/DP`: their
  ratio. XLA's CPU devices are threads of this one process, so the ratio is the staged
  program's overhead (its lax.cond per stage run, its ppermutes), not a pipeline's speed-up.
  The 8 devices come from XLA_FLAGS, set at the top of this script before jax is imported.
  `--no-jax` leaves these columns out ("-"); M = 32 and 64 take minutes each to compile.
`--timeline OUT.png` also draws the GPT-2 sample (samples/gpt2_model.py at bench_scale's width:
4 layers, D = 768, 12 heads, 256 tokens, batch 8) cut into 4 stages, 4 micro-batches, 1F1B, on
h100-node (needs torch): the README's image.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

# 8 host devices for the jax column: XLA reads this once, when jax is first imported (below, in
# lamina.compile), so it is set before anything can import jax
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import lamina  # noqa: E402
from lamina.analysis.timeline import schedule  # noqa: E402
from lamina.backends.interface import find_entry  # noqa: E402
from lamina.executable import random_arrays  # noqa: E402
from lamina.ir.mesh.target import load_target, parse_target  # noqa: E402
from lamina.passes.pipeline_stages import (  # noqa: E402
    MicroStep,
    activation_peak,
    bubble_formula,
    held_steps,
    saved_bytes,
)

ROOT = Path(__file__).resolve().parent.parent
FREE_LINKS = (ROOT / "ir/mesh/targets/h100-node.toml").read_text().replace(
    "alpha = 3e-6", "alpha = 1e-30").replace("beta = 450e9", "beta = 9e18").replace(
    'name = "h100-node"', 'name = "h100-node-free-links"')


def mlp_text(layers: int, width: int, batch: int) -> str:
    t = lambda *s: f"tensor<{'x'.join(map(str, s))}{'x' if s else ''}f32>"  # noqa: E731
    params = "".join(f", %w{i}: {t(width, width)}, %b{i}: {t(width)}" for i in range(layers))
    lines = [f"func.func @f(%x: {t(batch, width)}, %y: {t(batch, width)}{params}) -> {t()} {{"]
    h = "%x"
    for i in range(layers):
        lines += [f"  %m{i} = lamina.matmul {h}, %w{i} : ({t(batch, width)}, {t(width, width)})"
                  f" -> {t(batch, width)}",
                  f"  %a{i} = lamina.add %m{i}, %b{i} : ({t(batch, width)}, {t(width)}) -> "
                  f"{t(batch, width)}",
                  f"  %h{i} = lamina.tanh %a{i} : {t(batch, width)}"]
        h = f"%h{i}"
    lines += [f"  %d = lamina.sub {h}, %y : {t(batch, width)}",
              f"  %d2 = lamina.mul %d, %d : {t(batch, width)}",
              f"  %l = lamina.reduce_sum %d2 {{axes = array<i64: 0, 1>}} : ({t(batch, width)})"
              f" -> {t()}", f"  func.return %l : {t()}", "}"]
    return "\n".join(lines) + "\n"


DEVICES = 8
STAGED_DATA = 2    # the staged step's data axis: DEVICES = STAGED_DATA x --stages
SCHEDULES = (("gpipe", 1), ("1f1b", 1), ("interleaved", 2))   # (schedule, model chunks per stage)


def schedule_options(sched: str, virtual: int) -> str:
    """pipeline-stages' schedule options for a row (`virtual=` only where interleaved)."""
    return f"schedule={sched}" + (f" virtual={virtual}" if sched == "interleaved" else "")


def jax_seconds(text: str, pipeline: str, repeats: int) -> float:
    """Median wall time of one call of `pipeline`'s step on the jax backend (8 host devices),
    compiled once, after one warm-up call (which traces and compiles the XLA program)."""
    module = lamina.parse(text)
    lamina.apply(module, pipeline)
    exe = lamina.compile(module, "f_grad", backend="jax", devices=DEVICES)
    inputs = random_arrays(module, "f_grad", 0)
    exe(inputs)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        exe(inputs)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def staged_pipeline(stages: int, micro: int, sched: str, virtual: int = 1) -> str:
    """The staged step: data=2 x `stages` stages. The order is the one
    test_pipeline_stages' test_composes_with_data_and_model_axes checks: the placed step with
    its collectives and M micro-batches, then the cut (pipeline-stages before propagate-sharding
    leaves the batch reshape's placement unpropagated, which the verifier refuses)."""
    return (f"place-batch{{data=x,y axis=data size={STAGED_DATA}}},derive-backward{{data=x,y}},"
            f"accumulate-gradients{{micro-batches={micro}}},propagate-sharding,"
            f"insert-collectives,pipeline-stages{{stages={stages} "
            f"{schedule_options(sched, virtual)}}}")


def dp_pipeline(micro: int, batch: int) -> str:
    """The anchor: the unstaged data-parallel step over all 8 devices, accumulating M
    micro-batches where M divides each device's rows (else one batch)."""
    accumulate = (f"accumulate-gradients{{micro-batches={micro}}},"
                  if (batch // DEVICES) % micro == 0 else "")
    return (f"place-batch{{data=x,y axis=data size={DEVICES}}},derive-backward{{data=x,y}},"
            f"{accumulate}propagate-sharding,insert-collectives")


def row(text: str, stages: int, micro: int, sched: str, virtual: int, jax: list[str]
        ) -> list[str]:
    module = lamina.parse(text)
    start = time.perf_counter()
    lamina.apply(module, f"derive-backward{{data=x,y}},pipeline-stages{{stages={stages} "
                 f"micro-batches={micro} {schedule_options(sched, virtual)}}}")
    staged = time.perf_counter() - start
    func = find_entry(module, "f_grad")
    free = schedule(func, parse_target(FREE_LINKS, "<free links>")).bubble_fraction
    nvlink = schedule(func, load_target("h100-node")).bubble_fraction
    peak = activation_peak(func, 0)   # stage 0 holds the most (1F1B: P micro-batches)
    one = sum(saved_bytes(func, 0, MicroStep("F", 0, v).name(virtual)) for v in range(virtual))
    formula = bubble_formula(stages, micro, virtual)
    held = held_steps(sched, stages, micro, 0, virtual) / virtual
    name = sched + (f" V={virtual}" if sched == "interleaved" else "")
    return [name, str(micro), f"{free:.4f}", f"{formula:.4f}", f"{nvlink:.4f}",
            f"{peak / 2**20:.2f} MiB", f"{peak / one:.2f}" if one else "-", f"{held:.2f}",
            *jax, f"{staged:.1f}"]


def gpt2_timeline(out: str) -> None:
    """The GPT-2 sample's step on 4 stages (1F1B, 4 micro-batches), drawn on h100-node."""
    import torch
    from lamina.cli.timeline_plot import timeline_format, write_timeline
    from lamina.frontends.torch import import_exported

    sys.path.insert(0, str(ROOT))
    from samples.gpt2_model import GPT2Config, LossOnly, make_gpt2

    cfg = GPT2Config(vocab=96, context=256, dim=768, heads=12, layers=4, dropout=0.0)
    toks = torch.zeros((8, 256), dtype=torch.int64)
    module, _ = import_exported(torch.export.export(LossOnly(make_gpt2(cfg)).eval(),
                                                    (toks, toks)))
    lamina.apply(module, "derive-backward{data=idx,targets},"
                 "pipeline-stages{stages=4 micro-batches=4 schedule=1f1b}")
    func = find_entry(module, "forward_grad")
    tl = schedule(func, load_target("h100-node"))
    with open(out, "wb") as f:
        write_timeline(tl, f, timeline_format(out), "GPT-2 sample (4 layers, D = 768), 4 stages "
                       "x 4 micro-batches, 1F1B", "modeled on cost target 'h100-node'")
    print(f"wrote {out}: bubble {tl.bubble_fraction:.3f} (formula {3 / 7:.3f}), step "
          f"{tl.step_time * 1e6:.1f} us")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="pipeline-stages: modeled bubble and activation peaks")
    ap.add_argument("--micro", type=int, nargs="+", default=[4, 8, 16],
                    help="M values; the jax columns compile each step once: 32 and 64 take minutes")
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--rows", type=int, default=8, help="rows per micro-batch")
    ap.add_argument("--repeats", type=int, default=3, help="timed jax calls per step (median)")
    ap.add_argument("--no-jax", action="store_true", help="leave out the jax wall-time columns")
    ap.add_argument("--timeline", default=None)
    args = ap.parse_args(argv)
    head = ["schedule", "M", "bubble (links 0)", "(P-1)/(V*M+P-1)", "bubble (h100-node)",
            "peak act", "micro-batches held", "held (formula)", "jax s/step", "DP jax s/step",
            "staged/DP", "pass s"]
    rows = []
    for micro in args.micro:
        batch = args.rows * micro
        text = mlp_text(args.layers, args.width, batch)
        dp = None if args.no_jax else jax_seconds(text, dp_pipeline(micro, batch), args.repeats)
        for sched, virtual in SCHEDULES:
            if sched == "interleaved" and micro % args.stages:
                continue   # Megatron's interleaved order needs M a multiple of P
            jax = ["-", "-", "-"]
            if dp is not None:
                pp = jax_seconds(text, staged_pipeline(args.stages, micro, sched, virtual),
                                 args.repeats)
                jax = [f"{pp:.4f}", f"{dp:.4f}", f"{pp / dp:.2f}"]
            rows.append(row(text, args.stages, micro, sched, virtual, jax))
            print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    print(f"{args.layers}-layer MLP, width {args.width}, {args.rows} rows per micro-batch, "
          f"P = {args.stages}")
    for r in [head, ["-" * w for w in widths], *rows]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")
    if args.timeline:
        gpt2_timeline(args.timeline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
