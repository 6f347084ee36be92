"""The GPT-2 block of issue 13: kernels, bytes moved and time per fusion plan, on one device and on a mesh.

    .venv/bin/python benchmarks/bench_gpt2.py [--repeats 3] [--quick]

One pre-LN GPT-2 block at the anchor sizes of `shared/references.md` (B=2, T=1024, D=1024, 16
heads, MLP 4096, f32; the causal mask built in the program, the two residual dropouts as 0/1 mask
inputs), the program, inputs and jax.jit function of `bench_fusion.py` (imported, not copied), run
once per plan of `PLANS`. A plan whose pipeline names a pass that is not registered yet prints
"n/a: pass X not registered" instead of a row, so the script runs on today's code and measures a
pass the day it lands.

Columns, from `lamina.run`'s statistics (the fields `--stats-json` writes):
  kernels      kernel launches on one device (`kernels`: each `lamina.fused` is one, views and
               constants none)
  bytes moved  `bytes_moved`: the sum over kernels of the bytes of the kernel's distinct operands
               plus the bytes of its results. An operand passed twice to one kernel (`mul %x, %x`)
               counts once, as a real kernel reads it once (unlike `bytes_accessed`, which counts
               every operand slot); a fused kernel counts only its inputs and results, since its
               intermediates stay in the tile.
  time         the interpreter's wall time: the median of `--repeats` runs after a warm-up run,
               with their range (min-max); fused kernels run on one thread per core
  jax.jit      the same math on the same inputs under jax.jit (every core), timed after all the
               interpreter runs (XLA's thread pool spins for a while after each call)
  ratios       bytes and time against the unfused plan, and time against jax.jit (> 1: faster)
Targets (issue 13), printed beside each row: <= 11 kernels and <= 872 MiB (goal 10 kernels,
808 MiB); the fused plan faster than the unfused one. Before any timing, every plan's outputs are
compared with the unfused ones (`lamina.backends.compare`, `--check`'s tolerances per dtype) and
jax.jit's with the unfused ones (rtol = atol = 1e-3, float32 matmuls in another order).

Then the same block placed data x model on a 2 x 4 mesh, written as
`samples/gpt2_block_parallel.mlir` writes its smaller one (separate q, k, v projections, whose
weights keep their columns split on model; W_proj and W_out split by rows; x, the masks and the
result split by sequences on data), with its weights cut from the same inputs, so its output is
checked against the one-device block's. Plans of `PLACED_PLANS` run on the SPMD interpreter
(every device in turn; fuse-elementwise there takes insert-collectives' target, h100-node, as
the pipeline builder gives it): per-device kernels and bytes moved, the collectives (count, kinds and the
bytes one device sends, `comm_bytes_per_device`) and the wall time of the whole simulated mesh.

`--quick` runs B=2, T=128, D=256, 16 heads, MLP 1024 (the targets are for the anchor sizes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import lamina  # noqa: E402
from bench_fusion import (  # noqa: E402
    attention_text,
    gpt2_inputs,
    gpt2_program,
    jax_fns,
    t,
    timings,
)
from lamina.backends.compare import compare  # noqa: E402
from lamina.backends.interface import find_entry  # noqa: E402
from lamina.ir.core.dtypes import tensor_dtype  # noqa: E402
from lamina.passes.pipeline import parse_pipeline_spec  # noqa: E402
from lamina.passes.registry import available_passes  # noqa: E402
from xdsl.dialects.builtin import ModuleOp  # noqa: E402

# (row name, pipeline) on one device; the first is the reference every other is checked against
PLANS: list[tuple[str, str]] = [
    ("unfused", ""),
    ("fused", "fuse-elementwise"),
    ("fused + attention", "fuse-attention,fuse-elementwise"),
]
COLLECT = "insert-collectives{target=h100-node}"
PLACED_PLANS: list[tuple[str, str]] = [
    ("unfused", f"propagate-sharding,{COLLECT}"),
    ("fused", f"propagate-sharding,fuse-elementwise,{COLLECT}"),
    ("fused + attention", f"propagate-sharding,fuse-attention,fuse-elementwise,{COLLECT}"),
]
MIB = 1024 * 1024
KERNELS_TARGET, KERNELS_GOAL, MIB_TARGET, MIB_GOAL = 11, 10, 872, 808
HEADS = 16                       # bench_fusion's jax function splits into 16 heads


def missing_pass(spec: str) -> str | None:
    """The first pass of `spec` that the registry does not know, if any."""
    known = available_passes()
    return next((s.name for s in parse_pipeline_spec(spec) if s.name not in known), None) \
        if spec else None


def cell(ts: list[float] | None) -> str:
    if not ts:
        return "n/a"
    return f"{statistics.median(ts) * 1e3:.0f} ({min(ts) * 1e3:.0f}-{max(ts) * 1e3:.0f})"


def same_outputs(module: ModuleOp, got: list[np.ndarray], want: list[np.ndarray]) -> str:
    """'bit-exact', 'within tolerance' or the name of the first output that differs."""
    if all(a.tobytes() == b.tobytes() for a, b in zip(got, want, strict=True)):
        return "bit-exact"
    types = find_entry(module, None).function_type.outputs.data
    for i, (a, b, ty) in enumerate(zip(got, want, types, strict=True)):
        if not compare(f"out{i}", tensor_dtype(ty), a, b).ok:
            return f"out{i} DIFFERS"
    return "within tolerance"


# ---- the placed block ---------------------------------------------------------------------------

def placed(shape: tuple[int, ...], dims: str) -> str:
    return t(shape)[:-1] + f", #lamina.place<@m, {dims}>>"


def gpt2_placed_program(b: int, n: int, d: int, h: int, f: int) -> str:
    """The block of `gpt2_program` on a 2 x 4 mesh, placed as `samples/gpt2_block_parallel.mlir`:
    the batch on data, heads and the MLP hidden on model; q, k, v projected separately."""
    dh = d // h
    X, XP, V, H4 = t((b, n, d)), placed((b, n, d), "[[data], [], []]"), t((d,)), t((b, n, f))
    COLS, ROWS = placed((d, d), "[[], [model]]"), placed((d, d), "[[model], []]")
    FC, OUT = placed((d, f), "[[], [model]]"), placed((f, d), "[[model], []]")
    X4 = t((b, n, h, dh))
    eps = "{axis = -1 : i64, eps = 1.0e-05 : f64}"
    qkv_args = "".join(f"%w_{p}: {COLS}, %b_{p}: {V}, " for p in "qkv")
    qkv = "".join(f"  %{p}0 = lamina.matmul %a, %w_{p} : ({X}, {COLS}) -> {X}\n"
                  f"  %{p} = lamina.add %{p}0, %b_{p} : ({X}, {V}) -> {X}\n"
                  f"  %{p}4 = lamina.reshape %{p} : ({X}) -> {X4}\n" for p in "qkv")
    return f"""
