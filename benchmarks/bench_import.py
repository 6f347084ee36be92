"""Importing a GPT-2-small-sized model: how long `lamina-import`'s work takes at real size.

    .venv/bin/python benchmarks/bench_import.py                 # 12 layers, D = 768 (GPT-2 small)
    .venv/bin/python benchmarks/bench_import.py --layers 2 --dim 256 --vocab 1000   # quick
    .venv/bin/python benchmarks/bench_import.py --onnx          # also through torch.onnx.export

The model is `samples/gpt2_model.py`'s GPT-2 with its loss, with random weights (nothing is
downloaded), exported with torch.export on a [batch, tokens] input. The script reports, for the
exported program as is and after `run_decompositions()`: the import time (`import_exported`:
graph walk, op building, verification, and the weights viewed as NumPy arrays), the op count,
the printed module's size, and the time to parse and verify that text again (what
`lamina-opt` / `lamina-run` pay on the file). With `--onnx` the same for the model exported to
ONNX (weights in an external file) and `lamina.frontends.onnx.import_model`. Target (issue 12):
importing GPT-2 small in under 30 s on the 2-core development machine.

    .venv/bin/python benchmarks/bench_import.py --llama         # a 1.1B-parameter Llama instead
    .venv/bin/python benchmarks/bench_import.py --llama --llama-layers 1 --llama-hidden 128 \
        --llama-vocab 500 --runs 1                              # quick

With `--llama` the model is instead `transformers`' LlamaForCausalLM in TinyLlama-1.1B's shape
(22 layers, hidden 2048, MLP 5632, 32 heads sharing 4 key/value heads, vocabulary 32000), f32
weights drawn in memory from a seeded normal (built on the meta device, then given CPU memory:
nothing is downloaded), exported with torch.export on `model(input_ids)` for a [1, 128] input
and imported with `import_exported`. Each of `--runs` runs is a fresh process (so one run's
memory is not another's), which reports the export and import times and its peak resident memory
less its resident memory before the model was built, as a multiple of the weights' bytes: the
model itself is 1x. Targets (issue 25): export + import under 60 s, peak at most 1.5x the
weights. The table shows the medians of the times and the largest peak.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import lamina
import torch
from lamina.ir.text.source import parse_text, verify
from xdsl.dialects.builtin import ModuleOp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples"))
from gpt2_model import GPT2Config, example_inputs, make_gpt2  # noqa: E402

if TYPE_CHECKING:    # transformers is imported only by the Llama row
    from transformers import LlamaConfig

TARGET_S = 30.0
LLAMA_TARGET_S = 60.0       # export + import (issue 25)
LLAMA_TARGET_MEMORY = 1.5   # peak resident memory over the weights' bytes


def _count(module: ModuleOp) -> int:
    return sum(1 for op in module.walk() if op.name.startswith("lamina."))


def _row(label: str, import_s: float, module: ModuleOp, weights: dict) -> str:
    text = lamina.to_text(module)
    t = time.perf_counter()
    verify(parse_text(text, "gpt2.mlir"))
    parse_s = time.perf_counter() - t
    params = sum(w.size for w in weights.values())
    ok = "ok" if import_s < TARGET_S else "OVER TARGET"
    return (f"| {label} | {import_s:.2f} s ({ok}) | {_count(module)} | {len(text) / 1e6:.2f} MB | "
            f"{parse_s:.2f} s | {params / 1e6:.1f} M |")


def default_heads(dim: int) -> int:
    """The head count for a model width when --heads is not given: GPT-2's head size of 64
    where it divides `dim` (768 -> 12, 256 -> 4), else the most heads up to 12 that divide it.
    A fixed default of 12 made `--dim 256` a torch error deep inside the model."""
    if dim % 64 == 0:
        return dim // 64
    return max(h for h in range(1, 13) if dim % h == 0)


def _rss_bytes() -> int:
    """The process's resident memory now (Linux's /proc), else its peak so far."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return _peak_rss_bytes()


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024   # KiB on Linux


def llama_config(layers: int, hidden: int, vocab: int) -> LlamaConfig:
    """TinyLlama-1.1B's shape at `layers` x `hidden`: head size 64, 8 query heads per key/value
    head, the MLP 11/4 of the width (5632 at 2048)."""
    import transformers

    heads = hidden // 64
    return transformers.LlamaConfig(
        hidden_size=hidden, intermediate_size=hidden * 11 // 4, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=max(1, heads // 8), vocab_size=vocab,
        max_position_embeddings=2048)


