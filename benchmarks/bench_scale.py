"""The training-scale rewrites (issue 27) on the GPT-2 sample's step, against GSPMD written by hand.

    .venv/bin/python benchmarks/bench_scale.py [--quick] [--rows baseline,accum4,...]
        [--repeats 3] [--no-jax] [--no-spmd]

The step: samples/gpt2_model.py's GPT-2 (4 layers, D=768, 12 heads, vocabulary 96, dropout off;
`--quick`: 2 layers, D=64, 4 heads), batch B=32 of T=64 tokens, imported with torch.export and
trained with AdamW (lr 1e-3, weight decay 0.01). Each row is a Lamina pipeline on that import:

    baseline  place-batch over data=8, derive-backward, append-optimizer, propagate-sharding,
              insert-collectives{target=h100-node}, annotate-lifetimes
    accum4    + accumulate-gradients{micro-batches=4} (after derive-backward)
    bf16      + mixed-precision{compute=bf16} (after append-optimizer: f32 master weights and
              moments, matmuls and elementwise math in bf16, norms, softmax and the loss in f32)
(further rows, as their passes exist: bf16, zero1/2/3 and the combined 2x4 data x model mesh)

For each row:
  grad/scalar/other  the collectives of the step after insert-collectives, each run once a step:
                reductions of the gradient buckets / of rank-0 values (the loss's mean and its
                count) / gathers and all-to-alls (all_slice sends nothing and is not counted)
  sent/device   bytes each device sends for them (the SPMD interpreter's count, ring formulas)
  peak modeled  the largest sum of live per-device bytes along the step's order, a value live from
                its definition to its `lamina.free` (annotate-lifetimes), arguments from the start
  peak SPMD     the same measured on the SPMD interpreter running all 8 devices (`MemoryChecker`,
                per device; `--no-spmd` skips the run)
  step jax      `--backend jax` on 8 host devices (XLA_FLAGS, in a subprocess): the median over
                `--repeats` of a step's wall time, after one warm-up step
and the anchor beside it: benchmarks/scale_anchor.py, the same step written in JAX by hand with
GSPMD shardings (jax.jit + NamedSharding + optax, a lax.scan accumulation), its collectives read
from XLA's optimized HLO, XLA's own buffer plan per device (jax's CPU devices report no live
memory statistics) and its step time. Below the table, the issue's targets, each met or not:
K=4 has at most 1/4 of baseline's gradient reductions per step (a reduction that happens per
micro-batch counts K times); ZeRO-3's parameters and optimizer state per device at most 1/8 of
baseline's plus the largest parameter it gathers at once; bf16's activations saved for the
backward (the forward's values live where the backward starts, `saved_activations`) at most 0.6x
baseline's, with the whole modeled peak above the step's arguments beside it (it also holds the
gradients and the update's temporaries, f32 in both rows); every Lamina row sends at most
GSPMD's bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
MIB = 1 << 20
LR, WD = 1e-3, 0.01
DATA = "idx,targets"
ADAMW = f"append-optimizer{{kind=adamw lr={LR} weight-decay={WD}}}"
PLACE = "propagate-sharding,insert-collectives{target=h100-node},annotate-lifetimes"


@dataclass(frozen=True)
class Row:
    """One Lamina configuration: the mesh and the passes around derive-backward."""

    name: str
    mesh: tuple[tuple[str, int], ...]
    after_backward: str = ""      # passes between derive-backward and append-optimizer
    after_optimizer: str = ""     # passes between append-optimizer and propagate-sharding
    before_backward: str = ""     # passes on the forward, before derive-backward

    def pipeline(self) -> str:
        parts = [f"place-batch{{data={DATA} axis=data mesh=mesh}}", self.before_backward,
                 f"derive-backward{{data={DATA}}}", self.after_backward, ADAMW,
                 self.after_optimizer, PLACE]
        return ",".join(p for p in parts if p)


DP8 = (("data", 8),)
ROWS = {r.name: r for r in (
    Row("baseline", DP8),
    Row("accum4", DP8, after_backward="accumulate-gradients{micro-batches=4}"),
    Row("bf16", DP8, after_optimizer="mixed-precision{compute=bf16}"),
    Row("zero1", DP8, after_optimizer="shard-optimizer{stage=1}"),
    Row("zero2", DP8, after_optimizer="shard-optimizer{stage=2}"),
    Row("zero3", DP8, after_optimizer="shard-optimizer{stage=3}"),
    Row("combined", (("data", 2), ("model", 4)), after_backward="accumulate-gradients{micro-batches=4}",
        after_optimizer="mixed-precision{compute=bf16},shard-optimizer{stage=3}"),
)}


@dataclass(frozen=True)
class Size:
    layers: int
    dim: int
    heads: int
    vocab: int = 96
    batch: int = 32
    seq: int = 64


def size(quick: bool) -> Size:
    return Size(2, 64, 4) if quick else Size(4, 768, 12)


# ---- the Lamina program of a row ---------------------------------------------------------------

def imported(sz: Size) -> tuple[Any, dict[str, Any]]:
    """The GPT-2 sample's loss as a Lamina module and its weights (by argument name)."""
    import torch
    from lamina.frontends.torch import import_exported

    from samples.gpt2_model import GPT2Config, LossOnly, make_gpt2


    cfg = GPT2Config(vocab=sz.vocab, context=sz.seq, dim=sz.dim, heads=sz.heads,
                     layers=sz.layers, dropout=0.0)
    toks = torch.zeros((sz.batch, sz.seq), dtype=torch.int64)
    ep = torch.export.export(LossOnly(make_gpt2(cfg)).eval(), (toks, toks))
    return import_exported(ep)