lamina.mesh @m [data = 2, model = 4]
func.func @main(%x: {XP}, %ln1_g: {V}, %ln1_b: {V}, {qkv_args}%w_proj: {ROWS}, %b_proj: {V},
                %ln2_g: {V}, %ln2_b: {V}, %w_fc: {FC}, %b_fc: {t((f,))}, %w_out: {OUT},
                %b_out: {V}, %m1: {XP}, %m2: {XP}) -> {XP} {{
  %a = lamina.layernorm %x scale %ln1_g bias %ln1_b {eps} : ({XP}, {V}, {V}) -> {X}
{qkv}\
{attention_text(b, n, d, h)}  %proj0 = lamina.matmul %merged, %w_proj : ({X}, {ROWS}) -> {X}
  %proj = lamina.add %proj0, %b_proj : ({X}, {V}) -> {X}
  %keep = lamina.constant dense<{1 / 0.9:e}> : tensor<f32>
  %proj_m = lamina.mul %proj, %m1 : ({X}, {XP}) -> {X}
  %proj_d = lamina.mul %proj_m, %keep : ({X}, tensor<f32>) -> {X}
  %h = lamina.add %x, %proj_d : ({XP}, {X}) -> {X}
  %mm = lamina.layernorm %h scale %ln2_g bias %ln2_b {eps} : ({X}, {V}, {V}) -> {X}
  %fc0 = lamina.matmul %mm, %w_fc : ({X}, {FC}) -> {H4}
  %fc = lamina.add %fc0, %b_fc : ({H4}, {t((f,))}) -> {H4}
  %act = lamina.gelu %fc {{approximate = "tanh"}} : {H4}
  %out0 = lamina.matmul %act, %w_out : ({H4}, {OUT}) -> {X}
  %out = lamina.add %out0, %b_out : ({X}, {V}) -> {X}
  %out_m = lamina.mul %out, %m2 : ({X}, {XP}) -> {X}
  %out_d = lamina.mul %out_m, %keep : ({X}, tensor<f32>) -> {X}
  %y = lamina.add %h, %out_d : ({X}, {X}) -> {XP}
  func.return %y : {XP}
}}"""


def placed_inputs(inputs: list[np.ndarray], d: int) -> list[np.ndarray]:
    """`gpt2_inputs`' arrays for the placed block: W_attn [D, 3D] and b_attn cut into q, k, v."""
    x, g1, b1, w_attn, b_attn, *rest = inputs
    qkv = [a for i in range(3) for a in (np.ascontiguousarray(w_attn[:, i * d:(i + 1) * d]),
                                         b_attn[i * d:(i + 1) * d].copy())]
    return [x, g1, b1, *qkv, *rest]


