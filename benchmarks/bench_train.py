"""Training-step time of the GPT-2 sample: Lamina's Trainer against torch and jax.jit (issue 24).

    .venv/bin/python benchmarks/bench_train.py [--repeats 5] [--quick] [--only compiled,jax.jit]
        [--models small,big] [--threads 1] [--curve-steps 1000] [--plot benchmarks/train_loss.png]

The model is `samples/gpt2_model.py`'s GPT-2 (dropout off, f32), trained with AdamW (lr 3e-3,
weight decay 0.01, betas 0.9/0.999, eps 1e-8) from the same initial weights (`make_gpt2`, seed 0)
on the same token batches by every runner:
  small  2 layers, D=64, 4 heads, vocab 96, B=4, T=16 (per-step overhead dominates)
  big    4 layers, D=768, 12 heads, vocab 96, B=2, T=256 (matmuls dominate); `--quick` shrinks it
         to 2 layers, D=256, 4 heads, T=128
Runners:
  lamina numpy / compiled / jax   `lamina.Trainer` on the imported model (torch.export ->
      `lamina.frontends.torch`), which derives the step (derive-backward, append-optimizer with the
      learning rate an input), applies `--pipeline` (default none: fuse-elementwise gives the
      same losses but, on the small model, no speed-up today; the README says more), compiles once
      with `lamina.compile(..., donate=True)`; a step is `Trainer.step()` (feed the batch and rate,
      one call, results fed back, the loss read as a float)
  torch eager       the nn.Module with torch.optim.AdamW (its default foreach implementation)
  torch.compile     the same with the module under torch.compile (inductor); any failure to
      compile on this machine prints "n/a" and the reason
  jax.jit           the same math written in jax: jax.jit(value_and_grad) plus AdamW, one jitted
      step with parameters and both moments donated. optax is not a dependency of Lamina, so
      AdamW is written out (torch's update: p *= 1 - lr wd; p -= lr m_hat / (sqrt(v_hat) + eps))
A step time is the mean of `--steps-small` / `--steps-big` consecutive steps after a warm-up;
the table shows the median over `--repeats` such runs (min-max beside it), tokens/s (B T / step
time), the speed against jax.jit (> 1: faster than jax.jit) and a check that the runner's first
three losses equal torch eager's (rtol 1e-3): every row trains the same model. Targets (issue 24,
for the compiled row, in its target column and again below the table): >= 1.5x jax.jit on the
small model (moonshot 3x), >= 1.0x on the big one (moonshot 1.2x); each marked met / not met.

`--threads` (default 1) is the thread count of every runner: torch's intra-op pool, OpenBLAS /
numba, Lamina's tile threads, XLA's Eigen pool (one thread turns it off). One thread is the
default because on a shared machine a pool that spins against other processes measures the load,
not the framework (torch eager on 2 threads of a loaded 2-core machine took 50x longer per step).

Then the loss curve: `--curve-steps` (1000; 200 with --quick) steps of the small model on a fixed
synthetic token stream (a noisy rule: the next token is (5 t + 3) mod V with probability 0.8,
else uniform; windows at random offsets from seed 0), Lamina's compiled backend against torch
eager, plotted to `--plot` (written by a full run, or a quick one given --plot).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def _threads(argv: list[str]) -> int:
    """`--threads` from the command line, read before numpy, torch or jax start their pools."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--threads", type=int, default=1)
    n = ap.parse_known_args(argv)[0].threads
    return max(1, n)


THREADS = _threads(sys.argv[1:])
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = str(THREADS)
os.environ.setdefault("JAX_PLATFORMS", "cpu")
if THREADS == 1:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen="
                               "false intra_op_parallelism_threads=1").strip()
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "samples"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from gpt2_model import GPT2Config, LossOnly, make_gpt2  # noqa: E402

LR, WD, BETA1, BETA2, EPS = 3e-3, 0.01, 0.9, 0.999, 1e-8
LAMINA = ("numpy", "compiled", "jax")
RUNNERS = ("numpy", "compiled", "jax", "torch", "torch.compile", "jax.jit")
TARGETS = {"small": (1.5, 3.0), "big": (1.0, 1.2)}   # compiled vs jax.jit: target, moonshot


@dataclass(frozen=True)
class Model:
    name: str
    cfg: GPT2Config
    batch: int
    seq: int

    @property
    def label(self) -> str:
        c = self.cfg
        return f"{c.layers}L D={c.dim} H={c.heads} B={self.batch} T={self.seq}"


