# ruff: noqa: E501  (the block's ops are written one IR line per source line)
"""A GPT-2 training step planned across memory tiers: recompute against offload and the classics.

    .venv/bin/python benchmarks/bench_training.py [--blocks 2] [--batch 2] [--seq 256] [--dim 256]
        [--heads 4] [--fractions 1.0 0.8 0.6 0.5 0.4] [--ilp-time-limit 60] [--xla-size]

The program: `--blocks` pre-LN GPT-2 blocks (the block of samples/gpt2_block.mlir with a batch
dimension: LayerNorm, QKV projection, causal softmax attention with dropout, output projection,
residual dropout, LayerNorm, GeLU MLP of width 4D, residual dropout), f32. Its training step is
derived by Lamina itself: `derive-backward{data=x}` (the block stack's output takes a cotangent
argument) then `append-optimizer{kind=adamw}`; `fuse-elementwise` and `annotate-lifetimes` run
before planning, as in the samples' pipelines. The target is the built-in `h100-node` (its
roofline for compute, its PCIe / NVMe links) with the HBM capacity overridden: the sweep takes
fractions of the keep-everything peak, so the program decides the capacities.

Modeled step time = the steps' roofline compute + the plan's exposed transfer and recompute
time (`lamina.passes.tier_plan.problem.plan_cost`), for
- keep everything: every value stays in HBM (infinite HBM); it fits where the capacity is at
  least its peak;
- checkpoint every block boundary (Chen et al.): a block's forward activations that its backward
  reads are dropped after the forward and rebuilt when the backward of that block starts, by
  running the block's forward again (its whole compute time, once per block); they occupy HBM
  from that point to their last backward use (the intermediates of the rerun itself are not
  counted: a lower bound on its peak);
- Lamina's plan: greedy and ILP (`--ilp-time-limit`), with recompute and with `recompute=false`.
A row shows "-" where a plan does not fit (or the ILP found none in its limit; "*" marks an ILP
stopped at the limit with a plan).

The second table: kernels and bytes of the derived forward + backward (`@NAME_grad` after
fuse-elementwise: one kernel per top-level compute op, bytes = what each kernel reads and writes
in HBM) and of the whole step, with `--xla-size` at the size of XLA's reference (one block,
B=2, T=1024, D=1024, 16 heads: 70 kernels, 4169 MiB under jax.jit on CPU, with dropout masks
as inputs where Lamina hashes them).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

from lamina.analysis.sizes import local_bytes
from lamina.ir.buffers.memory import FreeOp, MoveOp
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.mesh.target import load_target
from lamina.ir.text.source import make_context, parse_text, verify
from lamina.passes.assign_memory_tiers import build_model
from lamina.passes.pipeline import build_pipeline, run_pipeline
from lamina.passes.tier_plan.greedy import solve_greedy
from lamina.passes.tier_plan.ilp import solve_ilp
from lamina.passes.tier_plan.problem import Infeasible, Plan, Problem, gaps_of, occupancy
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp

LN = "{axis = -1 : i64, eps = 1.000000e-05 : f64}"


def block_text(i: int, B: int, T: int, D: int, H: int) -> tuple[list[str], list[str]]:
    """(arguments, body lines) of block i, reading %h{i} and defining %h{i+1}."""
    F, Dh, N = 4 * D, D // H, B * T
    t = lambda *s: "tensor<" + "x".join(map(str, s)) + "xf32>"  # noqa: E731
    x, y = f"%h{i}", f"%h{i + 1}"
    p = f"b{i}_"
    args = [f"%{p}ln1_g: {t(D)}", f"%{p}ln1_b: {t(D)}", f"%{p}w_attn: {t(D, 3 * D)}",
            f"%{p}b_attn: {t(3 * D)}", f"%{p}w_proj: {t(D, D)}", f"%{p}b_proj: {t(D)}",
            f"%{p}ln2_g: {t(D)}", f"%{p}ln2_b: {t(D)}", f"%{p}w_fc: {t(D, F)}", f"%{p}b_fc: {t(F)}",
            f"%{p}w_out: {t(F, D)}", f"%{p}b_out: {t(D)}"]
    q = f"%{p}"
    s = 1.0 / math.sqrt(Dh)
    body = [
        f"{q}a = lamina.layernorm {x} scale {q}ln1_g bias {q}ln1_b {LN} : ({t(N, D)}, {t(D)}, {t(D)}) -> {t(N, D)}",
        f"{q}qkv0 = lamina.matmul {q}a, {q}w_attn : ({t(N, D)}, {t(D, 3 * D)}) -> {t(N, 3 * D)}",
        f"{q}qkv = lamina.add {q}qkv0, {q}b_attn : ({t(N, 3 * D)}, {t(3 * D)}) -> {t(N, 3 * D)}",
    ]
    for j, nm in enumerate("qkv"):
        body.append(f"{q}{nm} = lamina.slice {q}qkv {{start = array<i64: 0, {j * D}>, limit = "
                    f"array<i64: {N}, {(j + 1) * D}>}} : ({t(N, 3 * D)}) -> {t(N, D)}")
        body.append(f"{q}{nm}4 = lamina.reshape {q}{nm} : ({t(N, D)}) -> {t(B, T, H, Dh)}")
    body += [
        f"{q}qh = lamina.transpose {q}q4 {{permutation = array<i64: 0, 2, 1, 3>}} : ({t(B, T, H, Dh)}) -> {t(B, H, T, Dh)}",
        f"{q}kt = lamina.transpose {q}k4 {{permutation = array<i64: 0, 2, 3, 1>}} : ({t(B, T, H, Dh)}) -> {t(B, H, Dh, T)}",
        f"{q}vh = lamina.transpose {q}v4 {{permutation = array<i64: 0, 2, 1, 3>}} : ({t(B, T, H, Dh)}) -> {t(B, H, T, Dh)}",
        f"{q}scores = lamina.matmul {q}qh, {q}kt : ({t(B, H, T, Dh)}, {t(B, H, Dh, T)}) -> {t(B, H, T, T)}",
        f"{q}inv = lamina.constant dense<{s:.6e}> : tensor<f32>",
        f"{q}scaled = lamina.mul {q}scores, {q}inv : ({t(B, H, T, T)}, tensor<f32>) -> {t(B, H, T, T)}",
        f"{q}rows = lamina.constant dense<[{', '.join(f'[{r}]' for r in range(T))}]> : tensor<{T}x1xi32>",
        f"{q}cols = lamina.constant dense<[{', '.join(str(c) for c in range(T))}]> : tensor<{T}xi32>",
        f"{q}causal = lamina.ge {q}rows, {q}cols : (tensor<{T}x1xi32>, tensor<{T}xi32>) -> tensor<{T}x{T}xi1>",
        f"{q}neg = lamina.constant dense<-1.000000e+09> : tensor<f32>",
        f"{q}masked = lamina.select {q}causal, {q}scaled, {q}neg : (tensor<{T}x{T}xi1>, {t(B, H, T, T)}, tensor<f32>) -> {t(B, H, T, T)}",
        f"{q}probs = lamina.softmax {q}masked {{axis = -1 : i64}} : {t(B, H, T, T)}",
        f"{q}probs_d = lamina.dropout {q}probs {{rate = 1.000000e-01 : f64, seed = {10 * i + 1} : i64}} : {t(B, H, T, T)}",
        f"{q}ctx = lamina.matmul {q}probs_d, {q}vh : ({t(B, H, T, T)}, {t(B, H, T, Dh)}) -> {t(B, H, T, Dh)}",
        f"{q}ctx_t = lamina.transpose {q}ctx {{permutation = array<i64: 0, 2, 1, 3>}} : ({t(B, H, T, Dh)}) -> {t(B, T, H, Dh)}",
        f"{q}merged = lamina.reshape {q}ctx_t : ({t(B, T, H, Dh)}) -> {t(N, D)}",
        f"{q}proj0 = lamina.matmul {q}merged, {q}w_proj : ({t(N, D)}, {t(D, D)}) -> {t(N, D)}",
        f"{q}proj = lamina.add {q}proj0, {q}b_proj : ({t(N, D)}, {t(D)}) -> {t(N, D)}",
        f"{q}proj_d = lamina.dropout {q}proj {{rate = 1.000000e-01 : f64, seed = {10 * i + 2} : i64}} : {t(N, D)}",
        f"{q}r = lamina.add {x}, {q}proj_d : {t(N, D)}",
        f"{q}m = lamina.layernorm {q}r scale {q}ln2_g bias {q}ln2_b {LN} : ({t(N, D)}, {t(D)}, {t(D)}) -> {t(N, D)}",
        f"{q}fc0 = lamina.matmul {q}m, {q}w_fc : ({t(N, D)}, {t(D, F)}) -> {t(N, F)}",
        f"{q}fc = lamina.add {q}fc0, {q}b_fc : ({t(N, F)}, {t(F)}) -> {t(N, F)}",
        f"{q}act = lamina.gelu {q}fc {{approximate = \"tanh\"}} : {t(N, F)}",
        f"{q}out0 = lamina.matmul {q}act, {q}w_out : ({t(N, F)}, {t(F, D)}) -> {t(N, D)}",
        f"{q}out = lamina.add {q}out0, {q}b_out : ({t(N, D)}, {t(D)}) -> {t(N, D)}",
        f"{q}out_d = lamina.dropout {q}out {{rate = 1.000000e-01 : f64, seed = {10 * i + 3} : i64}} : {t(N, D)}",
        f"{y} = lamina.add {q}r, {q}out_d : {t(N, D)}",
    ]
    return args, body


def program_text(L: int, B: int, T: int, D: int, H: int) -> tuple[str, list[tuple[int, int]]]:
    """The L-block forward function, and each block's range of source lines."""
    N = B * T
    args, lines, spans = [f"%h0: tensor<{N}x{D}xf32>"], [], []
    for i in range(L):
        a, body = block_text(i, B, T, D, H)
        args += a
        first = len(lines) + 2
        lines += body
        spans.append((first, len(lines) + 1))
    head = f"func.func @gpt2({', '.join(args)}) -> tensor<{N}x{D}xf32> {{"
    text = "\n".join([head, *("  " + ln for ln in lines),
                      f"  func.return %h{L} : tensor<{N}x{D}xf32>", "}"]) + "\n"
    return text, spans