def random_llama(config: LlamaConfig) -> torch.nn.Module:
    """A LlamaForCausalLM with seeded random f32 weights, fast: built on the meta device (no
    memory, no init), given CPU memory, every matrix drawn from N(0, 0.02) in place and the
    norms set to 1; the rotary tables (buffers computed at construction) made again on the CPU."""
    import transformers

    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    model.to_empty(device="cpu")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=gen)
    model.model.rotary_emb = type(model.model.rotary_emb)(config)
    return model.eval()


class _Logits(torch.nn.Module):
    """`model(input_ids).logits`: the default call, one tensor out."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.m = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.m(input_ids).logits


def llama_run(layers: int, hidden: int, vocab: int, tokens: int) -> dict[str, float]:
    """One Llama measurement, in this process (meant to be a fresh one: see `--runs`)."""
    import transformers.models.llama.modeling_llama  # noqa: F401  (in the baseline, not the row)
    from lamina.frontends.torch import import_exported

    before = _rss_bytes()
    t = time.perf_counter()
    model = random_llama(llama_config(layers, hidden, vocab))
    made = time.perf_counter() - t
    ids = torch.randint(0, vocab, (1, tokens), generator=torch.Generator().manual_seed(1))
    t = time.perf_counter()
    ep = torch.export.export(_Logits(model), (ids,))
    export_s = time.perf_counter() - t
    t = time.perf_counter()
    module, weights = import_exported(ep)
    import_s = time.perf_counter() - t
    peak = _peak_rss_bytes()
    tensors = [*model.parameters(), *model.buffers()]
    in_torch = {t.data_ptr() for t in tensors}
    return {"params": sum(p.numel() for p in model.parameters()),
            "weight_bytes": sum(p.numel() * p.element_size() for p in tensors),
            "imported_bytes": sum(w.nbytes for w in weights.values()),
            "shared_bytes": sum(w.nbytes for w in weights.values() if w.ctypes.data in in_torch),
            "made_s": made, "export_s": export_s, "import_s": import_s,
            "peak_bytes": peak - before, "ops": _count(module)}


def _size(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _shared(run: dict[str, float]) -> str:
    if run["shared_bytes"] == run["imported_bytes"]:
        return "all of it"
    return f"{_size(run['shared_bytes'])} of it"


def _llama_runs(args: argparse.Namespace) -> list[dict[str, float]]:
    """`args.runs` measurements, each by this script in a fresh interpreter."""
    child = [sys.executable, str(Path(__file__).resolve()), "--llama-child", json.dumps(
        [args.llama_layers, args.llama_hidden, args.llama_vocab, args.tokens])]
    runs = []
    for _ in range(args.runs):
        done = subprocess.run(child, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit("bench_import.py: the Llama run failed:\n" + done.stderr[-4000:])
        runs.append(json.loads(done.stdout.splitlines()[-1]))
    return runs


def llama_report(args: argparse.Namespace) -> list[str]:
    """The Llama row: medians of the runs' times, the largest peak memory."""
    runs = _llama_runs(args)
    first = runs[0]

    def med(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    total = med("export_s") + med("import_s")
    memory = max(r["peak_bytes"] for r in runs) / first["weight_bytes"]
    ok_s = "ok" if total < LLAMA_TARGET_S else "OVER TARGET"
    ok_m = "ok" if memory <= LLAMA_TARGET_MEMORY else "OVER TARGET"
    cfg = llama_config(args.llama_layers, args.llama_hidden, args.llama_vocab)
    return [
        f"Llama: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, MLP "
        f"{cfg.intermediate_size}, {cfg.num_attention_heads} heads ({cfg.num_key_value_heads} "
        f"key/value), vocabulary {cfg.vocab_size}: {first['params']:,.0f} parameters, "
        f"{_size(first['weight_bytes'])} of f32 weights and buffers; input [1, {args.tokens}]; "
        f"{len(runs)} run(s), each a fresh process; random weights in {med('made_s'):.1f} s",
        "",
        "| program | torch.export | import | export + import | lamina ops | peak memory / weights |",
        "|---|---|---|---|---|---|",
        f"| torch.export (ATen) | {med('export_s'):.2f} s | {med('import_s'):.2f} s | "
        f"{total:.2f} s ({ok_s}) | {first['ops']} | {memory:.2f}x ({ok_m}) |",
        "",
        f"(targets: export + import < {LLAMA_TARGET_S:.0f} s, peak <= {LLAMA_TARGET_MEMORY}x the "
        f"weights; the imported arrays hold {_size(first['imported_bytes'])}, "
        f"{_shared(first)} in torch's tensors' memory)"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_import.py",
                                 description=(__doc__ or "").split("\n\n")[0])
    small = GPT2Config.small()
    ap.add_argument("--layers", type=int, default=small.layers)
    ap.add_argument("--dim", type=int, default=small.dim)
    ap.add_argument("--heads", type=int, default=None,
                    help="attention heads (must divide --dim; default: --dim / 64, 12 for GPT-2 "
                         "small)")
    ap.add_argument("--vocab", type=int, default=small.vocab)
    ap.add_argument("--tokens", type=int, default=128, help="sequence length of the example")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--onnx", action="store_true", help="also import through torch.onnx.export")
    ap.add_argument("--llama", action="store_true",
                    help="the 1.1B-parameter Llama row instead of GPT-2 (needs transformers)")
    ap.add_argument("--llama-layers", type=int, default=22)
    ap.add_argument("--llama-hidden", type=int, default=2048, help="a multiple of 64")
    ap.add_argument("--llama-vocab", type=int, default=32000)
    ap.add_argument("--runs", type=int, default=3, help="Llama runs, each a fresh process")
    ap.add_argument("--llama-child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.llama_child:
        print(json.dumps(llama_run(*json.loads(args.llama_child))))
        return 0
    for flag in ("layers", "dim", "vocab", "tokens", "batch", "llama_layers", "llama_vocab",
                 "runs"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(args, flag)}")
    if args.llama_hidden < 64 or args.llama_hidden % 64:
        ap.error(f"--llama-hidden must be a multiple of 64 (the head size), got "
                 f"{args.llama_hidden}")
    if args.llama:
        print("\n".join(llama_report(args)))
        return 0
    if args.heads is None:
        args.heads = default_heads(args.dim)
    elif args.heads < 1 or args.dim % args.heads:
        ap.error(f"--heads {args.heads} does not divide --dim {args.dim} into equal heads")
    cfg = GPT2Config(vocab=args.vocab, context=max(args.tokens, 16), dim=args.dim,
                     heads=args.heads, layers=args.layers)
    t = time.perf_counter()
    model = make_gpt2(cfg).eval()
    inputs = example_inputs(cfg, args.batch, args.tokens)
    made = time.perf_counter() - t
    t = time.perf_counter()
    ep = torch.export.export(model, inputs)
    export_s = time.perf_counter() - t
    print(f"GPT-2: {cfg.layers} layers, D = {cfg.dim}, {cfg.heads} heads, vocabulary {cfg.vocab}, "
          f"input [{args.batch}, {args.tokens}]; random weights in {made:.1f} s, "
          f"torch.export in {export_s:.1f} s (not Lamina's)")
    print("\n| program | import | lamina ops | printed | parse + verify | weights |")
    print("|---|---|---|---|---|---|")
    from lamina.frontends.torch import import_exported

    rows = [("torch.export (ATen)", ep)]
    t = time.perf_counter()
    rows.append(("after run_decompositions()", ep.run_decompositions()))
    decompose_s = time.perf_counter() - t
    for label, program in rows:
        t = time.perf_counter()
        module, weights = import_exported(program)
        print(_row(label, time.perf_counter() - t, module, weights), flush=True)
    if args.onnx:
        from lamina.frontends.onnx import import_model

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "gpt2.onnx"
            t = time.perf_counter()
            onnx_program = torch.onnx.export(model, inputs, dynamo=True, verbose=False,
                                             input_names=["idx", "targets"])
            assert onnx_program is not None
            onnx_program.save(str(path), external_data=True)
            onnx_s = time.perf_counter() - t
            t = time.perf_counter()
            module, weights = import_model(str(path))
            print(_row("ONNX file (torch.onnx.export)", time.perf_counter() - t, module,
                       weights))
        print(f"\n(run_decompositions took {decompose_s:.1f} s, torch.onnx.export + save "
              f"{onnx_s:.1f} s: torch's time, not the importer's)")
    else:
        print(f"\n(run_decompositions took {decompose_s:.1f} s: torch's time, not the importer's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