# ---- rows ---------------------------------------------------------------------------------------

def run_plans(text: str, inputs: list[np.ndarray], plans: list[tuple[str, str]],
              repeats: int) -> list[dict[str, Any]]:
    """Each plan: its module, stats, outputs checked against the first plan's, and timings."""
    rows: list[dict[str, Any]] = []
    for name, spec in plans:
        if (missing := missing_pass(spec)) is not None:
            rows.append({"name": name, "spec": spec, "missing": missing})
            continue
        module = lamina.parse(text, "gpt2.mlir")
        lamina.verify(module)
        if spec:
            lamina.apply(module, spec)
        res = lamina.run(module, inputs)
        outs = list(res.outputs.values())
        check = "reference" if not rows else same_outputs(module, outs, rows[0]["outs"])
        rows.append({"name": name, "spec": spec, "stats": res.stats, "outs": outs,
                     "check": check, "module": module})
    for row in rows:   # timed only after every plan's outputs were checked
        if "stats" in row:
            row["times"] = timings(lambda m=row["module"]: lamina.run(m, inputs), repeats)
    return rows


def targets(row: dict[str, Any], unfused_s: float) -> str:
    k, mib = row["stats"]["kernels"], row["stats"]["bytes_moved"] / MIB
    s = statistics.median(row["times"])

    def mark(ok: bool) -> str:
        return "yes" if ok else "no"

    return (f"<= {KERNELS_TARGET} kernels: {mark(k <= KERNELS_TARGET)}, <= {MIB_TARGET} MiB: "
            f"{mark(mib <= MIB_TARGET)}; goal {KERNELS_GOAL} / {MIB_GOAL}: "
            f"{mark(k <= KERNELS_GOAL and mib <= MIB_GOAL)}; faster than unfused: "
            f"{mark(s < unfused_s) if row['spec'] else '-'}")


