"""The GSPMD anchor of bench_scale.py: the GPT-2 sample's training step written in JAX by hand.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu \
        python benchmarks/scale_anchor.py --layers 4 --dim 768 --heads 12 --vocab 96 \
        --batch 32 --seq 64 [--rows baseline,accum4,bf16,zero1,zero2,zero3,combined] [--steps 3]

bench_scale.py runs it in a subprocess (the device count must be set before jax starts) and reads
the one JSON line it prints last: for each row, the collectives of XLA's optimized HLO (a collective
inside a while loop counted once per trip, the loop's known trip count), the bytes each device
sends for them (ring formulas, as benchmarks/bench_gspmd.py counts them), XLA's own buffer
assignment per device (`compiled.memory_analysis()`: arguments + outputs + temporaries - aliased;
jax's CPU devices report no live memory statistics, so this is XLA's plan, not a measurement) and
the median wall time of `--steps` steps after one warm-up.

The model is samples/gpt2_model.py's GPT-2 (pre-LayerNorm blocks, tanh-GeLU, LM head tied to the
token embedding, next-token cross-entropy, dropout off), its parameters named and shaped as the
torch module's (`wte.weight`, `blocks.0.attn.weight` [3D, D], ...), drawn N(0, 0.02) from seed 0.
The optimizer is optax.adamw (lr 1e-3, weight decay 0.01: torch's AdamW update). What each row
writes with shardings, the way a JAX user gets these rewrites from GSPMD:
  baseline  mesh data=8: the batch split over `data`, parameters and moments replicated
  accum4    the same with K=4 micro-batches: a `lax.scan` over the micro-batches accumulating f32
            gradients (each device's micro-batch its own rows: [B] -> [B/K, K] keeps them local)
  bf16      parameters cast to bf16 where the model reads them (f32 master weights and moments),
            LayerNorm, softmax and the loss in f32, as jax.experimental's / AMP's lists do
  zero1     moments split over `data` (NamedSharding on their first dimension the axis divides)
  zero2     also the gradients (a sharding constraint on them: XLA reduce-scatters)
  zero3     also the parameters (split in and out; XLA gathers them where the model uses them)
  combined  a 2x4 (data x model) mesh: accum4 + bf16 + zero3 over `data`, with the MLP weights
            split over `model` Megatron-style (fc by output rows, fc_proj by input columns)
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax  # pyright: ignore[reportMissingImports]  (extra `bench`, which `make` does not install)
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

LR, WD = 1e-3, 0.01
ROWS = ("baseline", "accum4", "bf16", "zero1", "zero2", "zero3", "combined")
_ITEM = {"f32": 4, "bf16": 2, "f16": 2, "f64": 8, "s32": 4, "u32": 4, "s64": 8, "pred": 1}
_KINDS = "all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute"


# ---- the model -------------------------------------------------------------------------------

def param_shapes(layers: int, dim: int, vocab: int, context: int) -> dict[str, tuple[int, ...]]:
    """The torch module's parameters (samples/gpt2_model.py), in its order."""
    shapes: dict[str, tuple[int, ...]] = {"wte.weight": (vocab, dim), "wpe.weight": (context, dim)}
    for i in range(layers):
        p = f"blocks.{i}"
        shapes |= {f"{p}.ln_1.weight": (dim,), f"{p}.ln_1.bias": (dim,),
                   f"{p}.attn.weight": (3 * dim, dim), f"{p}.attn.bias": (3 * dim,),
                   f"{p}.proj.weight": (dim, dim), f"{p}.proj.bias": (dim,),
                   f"{p}.ln_2.weight": (dim,), f"{p}.ln_2.bias": (dim,),
                   f"{p}.fc.weight": (4 * dim, dim), f"{p}.fc.bias": (4 * dim,),
                   f"{p}.fc_proj.weight": (dim, 4 * dim), f"{p}.fc_proj.bias": (dim,)}
    return shapes | {"ln_f.weight": (dim,), "ln_f.bias": (dim,)}