def declare_mesh(module: Any, axes: tuple[tuple[str, int], ...]) -> None:
    """`lamina.mesh @mesh [axes]` at the top of the module (place-batch{mesh=mesh} uses it)."""
    from lamina.ir.mesh.placement import MeshOp

    module.body.block.insert_op_before(MeshOp("mesh", list(axes)), module.body.block.first_op)


def build(row: Row, sz: Size) -> tuple[Any, Any, dict[str, Any]]:
    """The row's step: (module, its function, the weights)."""
    import lamina
    from lamina.backends.interface import find_entry

    module, weights = imported(sz)
    declare_mesh(module, row.mesh)
    lamina.apply(module, row.pipeline())
    return module, find_entry(module, "forward_step"), weights


def step_inputs(func: Any, weights: dict[str, Any], sz: Size) -> list[Any]:
    """Weights by name, zeros for the optimizer state, the same token batch for every row."""
    import numpy as np
    from lamina.ir.core.dtypes import STORAGE, tensor_dtype
    from lamina.ir.ops.opbase import tensor_info

    tokens = np.random.default_rng(1).integers(0, sz.vocab, (sz.batch, sz.seq)).astype(np.int64)
    out = []
    for a in func.body.block.args:
        name = a.name_hint or ""
        info = tensor_info(a.type)
        if name in ("idx", "targets"):
            out.append(tokens)
        elif name in weights:
            out.append(np.asarray(weights[name]))
        else:
            out.append(np.zeros(info.shape, STORAGE[tensor_dtype(a.type)]))
    return out


# ---- what a row costs --------------------------------------------------------------------------

def collectives(func: Any) -> dict[str, int]:
    """The step's collectives that move data, by what they carry: `grad` the reductions of
    tensors (the gradient buckets), `scalar` those of rank-0 values (the loss's mean and count),
    `other` gathers and all-to-alls. An all_slice (each device keeps its part of a replicated
    value) sends nothing and is not counted."""
    from lamina.ir.mesh.collectives import PlacementOp
    from lamina.ir.ops.opbase import tensor_info

    out = {"grad": 0, "scalar": 0, "other": 0}
    for op in func.walk():
        if not isinstance(op, PlacementOp) or op.short == "all_slice":
            continue
        if op.short in ("all_reduce", "reduce_scatter"):
            out["scalar" if tensor_info(op.operands[0].type).shape == () else "grad"] += 1
        else:
            out["other"] += 1
    return out


def live_bytes(func: Any, with_args: bool) -> Iterator[tuple[Any, int]]:
    """(op, per-device live bytes just before it) along the function's order: a value is live
    from its definition to its `lamina.free` (annotate-lifetimes), the arguments from the start
    when `with_args`."""
    from lamina.analysis.sizes import local_bytes
    from lamina.ir.buffers.memory import FreeOp

    live = {a: local_bytes(a, func) for a in func.body.block.args} if with_args else {}
    cur = sum(live.values())
    for op in func.body.block.ops:
        yield op, cur
        if isinstance(op, FreeOp):
            cur -= live.pop(op.operands[0], 0)
            continue
        for r in op.results:
            live[r] = local_bytes(r, func)
            cur += live[r]
    yield None, cur


def modeled_peak(func: Any) -> int:
    """Per-device live bytes along the function's order (module docstring: peak modeled)."""
    return max(cur for _, cur in live_bytes(func, with_args=True))


