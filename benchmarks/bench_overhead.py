"""Per-call overhead of `lamina.compile`'s executables against program size (issue 21).

    .venv/bin/python benchmarks/bench_overhead.py [--repeats 200] [--anchor-repeats 5]
        [--only mlp7,chain30,chain300,gpt2,step,W1,GPT2] [--skip-anchor]

Small programs, where a call's fixed cost is most of its time; the same math in every column:
  mlp7      the 7-op MLP block matmul, add, layernorm, gelu, matmul, add, add on f32[16,64] with
            64x64 weights (the residual added back), after `fuse-elementwise`
  chain30   a 30-op and a 300-op elementwise chain on f32[64,64] (x, y inputs): the 5-op cycle
  chain300  mul y, add x, tanh, exp, sub x repeated (finite for every input), `fuse-elementwise`
  gpt2      the pre-LN GPT-2 block of bench_fusion.py at B1 T32 D64 H4 (MLP 256; causal mask in
            the program, residual dropouts as 0/1 mask inputs), `fuse-attention,fuse-elementwise`
  step      its training step: the block's output against a target (mean squared error),
            `derive-backward{data=x,m1,m2,tgt},append-optimizer{kind=adamw lr=1e-3
            weight-decay=0.01}`, then the fusion passes; parameters, moments and step count
            donated (`donate=True`) and each call's outputs fed back as the next call's inputs
Columns: `lamina.compile(module, backend=...)` for numpy, compiled and jax, timing `exe(inputs)`
only, after a warm-up call (NumPy arrays for numpy/compiled; `jax.Array`s resident on the device
for jax, whose executable blocks until its results are ready); `jax.jit` of the same math in
jax.numpy (float32, x64 off; `jax.block_until_ready`; for the step `donate_argnums` on the
parameters, moments and step count, outputs fed back); torch eager (the same math in torch ops,
`torch.inference_mode`; the step with `torch.autograd.grad` and the AdamW update in place; on
`--torch-threads` threads, 1 by default: on a loaded 2-core machine torch's default 2-thread pool
had phases of ~100 ms per call of the 7-op MLP, against a steady ~60 us on one thread).
Every column's outputs (for the step: loss and new parameters after one step from the same
state) are checked against the numpy executable's (rtol = atol = 1e-3). Cells are medians of
`--repeats` calls in microseconds with their range (min-max); ratios are medians over jax.jit's
median (< 1: faster than jax.jit). A column whose framework is not installed prints '-'.

Anchor rows (skipped with `--skip-anchor`): W1 (layernorm, *g, +b, gelu, dropout 0.1 on
f32[8192,4096]) and the GPT-2 block at B2 T1024 D1024 H16 (bench_fusion.py's programs and
inputs, fused as there) on numpy and compiled: `exe(inputs)` against `lamina.run(module, inputs)`
(compile + one call, the old path), and the executable's own overhead per call = the call's wall
time minus the kernels' time the backend measures inside it (`stats["run_seconds"]`: the steps
and the donated write-back; outside it only the input checks and the `Run`). Target: overhead
within 2% of the kernels' time.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import lamina  # noqa: E402
from bench_fusion import (  # noqa: E402
    FUSE,
    gpt2_inputs,
    gpt2_program,
    seed_program,
    t,
    timings,
)
from lamina.backends.interface import arg_names, find_entry  # noqa: E402
from lamina.ir.buffers.updates import updates_of  # noqa: E402
from xdsl.dialects.builtin import ModuleOp  # noqa: E402

jax: Any = None    # optional: without jax the jax and jax.jit columns print '-'
jnp: Any = None
torch: Any = None  # optional: without torch the torch column prints '-'
try:
    import jax as _jax  # pyright: ignore[reportMissingImports]
    import jax.numpy as _jnp  # pyright: ignore[reportMissingImports]

    _jax.config.update("jax_platforms", "cpu")
    jax, jnp = _jax, _jnp
except ImportError:
    pass
try:
    import torch as _torch  # pyright: ignore[reportMissingImports]

    torch = _torch
except ImportError:
    pass

SMALL = ["mlp7", "chain30", "chain300", "gpt2", "step"]
ANCHOR = ["W1", "GPT2"]
BACKENDS = ["numpy", "compiled", "jax"]
REFS = ["jax.jit", "torch"]
ADAMW = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01}
STEP_PIPELINE = (f"derive-backward{{data=x,m1,m2,tgt}},append-optimizer{{kind=adamw "
                 f"lr={ADAMW['lr']} weight-decay={ADAMW['weight_decay']}}}")
GPT2_SMALL = (1, 32, 64, 4, 256)   # B, T, D, H, MLP width

# the sample tests/test_executable.py also calls (one program, read by both)
with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "samples",
                       "mlp_layernorm_block.mlir")) as _f:
    MLP7 = _f.read()

CYCLE = [("mul", "y"), ("add", "x"), ("tanh", None), ("exp", None), ("sub", "x")]


def chain_ops(n: int) -> list[tuple[str, str | None]]:
    return [CYCLE[i % len(CYCLE)] for i in range(n)]


def chain_text(n: int) -> str:
    T = t((64, 64))
    lines, prev = [], "%x"
    for i, (op, other) in enumerate(chain_ops(n)):
        operands = f"{prev}, %{other}" if other else prev
        lines.append(f"  %v{i} = lamina.{op} {operands} : {T}")
        prev = f"%v{i}"
    body = "\n".join(lines)
    return f"func.func @chain(%x: {T}, %y: {T}) -> {T} {{\n{body}\n  func.return {prev} : {T}\n}}\n"


def gpt2_loss_text(b: int, n: int, d: int, h: int, f: int) -> str:
    """bench_fusion's block with a mean squared error against %tgt as its (scalar) result."""
    X = t((b, n, d))
    text = gpt2_program(b, n, d, h, f)
    head, ret = f"%m2: {X}) -> {X} {{", f"  func.return %y : {X}"
    assert head in text and ret in text
    loss = (f"  %dy = lamina.sub %y, %tgt : {X}\n  %sq = lamina.mul %dy, %dy : {X}\n"
            f"  %loss = lamina.reduce_mean %sq {{axes = array<i64: 0, 1, 2>}} : ({X}) -> "
            "tensor<f32>\n  func.return %loss : tensor<f32>")
    return text.replace(head, f"%m2: {X}, %tgt: {X}) -> tensor<f32> {{").replace(ret, loss)


