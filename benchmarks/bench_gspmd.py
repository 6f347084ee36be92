"""Lamina's collectives against XLA's SPMD partitioner (GSPMD) on the two MLP samples.

    python benchmarks/bench_gspmd.py

Programs: h = gelu(x @ W1 + b1) @ W2 + b2, x f32[2048,1024], W1 f32[1024,4096], W2 f32[4096,1024],
on a 2 x 4 mesh ('data', 'model'), placed as in samples/mlp_megatron.mlir (x rows on data, W1
columns on model, result rows on data) and samples/mlp_contracting.mlir (x columns and W1 rows on
model, result replicated).

GSPMD: jax in a subprocess with XLA_FLAGS=--xla_force_host_platform_device_count=8, jit with
NamedSharding in/out shardings, `compiled.as_text()`; every all-reduce / all-gather /
reduce-scatter / all-to-all in the optimized HLO is counted with its per-device shape -> payload
bytes, and ring bytes sent per device: 2(n-1)/n * B for all-reduce, (n-1)/n * B for reduce-scatter
(B its input) and all-gather (B its output), (n-1)/n * B for all-to-all. Gelu work per device is
the element count of the tensor the gelu (tanh / erf) fusion runs on.
Lamina: `propagate-sharding,insert-collectives{target=h100-node}` on the sample, the inserted
collectives, and the SPMD run's stats (`collectives`, `comm_bytes_per_device`); gelu elements per
device from the gelu op's local shape. The jax column is skipped with a message if jax is missing.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 1 << 20
SAMPLES = {"megatron": "samples/mlp_megatron.mlir", "contracting": "samples/mlp_contracting.mlir"}

JAX_SCRIPT = r'''
import json, re, sys
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import numpy as np
mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "model"))
S = lambda *spec: NamedSharding(mesh, P(*spec))
cases = {
    "megatron": ((S("data", None), S(None, "model"), S(), S(), S()), S("data", None)),
    "contracting": ((S(None, "model"), S("model", None), S(), S(), S()), S()),
}
def mlp(x, w1, b1, w2, b2):
    return jax.nn.gelu(x @ w1 + b1) @ w2 + b2
args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in
        ((2048, 1024), (1024, 4096), (4096,), (4096, 1024), (1024,))]
out = {}
for name, (ins, o) in cases.items():
    c = jax.jit(mlp, in_shardings=ins, out_shardings=o).lower(*args).compile()
    out[name] = c.as_text()
print(json.dumps(out))
'''

_KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")
_ITEM = {"f32": 4, "bf16": 2, "f16": 2, "f64": 8, "s32": 4, "u32": 4, "pred": 1}


def _shape_bytes(text: str) -> list[int]:
    """Bytes of each array shape like f32[1024,1024]{1,0} in `text`."""
    out = []
    for dt, dims in re.findall(r"\b(f32|bf16|f16|f64|s32|u32|pred)\[([0-9,]*)\]", text):
        n = math.prod(int(d) for d in dims.split(",") if d) if dims else 1
        out.append(n * _ITEM[dt])
    return out


def _group_size(line: str) -> int:
    m = re.search(r"replica_groups=\[(\d+),(\d+)\]", line)   # iota form [groups,size]
    if m:
        return int(m.group(2))
    m = re.search(r"replica_groups=mesh\[([^\]]*)\].*?\{([^}]*)\}", line)  # named-mesh form
    if m:
        sizes = dict(re.findall(r"'(\w+)'=(\d+)", m.group(1)))
        return math.prod(int(sizes[a]) for a in re.findall(r"'(\w+)'", m.group(2)))
    m = re.search(r"replica_groups=\{\{([0-9,]+)\}", line)
    if m:
        return len(m.group(1).split(","))
    return 8


def hlo_collectives(hlo: str) -> list[dict]:
    """Every collective of the optimized HLO's entry computation (start ops of async pairs)."""
    found = []
    for line in hlo.splitlines():
        m = re.match(r"\s*(?:ROOT\s+)?%?[\w.\-]+ = (.+?) (all-reduce|all-gather|reduce-scatter|"
                     r"all-to-all)(-start)?\((.*)$", line)
        if not m:
            continue
        kind = m.group(2)
        out_b = sum(_shape_bytes(m.group(1)))
        operand_text = m.group(4).split(")", 1)[0]
        in_b = sum(_shape_bytes(operand_text)) or out_b
        if m.group(3) and kind == "all-gather":
            out_b = _shape_bytes(m.group(1))[-1]   # async: (operand, result) tuple
        n = _group_size(line)
        payload = out_b if kind == "all-gather" else in_b
        if kind == "all-reduce":
            sent = 2 * (n - 1) / n * payload
        else:
            sent = (n - 1) / n * payload
        found.append({"kind": kind.replace("-", "_"), "devices": n, "payload": payload,
                      "sent": sent, "shape": m.group(1).strip()})
    return found