def models(quick: bool) -> dict[str, Model]:
    small = Model("small", GPT2Config(vocab=96, context=16, dim=64, heads=4, layers=2,
                                      dropout=0.0), 4, 16)
    big = Model("big", GPT2Config(vocab=96, context=128, dim=256, heads=4, layers=2, dropout=0.0),
                2, 128) if quick else \
        Model("big", GPT2Config(vocab=96, context=256, dim=768, heads=12, layers=4, dropout=0.0),
              2, 256)
    return {"small": small, "big": big}



def random_batches(m: Model, n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, m.cfg.vocab, (n, m.batch, m.seq)
                                                ).astype(np.int64)


def stream_batches(m: Model, n: int, seed: int = 0) -> np.ndarray:
    """`n` batches of windows from the fixed synthetic stream (module docstring)."""
    rng = np.random.default_rng(seed)
    length = 1 << 16
    stream = np.empty(length, np.int64)
    stream[0] = 0
    noise = rng.random(length) >= 0.8
    other = rng.integers(0, m.cfg.vocab, length)
    for i in range(1, length):
        stream[i] = other[i] if noise[i] else (5 * stream[i - 1] + 3) % m.cfg.vocab
    starts = rng.integers(0, length - m.seq, (n, m.batch))
    return stream[starts[..., None] + np.arange(m.seq)]


# ---- runners: each returns a `step(i) -> loss` closure, set up from the same weights ----------

Step = Callable[[int], float]


def lamina_runner(m: Model, backend: str, batches: np.ndarray, pipeline: str) -> Step:
    import lamina
    from lamina.frontends.torch import import_exported

    toks = torch.tensor(batches[0])
    ep = torch.export.export(LossOnly(make_gpt2(m.cfg)).eval(), (toks, toks))
    module, weights = import_exported(ep)
    options: dict[str, Any] = {"threads": THREADS} if backend != "jax" else {}
    trainer = lamina.Trainer(module, {"idx": batches, "targets": batches}, init=weights,
                             optimizer="adamw", lr=LR, weight_decay=WD, beta1=BETA1, beta2=BETA2,
                             eps=EPS, backend=backend, pipeline=pipeline, **options)
    return lambda _i: trainer.step().loss


def torch_runner(m: Model, batches: np.ndarray, compiled: bool) -> Step:
    model = LossOnly(make_gpt2(m.cfg)).eval()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(BETA1, BETA2), eps=EPS,
                            weight_decay=WD)
    fn: Callable[..., torch.Tensor] = torch.compile(model) if compiled else model
    data = [torch.tensor(b) for b in batches]

    def step(i: int) -> float:
        x = data[i % len(data)]
        opt.zero_grad(set_to_none=True)
        loss = fn(x, x)
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