def derived_step(L: int, B: int, T: int, D: int, H: int,
                 optimizer: bool = True) -> tuple[ModuleOp, list[tuple[int, int]]]:
    """The forward and @gpt2_step (or @gpt2_grad without `optimizer`), fused, with frees."""
    text, spans = program_text(L, B, T, D, H)
    ctx = make_context()
    module = parse_text(text, "gpt2.mlir", ctx)
    verify(module)
    run_pipeline(ctx, module, build_pipeline(
        "derive-backward{data=h0},"
        + ("append-optimizer{kind=adamw lr=0.001 weight-decay=0.01}," if optimizer else "")
        + "fuse-elementwise,annotate-lifetimes"))
    verify(module)
    return module, spans


def function(module: ModuleOp, name: str) -> FuncOp:
    return next(op for op in module.walk() if isinstance(op, FuncOp) and op.sym_name.data == name)


def kernels_and_bytes(func: FuncOp) -> tuple[int, int]:
    """Kernels (top-level compute ops other than constants) and the bytes they read and write."""
    n = total = 0
    for op in func.body.block.ops:
        if isinstance(op, (MoveOp, FreeOp, ReturnOp)) or not op.operands:
            continue
        n += 1
        total += sum(local_bytes(v, func) for v in (*op.operands, *op.results)
                     if isinstance(v.type, TensorType))
    return n, total