def hlo_gelu_elements(hlo: str) -> int | None:
    """Elements of the largest tensor a tanh/erf (gelu) is computed on in the HLO."""
    best = None
    for line in hlo.splitlines():
        m = re.match(r"\s*(?:ROOT\s+)?%?[\w.\-]+ = (f32)\[([0-9,]+)\]\S* (tanh|erf)\(", line)
        if m:
            n = math.prod(int(d) for d in m.group(2).split(","))
            best = n if best is None else max(best, n)
    return best


def run_jax() -> dict[str, str] | str:
    try:
        import jax  # noqa: F401  # pyright: ignore[reportMissingImports] (optional [bench] extra)
    except ImportError:
        return "jax is not installed (pip install 'lamina[bench]'): GSPMD column skipped"
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
               JAX_PLATFORMS="cpu")
    p = subprocess.run([sys.executable, "-c", JAX_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0:
        return "jax failed: " + (p.stderr.strip().splitlines() or ["?"])[-1]
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_lamina(path: str) -> dict:
    from lamina.analysis.placed import placed_mesh
    from lamina.backends.arrays import block
    from lamina.backends.interface import find_entry
    from lamina.backends.numpy.spmd import run_spmd
    from lamina.ir.mesh.collectives import PlacementOp
    from lamina.ir.mesh.placement import spec_or_replicated
    from lamina.ir.ops.opbase import LaminaOp, tensor_info
    from lamina.ir.text.source import load, make_context
    from lamina.passes.pipeline import build_pipeline, run_pipeline
    from xdsl.dialects.builtin import TensorType

    ctx = make_context()
    module = load(os.path.join(ROOT, path), ctx)
    run_pipeline(ctx, module, build_pipeline("propagate-sharding,insert-collectives"
                                             "{target=h100-node}"))
    func = find_entry(module, None)
    inserted = [f"{op.short}[{','.join(op.axis_names())}]" for op in func.walk()
                if isinstance(op, PlacementOp)]
    mesh_op = placed_mesh(func)
    assert mesh_op is not None, "propagate-sharding left nothing placed on a mesh"
    mesh = mesh_op.mesh
    gelu = 0
    for op in func.walk():
        if isinstance(op, LaminaOp) and op.info.name == "gelu":
            r = op.results[0]
            gelu = math.prod(block(mesh, spec_or_replicated(r.type), tensor_info(r.type).shape,
                                   0)[1])
    rng = np.random.default_rng(0)
    ins = []
    for t in func.function_type.inputs.data:
        assert isinstance(t, TensorType)
        ins.append(rng.standard_normal(tuple(t.get_shape())).astype(np.float32))
    stats = run_spmd(func, ins).stats
    return {"inserted": inserted, "collectives": stats["collectives"],
            "comm": stats["comm_bytes_per_device"], "gelu": gelu}


def _fmt_mib(b: float) -> str:
    return f"{b / MIB:.1f} MiB"


def main() -> int:
    sys.path.insert(0, os.path.dirname(ROOT))
    jax_out = run_jax()
    rows: list[tuple[str, str, str]] = []
    for name, path in SAMPLES.items():
        lam = run_lamina(path)
        lam_colls = ", ".join(f"{c['kind']}[{','.join(c['axes'])}] {c['algorithm']} "
                              f"{_fmt_mib(c['payload_bytes'])}"
                              for c in lam["collectives"])
        rows.append((f"{name}: collectives", lam_colls, ""))
        rows.append((f"{name}: sent per device", _fmt_mib(lam["comm"]), ""))
        rows.append((f"{name}: gelu elements per device", f"{lam['gelu']:,}", ""))
        if isinstance(jax_out, dict):
            hlo = jax_out[name]
            cs = hlo_collectives(hlo)
            rows[-3] = (rows[-3][0], rows[-3][1], ", ".join(
                f"{c['kind']}(n={c['devices']}) {_fmt_mib(c['payload'])}" for c in cs) or "none")
            rows[-2] = (rows[-2][0], rows[-2][1], _fmt_mib(sum(c["sent"] for c in cs)))
            g = hlo_gelu_elements(hlo)
            rows[-1] = (rows[-1][0], rows[-1][1], f"{g:,}" if g is not None else "?")
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows + [("", "Lamina (h100-node)", "")])
    print(f"{'':{w0}}  {'Lamina (h100-node)':{w1}}  XLA GSPMD (jax, 8 host devices)")
    for a, b, c in rows:
        print(f"{a:{w0}}  {b:{w1}}  {c}")
    if not isinstance(jax_out, dict):
        print(jax_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