def print_single(rows: list[dict[str, Any]], jax_s: list[float] | None, jax_check: str) -> None:
    cols = ["plan", "pipeline", "kernels", "bytes moved (MiB)", "bytes / unfused", "time (ms)",
            "speed-up vs unfused", "vs jax.jit", "outputs", "targets (issue 13)"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "|".join("---" for _ in cols) + "|")
    ref = rows[0]
    u_s, u_b = statistics.median(ref["times"]), ref["stats"]["bytes_moved"]
    jm = statistics.median(jax_s) if jax_s else None
    for row in rows:
        if "missing" in row:
            print(f"| {row['name']} | `{row['spec']}` | n/a: pass {row['missing']} not registered"
                  + " |" * (len(cols) - 2))
            continue
        s, b = statistics.median(row["times"]), row["stats"]["bytes_moved"]
        vs_jax = f"{jm / s:.2f}x" if jm else "n/a"
        print(f"| {row['name']} | `{row['spec'] or '-'}` | {row['stats']['kernels']} | "
              f"{b / MIB:.0f} | {b / u_b:.2f} | {cell(row['times'])} | {u_s / s:.2f}x | "
              f"{vs_jax} | {row['check']} | {targets(row, u_s)} |")
    vs_unfused = f"{u_s / jm:.2f}x" if jm else "n/a"
    print(f"| jax.jit | same math, inputs | - | - | - | {cell(jax_s)} | {vs_unfused} | 1.00x | "
          f"{jax_check} | - |")


def print_placed(rows: list[dict[str, Any]], one_device: list[np.ndarray]) -> None:
    cols = ["plan", "pipeline", "kernels / device", "bytes moved / device (MiB)",
            "collectives", "sent / device (MiB)", "mesh time (ms)", "outputs"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "|".join("---" for _ in cols) + "|")
    for row in rows:
        if "missing" in row:
            print(f"| {row['name']} | `{row['spec']}` | n/a: pass {row['missing']} not registered"
                  + " |" * (len(cols) - 2))
            continue
        st = row["stats"]
        kinds: dict[str, int] = {}
        for c in st.get("collectives", []):
            key = f"{c['kind']}[{','.join(c['axes'])}]"
            kinds[key] = kinds.get(key, 0) + 1
        coll = f"{len(st.get('collectives', []))}: " + ", ".join(
            f"{k} x{v}" for k, v in kinds.items())
        vs_one = same_outputs(row["module"], row["outs"], one_device)
        print(f"| {row['name']} | `{row['spec']}` | {st['kernels']} | "
              f"{st['bytes_moved'] / MIB:.0f} | {coll} | "
              f"{st.get('comm_bytes_per_device', 0) / MIB:.2f} | {cell(row['times'])} | "
              f"{row['check']} vs unfused, {vs_one} vs one device |")


def main() -> None:
    ap = argparse.ArgumentParser(description="GPT-2 block: kernels, bytes moved and time per plan")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="B=2 T=128 D=256 H=16 MLP 1024")
    args = ap.parse_args()
    b, n, d, f = (2, 128, 256, 1024) if args.quick else (2, 1024, 1024, 4096)
    inputs = gpt2_inputs(np.random.default_rng(0), b, n, d, f)
    print(f"GPT-2 block B={b} T={n} D={d} H={HEADS} MLP {f} f32; load average at start: "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())} on {os.cpu_count()} cores "
          f"(times: median (min-max) of {args.repeats} runs after a warm-up)")
    rows = run_plans(gpt2_program(b, n, d, HEADS, f), inputs, PLANS, args.repeats)
    prows = run_plans(gpt2_placed_program(b, n, d, HEADS, f), placed_inputs(inputs, d),
                      PLACED_PLANS, args.repeats)
    jx = jax_fns()   # after every interpreter run: XLA's pool keeps spinning after its calls
    jax_s, jax_check = None, "jax not installed"
    if jx is not None:
        fn = jx[0]["gpt2"]
        ok = np.allclose(np.asarray(fn(*inputs)), rows[0]["outs"][0], rtol=1e-3, atol=1e-3)
        jax_check = "within 1e-3" if ok else "DIFFERS"
        jax_s = timings(lambda: fn(*inputs), args.repeats)
        print(f"jax {jx[1].__version__}")
    print()
    print_single(rows, jax_s, jax_check)
    print()
    print("Placed data x model on a 2 x 4 mesh (SPMD interpreter, per device):")
    print()
    print_placed(prows, rows[0]["outs"])


if __name__ == "__main__":
    main()