def saved_activations(func: Any) -> int:
    """Per-device bytes of the forward's values still live when the backward starts (at each
    loss seed derive-backward marks `lamina.loss_seed`; the largest over accumulate-gradients'
    micro-batches): the activations saved for the backward, without the arguments, the
    gradients and the optimizer's temporaries that `peak modeled - arguments` also holds."""
    return max((cur for op, cur in live_bytes(func, with_args=False)
                if op is not None and "lamina.loss_seed" in op.attributes), default=0)


def argument_bytes(func: Any) -> dict[str, int]:
    """Per-device bytes of the step's arguments: `model` the parameters and optimizer state (what
    ZeRO shards), `all` every argument (data included)."""
    from lamina.analysis.sizes import local_bytes
    from lamina.ir.buffers.updates import roles_of

    roles = {i: r.name for i, r in roles_of(func).items()}
    held = ("parameter", "first_moment", "second_moment", "momentum_buffer")
    sizes = [local_bytes(a, func) for a in func.body.block.args]
    return {"model": sum(b for i, b in enumerate(sizes) if roles.get(i) in held),
            "all": sum(sizes)}


def gathered_bytes(func: Any) -> int:
    """The largest per-device result of one all_gather: the working set ZeRO-3 gathers at once."""
    from lamina.analysis.sizes import local_bytes
    from lamina.ir.mesh.collectives import PlacementOp

    return max((local_bytes(op.results[0], func) for op in func.walk()
                if isinstance(op, PlacementOp) and op.short == "all_gather"), default=0)


def spmd_run(func: Any, ins: list[Any]) -> tuple[int, int, float]:
    """(bytes sent per device, measured peak per device, the loss) on the SPMD interpreter."""
    from lamina.backends.numpy.memory import MemoryChecker
    from lamina.backends.numpy.spmd import run_spmd

    checker = MemoryChecker(None)
    res = run_spmd(func, ins, observer=checker)
    return res.stats["comm_bytes_per_device"], checker.peak["hbm"], float(res.outputs[-1])


def lamina_rows(names: list[str], sz: Size, spmd: bool) -> dict[str, dict[str, Any]]:
    out = {}
    for name in names:
        _module, func, weights = build(ROWS[name], sz)
        rec: dict[str, Any] = {"collectives": collectives(func), "peak_model": modeled_peak(func),
                               "saved": saved_activations(func),
                               "args": argument_bytes(func), "gathered": gathered_bytes(func)}
        if spmd:
            t0 = time.perf_counter()
            rec["sent"], rec["peak_spmd"], rec["loss"] = spmd_run(func, step_inputs(func, weights, sz))
            rec["spmd_s"] = time.perf_counter() - t0
        out[name] = rec
        print(f"  {name}: built{' and run on the SPMD interpreter' if spmd else ''}", file=sys.stderr)
    return out


def jax_worker(names: list[str], sz: Size, repeats: int) -> None:
    """Run inside the 8-device subprocess: each row's step time on `--backend jax`."""
    import lamina

    times = {}
    for name in names:
        module, func, weights = build(ROWS[name], sz)
        exe = lamina.compile(module, "forward_step", backend="jax", devices=8)
        ins = step_inputs(func, weights, sz)
        exe(*ins)
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            exe(*ins)
            samples.append(time.perf_counter() - t0)
        times[name] = statistics.median(samples)
    print(json.dumps(times))


def subprocess_json(argv: list[str]) -> dict[str, Any] | str:
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
               JAX_PLATFORMS="cpu")
    p = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True,
                       timeout=3600, cwd=ROOT)
    if p.returncode != 0:
        return "failed: " + (p.stderr.strip().splitlines() or ["?"])[-1]
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---- the table ---------------------------------------------------------------------------------

def _mib(b: float | None) -> str:
    return "-" if b is None else f"{b / MIB:,.1f}"


def table(names: list[str], lam: dict[str, Any], jx: dict[str, Any] | str,
          anchor: dict[str, Any] | str) -> str:
    head = ["row", "grad/scalar/other", "sent/dev MiB", "peak model MiB", "peak SPMD MiB", "step jax s",
            "| GSPMD coll.", "sent MiB", "XLA peak MiB", "step s"]
    lines = [head]
    for n in names:
        r = lam[n]
        a = anchor.get(n) if isinstance(anchor, dict) else None
        c = r["collectives"]
        lines.append([n, f"{c['grad']}/{c['scalar']}/{c['other']}", _mib(r.get("sent")),
                      _mib(r["peak_model"]),
                      _mib(r.get("peak_spmd")),
                      f"{jx[n]:.3f}" if isinstance(jx, dict) else "-",
                      "| " + (str(a["collectives"]) if a else "-"),
                      _mib(a["sent"]) if a else "-", _mib(a["peak"]) if a else "-",
                      f"{a['step_s']:.3f}" if a else "-"])
    widths = [max(len(x[i]) for x in lines) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                               enumerate(zip(x, widths, strict=True))) for x in lines)