def phases(func: FuncOp, prob: Problem, spans: list[tuple[int, int]]
           ) -> tuple[list[int], list[int], int]:
    """Per value its forward block (-1: none; the forward copy keeps the names `%b{i}_...` and
    the boundaries `%h{i}`), per step its backward block (by the source line its op carries:
    the backward's ops carry their forward op's), and the first step after the forward (the
    fused program schedules a few backward ops that only read the cotangent earlier)."""
    from lamina.ir.core.diagnostics import op_loc

    ops = [o for o in func.body.block.ops if not isinstance(o, (FreeOp, ReturnOp))]
    assert len(ops) == prob.steps
    L = len(spans)
    bwd = 1 + next(v.define for v in prob.values if v.name == f"%h{L}")
    owner = []
    for v in prob.values:
        owner.append(next((i for i in range(L) if v.name.startswith(f"%b{i}_")), -1)
                     if not v.is_arg and v.define < bwd else -1)
    block = []
    for o in ops:
        loc = op_loc(o)
        line = loc.line if loc is not None else 0
        block.append(next((i for i, (lo, hi) in enumerate(spans) if lo <= line <= hi), -1))
    return owner, block, bwd


def checkpoint_baseline(prob: Problem, owner: list[int], block: list[int],
                        bwd: int) -> tuple[float, float]:
    """(peak HBM bytes, modeled step time) of checkpointing every block boundary."""
    K = prob.steps
    start: dict[int, int] = {}
    for k in range(bwd, K):
        start.setdefault(block[k], k)
    plan = Plan([None] * len(prob.values), [[None] * len(gaps_of(v, i)) for i, v in
                                            enumerate(prob.values)])
    rerun: set[int] = set()
    for vi, v in enumerate(prob.values):
        i = owner[vi]
        if i < 0:
            continue
        for gi, g in enumerate(gaps_of(v, vi)):
            if g.a < bwd <= g.b and not g.tail and g.b - g.a >= 2:
                plan.prefetch[vi][gi] = max(g.a + 2, min(g.b, start.get(i, g.b)))
                plan.tier[vi] = "host"
                rerun.add(i)
    peak = max(occupancy(prob, plan)["hbm"])
    fwd_steps = {prob.values[vi].define for vi in range(len(prob.values)) if owner[vi] in rerun}
    return peak, sum(prob.compute) + sum(prob.compute[k] for k in fwd_steps)