def init_params(shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    for name, shape in shapes.items():
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            out[name] = np.ones(shape, np.float32)
        elif name.endswith("bias"):
            out[name] = np.zeros(shape, np.float32)
        else:
            out[name] = (0.02 * rng.standard_normal(shape)).astype(np.float32)
    return out


def make_loss(layers: int, heads: int, low: Any) -> Callable[..., Any]:
    """The mean next-token cross-entropy; matmul operands in `low` (None: f32 everywhere)."""

    def cast(w: Any) -> Any:
        return w if low is None else w.astype(low)

    def ln(x: Any, g: Any, b: Any) -> Any:
        x = x.astype(jnp.float32)
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        y = (x - mu) / jnp.sqrt(var + 1e-5) * g + b
        return cast(y)

    def linear(x: Any, p: dict[str, Any], name: str) -> Any:
        return x @ cast(p[f"{name}.weight"]).T + cast(p[f"{name}.bias"])

    def loss_fn(p: dict[str, Any], idx: Any, targets: Any) -> Any:
        b, t = idx.shape
        d = p["wte.weight"].shape[1]
        causal = jnp.arange(t)[None, :] <= jnp.arange(t)[:, None]
        x = cast(p["wte.weight"][idx] + p["wpe.weight"][:t])
        for i in range(layers):
            pre = f"blocks.{i}"
            qkv = linear(ln(x, p[f"{pre}.ln_1.weight"], p[f"{pre}.ln_1.bias"]), p, f"{pre}.attn")
            q, k, v = (z.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3)
                       for z in jnp.split(qkv, 3, axis=-1))
            att = (q @ k.transpose(0, 1, 3, 2)).astype(jnp.float32) * (1.0 / math.sqrt(d // heads))
            att = cast(jax.nn.softmax(jnp.where(causal, att, -jnp.inf), axis=-1))
            y = (att @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
            x = x + linear(y, p, f"{pre}.proj")
            hid = jax.nn.gelu(linear(ln(x, p[f"{pre}.ln_2.weight"], p[f"{pre}.ln_2.bias"]), p,
                                     f"{pre}.fc"), approximate=True)
            x = x + linear(hid, p, f"{pre}.fc_proj")
        logits = (ln(x, p["ln_f.weight"], p["ln_f.bias"]) @ cast(p["wte.weight"]).T)
        logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
        picked = jnp.take_along_axis(logp, targets[:, 1:, None], axis=-1)
        return -picked.mean()

    return loss_fn


# ---- the rows: shardings and the step ---------------------------------------------------------

def split_spec(shape: tuple[int, ...], axis: str, size: int, taken: P | None = None) -> P:
    """`axis` on the first dimension it divides that `taken` leaves free (else `taken` as is)."""
    base: list[str | None] = [None] * len(shape)
    for i, a in enumerate(taken or ()):
        base[i] = a
    for i, n in enumerate(shape):
        if base[i] is None and n % size == 0:
            base[i] = axis
            return P(*base)
    return P(*base)


def megatron_spec(name: str, ndim: int) -> P:
    """The MLP weights split over `model` (fc by output rows, fc_proj by input columns)."""
    if name.endswith("fc.weight"):
        return P("model", None)
    if name.endswith("fc.bias"):
        return P("model")
    if name.endswith("fc_proj.weight"):
        return P(None, "model")
    return P(*([None] * ndim))


def build_row(row: str, shapes: dict[str, tuple[int, ...]], layers: int, heads: int,
              batch: int, seq: int) -> tuple[Any, list[Any], Mesh]:
    """The jitted step of `row` (module docstring) and its initial state, placed."""
    combined = row == "combined"
    devices = np.array(jax.devices()[:8])
    mesh = Mesh(devices.reshape(2, 4), ("data", "model")) if combined else \
        Mesh(devices, ("data",))
    nd = 2 if combined else 8
    k = 4 if row in ("accum4", "combined") else 1
    low = jnp.bfloat16 if row in ("bf16", "combined") else None
    zero = {"zero1": 1, "zero2": 2, "zero3": 3, "combined": 3}.get(row, 0)

    def base(name: str) -> P:
        return megatron_spec(name, len(shapes[name])) if combined else P(*([None] * len(shapes[name])))

    param_spec = {n: split_spec(s, "data", nd, base(n)) if zero >= 3 else base(n)
                  for n, s in shapes.items()}
    state_spec = {n: split_spec(s, "data", nd, base(n)) if zero >= 1 else base(n)
                  for n, s in shapes.items()}
    grad_spec = {n: split_spec(s, "data", nd, base(n)) if zero >= 2 else None
                 for n, s in shapes.items()}
    sh = lambda spec: NamedSharding(mesh, spec)  # noqa: E731
    loss_fn = make_loss(layers, heads, low)
    opt = optax.adamw(LR, weight_decay=WD)

    def grads(p: Any, idx: Any, tgt: Any) -> tuple[Any, Any]:
        if k == 1:
            return jax.value_and_grad(loss_fn)(p, idx, tgt)
        # [B] -> [B/K, K]: micro-batch j is row j of every K-row group, so each device's rows stay its own
        micro = lambda a: a.reshape(batch // k, k, seq).transpose(1, 0, 2)  # noqa: E731

        def body(carry: Any, xs: Any) -> tuple[Any, None]:
            total, acc = carry
            loss, g = jax.value_and_grad(loss_fn)(p, *xs)
            return (total + loss, jax.tree.map(jnp.add, acc, g)), None

        zeros = jax.tree.map(lambda a: jnp.zeros(a.shape, jnp.float32), p)
        (total, acc), _ = jax.lax.scan(body, (jnp.float32(0), zeros), (micro(idx), micro(tgt)))
        return total / k, jax.tree.map(lambda g: g / k, acc)

    def step(p: Any, st: Any, idx: Any, tgt: Any) -> tuple[Any, Any, Any]:
        loss, g = grads(p, idx, tgt)
        g = {n: v if grad_spec[n] is None else jax.lax.with_sharding_constraint(v, sh(grad_spec[n]))
             for n, v in g.items()}
        upd, st = opt.update(g, st, p)
        return optax.apply_updates(p, upd), st, loss

    params = {n: jax.device_put(a, sh(param_spec[n])) for n, a in init_params(shapes).items()}
    state = opt.init(params)
    state_sh = _state_shardings(state, state_spec, sh, mesh)
    state = jax.device_put(state, state_sh)
    data_sh = sh(P("data", None))
    p_sh = {n: sh(s) for n, s in param_spec.items()}
    jitted = jax.jit(step, in_shardings=(p_sh, state_sh, data_sh, data_sh),
                     out_shardings=(p_sh, state_sh, sh(P())), donate_argnums=(0, 1))
    return jitted, [params, state], mesh


def _state_shardings(state: Any, spec: dict[str, P], sh: Callable[[P], Any], mesh: Mesh) -> Any:
    """optax's state tree: the moment trees (dicts keyed like the parameters) placed by `spec`,
    the counters replicated."""

    def place(node: Any) -> Any:
        if isinstance(node, dict) and set(node) == set(spec):
            return {n: sh(spec[n]) for n in node}
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            return type(node)(*(place(x) for x in node))
        if isinstance(node, tuple | list):
            return type(node)(place(x) for x in node)
        return NamedSharding(mesh, P())

    return place(state)


# ---- what XLA compiled -----------------------------------------------------------------------

def _shape_bytes(text: str) -> list[int]:
    out = []
    for dt, dims in re.findall(r"\b(f32|bf16|f16|f64|s32|u32|s64|pred)\[([0-9,]*)\]", text):
        out.append((math.prod(int(d) for d in dims.split(",") if d) if dims else 1) * _ITEM[dt])
    return out


def _group_size(line: str, default: int) -> int:
    m = re.search(r"replica_groups=\[(\d+),(\d+)\]", line)
    if m:
        return int(m.group(2))
    m = re.search(r"replica_groups=\{\{([0-9,]+)\}", line)
    if m:
        return len(m.group(1).split(","))
    return default


def _computations(hlo: str) -> dict[str, list[str]]:
    comps: dict[str, list[str]] = {}
    name = None
    for line in hlo.splitlines():
        m = re.match(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
        if m and not line.startswith(" "):
            name = m.group(1)
            comps[name] = []
        elif name is not None:
            comps[name].append(line)
    return comps


def _trips(comps: dict[str, list[str]]) -> dict[str, int]:
    """How many times each computation runs per step: a while body its loop's known trip count,
    nested loops multiplied, everything else once."""
    trips = {n: 1 for n in comps}
    for _ in range(4):   # nested loops: a few rounds settle them
        for n, lines in comps.items():
            for line in lines:
                m = re.search(r"while\(.*body=%?([\w.\-]+)", line)
                if m:
                    t = re.search(r'known_trip_count":\{"n":"(\d+)"', line)
                    trips[m.group(1)] = trips[n] * (int(t.group(1)) if t else 1)
    return trips


def collectives(hlo: str, devices: int) -> list[dict[str, Any]]:
    comps = _computations(hlo)
    trips = _trips(comps)
    found = []
    for name, lines in comps.items():
        for line in lines:
            m = re.match(rf"\s*(?:ROOT\s+)?%?[\w.\-]+ = (.+?) ({_KINDS})(-start)?\((.*)$", line)
            if not m:
                continue
            kind = m.group(2)
            out_b = _shape_bytes(m.group(1))
            in_b = sum(_shape_bytes(m.group(4).split(")", 1)[0])) or sum(out_b)
            payload = (out_b[-1] if m.group(3) else sum(out_b)) if kind == "all-gather" else in_b
            n = _group_size(line, devices)
            sent = 2 * (n - 1) / n * payload if kind == "all-reduce" else (n - 1) / n * payload
            found.append({"kind": kind.replace("-", "_"), "count": trips.get(name, 1),
                          "sent": sent * trips.get(name, 1)})
    return found


def measure(row: str, args: argparse.Namespace) -> dict[str, Any]:
    shapes = param_shapes(args.layers, args.dim, args.vocab, args.seq)
    jitted, state, _mesh = build_row(row, shapes, args.layers, args.heads, args.batch, args.seq)
    rng = np.random.default_rng(1)
    tokens = jnp.asarray(rng.integers(0, args.vocab, (args.batch, args.seq)).astype(np.int32))
    compiled = jitted.lower(*state, tokens, tokens).compile()
    mem = compiled.memory_analysis()
    peak = (mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
            - mem.alias_size_in_bytes)
    found = collectives(compiled.as_text(), 8)
    params, st = state
    times, losses = [], []
    for i in range(args.steps + 1):
        t0 = time.perf_counter()
        params, st, loss = jitted(params, st, tokens, tokens)
        losses.append(float(loss))
        if i:
            times.append(time.perf_counter() - t0)
    return {"collectives": sum(c["count"] for c in found),
            "sent": sum(c["sent"] for c in found),
            "kinds": sorted({c["kind"] for c in found}),
            "peak": peak, "args": mem.argument_size_in_bytes, "temp": mem.temp_size_in_bytes,
            "step_s": statistics.median(times), "losses": losses}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=96)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rows", default=",".join(ROWS))
    args = ap.parse_args()
    if len(jax.devices()) < 8:
        raise SystemExit("needs 8 devices: XLA_FLAGS=--xla_force_host_platform_device_count=8")
    out = {row: measure(row, args) for row in args.rows.split(",")}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