# ---- the same math in jax.numpy and torch ------------------------------------------------------

def _gelu(x: Any, tanh: Callable[[Any], Any]) -> Any:
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def _mean(lib: Any, x: Any) -> Any:
    return x.mean(-1, keepdims=True) if lib is jnp else x.mean(-1, keepdim=True)


def _layernorm(lib: Any, x: Any, g: Any = None, b: Any = None) -> Any:
    c = x - _mean(lib, x)
    y = c / (_mean(lib, c * c) + 1e-5) ** 0.5
    return y if g is None else y * g + b


def mlp7_fn(lib: Any) -> Callable[..., Any]:
    def f(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
        return _gelu(_layernorm(lib, x @ w1 + b1), lib.tanh) @ w2 + b2 + x
    return f


def chain_fn(lib: Any, n: int) -> Callable[..., Any]:
    ops = chain_ops(n)

    def f(x: Any, y: Any) -> Any:
        env, v = {"x": x, "y": y}, x
        for op, other in ops:
            if other is None:
                v = getattr(lib, op)(v)
            elif op == "mul":
                v = v * env[other]
            elif op == "add":
                v = v + env[other]
            else:
                v = v - env[other]
        return v
    return f


def gpt2_fn(lib: Any, h: int) -> Callable[..., Any]:
    """The block of `gpt2_program` (bench_fusion's jax function with `h` heads), in `lib`."""
    def f(x: Any, ln1_g: Any, ln1_b: Any, w_attn: Any, b_attn: Any, w_proj: Any, b_proj: Any,
          ln2_g: Any, ln2_b: Any, w_fc: Any, b_fc: Any, w_out: Any, b_out: Any, m1: Any,
          m2: Any) -> Any:
        b, n, d = x.shape
        dh = d // h
        qkv = _layernorm(lib, x, ln1_g, ln1_b) @ w_attn + b_attn
        q, k, v = (qkv[..., i * d:(i + 1) * d].reshape(b, n, h, dh) for i in range(3))
        s = lib.einsum("bqhd,bkhd->bhqk", q, k) * float(1 / np.sqrt(dh))
        causal = lib.arange(n)[:, None] >= lib.arange(n)[None, :]
        s = lib.where(causal, s, -1e9)
        s = s - s.max(-1, keepdims=True) if lib is jnp else s - s.amax(-1, keepdim=True)
        e = lib.exp(s)
        p = e / (e.sum(-1, keepdims=True) if lib is jnp else e.sum(-1, keepdim=True))
        ctx = lib.einsum("bhqk,bkhd->bqhd", p, v).reshape(b, n, d)
        keep = 1 / 0.9
        hh = x + (ctx @ w_proj + b_proj) * m1 * keep
        mlp = _gelu(_layernorm(lib, hh, ln2_g, ln2_b) @ w_fc + b_fc, lib.tanh) @ w_out + b_out
        return hh + mlp * m2 * keep
    return f


def gpt2_loss_fn(lib: Any, h: int) -> Callable[..., Any]:
    block = gpt2_fn(lib, h)

    def f(*args: Any) -> Any:
        d = block(*args[:-1]) - args[-1]
        return (d * d).mean()
    return f


def adamw(w: Any, g: Any, m: Any, v: Any, t1: Any, sqrt: Callable[[Any], Any]) -> tuple:
    """append-optimizer's update (its docstring) of one parameter at step number t1 = step + 1."""
    a = ADAMW
    w = w * (1.0 - a["lr"] * a["weight_decay"])
    m = a["beta1"] * m + (1.0 - a["beta1"]) * g
    v = a["beta2"] * v + (1.0 - a["beta2"]) * g * g
    w = w - a["lr"] / (1.0 - a["beta1"] ** t1) * m / (sqrt(v) / sqrt(1.0 - a["beta2"] ** t1)
                                                     + a["eps"])
    return w, m, v


# ---- cases -------------------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    what: str
    module: ModuleOp
    entry: str | None
    inputs: list[np.ndarray]                # in argument order
    jax_ref: Callable[[], Callable[[], Any]] | None = None      # builds a timed call
    torch_ref: Callable[[], Callable[[], Any]] | None = None
    donate: bool = False
    ops: int = 0                            # ops of the function before fusion
    n_params: int = 0                       # the step: results checked are these and the loss
    notes: list[str] = field(default_factory=list)


def n_ops(module: ModuleOp, entry: str | None) -> int:
    """Top-level ops of the function, its return not counted."""
    return len(list(find_entry(module, entry).body.block.ops)) - 1


def forward_case(name: str, what: str, text: str, pipeline: str, inputs: list[np.ndarray] | None,
                 fn: Callable[[Any], Callable[..., Any]]) -> Case:
    m = lamina.parse(text)
    ops = n_ops(m, None)
    lamina.apply(m, pipeline)
    xs = inputs if inputs is not None else list(lamina.inputs(m, seed=0).values())

    def jax_ref() -> Callable[[], Any]:
        assert jax is not None
        jf = jax.jit(fn(jnp))
        args = [jax.device_put(a) for a in xs]
        return lambda: jax.block_until_ready(jf(*args))

    def torch_ref() -> Callable[[], Any]:
        assert torch is not None
        tf = fn(torch)
        args = [torch.from_numpy(a) for a in xs]

        def call() -> Any:
            with torch.inference_mode():
                return tf(*args)
        return call

    return Case(name, what, m, None, xs, jax_ref, torch_ref, ops=ops)


def step_case() -> Case:
    b, n, d, h, f = GPT2_SMALL
    m = lamina.parse(gpt2_loss_text(b, n, d, h, f))
    entry = "main_step"
    lamina.apply(m, STEP_PIPELINE)
    ops = n_ops(m, entry)
    lamina.apply(m, FUSE)
    assert updates_of(find_entry(m, entry)), "append-optimizer writes lamina.updates"
    func = find_entry(m, entry)
    names = arg_names(func)
    gen = np.random.default_rng(0)
    block = [a.copy() for a in gpt2_inputs(gen, b, n, d, f)]   # no two inputs share memory
    by_name = dict(zip(["x", "ln1_g", "ln1_b", "w_attn", "b_attn", "w_proj", "b_proj", "ln2_g",
                        "ln2_b", "w_fc", "b_fc", "w_out", "b_out", "m1", "m2"], block, strict=True))
    by_name["tgt"] = gen.standard_normal((b, n, d), dtype=np.float32)
    params = [k for k in names if f"m_{k}" in names]
    for p in params:
        by_name[f"m_{p}"] = np.zeros_like(by_name[p])
        by_name[f"v_{p}"] = np.zeros_like(by_name[p])
    by_name["step"] = np.zeros((), np.float32)
    xs = [by_name[k] for k in names]
    data = ["x", "m1", "m2", "tgt"]
    block_names = ["x", "ln1_g", "ln1_b", "w_attn", "b_attn", "w_proj", "b_proj", "ln2_g",
                   "ln2_b", "w_fc", "b_fc", "w_out", "b_out", "m1", "m2", "tgt"]

    def loss_args(env: dict[str, Any]) -> list[Any]:
        return [env[k] for k in block_names]

    def jax_ref() -> Callable[[], Any]:
        assert jax is not None
        loss_fn = gpt2_loss_fn(jnp, h)

        def step(ps: list[Any], ms: list[Any], vs: list[Any], count: Any, dat: list[Any]) -> Any:
            def loss_of(ps_: list[Any]) -> Any:
                return loss_fn(*loss_args({**dict(zip(params, ps_, strict=True)),
                                           **dict(zip(data, dat, strict=True))}))
            loss, gs = jax.value_and_grad(loss_of)(ps)
            t1 = count + 1.0
            new = [adamw(w, g, mm, vv, t1, jnp.sqrt)
                   for w, g, mm, vv in zip(ps, gs, ms, vs, strict=True)]
            return ([u[0] for u in new], [u[1] for u in new], [u[2] for u in new], t1, loss)

        jf = jax.jit(step, donate_argnums=(0, 1, 2, 3))
        state: list[Any] = [[jax.device_put(by_name[p].copy()) for p in params],
                            [jax.device_put(by_name[f"m_{p}"].copy()) for p in params],
                            [jax.device_put(by_name[f"v_{p}"].copy()) for p in params],
                            jax.device_put(by_name["step"].copy())]
        dat = [jax.device_put(by_name[k]) for k in data]

        def call() -> Any:
            out = jax.block_until_ready(jf(*state, dat))
            state[:] = out[:4]
            return out
        return call

    def torch_ref() -> Callable[[], Any]:
        assert torch is not None
        loss_fn = gpt2_loss_fn(torch, h)
        ps = [torch.from_numpy(by_name[p].copy()).requires_grad_() for p in params]
        ms = [torch.from_numpy(by_name[f"m_{p}"].copy()) for p in params]
        vs = [torch.from_numpy(by_name[f"v_{p}"].copy()) for p in params]
        dat = {k: torch.from_numpy(by_name[k]) for k in data}
        count = [0.0]
        a = ADAMW

        def call() -> Any:
            loss = loss_fn(*loss_args({**dict(zip(params, ps, strict=True)), **dat}))
            gs = torch.autograd.grad(loss, ps)
            count[0] += 1.0
            t1 = count[0]
            with torch.no_grad():
                for w, g, mm, vv in zip(ps, gs, ms, vs, strict=True):
                    w.mul_(1.0 - a["lr"] * a["weight_decay"])
                    mm.mul_(a["beta1"]).add_(g, alpha=1.0 - a["beta1"])
                    vv.mul_(a["beta2"]).addcmul_(g, g, value=1.0 - a["beta2"])
                    den = vv.sqrt().div_((1.0 - a["beta2"] ** t1) ** 0.5).add_(a["eps"])
                    w.addcdiv_(mm, den, value=-a["lr"] / (1.0 - a["beta1"] ** t1))
            return [w.detach() for w in ps], loss.detach()
        return call

    c = Case("step", f"GPT-2 block B{b} T{n} D{d} H{h}: derived AdamW step, donated", m, entry,
             xs, jax_ref, torch_ref, donate=True, ops=ops, n_params=len(params))
    return c


def small_cases(only: set[str] | None) -> list[Case]:
    b, n, d, h, f = GPT2_SMALL
    out: list[Case] = []
    want = [k for k in SMALL if only is None or k in only]
    for k in want:
        if k == "mlp7":
            out.append(forward_case(k, "7-op MLP block f32[16,64], 64x64 weights", MLP7,
                                    "fuse-elementwise", None, mlp7_fn))
        elif k in ("chain30", "chain300"):
            ops = int(k[5:])
            out.append(forward_case(k, f"{ops}-op elementwise chain f32[64,64]",
                                    chain_text(ops), "fuse-elementwise", None,
                                    lambda lib, ops=ops: chain_fn(lib, ops)))
        elif k == "gpt2":
            xs = [a.copy() for a in gpt2_inputs(np.random.default_rng(0), b, n, d, f)]
            out.append(forward_case(k, f"GPT-2 block B{b} T{n} D{d} H{h}, fused",
                                    gpt2_program(b, n, d, h, f), FUSE, xs,
                                    lambda lib: gpt2_fn(lib, h)))
        elif k == "step":
            out.append(step_case())
    return out


# ---- timing ------------------------------------------------------------------------------------

def lamina_call(case: Case, backend: str) -> Callable[[], Any]:
    """A call of the case's executable on `backend`; donated outputs fed back as next inputs."""
    exe = lamina.compile(case.module, case.entry, backend=backend, donate=case.donate)
    if backend == "jax":
        assert jax is not None
        args: list[Any] = [jax.device_put(a.copy()) for a in case.inputs]
    else:
        args = [a.copy() for a in case.inputs]
    updates = updates_of(find_entry(case.module, case.entry)) if case.donate else {}
    names = exe.output_names

    def call() -> Any:
        run = exe(args)
        for r, a in updates.items():
            args[a] = run.outputs[names[r]]
        return run
    return call


def outputs_of(x: Any) -> list[np.ndarray]:
    """Every array of a result (a `Run`, a jax/torch array or nested tuples/lists of them)."""
    if isinstance(x, lamina.Run):
        return [np.asarray(v) for v in x.outputs.values()]
    if isinstance(x, list | tuple):
        return [a for v in x for a in outputs_of(v)]
    if torch is not None and isinstance(x, torch.Tensor):
        return [x.detach().numpy()]
    return [np.asarray(x)]


def check(case: Case, got: Any, want: list[np.ndarray]) -> bool:
    g = outputs_of(got)
    if case.donate:   # the step: the new parameters (its first results) and the loss (its last)
        k = case.n_params
        g, want = g[:k] + g[-1:], want[:k] + want[-1:]
    return len(g) == len(want) and all(
        np.allclose(a, b, rtol=1e-3, atol=1e-3) for a, b in zip(g, want, strict=True))


def measure(case: Case, repeats: int) -> tuple[dict[str, list[float] | str], str, list[str]]:
    """Times per column ('-' where the column cannot run, with why in the notes), the program's
    size, and which columns' outputs differed from numpy's."""
    run = lamina.compile(case.module, case.entry, backend="numpy")([a.copy() for a in case.inputs])
    want = [np.asarray(v) for v in run.outputs.values()]
    size = f"{case.ops} / {run.stats.get('kernels', '?')}"
    cols: dict[str, list[float] | str] = {}
    bad: list[str] = []
    makers: list[tuple[str, Callable[[], Callable[[], Any]] | None]] = [
        ("torch", case.torch_ref if torch is not None else None),
        ("numpy", lambda: lamina_call(case, "numpy")),
        ("compiled", lambda: lamina_call(case, "compiled")),
        ("jax", (lambda: lamina_call(case, "jax")) if jax is not None else None),
        ("jax.jit", case.jax_ref if jax is not None else None)]
    # torch first, jax last: thread pools (OpenMP's, Lamina's tile threads, XLA's) spin for a
    # while after their calls and slow the next framework's on a small machine
    for col, make in makers:
        if make is None:
            cols[col] = "-"
            continue
        try:
            call = make()
            first = call()
            if not check(case, first, want):
                bad.append(col)
            cols[col] = timings(call, repeats)
        except Exception as e:  # a column that fails prints '-' and says why
            cols[col] = "-"
            case.notes.append(f"{case.name} {col}: {type(e).__name__}: {str(e)[:200]}")
    return cols, size, bad


def us(ts: list[float] | str) -> str:
    if isinstance(ts, str):
        return ts
    return (f"{statistics.median(ts) * 1e6:.1f} ({min(ts) * 1e6:.1f}-{max(ts) * 1e6:.1f})")


def ratio(ts: list[float] | str, ref: list[float] | str) -> str:
    if isinstance(ts, str) or isinstance(ref, str):
        return "-"
    return f"{statistics.median(ts) / statistics.median(ref):.2f}"


def med(ts: list[float] | str) -> float | None:
    return None if isinstance(ts, str) else statistics.median(ts)


def small_table(cases: list[Case], repeats: int) -> dict[str, dict[str, list[float] | str]]:
    cols = ["row", "program", "ops / kernels", "numpy", "compiled", "jax", "jax.jit", "torch",
            "numpy / jit", "compiled / jit", "jax / jit", "torch / jit", "outputs"]
    results: dict[str, dict[str, list[float] | str]] = {}
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for case in cases:
        r, size, bad = measure(case, repeats)
        results[case.name] = r
        jit = r["jax.jit"]
        lines.append(f"| {case.name} | {case.what} | {size} | " + " | ".join(
            us(r[c]) for c in ("numpy", "compiled", "jax", "jax.jit", "torch")) + " | " +
            " | ".join(ratio(r[c], jit) for c in ("numpy", "compiled", "jax", "torch")) +
            f" | {'DIFFER: ' + ', '.join(bad) if bad else 'match numpy'} |")
    print("\n".join(lines))
    notes = [n for c in cases for n in c.notes]
    for n in dict.fromkeys(notes):
        print(f"\nnote: {n}")
    return results


def targets(results: dict[str, dict[str, list[float] | str]]) -> None:
    def line(what: str, ok: bool | None, detail: str) -> None:
        mark = "-" if ok is None else ("met" if ok else "NOT met")
        print(f"- {what}: {mark} ({detail})")

    print("\nTargets (issue 21):")
    mlp = results.get("mlp7")
    if mlp is not None:
        c, j = med(mlp["compiled"]), med(mlp["jax.jit"])
        line("compiled on the 7-op MLP <= jax.jit", None if c is None or j is None else c <= j,
             f"{us(mlp['compiled'])} vs {us(mlp['jax.jit'])} us")
        line("moonshot: compiled on the 7-op MLP <= 10 us", None if c is None else c <= 10e-6,
             f"{us(mlp['compiled'])} us")
    for name, r in results.items():
        j = med(r["jax.jit"])
        n, x = med(r["numpy"]), med(r["jax"])
        line(f"{name}: numpy <= 2x jax.jit", None if n is None or j is None else n <= 2 * j,
             f"{ratio(r['numpy'], r['jax.jit'])}x")
        line(f"{name}: jax backend within 1.2x of jax.jit",
             None if x is None or j is None else x <= 1.2 * j,
             f"{ratio(r['jax'], r['jax.jit'])}x")
    step = results.get("step")
    if step is not None:
        c, j = med(step["compiled"]), med(step["jax.jit"])
        line("GPT-2 D=64 step: compiled faster than jax.jit's step",
             None if c is None or j is None else c < j,
             f"{us(step['compiled'])} vs {us(step['jax.jit'])} us")


# ---- anchor rows -------------------------------------------------------------------------------

def anchor_table(only: set[str] | None, repeats: int) -> list[tuple[str, str, bool]]:
    gen = np.random.default_rng(0)
    work: list[tuple[str, str, str, list[np.ndarray]]] = []
    if only is None or "W1" in only:
        r, c = 8192, 4096
        work.append(("W1", f"LN+GeLU+Dropout f32[{r},{c}]", seed_program(r, c),
                     [gen.standard_normal((r, c), dtype=np.float32),
                      gen.standard_normal(c, dtype=np.float32),
                      gen.standard_normal(c, dtype=np.float32)]))
    if only is None or "GPT2" in only:
        work.append(("GPT2", "GPT-2 block B2 T1024 D1024 H16", gpt2_program(2, 1024, 1024, 16,
                                                                           4096),
                     gpt2_inputs(gen, 2, 1024, 1024, 4096)))
    if not work:
        return []
    cols = ["row", "program", "backend", "exe(x) (ms)", "kernels (ms)", "overhead (us)",
            "overhead / kernels", "lamina.run (ms)", "lamina.run - exe (ms)", "target <= 2%"]
    print("\n| " + " | ".join(cols) + " |")
    print("|" + "|".join("---" for _ in cols) + "|")
    met: list[tuple[str, str, bool]] = []
    for name, what, text, xs in work:
        m = lamina.parse(text)
        lamina.apply(m, FUSE)
        for backend in ("numpy", "compiled"):
            exe = lamina.compile(m, backend=backend)
            kern: list[float] = []

            def call(exe: lamina.Executable = exe, kern: list[float] = kern,
                     xs: list[np.ndarray] = xs) -> None:
                kern.append(exe(xs).stats["run_seconds"])

            wall = timings(call, repeats)
            kern = kern[1:]   # the warm-up call's
            over = [w - k for w, k in zip(wall, kern, strict=True)]
            old = timings(lambda m=m, backend=backend, xs=xs: lamina.run(m, xs, backend=backend),
                        repeats)
            frac = statistics.median(over) / statistics.median(kern)
            ok = frac <= 0.02
            met.append((name, backend, ok))

            def ms(ts: list[float]) -> str:
                return f"{statistics.median(ts) * 1e3:.1f} ({min(ts) * 1e3:.1f}-{max(ts) * 1e3:.1f})"
            print(f"| {name} | {what} | {backend} | {ms(wall)} | {ms(kern)} | "
                  f"{statistics.median(over) * 1e6:.0f} ({min(over) * 1e6:.0f}-"
                  f"{max(over) * 1e6:.0f}) | {frac * 100:.3f}% | {ms(old)} | "
                  f"{(statistics.median(old) - statistics.median(wall)) * 1e3:.1f} | "
                  f"{'met' if ok else 'NOT met'} |")
    return met


def machine() -> str:
    try:
        up = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        up = "uptime unavailable"
    versions = [f"python {platform.python_version()}", f"numpy {np.__version__}",
                f"lamina {lamina.__version__}",
                f"jax {jax.__version__}" if jax is not None else "jax not installed",
                f"torch {torch.__version__} ({torch.get_num_threads()} threads)"
                if torch is not None else "torch not installed"]
    return (f"{platform.machine()} {platform.processor() or platform.system()}, "
            f"{os.cpu_count()} cores; {up}\n" + ", ".join(versions))


def main() -> None:
    ap = argparse.ArgumentParser(description="per-call overhead of lamina.compile executables")
    ap.add_argument("--repeats", type=int, default=200, help="calls per small-row cell")
    ap.add_argument("--anchor-repeats", type=int, default=5, help="calls per anchor-row cell")
    ap.add_argument("--only", default=None,
                    help=f"comma-separated rows ({','.join(SMALL + ANCHOR)})")
    ap.add_argument("--skip-anchor", action="store_true")
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="torch's intra-op threads (0: torch's default)")
    args = ap.parse_args()
    if torch is not None and args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    only = set(args.only.split(",")) if args.only else None
    if only is not None and (unknown := only - set(SMALL) - set(ANCHOR)):
        ap.error(f"unknown rows: {', '.join(sorted(unknown))}")
    print(machine())
    cases = small_cases(only)
    if cases:
        print(f"small rows: median (min-max) of {args.repeats} calls after a warm-up, in us; "
              "ratios: median / jax.jit's median (< 1: faster)\n")
        results = small_table(cases, args.repeats)
        targets(results)
    if not args.skip_anchor:
        met = anchor_table(only, args.anchor_repeats)
        if met:
            print(f"\nanchor rows: median (min-max) of {args.anchor_repeats} calls; overhead = "
                  "exe(x) wall time - the kernels' time the backend measures inside the call")
            for name, backend, ok in met:
                print(f"- {name} on {backend}: executable overhead within 2% of the kernels: "
                      f"{'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