def jax_runner(m: Model, batches: np.ndarray) -> Step:
    """GPT-2 and AdamW written in jax (module docstring), one jitted step with donated state."""
    import jax
    import jax.numpy as jnp

    cfg = m.cfg
    h, d = cfg.heads, cfg.dim
    torch_params = {n: p.detach().numpy().copy()
                    for n, p in make_gpt2(cfg).named_parameters()}   # tied: wte.weight once
    params = {n: jnp.asarray(a) for n, a in torch_params.items()}

    def ln(x: Any, g: Any, b: Any) -> Any:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + 1e-5) * g + b

    def linear(x: Any, p: dict[str, Any], name: str) -> Any:
        return x @ p[f"{name}.weight"].T + p[f"{name}.bias"]

    def loss_fn(p: dict[str, Any], idx: Any, targets: Any) -> Any:
        b, t = idx.shape
        causal = jnp.arange(t)[None, :] <= jnp.arange(t)[:, None]
        x = p["wte.weight"][idx] + p["wpe.weight"][:t]
        for i in range(cfg.layers):
            pre = f"blocks.{i}"
            qkv = linear(ln(x, p[f"{pre}.ln_1.weight"], p[f"{pre}.ln_1.bias"]), p, f"{pre}.attn")
            q, k, v = (z.reshape(b, t, h, d // h).transpose(0, 2, 1, 3)
                       for z in jnp.split(qkv, 3, axis=-1))
            att = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / np.sqrt(d // h))
            att = jax.nn.softmax(jnp.where(causal, att, -jnp.inf), axis=-1)
            y = (att @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
            x = x + linear(y, p, f"{pre}.proj")
            hid = jax.nn.gelu(linear(ln(x, p[f"{pre}.ln_2.weight"], p[f"{pre}.ln_2.bias"]), p,
                                     f"{pre}.fc"), approximate=True)
            x = x + linear(hid, p, f"{pre}.fc_proj")
        logits = ln(x, p["ln_f.weight"], p["ln_f.bias"]) @ p["wte.weight"].T
        logp = jax.nn.log_softmax(logits[:, :-1], axis=-1)
        picked = jnp.take_along_axis(logp, targets[:, 1:, None], axis=-1)
        return -picked.mean()

    def train_step(p: Any, mom: Any, vel: Any, count: Any, idx: Any, targets: Any
                   ) -> tuple[Any, Any, Any, Any, Any]:
        loss, g = jax.value_and_grad(loss_fn)(p, idx, targets)
        count = count + 1
        bc1, bc2 = 1 - BETA1 ** count, 1 - BETA2 ** count
        mom = jax.tree.map(lambda mm, gg: BETA1 * mm + (1 - BETA1) * gg, mom, g)
        vel = jax.tree.map(lambda vv, gg: BETA2 * vv + (1 - BETA2) * gg * gg, vel, g)
        p = jax.tree.map(lambda pp, mm, vv: pp * (1 - LR * WD)
                         - LR * (mm / bc1) / (jnp.sqrt(vv / bc2) + EPS), p, mom, vel)
        return p, mom, vel, count, loss

    jitted = jax.jit(train_step, donate_argnums=(0, 1, 2, 3))
    state = [params, jax.tree.map(jnp.zeros_like, params), jax.tree.map(jnp.zeros_like, params),
             jnp.asarray(0.0, jnp.float32)]
    data = [jnp.asarray(b.astype(np.int32)) for b in batches]

    def step(i: int) -> float:
        x = data[i % len(data)]
        *new, loss = jitted(*state, x, x)
        state[:] = new
        return float(loss)

    return step


def make_runner(name: str, m: Model, batches: np.ndarray, pipeline: str) -> Step:
    if name in LAMINA:
        return lamina_runner(m, name, batches, pipeline)
    if name in ("torch", "torch.compile"):
        return torch_runner(m, batches, name == "torch.compile")
    return jax_runner(m, batches)


# ---- timing -------------------------------------------------------------------------------------

@dataclass
class Result:
    times: list[float]          # seconds per step, one per repeat
    losses: list[float]         # the first three steps' losses
    setup: float                # seconds from nothing to the first step done (compiles included)
    error: str = ""


def measure(name: str, m: Model, batches: np.ndarray, pipeline: str, repeats: int, steps: int
            ) -> Result:
    start = time.perf_counter()
    try:
        step = make_runner(name, m, batches, pipeline)
        losses = [step(i) for i in range(3)]
    except Exception as e:   # a runner that cannot run here (torch.compile without a toolchain)
        first = (str(e).strip().splitlines() or [""])[0][:80]
        return Result([], [], 0.0, f"{type(e).__name__}: {first}")
    setup = time.perf_counter() - start
    i, times = 3, []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            step(i)
            i += 1
        times.append((time.perf_counter() - t0) / steps)
    return Result(times, losses, setup)


def median(xs: list[float]) -> float:
    return float(np.median(xs))


def cell(r: Result, m: Model, jax_s: float | None, check: list[float] | None) -> list[str]:
    if r.error:
        return [f"n/a ({r.error})", "-", "-", "-"]
    s = median(r.times)
    ms = f"{s * 1e3:.1f} ({min(r.times) * 1e3:.1f}-{max(r.times) * 1e3:.1f})"
    tok = f"{m.batch * m.seq / s:,.0f}"
    vs = f"{jax_s / s:.2f}x" if jax_s else "n/a"
    if check is None:
        ok = "n/a"
    else:
        off = [i for i, (a, b) in enumerate(zip(r.losses, check, strict=True))
               if not np.isclose(a, b, rtol=1e-3)]
        ok = f"DIFFERS at step {off[0] + 1} ({r.losses[off[0]]:.4f} vs {check[off[0]]:.4f})" \
            if off else "same"
    return [ms, tok, vs, ok]


def target_text(model: str, ratio: float | None) -> str:
    goal, moon = TARGETS[model]
    if ratio is None:
        return f">= {goal}x: n/a"
    return (f">= {goal}x: {'met' if ratio >= goal else 'not met'}; moonshot {moon}x: "
            f"{'met' if ratio >= moon else 'not met'}")


def table(results: dict[str, dict[str, Result]], ms: dict[str, Model], runners: list[str]
          ) -> None:
    names = list(results)
    head = ["runner"]
    for n in names:
        head += [f"{n}: ms/step", f"{n}: tokens/s", f"{n}: vs jax.jit", f"{n}: losses",
                 f"{n}: target (issue 24)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    ratios: dict[str, float | None] = {n: None for n in names}
    for runner in runners:
        row = [f"lamina {runner}" if runner in LAMINA else runner]
        for n in names:
            res = results[n]
            jx = res.get("jax.jit")
            jax_s = median(jx.times) if jx is not None and not jx.error else None
            ref = res.get("torch")
            check = ref.losses if ref is not None and not ref.error else None
            r = res[runner]
            row += cell(r, ms[n], jax_s, check)
            if runner == "compiled" and not r.error and jax_s:
                ratios[n] = jax_s / median(r.times)
            row.append(target_text(n, ratios[n]) if runner == "compiled" else "-")
        print("| " + " | ".join(row) + " |")
    print()
    for n in names:
        if "compiled" in runners:
            print(f"target ({n}, lamina compiled vs jax.jit): {target_text(n, ratios[n])}")


# ---- the loss curve -----------------------------------------------------------------------------

def curve(m: Model, steps: int, pipeline: str, plot: str | None) -> None:
    batches = stream_batches(m, steps)
    lam = make_runner("compiled", m, batches, pipeline)
    ref = make_runner("torch", m, batches, pipeline)
    got = np.array([lam(i) for i in range(steps)])
    want = np.array([ref(i) for i in range(steps)])
    rel = np.abs(got - want) / np.abs(want)
    print(f"loss curve, {m.label}, {steps} steps on the synthetic stream: lamina compiled "
          f"{got[0]:.4f} -> {got[-1]:.4f}, torch {want[0]:.4f} -> {want[-1]:.4f}; relative "
          f"difference max {rel.max():.2e} (step {int(rel.argmax()) + 1}), at the end "
          f"{rel[-1]:.2e}")
    if plot is None:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=80)
    x = np.arange(1, steps + 1)
    ax.plot(x, want, color="tab:orange", linewidth=2.5, label="torch eager + AdamW")
    ax.plot(x, got, color="tab:blue", linewidth=1.0, label="Lamina compiled (Trainer)")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_yscale("log")
    ax.set_title(f"GPT-2 sample {m.label}, synthetic stream", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plot)
    print(f"wrote {plot} ({os.path.getsize(plot) // 1024} KiB)")


def main() -> None:
    ap = argparse.ArgumentParser(description="GPT-2 training-step time: Lamina vs torch vs jax.jit")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="the big model at 2L D=256 T=128")
    ap.add_argument("--only", default="", help=f"comma-separated runners of {', '.join(RUNNERS)}"
                    " and 'curve' (default: all)")
    ap.add_argument("--models", default="small,big")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--pipeline", default="")
    ap.add_argument("--steps-small", type=int, default=20)
    ap.add_argument("--steps-big", type=int, default=2)
    ap.add_argument("--curve-steps", type=int)
    ap.add_argument("--plot")
    args = ap.parse_args()
    chosen = [s for s in args.only.split(",") if s] or [*RUNNERS, "curve"]
    bad = [s for s in chosen if s not in (*RUNNERS, "curve")]
    wanted = [s for s in args.models.split(",") if s]
    if bad or any(w not in ("small", "big") for w in wanted) or args.repeats < 1:
        ap.error(f"unknown runner or model: {', '.join(bad + wanted)} (runners: "
                 f"{', '.join(RUNNERS)}, curve; models: small, big; --repeats >= 1)")
    ms = {k: v for k, v in models(args.quick).items() if k in wanted}
    torch.set_num_threads(THREADS)
    runners = [r for r in RUNNERS if r in chosen]
    # jax.jit is timed last per model: XLA's pool keeps spinning after its calls
    order = [r for r in runners if r != "jax.jit"] + [r for r in runners if r == "jax.jit"]
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())} on "
          f"{os.cpu_count()} cores; {THREADS} thread(s) per runner; pipeline "
          f"'{args.pipeline}'; medians of {args.repeats} runs")
    results: dict[str, dict[str, Result]] = {}
    for name, m in ms.items():
        steps = args.steps_small if name == "small" else args.steps_big
        batches = random_batches(m, 8)
        print(f"{name}: {m.label}, vocab {m.cfg.vocab}, {steps} steps per run", flush=True)
        results[name] = {}
        for r in order:
            res = measure(r, m, batches, args.pipeline, args.repeats, steps)
            results[name][r] = res
            what = res.error or f"{median(res.times) * 1e3:.1f} ms/step (setup {res.setup:.1f} s)"
            print(f"  {r}: {what}", flush=True)
    print()
    if results and runners:
        table(results, ms, runners)
    if "curve" in chosen:
        steps = args.curve_steps or (200 if args.quick else 1000)
        plot = args.plot or (None if args.quick else os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "train_loss.png"))
        print()
        curve(models(args.quick)["small"], steps, args.pipeline, plot)


if __name__ == "__main__":
    main()
