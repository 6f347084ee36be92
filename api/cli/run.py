"""`lamina-run`: run a function of a Lamina program on a backend (default: the NumPy interpreter).

    lamina-run FILE [-p PIPELINE] [--entry NAME] [--backend NAME] [--inputs IN.npz] [--seed N]
               [--outputs OUT.npz] [--check] [--stats-json PATH] [--print-outputs]
               [--target NAME|FILE.toml] [--memory-plot OUT.png] [--threads N]

Without `--inputs`, inputs are drawn from the argument types and `--seed`. With `--check` the
program runs twice on the same inputs, as parsed and after the pipeline, and every output is
compared (tolerances by element type, see `lamina.backends.compare`); exit 1 with a per-output
report when they disagree. The program as parsed always runs on the NumPy interpreter, whole
arrays on one device: `--backend X --check` compares backend X after the pipeline against it.
On the NumPy backend every run is checked execution (`lamina.backends.numpy.memory`): a use after
`lamina.free`, a double free or a compute op touching a host/nvme value is an error at the op;
with `--target` so is a tier's capacity overflow (naming what was live). `--stats-json` writes
`ops_executed`, `kernels`, `flops`, `bytes_accessed`, `peak_live_bytes`, `peak_bytes` (per memory
tier, per device), `moved_bytes` (per tier pair, e.g. "hbm->host") and `outputs` (name, shape,
dtype, and the errors under `--check`); with `--check` it also has `reference` (the same counters
for the program as parsed).
A function with placed values runs on every device of its mesh (`lamina.backends.numpy.spmd`);
its stats add `devices`, `collectives` (kind, axes, algorithm, bytes per device) and
`comm_bytes_per_device`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import lamina
import numpy as np
from lamina.backends.compare import compare
from lamina.backends.inputs import load_inputs, random_inputs
from lamina.backends.interface import RunOptions, check_supported, find_entry, output_names
from lamina.backends.numpy.backend import reference_run
from lamina.backends.registry import backend_names, get_backend
from lamina.cli.memory_plot import plot_memory
from lamina.cli.outputs import save_npz_atomic, write_text_atomic
from lamina.ir.diagnostics import LaminaError, UsageError, report
from lamina.ir.dtypes import tensor_dtype
from lamina.ir.source import load, make_context
from lamina.ir.target import load_target
from lamina.passes.pipeline import build_pipeline, run_pipeline
from xdsl.dialects.builtin import ModuleOp


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # exit 1, one line, like every other error
        raise UsageError(self.prog, message)


def arg_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="lamina-run", description="Run a Lamina program on a backend.")
    p.add_argument("file", help="program (.mlir); '-' reads stdin")
    p.add_argument("--version", action="version", version=f"lamina-run {lamina.__version__}")
    p.add_argument("--backend", default="numpy",
                   help=f"backend to run on: {', '.join(backend_names())} (default numpy)")
    p.add_argument("-p", "--passes", default="", help="pass pipeline to apply before running")
    p.add_argument("--entry", default=None, help="function to run (default: the only one)")
    p.add_argument("--inputs", default=None, help=".npz with one array per argument")
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs (default 0)")
    p.add_argument("--outputs", default=None, help="write the results to this .npz")
    p.add_argument("--check", action="store_true",
                   help="also run the program as parsed and compare every output")
    p.add_argument("--stats-json", default=None, help="write run statistics as JSON ('-': stdout)")
    p.add_argument("--print-outputs", action="store_true", help="print a summary of each output")
    p.add_argument("--explain", action="store_true",
                   help="Lamina passes and the backend explain their decisions")
    p.add_argument("--target", default=None,
                   help="check memory-tier capacities against this target (name or .toml)")
    p.add_argument("--memory-plot", default=None, metavar="OUT.png",
                   help="draw bytes per tier per device over program points (needs matplotlib)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="threads for fused kernels' tile loops (default: LAMINA_FUSED_THREADS, "
                        "else one per core); results do not depend on it")
    return p


def summarize(name: str, a: np.ndarray, dtype: str) -> str:
    if a.dtype.kind == "f" and a.size:
        with np.errstate(all="ignore"):
            return (f"{name}: {dtype}{list(a.shape)} mean {float(np.mean(a)):.6g} std "
                    f"{float(np.std(a)):.6g} min {float(np.min(a)):.6g} max {float(np.max(a)):.6g}"
                    f" zeros {int(np.count_nonzero(a == 0))}")
    return f"{name}: {dtype}{list(a.shape)} nonzero {int(np.count_nonzero(a))}"


def run(argv: Sequence[str] | None = None) -> int:
    args = arg_parser().parse_args(argv)
    if args.threads is not None and args.threads < 1:
        raise UsageError("lamina-run", f"argument --threads: must be at least 1, got {args.threads}")
    backend = get_backend(args.backend)
    ctx = make_context()
    module: ModuleOp = load(args.file, ctx)
    reference = module.clone() if args.check else None
    passes = build_pipeline(args.passes, explain=args.explain)
    run_pipeline(ctx, module, passes)

    func = find_entry(module, args.entry)
    entry = func.sym_name.data
    check_supported(backend, func)
    inputs = load_inputs(args.inputs, func) if args.inputs else random_inputs(func, args.seed)
    target = load_target(args.target) if args.target else None
    result = backend.run(module, entry, inputs, RunOptions(threads=args.threads, target=target))
    if args.explain:
        for line in result.explain:   # the backend's own decisions (a kernel it did not compile)
            print(line, file=sys.stderr)
    names = output_names(func)
    dtypes = [tensor_dtype(t) for t in func.function_type.outputs.data]

    stats: dict[str, Any] = {"entry": entry, "pipeline": args.passes, **result.stats}
    if args.memory_plot:
        if result.memory is None:
            raise LaminaError(f"--memory-plot: backend '{backend.name}' records no memory trace")
        plot_memory(result.memory, args.memory_plot, f"@{entry} on target "
                    f"'{target.name if target else 'none'}'")
    outputs = [{"name": n, "shape": list(a.shape), "dtype": d}
               for n, a, d in zip(names, result.outputs, dtypes, strict=True)]
    failed = False
    report_lines: list[str] = []
    if reference is not None:
        ref = reference_run(reference, entry, inputs)
        stats["reference"] = ref.stats
        for out, n, a, r, d in zip(outputs, names, result.outputs, ref.outputs, dtypes,
                                   strict=True):
            diff = compare(n, d, a, r)
            out.update(diff.as_dict())
            report_lines.append(diff.line())
            failed |= not diff.ok
    stats["outputs"] = outputs

    if args.print_outputs:
        for n, a, d in zip(names, result.outputs, dtypes, strict=True):
            print(summarize(n, a, d))
    for line in report_lines:
        print(("check " if not failed else "check FAILED ") + line)
    if args.stats_json:
        write_text_atomic(args.stats_json, json.dumps(stats, indent=2) + "\n")
    if args.outputs and not failed:
        save_npz_atomic(args.outputs, dict(zip(names, result.outputs, strict=True)))
    if failed:
        print(f"lamina-run: error: outputs after '{args.passes}' differ from the program as "
              "parsed", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(argv)
    except KeyboardInterrupt:
        return 130
    except BaseException as e:  # noqa: BLE001 - every failure becomes one diagnostic
        if isinstance(e, SystemExit):
            return e.code if isinstance(e.code, int) else 0
        if os.environ.get("LAMINA_TRACEBACK") and not isinstance(e, LaminaError):
            raise
        return report(e)


if __name__ == "__main__":
    sys.exit(main())
