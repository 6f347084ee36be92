"""Lamina's placed programs on three engines: the NumPy SPMD interpreter, the JAX backend, GSPMD.

    python benchmarks/bench_jax.py [--repeats 5] [--rows megatron,contracting,gpt2]

Rows (8 host CPU devices, a 2 x 4 mesh `data` x `model`):
  megatron     samples/mlp_megatron.mlir      x f32[2048,1024] @ W1 [1024,4096] -> gelu -> @ W2
  contracting  samples/mlp_contracting.mlir   the same MLP, first contracting dimension split
  gpt2         samples/gpt2_block_parallel.mlir  a GPT-2 block, batch on data, Megatron on model

Engines, each on the same inputs (`random_inputs(func, 0)`):
  (a) numpy  Lamina's NumPy SPMD interpreter on the program after
             `propagate-sharding,insert-collectives{target=h100-node}` (every device simulated in
             turn on this machine's cores)
  (b) jax    `lamina-run --backend jax` on that program (the backend's `Program`, compiled and
             run as `JaxBackend.run` does: one shard_map, exactly the collectives Lamina inserted)
  (c) gspmd  plain `jax.jit` of the same whole-array math (the op table's formulas on jax.numpy,
             the program before Lamina's passes) with `in_shardings` / `out_shardings` the
             NamedShardings (b)'s arguments and results have; XLA's SPMD partitioner chooses
             every collective
Columns: wall time per step (median of --repeats runs after a first one; (b) and (c) timed in
turn, round by round, so the VM's drifting speed does not enter their ratio, and for at least
--min-seconds per row), compile time, the
collectives of each compiled HLO and the bytes one device sends for them (ring model,
`lamina.backends.jax.hlo`; for (a) Lamina's own list, which (b)'s HLO equals), and the ratios.
Targets (issue 11): (b) sends no more than (c) on every row and less on the contracting MLP, and
(b)'s step is within 1.1x of (c)'s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

COUNT_FLAG = "--xla_force_host_platform_device_count"
os.environ["XLA_FLAGS"] = " ".join(
    [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(COUNT_FLAG)]
    + [f"{COUNT_FLAG}=8"])
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402  (after XLA_FLAGS)
import numpy as np  # noqa: E402
from lamina.analysis.placed import placed_mesh  # noqa: E402
from lamina.backends.inputs import random_inputs  # noqa: E402
from lamina.backends.interface import find_entry  # noqa: E402
from lamina.backends.jax import hlo  # noqa: E402
from lamina.backends.jax.backend import (  # noqa: E402
    COMPILER_OPTIONS,
    Program,
    compare_collectives,
    memory_moves,
)
from lamina.backends.jax.collectives import in_spec  # noqa: E402
from lamina.backends.jax.lower import Lowering  # noqa: E402
from lamina.backends.numpy.spmd import run_spmd  # noqa: E402
from lamina.ir.mesh.placement import spec_or_replicated  # noqa: E402
from lamina.ir.text.source import load, make_context  # noqa: E402
from lamina.passes.pipeline import build_pipeline, run_pipeline  # noqa: E402
from xdsl.dialects.builtin import ModuleOp  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = {"megatron": "samples/mlp_megatron.mlir", "contracting": "samples/mlp_contracting.mlir",
        "gpt2": "samples/gpt2_block_parallel.mlir"}
PIPELINE = "propagate-sharding,insert-collectives{target=h100-node}"
MIB = float(1 << 20)


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int,
                min_seconds: float = 0.0) -> dict[str, float]:
    """Median wall time of each function over at least `repeats` rounds (more for fast ones, to
    fill `min_seconds`), the functions called in turn in every round after one untimed call each
    (this VM's speed drifts over minutes: interleaving keeps the drift out of the ratios)."""
    start = time.perf_counter()
    for fn in fns.values():
        fn()
    first = time.perf_counter() - start
    rounds = max(repeats, min(500, int(min_seconds / max(first, 1e-6))))
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def describe(kinds: Sequence[tuple[str, int]]) -> str:
    """`all_reduce x2 (n=4)` style summary of (kind, group size) pairs."""
    counts: dict[tuple[str, int], int] = {}
    for k in kinds:
        counts[k] = counts.get(k, 0) + 1
    return ", ".join(f"{k}{f' x{c}' if c > 1 else ''} (n={n})" for (k, n), c in counts.items()) \
        or "none"


def numpy_row(module: ModuleOp, inputs: list[np.ndarray], repeats: int) -> dict[str, Any]:
    func = find_entry(module, None)
    stats = run_spmd(func, inputs).stats
    step = interleaved({"numpy": lambda: run_spmd(func, inputs)}, repeats)["numpy"]
    return {"step": step, "compile": None, "sent": stats["comm_bytes_per_device"],
            "collectives": describe([(c["kind"], c["devices"]) for c in stats["collectives"]])}


def jax_cell(module: ModuleOp, inputs: list[np.ndarray]) -> tuple[Callable[[], Any],
                                                                     dict[str, Any]]:
    """(b): the program as `JaxBackend.run` compiles and runs it (`Program`), checked to hold
    exactly Lamina's collectives; returns one step and the cell."""
    func = find_entry(module, None)
    mesh_op = placed_mesh(func)
    assert mesh_op is not None
    prog = Program(func, mesh_op.mesh, jax.devices()[:8], memory_moves(jax.devices()[0], func)[0])
    start = time.perf_counter()
    compiled = prog.compile()
    compile_s = time.perf_counter() - start
    args = prog.put(inputs)
    stats = compare_collectives(func, mesh_op.mesh, compiled.as_text(), prog.lowered_hlo)
    assert stats["hlo_matches_plan"], "the compiled HLO differs from Lamina's collectives"
    return (lambda: jax.block_until_ready(compiled(*args))), {
        "compile": compile_s, "sent": stats["hlo_comm_bytes_per_device"],
        "collectives": describe([(c["kind"], len(c["replica_groups"][0]))
                                 for c in stats["hlo_collectives"]])}


def gspmd_cell(parsed: ModuleOp, placed: ModuleOp, inputs: list[np.ndarray]
               ) -> tuple[Callable[[], Any], dict[str, Any]]:
    """(c): the unplaced math of `parsed` jitted with `placed`'s argument/result shardings."""
    func, pfunc = find_entry(parsed, None), find_entry(placed, None)
    mesh_op = placed_mesh(pfunc)
    assert mesh_op is not None
    prog = Program(pfunc, mesh_op.mesh, jax.devices()[:8], lambda x, tier: x)
    assert prog.jmesh is not None
    outs = [jax.sharding.NamedSharding(prog.jmesh, in_spec(spec_or_replicated(t)))
            for t in pfunc.function_type.outputs.data]
    jitted = jax.jit(Lowering(func, None, lambda x, tier: x),
                     in_shardings=tuple(prog.in_shardings), out_shardings=tuple(outs))
    args = prog.put(inputs)
    start = time.perf_counter()
    compiled = jitted.lower(*args).compile(compiler_options=dict(COMPILER_OPTIONS))
    compile_s = time.perf_counter() - start
    found = hlo.collectives(compiled.as_text() or "", len(prog.in_shardings[0].device_set))
    return (lambda: jax.block_until_ready(compiled(*args))), {
        "compile": compile_s, "sent": sum(c.sent for c in found),
        "collectives": describe([(c.kind, c.group_size) for c in found])}


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.1f} ms"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Lamina placed programs on NumPy, the JAX backend and GSPMD.")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per cell (median; >= 5)")
    p.add_argument("--min-seconds", type=float, default=3.0,
                   help="time (b) and (c) for at least this long per row (more rounds for fast "
                        "rows; default 3)")
    p.add_argument("--rows", default=",".join(ROWS), help="rows to run: " + ", ".join(ROWS))
    args = p.parse_args(argv)
    table: list[tuple[str, dict[str, dict[str, Any]]]] = []
    for name in args.rows.split(","):
        ctx = make_context()
        parsed = load(os.path.join(ROOT, ROWS[name]), ctx)
        placed = parsed.clone()
        run_pipeline(ctx, placed, build_pipeline(PIPELINE))
        inputs = random_inputs(find_entry(placed, None), 0)
        cells = {"numpy": numpy_row(placed, inputs, args.repeats)}   # before any jax call
        with jax.enable_x64(True):   # as the JAX backend runs (dropout's 64-bit index)
            step_b, cells["jax"] = jax_cell(placed, inputs)
            step_c, cells["gspmd"] = gspmd_cell(parsed, placed, inputs)
            steps = interleaved({"jax": step_b, "gspmd": step_c}, args.repeats,
                                args.min_seconds)
        cells["jax"]["step"], cells["gspmd"]["step"] = steps["jax"], steps["gspmd"]
        table.append((name, cells))
    print(f"jax {jax.__version__}, {len(jax.devices())} {jax.devices()[0].platform} devices, "
          f"{os.cpu_count()} cores, medians of >= {args.repeats} runs\n")
    print("| row | engine | step | compile | collectives (compiled) | sent per device | "
          "step / gspmd | sent / gspmd |")
    print("|---|---|---|---|---|---|---|---|")
    verdicts = []
    for name, cells in table:
        ref = cells["gspmd"]
        for engine, c in cells.items():
            ratio = c["step"] / ref["step"]
            sent = f"{c['sent'] / ref['sent']:.2f}x" if ref["sent"] else "-"
            print(f"| {name} | {engine} | {_ms(c['step'])} | {_ms(c['compile'])} | "
                  f"{c['collectives']} | {c['sent'] / MIB:.2f} MiB | {ratio:.2f}x | {sent} |")
        b, c = cells["jax"], ref
        verdicts.append(f"{name}: jax sends {b['sent'] / MIB:.2f} MiB vs gspmd "
                        f"{c['sent'] / MIB:.2f} MiB ({'<=' if b['sent'] <= c['sent'] else '>'}); "
                        f"step {b['step'] / c['step']:.2f}x gspmd "
                        f"({'within' if b['step'] <= 1.1 * c['step'] else 'beyond'} 1.1x)")
    print()
    print("\n".join(verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
