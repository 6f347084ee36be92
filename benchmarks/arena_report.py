"""Static memory plans (`lamina.analysis.arena.plan_function`) of every sample: arena vs peak.

    .venv/bin/python benchmarks/arena_report.py [--alignment 64] [--fused-samples] [--largest N]

One row per function and memory tier of every `samples/*.mlir` program (the deliberately invalid
one left out), then the GPT-2 block after `fuse-attention,fuse-elementwise`. Columns: values in
the arena (intermediates: not arguments, not returned values, not views), the peak of live bytes
(the most intermediate bytes alive at one point, the least any arena could be), the arena the
planner chose, and their ratio (issue 21's goal: at most 1.1). Sizes are bytes per device at the
device element widths (bf16 in 2 bytes). `--fused-samples` adds every sample after the fusion
pipeline too; `--largest N` prints the N largest buffers of the GPT-2 block's plans.
"""

from __future__ import annotations

import argparse
import glob
import os

import lamina
from lamina.analysis.arena import DEFAULT_ALIGNMENT, ArenaPlan, plan_function
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FUSION = "fuse-attention,fuse-elementwise"


def _samples() -> list[str]:
    paths = sorted(glob.glob(os.path.join(ROOT, "samples", "*.mlir")))
    out = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            if "// expected-error" not in f.read():
                out.append(p)
    return out


def _functions(module: ModuleOp) -> list[FuncOp]:
    return [op for op in module.walk() if isinstance(op, FuncOp)]


def _rows(label: str, module: ModuleOp, alignment: int) -> list[tuple[list[str], ArenaPlan]]:
    rows = []
    for func in _functions(module):
        plan = plan_function(func, alignment=alignment)
        for tier in plan.arena_bytes or {"-": 0}:
            arena = plan.arena_bytes.get(tier, 0)
            peak = plan.peak_live_bytes.get(tier, 0)
            count = sum(1 for s in plan.slots.values() if s.tier == tier)
            ratio = f"{arena / peak:.3f}" if peak else "-"
            rows.append(([label, func.sym_name.data, tier, str(count), f"{peak:,}", f"{arena:,}",
                          ratio], plan))
    return rows


def executables(fused_samples: bool) -> None:
    """The plan each compiled NumPy program actually runs with (`lamina.Executable.memory_plan`):
    its arena against its peak, and what a steady-state call still allocates besides its
    outputs (kernels without an out= form, fused kernels' and other runners' results)."""
    print("\nexecutables (`lamina.compile`, numpy backend; functions on one device):\n")
    print("| program | function | arena bytes | peak live bytes | ratio | values | temporaries "
          "| kernel results |")
    print("|---|---|--:|--:|--:|--:|--:|--:|")
    cases = [(os.path.basename(p), lamina.load(p)) for p in _samples()]
    gpt2 = os.path.join(ROOT, "samples", "gpt2_block.mlir")
    cases.append(("gpt2_block.mlir + fusion", lamina.apply(lamina.load(gpt2), FUSION)))
    if fused_samples:
        cases += [(f"{os.path.basename(p)} + fusion", lamina.apply(lamina.load(p), FUSION))
                  for p in _samples()]
    for label, module in cases:
        for func in _functions(module):
            plan = lamina.compile(module, func.sym_name.data).memory_plan
            if plan is None:
                continue
            arena, peak = sum(plan["arena_bytes"].values()), sum(plan["peak_live_bytes"].values())
            ratio = f"{arena / peak:.3f}" if peak else "-"
            print(f"| {label} | {func.sym_name.data} | {arena:,} | {peak:,} | {ratio} | "
                  f"{plan['values']} | {len(plan['temporaries'])} | "
                  f"{len(plan['kernel_results'])} |")


def main() -> None:
    ap = argparse.ArgumentParser(description="static memory plans of every sample: arena vs peak")
    ap.add_argument("--alignment", type=int, default=DEFAULT_ALIGNMENT)
    ap.add_argument("--fused-samples", action="store_true",
                    help=f"also every sample after {FUSION}")
    ap.add_argument("--largest", type=int, default=0,
                    help="print the N largest buffers of the GPT-2 block's plans")
    args = ap.parse_args()
    rows: list[tuple[list[str], ArenaPlan]] = []
    for path in _samples():
        name = os.path.basename(path)
        rows += _rows(name, lamina.load(path), args.alignment)
        if args.fused_samples and name != "gpt2_block.mlir":
            rows += _rows(f"{name} + fusion", lamina.apply(lamina.load(path), FUSION),
                          args.alignment)
    gpt2 = os.path.join(ROOT, "samples", "gpt2_block.mlir")
    fused = _rows("gpt2_block.mlir + fusion", lamina.apply(lamina.load(gpt2), FUSION),
                  args.alignment)
    rows += fused
    head = ["program", "function", "tier", "values in arena", "peak live bytes", "arena bytes",
            "ratio"]
    table = [head] + [r for r, _ in rows]
    widths = [max(len(r[c]) for r in table) for c in range(len(head))]
    right = {3, 4, 5, 6}

    def fmt(r: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if i in right else c.ljust(w)
                                 for i, (c, w) in enumerate(zip(r, widths, strict=True))) + " |"

    print(fmt(head))
    print("|" + "|".join("-" * (w + 1) + (":" if i in right else "-")
                         for i, w in enumerate(widths)) + "|")
    for r, _ in rows:
        print(fmt(r))
    print(f"\nalignment {args.alignment} B; ratio = arena / peak live bytes (goal: <= 1.1)")
    misses = [r for r, _ in rows if r[6] != "-" and float(r[6]) > 1.1]
    for r in misses:
        print(f"over 1.1: {r[0]} @{r[1]} ({r[2]}): {r[5]} B for a {r[4]} B peak")
    executables(args.fused_samples)
    if args.largest:
        unfused = [p for r, p in rows if r[0] == "gpt2_block.mlir"]
        for label, plans in (("gpt2_block.mlir", unfused),
                             ("gpt2_block.mlir + fusion", [p for _, p in fused])):
            for plan in plans:
                print(f"\n{label}:\n{plan.report(args.largest)}")


if __name__ == "__main__":
    main()
