"""`lamina-import`: a PyTorch or ONNX model as a Lamina program and its weights.

    lamina-import torch MODULE:FACTORY --args SPEC -o OUT.mlir --weights OUT.npz [--train]
                        [--decompose] [--seed N]
    lamina-import onnx MODEL.onnx -o OUT.mlir --weights OUT.npz

`torch`: imports MODULE (from the current directory or the path; or a file, `path/to/model.py:
FACTORY`, loaded as a module by its path), calls FACTORY() for an
`nn.Module`, exports it with `torch.export.export` on example inputs of the shapes and dtypes in
SPEC (`2x8xi64,2x8xi64`: MLIR's shape syntax, comma separated; values are zeros, export traces
shapes), in eval mode (`--train`: train mode, dropout kept with seeds from `--seed`), optionally
after `run_decompositions()` (`--decompose`), and imports the exported program. Importing the
module runs its code: that is torch.export's contract, and the only user code Lamina executes.
`onnx`: reads MODEL.onnx (and its external weight file) with onnx's protobuf loader.

The program (one function: inputs, then weights named after their parameters / initializers) is
written to OUT.mlir ('-': stdout) and the weights, by argument name, to `--weights` as an .npz
(what `lamina-run --inputs` reads, beside a file of the model's inputs: `--inputs in.npz --inputs
w.npz`). A model with weights needs `--weights`: they stay arguments of the function (training
updates them), so a program written without them could not be run with the model's values, and
the import is refused rather than drop them. Both files are written only when the whole import
succeeded. Anything the importer cannot map exactly is one diagnostic
naming the node, its op type or ATen target and what is missing, and exit code 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import lamina
import numpy as np
from lamina.cli.entry import guarded
from lamina.cli.outputs import save_npz_atomic, write_text_atomic
from lamina.ir.core.diagnostics import LaminaError, UsageError
from xdsl.dialects.builtin import ModuleOp


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # exit 1, one line, like every other error
        raise UsageError(self.prog, message)


def arg_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="lamina-import", description="Import a PyTorch or ONNX model as a Lamina "
                "program.")
    p.add_argument("--version", action="version", version=f"lamina-import {lamina.__version__}")
    sub = p.add_subparsers(dest="frontend", required=True, parser_class=_Parser)
    t = sub.add_parser("torch", help="a torch.export of MODULE:FACTORY()")
    t.add_argument("factory", metavar="MODULE:FACTORY",
                   help="a function returning the nn.Module, in a module or a file "
                        "(path/to/model.py:FACTORY); imported: its code runs")
    t.add_argument("--args", required=True, metavar="SPEC",
                   help="example input shapes and dtypes, e.g. 2x8xi64,2x8xi64")
    t.add_argument("--train", action="store_true", help="export in train mode (dropout kept)")
    t.add_argument("--decompose", action="store_true",
                   help="import the program after run_decompositions() (core ATen)")
    t.add_argument("--seed", type=int, default=0,
                   help="dropout seed of the first dropout (the next get seed + 1, ...)")
    o = sub.add_parser("onnx", help="an ONNX model file")
    o.add_argument("model", metavar="MODEL.onnx")
    for s in (t, o):
        s.add_argument("-o", "--output", default="-", metavar="OUT.mlir",
                       help="where the program goes ('-': stdout, the default)")
        s.add_argument("--weights", default=None, metavar="OUT.npz",
                       help="write the weights by argument name to this .npz (required when "
                            "the model has weights)")
    return p


def _needs(package: str, extra: str) -> LaminaError:
    return LaminaError(f"lamina-import {extra} needs the Python package '{package}', which is "
                       f"not installed: pip install 'lamina[{extra}]'")


def _import_torch(args: argparse.Namespace) -> tuple[ModuleOp, dict[str, np.ndarray]]:
    try:
        from lamina.frontends import torch as frontend
    except ModuleNotFoundError as e:
        raise _needs(e.name or "torch", "torch") from None
    spec = frontend.parse_args_spec(args.args)
    ep = frontend.export_factory(args.factory, spec, train=args.train, decompose=args.decompose)
    return frontend.import_exported(ep, seed=args.seed)


def _import_onnx(args: argparse.Namespace) -> tuple[ModuleOp, dict[str, np.ndarray]]:
    try:
        from lamina.frontends import onnx as frontend
    except ModuleNotFoundError as e:
        raise _needs(e.name or "onnx", "onnx") from None
    return frontend.import_model(args.model)


def run(argv: Sequence[str] | None = None) -> int:
    args = arg_parser().parse_args(argv)
    module, weights = _import_torch(args) if args.frontend == "torch" else _import_onnx(args)
    if weights and not args.weights:
        raise UsageError("lamina-import", f"the model has {len(weights)} weight "
                         f"array{'s' if len(weights) != 1 else ''}; give --weights OUT.npz to "
                         "write them (they stay arguments of the function: training updates "
                         "them)")
    text = lamina.to_text(module)
    if args.weights:
        save_npz_atomic(args.weights, weights)
    write_text_atomic(args.output, text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return guarded(run, argv)


if __name__ == "__main__":
    sys.exit(main())