def targets(names: list[str], lam: dict[str, Any], anchor: dict[str, Any] | str) -> list[str]:
    out = []
    if "baseline" in lam and "accum4" in lam:
        b = lam["baseline"]["collectives"]["grad"]
        a = lam["accum4"]["collectives"]["grad"]
        # reducing per micro-batch would issue baseline's gradient reductions K = 4 times
        out.append(f"K=4: {a} gradient reduction(s) per step against {4 * b} when reducing each "
                   f"of the 4 micro-batches (baseline: {b}): "
                   f"{'met' if a <= b else 'not met'} "
                   "(target: at most 1/4)")
    if "baseline" in lam and "zero3" in lam:
        base, z = lam["baseline"], lam["zero3"]
        bound = base["args"]["model"] / 8 + z["gathered"]
        out.append(f"ZeRO-3: parameters + optimizer state {_mib(z['args']['model'])} MiB per "
                   f"device against baseline's {_mib(base['args']['model'])} MiB / 8 + the "
                   f"largest gathered parameter {_mib(z['gathered'])} MiB = {_mib(bound)} MiB: "
                   f"{'met' if z['args']['model'] <= bound else 'not met'}")
    if "baseline" in lam and "bf16" in lam:
        def act(r: dict[str, Any]) -> int:   # the modeled peak above the arguments
            return r["peak_model"] - r["args"]["all"]
        ratio = act(lam["bf16"]) / max(1, act(lam["baseline"]))
        saved = lam["bf16"]["saved"] / max(1, lam["baseline"]["saved"])
        out.append(f"bf16: activations saved for the backward {_mib(lam['bf16']['saved'])} MiB "
                   f"against f32's {_mib(lam['baseline']['saved'])} MiB = {saved:.2f}x: "
                   f"{'met' if saved <= 0.6 else 'not met'} (target: at most 0.6x); the whole "
                   f"modeled peak above the arguments (gradients and the f32 update included) "
                   f"{_mib(act(lam['bf16']))} MiB against {_mib(act(lam['baseline']))} MiB = "
                   f"{ratio:.2f}x")
    if isinstance(anchor, dict):
        for n in names:
            if n in anchor and "sent" in lam[n]:
                ok = lam[n]["sent"] <= anchor[n]["sent"] * 1.0001
                out.append(f"{n}: sent {_mib(lam[n]['sent'])} MiB vs GSPMD "
                           f"{_mib(anchor[n]['sent'])} MiB: {'met' if ok else 'not met'}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-jax", action="store_true")
    ap.add_argument("--no-spmd", action="store_true")
    ap.add_argument("--jax-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    names = args.rows.split(",")
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        ap.error(f"unknown rows {unknown}; rows: {', '.join(ROWS)}")
    sz = size(args.quick)
    if args.jax_worker:
        jax_worker(names, sz, args.repeats)
        return 0
    print(f"GPT-2 sample: {sz.layers} layers, D={sz.dim}, {sz.heads} heads, B={sz.batch}, "
          f"T={sz.seq}, AdamW; meshes data=8 (combined: data=2 x model=4)", flush=True)
    lam = lamina_rows(names, sz, not args.no_spmd)
    quick = ["--quick"] if args.quick else []
    jx: dict[str, Any] | str = "skipped (--no-jax)"
    anchor: dict[str, Any] | str = "skipped (--no-jax)"
    if not args.no_jax:
        jx = subprocess_json(["benchmarks/bench_scale.py", "--jax-worker", "--rows", args.rows,
                              "--repeats", str(args.repeats), *quick])
        anchor = subprocess_json(["benchmarks/scale_anchor.py", "--layers", str(sz.layers),
                                  "--dim", str(sz.dim), "--heads", str(sz.heads),
                                  "--vocab", str(sz.vocab), "--batch", str(sz.batch),
                                  "--seq", str(sz.seq), "--steps", str(args.repeats),
                                  "--rows", ",".join(n for n in names)])
    print(table(names, lam, jx, anchor))
    for note in (jx, anchor):
        if isinstance(note, str):
            print(note)
    for line in targets(names, lam, anchor):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
