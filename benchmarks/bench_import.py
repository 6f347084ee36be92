"""Importing a GPT-2-small-sized model: how long `lamina-import`'s work takes at real size.

    .venv/bin/python benchmarks/bench_import.py                 # 12 layers, D = 768 (GPT-2 small)
    .venv/bin/python benchmarks/bench_import.py --layers 2 --dim 256 --vocab 1000   # quick
    .venv/bin/python benchmarks/bench_import.py --onnx          # also through torch.onnx.export

The model is `samples/gpt2_model.py`'s GPT-2 with its loss, with random weights (nothing is
downloaded), exported with torch.export on a [batch, tokens] input. The script reports, for the
exported program as is and after `run_decompositions()`: the import time (`import_exported`:
graph walk, op building, verification, and the weights copied into NumPy arrays), the op count,
the printed module's size, and the time to parse and verify that text again (what
`lamina-opt` / `lamina-run` pay on the file). With `--onnx` the same for the model exported to
ONNX (weights in an external file) and `lamina.frontends.onnx.import_model`. Target (issue 12):
importing GPT-2 small in under 30 s on the 2-core development machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import lamina
import torch
from lamina.ir.text.source import parse_text, verify
from xdsl.dialects.builtin import ModuleOp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples"))
from gpt2_model import GPT2Config, example_inputs, make_gpt2  # noqa: E402

TARGET_S = 30.0


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
    args = ap.parse_args(argv)
    for flag in ("layers", "dim", "vocab", "tokens", "batch"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag} must be at least 1, got {getattr(args, flag)}")
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