def plan_time(prob: Problem, solver: str, limit: float) -> tuple[float | None, str]:
    """Modeled step time of a solver's plan (None: no plan) and a mark (* stopped at the limit)."""
    try:
        plan = solve_greedy(prob) if solver == "greedy" else solve_ilp(prob, time_limit=limit)
    except (Infeasible, LaminaError):
        return None, ""
    return sum(prob.compute) + plan.cost, "" if plan.optimal else "*"


def sweep(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    module, spans = derived_step(args.blocks, args.batch, args.seq, args.dim, args.heads)
    step = function(module, "gpt2_step")
    target = load_target("h100-node")
    base = build_model(step, target, 1e18)
    owner, block, bwd = phases(step, base.problem, spans)
    keep_peak = max(occupancy(base.problem, Plan([None] * len(base.problem.values),
                    [[None] * len(gaps_of(v, i)) for i, v in enumerate(base.problem.values)]))["hbm"])
    compute = sum(base.problem.compute)
    ck_peak, ck_time = checkpoint_baseline(base.problem, owner, block, bwd)
    print(f"GPT-2 training step: {args.blocks} block(s), B={args.batch} T={args.seq} D={args.dim} "
          f"H={args.heads}, f32; {base.problem.steps} program points, {len(base.problem.values)} "
          f"values (derived and fused in {time.perf_counter() - t0:.1f} s); target h100-node")
    print(f"keep everything: peak {keep_peak / 2**20:.1f} MiB, step {compute * 1e3:.3f} ms; "
          f"checkpoint every block boundary: peak >= {ck_peak / 2**20:.1f} MiB, step "
          f"{ck_time * 1e3:.3f} ms\n")
    print("| HBM (MiB) | fraction of keep peak | keep everything (modeled ms) | "
          "checkpoint blocks (modeled ms) | greedy (modeled ms) | greedy, no recompute (modeled ms) | "
          "ILP (modeled ms) | ILP, no recompute (modeled ms) | greedy vs ILP | solve s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for f in args.fractions:
        cap = f * keep_peak
        t1 = time.perf_counter()
        row = {}
        for rc in (True, False):
            prob = build_model(step, target, cap, rc).problem
            row[("greedy", rc)] = plan_time(prob, "greedy", 0)
            row[("ilp", rc)] = plan_time(prob, "ilp", args.ilp_time_limit) if args.ilp_time_limit \
                else (None, "")

        def ms(x: tuple[float | None, str]) -> str:
            return "-" if x[0] is None else f"{x[0] * 1e3:.3f}{x[1]}"

        g, o = row[("greedy", True)][0], row[("ilp", True)][0]
        gap = "-" if g is None or o is None else f"{(g - o) / o * 100:+.2f}%"
        keep = f"{compute * 1e3:.3f}" if cap >= keep_peak - 1e-6 else "-"
        ck = f"{ck_time * 1e3:.3f}" if cap >= ck_peak - 1e-6 else "-"
        print(f"| {cap / 2**20:.1f} | {f:.2f} | {keep} | {ck} | {ms(row[('greedy', True)])} | "
              f"{ms(row[('greedy', False)])} | {ms(row[('ilp', True)])} | "
              f"{ms(row[('ilp', False)])} | {gap} | {time.perf_counter() - t1:.1f} |", flush=True)


def kernels_table(args: argparse.Namespace) -> None:
    if args.xla_size:
        shape = (1, 2, 1024, 1024, 16)
    else:
        shape = (1, args.batch, args.seq, args.dim, args.heads)
    module, _ = derived_step(*shape)
    grad, _ = derived_step(*shape, optimizer=False)
    print(f"\nKernels and bytes, one block, B={shape[1]} T={shape[2]} D={shape[3]} H={shape[4]}:\n")
    print("| program | kernels | bytes accessed (MiB) |")
    print("|---|---|---|")
    for name, what in (("gpt2", "forward"), ("gpt2_grad", "forward + backward (derived)"),
                       ("gpt2_step", "training step with AdamW")):
        n, b = kernels_and_bytes(function(grad if name == "gpt2_grad" else module, name))
        print(f"| Lamina {what} | {n} | {b / 2**20:.0f} |")
    if args.xla_size:
        print("| XLA forward + backward (jax.jit on CPU, references.md) | 70 | 4169 |")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--fractions", type=float, nargs="+", default=[1.0, 0.8, 0.6, 0.5, 0.4, 0.3])
    ap.add_argument("--ilp-time-limit", type=float, default=60.0)
    ap.add_argument("--xla-size", action="store_true")
    args = ap.parse_args()
    sweep(args)
    kernels_table(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
