"""`lamina-run`: run a function of a Lamina program on a backend (default: the NumPy interpreter).

    lamina-run FILE [-p PIPELINE] [--entry NAME] [--backend NAME] [--inputs IN.npz ...] [--seed N]
               [--write-inputs IN.npz] [--outputs OUT.npz] [--check [--allow-nonfinite]]
               [--stats-json PATH]
               [--print-outputs] [--target NAME|FILE.toml] [--memory-plot OUT.png]
               [--timeline OUT.png|OUT.json] [--threads N]
               [--devices N] [--repeats N] [--coordinator HOST:PORT --num-processes N
               --process-id I] [--iree-target llvm-cpu|cuda]

Without `--inputs`, inputs are drawn from the argument types, the roles the IR gives arguments
and `--seed` (`lamina.backends.inputs`); `--write-inputs` saves the inputs a run used, keyed by
argument name, in the form `--inputs` reads back. `--inputs` may be given several times (a
model's inputs and the weights `lamina-import --weights` wrote): the files are merged by key, and
a key in two of them is refused naming both. An array whose dtype the argument cannot hold
exactly (float64 for an f32, int64 for an i32) is converted with a note on stderr naming it and
both types; a value out of the argument type's range is refused. With `--check` the program runs twice on the
same inputs, as parsed and after the pipeline, and every output is compared (tolerances by
element type, see `lamina.backends.compare`); exit 1 with a per-output report when they disagree,
and also when an output agrees only by being NaN or inf in the same places on both sides (its
line says `NONFINITE` and how many), which checks nothing there, unless `--allow-nonfinite`.
The program as parsed always runs on the NumPy interpreter, whole arrays on one device:
`--backend X --check` compares backend X after the pipeline against it.
On the NumPy backend every run is checked execution (`lamina.backends.numpy.memory`): a use after
`lamina.free`, a double free or a compute op touching a host/nvme value is an error at the op;
with `--target` so is a tier's capacity overflow (naming what was live). A function with placed
values runs on every device of its mesh (`lamina.backends.numpy.spmd`); a partially placed one
runs on one device with its placements ignored, and a note on stderr says so.

What it prints: one summary line per output (`out0: f32[4, 8] mean ... std ... min ... max ...
zeros N`), with `--print-outputs` each output's values too, and with `--check` one comparison
line per output. These go to stdout, except when stdout carries data (`--stats-json -`, or any
output written to `-`): then stdout carries that data alone and every other line goes to stderr,
so `lamina-run ... --stats-json - | python -m json.tool` always parses. Notes and diagnostics
always go to stderr.

The files it writes (`--outputs`, `--write-inputs`, `--stats-json`, `--memory-plot`) are written
all together when the run succeeded, or not at all (`lamina.cli.outputs`); each destination is
checked before the program runs, and an empty value for any flag is refused, never ignored.
When `--check` finds a difference, the files that describe and reproduce it (`--stats-json`,
`--memory-plot`, `--write-inputs`) are written and `--outputs` is not.

The function is compiled once (`lamina.compile`) and called once; `--repeats N` calls it N more
times on the same inputs, on any backend, prints one `timing:` line (the median per call of the
N calls, and the compile time) and the stats say `compile_seconds` (the whole compile),
`run_seconds` (the median of the repeats; without repeats, the one call), `run_seconds_all` and
`repeats`. On the NumPy backends the first call is the checked one (every statistic counted);
the repeats run the prepared kernels alone.

`--backend jax` compiles the function with XLA (`lamina.backends.jax`): `--devices N` sets how
many devices (on CPU: host devices XLA starts with; default the mesh's size), and
`--coordinator`, `--num-processes`, `--process-id` run one process of a multi-process job (every
process runs the same command with its own id; only process 0 prints and writes files). Its stats
add `backend` and, for placed programs, the compiled HLO's collectives (`hlo_collectives`) beside
Lamina's own (`collectives`). `--backend iree` compiles the function's `-t linalg` export with
IREE for `--iree-target` (llvm-cpu, the host CPU, by default; cuda where IREE finds a CUDA GPU).
A backend's flag given to another backend (`--devices` to numpy,
which runs every device of the program's mesh, or `--threads` to jax) is refused, never ignored.

`--timeline OUT.png|OUT.json` draws the step's timeline (`lamina.cli.timeline_plot`) with the
times the backend measured where it can time kernels: on the NumPy backend each compute op's
wall time in the checked call (per device: the simulated devices run one after another, so the
op's time over its devices), collectives and moves modeled; on the others every time is
modeled (the compiled backend's checked call is its warm-up, which compiles the kernels).
Costs are modeled on `--target`, else the pipeline's `target=`, else h100-node; the title says
which times are which.

Every `--stats-json` field (name, unit, per device or total) is documented in one place: the
README's "Run statistics" section.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, TextIO

import lamina
import numpy as np
from lamina.analysis.step_cost import COMPUTE, step_costs
from lamina.analysis.timeline import schedule
from lamina.backends.arrays import check_inputs
from lamina.backends.compare import compare
from lamina.backends.inputs import input_keys, random_inputs, read_inputs
from lamina.backends.interface import (
    Backend,
    RunResult,
    check_supported,
    find_entry,
    output_names,
)
from lamina.backends.numpy.backend import reference_run
from lamina.backends.registry import backend_names, get_backend
from lamina.cli.entry import guarded
from lamina.cli.memory_plot import plot_format, plot_memory
from lamina.cli.outputs import StagedOutputs, check_destination, is_stdout
from lamina.cli.report import cost_target
from lamina.cli.timeline_plot import timeline_format, write_timeline
from lamina.ir.core.diagnostics import LaminaError, UsageError, format_diagnostic
from lamina.ir.core.dtypes import tensor_dtype
from lamina.ir.mesh.target import Target, load_target
from lamina.ir.text.source import load, make_context
from lamina.passes.pipeline import build_pipeline, run_pipeline
from lamina.passes.pipeline_stages import pipeline_stats
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp

STATS_DOC = "README.md, section 'Run statistics'"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # exit 1, one line, like every other error
        raise UsageError(self.prog, message)


def arg_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="lamina-run", description="Run a Lamina program on a backend.",
                epilog=f"--stats-json fields (name, unit, per device or total): {STATS_DOC}.")
    p.add_argument("file", help="program (.mlir); '-' reads stdin")
    p.add_argument("--version", action="version", version=f"lamina-run {lamina.__version__}")
    p.add_argument("--backend", default="numpy",
                   help=f"backend to run on: {', '.join(backend_names())} (default numpy)")
    p.add_argument("-p", "--passes", default="", help="pass pipeline to apply before running")
    p.add_argument("--entry", default=None, help="function to run (default: the only one)")
    p.add_argument("--inputs", action="append", default=None, metavar="IN.npz",
                   help=".npz with arrays by argument name; repeat it to merge several files "
                        "(a model's inputs and its weights)")
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs (default 0)")
    p.add_argument("--write-inputs", default=None, metavar="IN.npz",
                   help="write the inputs this run uses, keyed by argument name (what --inputs "
                        "reads)")
    p.add_argument("--outputs", default=None, help="write the results to this .npz")
    p.add_argument("--check", action="store_true",
                   help="also run the program as parsed and compare every output")
    p.add_argument("--allow-nonfinite", action="store_true",
                   help="with --check: accept outputs that are NaN or inf in the same places on "
                        "both sides (otherwise such a check exits 1)")
    p.add_argument("--stats-json", default=None,
                   help=f"write run statistics as JSON ('-': stdout); fields: {STATS_DOC}")
    p.add_argument("--print-outputs", action="store_true",
                   help="print each output's values after its summary line")
    p.add_argument("--explain", action="store_true",
                   help="Lamina passes and the backend explain their decisions")
    p.add_argument("--target", default=None,
                   help="check memory-tier capacities against this target (name or .toml)")
    p.add_argument("--memory-plot", default=None, metavar="OUT.png",
                   help="draw bytes per tier per device over program points (needs matplotlib; "
                        "the format follows the extension)")
    p.add_argument("--timeline", default=None, metavar="OUT.png|OUT.json",
                   help="draw the step's timeline, measured per kernel where the backend can "
                        "time kernels (a Chrome trace for .json, else an image)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="threads for fused kernels' tile loops (default: LAMINA_FUSED_THREADS, "
                        "else one per core); results do not depend on it")
    p.add_argument("--repeats", type=int, default=0, metavar="N",
                   help="timed calls after the first, on any backend; the stats report their "
                        "median (default 0)")
    jax = p.add_argument_group("backend jax")
    jax.add_argument("--devices", type=int, default=None, metavar="N",
                     help="devices to run on, per process (default: the mesh's size)")
    jax.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                     help="multi-process: the coordinator's address (process 0 serves it)")
    jax.add_argument("--num-processes", type=int, default=None, metavar="N",
                     help="multi-process: how many processes take part")
    jax.add_argument("--process-id", type=int, default=None, metavar="I",
                     help="multi-process: this process's number, 0 .. N-1")
    iree = p.add_argument_group("backend iree")
    iree.add_argument("--iree-target", default=None, metavar="NAME",
                      help="what IREE compiles for: llvm-cpu (the host CPU, default) or cuda "
                           "(where IREE finds a CUDA GPU)")
    return p


# ---- the command line, checked before any work ----------------------------------------------

# flags whose value is a file the run writes, in the order they are listed in messages
_DESTINATIONS = ("outputs", "write_inputs", "stats_json", "memory_plot", "timeline")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def check_args(args: argparse.Namespace) -> None:
    """Refuse, before anything runs, a command line that could not be honoured: numbers out of
    range, empty values (an empty --outputs or --target names nothing; `-p ''` is the empty
    pipeline and stays valid), and destinations that cannot be written or collide."""
    for flag, value, least in (("--threads", args.threads, 1), ("--devices", args.devices, 1),
                               ("--repeats", args.repeats, 0),
                               ("--num-processes", args.num_processes, 1),
                               ("--process-id", args.process_id, 0)):
        if value is not None and value < least:
            raise UsageError("lamina-run", f"argument {flag}: must be at least {least}, got "
                             f"{value}")
    multi = (args.coordinator, args.num_processes, args.process_id)
    if any(v is not None for v in multi) and any(v is None for v in multi):
        raise UsageError("lamina-run", "--coordinator, --num-processes and --process-id go "
                         "together")
    if args.process_id is not None and args.process_id >= args.num_processes:
        raise UsageError("lamina-run", f"argument --process-id: must be below --num-processes "
                         f"{args.num_processes}, got {args.process_id}")
    if args.seed < 0:
        raise UsageError("lamina-run", f"argument --seed: must be non-negative, got {args.seed}")
    if args.allow_nonfinite and not args.check:
        raise UsageError("lamina-run", "--allow-nonfinite applies to --check, which is not given")
    for dest, value in vars(args).items():
        given = value if isinstance(value, list) else [value]   # --inputs repeats
        if "" in given and dest not in ("passes", "file"):
            raise UsageError("lamina-run", f"argument {_flag(dest)}: expected a value, got ''")
    seen: dict[str, str] = {}
    for dest in _DESTINATIONS:
        path = getattr(args, dest)
        if path is None:
            continue
        key = "-" if is_stdout(path) else os.path.realpath(path)
        if key in seen:
            what = "stdout" if key == "-" else f"'{path}'"
            raise UsageError("lamina-run", f"{_flag(seen[key])} and {_flag(dest)} both write "
                             f"{what}")
        seen[key] = dest
        check_destination(path)
    if args.memory_plot is not None:
        plot_format(args.memory_plot)
    if args.timeline is not None:
        timeline_format(args.timeline)


# the backends each backend-specific flag applies to: the backends whose options type has the
# field (a test checks this against every backend's `Options`); stated here so that a refusal
# can name them without importing every backend
BACKEND_FLAGS: dict[str, tuple[str, ...]] = {
    "threads": ("compiled", "numpy"), "devices": ("jax",), "coordinator": ("jax",),
    "num_processes": ("jax",), "process_id": ("jax",), "iree_target": ("iree",)}


def check_backend_flags(args: argparse.Namespace, backend: Backend,
                        prog: str = "lamina-run") -> None:
    """Refuse, before any work, a backend-specific flag that `backend`'s options do not take:
    ignoring it would run something other than what was asked (the NumPy backends run every
    device of the program's mesh, whatever `--devices` says). A tool without some of these
    flags (`lamina-train` has no multi-process ones) is checked on those it has."""
    takes = {f.name for f in fields(backend.Options)}
    for name, backends in BACKEND_FLAGS.items():
        if getattr(args, name, None) is not None and name not in takes:
            raise UsageError(prog, f"{_flag(name)} applies to --backend {', '.join(backends)}")


def run_options(args: argparse.Namespace, backend: Backend, target: Target | None
                ) -> dict[str, Any]:
    """The backend-specific flags given, for `backend`'s options (checked by
    `check_backend_flags`); a target always goes through, so a backend without checked
    execution refuses it."""
    check_backend_flags(args, backend)
    options: dict[str, Any] = {name: getattr(args, name) for name in BACKEND_FLAGS
                               if getattr(args, name) is not None}
    if target is not None:
        options["target"] = target
    return options


def timed_calls(exe: lamina.Executable, inputs: list[np.ndarray], repeats: int,
                first: lamina.Run) -> dict[str, Any]:
    """`repeats` more calls of `exe`: the timing statistics every backend reports."""
    times = [exe(inputs).stats["run_seconds"] for _ in range(repeats)]
    return {"compile_seconds": exe.compile_seconds,
            "run_seconds": statistics.median(times) if times else first.stats["run_seconds"],
            "run_seconds_all": times or [first.stats["run_seconds"]], "repeats": len(times)}


def timing_line(stats: dict[str, Any]) -> str:
    """What `--repeats N` reports on every backend: the median per-call time of the N timed
    calls of the compiled function (the first call, checked on the NumPy backends, is not
    one of them), beside the compile time."""
    return (f"timing: median {stats['run_seconds'] * 1e3:.4g} ms per call over "
            f"{stats['repeats']} calls (compile {stats['compile_seconds']:.4g} s)")


def data_on_stdout(args: argparse.Namespace) -> bool:
    """Whether one of the run's files goes to stdout (then stdout carries nothing else)."""
    return any(getattr(args, d) is not None and is_stdout(getattr(args, d)) for d in _DESTINATIONS)


# ---- what a run prints ----------------------------------------------------------------------


def summarize(name: str, a: np.ndarray, dtype: str) -> str:
    if a.dtype.kind == "f" and a.size:
        with np.errstate(all="ignore"):
            return (f"{name}: {dtype}{list(a.shape)} mean {float(np.mean(a)):.6g} std "
                    f"{float(np.std(a)):.6g} min {float(np.min(a)):.6g} max {float(np.max(a)):.6g}"
                    f" zeros {int(np.count_nonzero(a == 0))}")
    return f"{name}: {dtype}{list(a.shape)} nonzero {int(np.count_nonzero(a))}"


@dataclass
class Outcome:
    """A finished run of the entry function: its results, their stats, and the check."""

    func: FuncOp
    inputs: list[np.ndarray]
    result: RunResult
    stats: dict[str, Any]
    check_lines: list[str]
    failed: bool
    nonfinite: list[str]   # outputs that agree only by NaN or inf on both sides, when refused
    kernel_seconds: dict[int, float] | None = None   # measured per op index (--timeline)

    @property
    def names(self) -> list[str]:
        return output_names(self.func)

    @property
    def dtypes(self) -> list[str]:
        return [tensor_dtype(t) for t in self.func.function_type.outputs.data]


def print_report(out: Outcome, values: bool, stream: TextIO) -> None:
    """One summary line per output (and its values with `values`), then the check lines."""
    for n, a, d in zip(out.names, out.result.outputs, out.dtypes, strict=True):
        print(summarize(n, a, d), file=stream)
        if values:
            print(np.array2string(a, separator=", ", max_line_width=100), file=stream)
    for line in out.check_lines:
        print(("check " if not out.failed else "check FAILED ") + line, file=stream)
    if out.stats.get("repeats"):
        print(timing_line(out.stats), file=stream)


# ---- the run --------------------------------------------------------------------------------


def times_kernels(backend: Backend) -> bool:
    """Whether `backend` measures each op of a run (`NumpyOptions.kernel_times`) in a call of
    its own inputs: not a backend whose checked call is its warm-up at compile time (the
    compiled backend's, whose times would be its kernels' compilation)."""
    takes = {f.name for f in fields(backend.Options)}
    return "kernel_times" in takes and not getattr(backend, "warm", False)


def run_entry(args: argparse.Namespace, backend: Backend, module: ModuleOp,
              reference: ModuleOp | None) -> Outcome:
    """Run the entry function of `module` (after its pipeline) on `backend` as the flags say,
    and compare it with `reference` (the program as parsed) under --check."""
    func = find_entry(module, args.entry)
    entry = func.sym_name.data
    check_supported(backend, func)
    target = load_target(args.target) if args.target else None
    options = run_options(args, backend, target)
    if args.timeline and times_kernels(backend):
        options["kernel_times"] = True
    if args.inputs:
        loaded = read_inputs(args.inputs, func)
        # converted (and a value out of its type's range refused) before any note, so a note
        # is never about a conversion that did not happen
        inputs = check_inputs(func, loaded.arrays)
        if not args.process_id:
            for note in loaded.casts(func):
                print("\n".join(format_diagnostic(None, "note", note)), file=sys.stderr)
    else:
        inputs = random_inputs(func, args.seed)
    exe = lamina.compile(module, entry, args.backend, warmup=False, **options)
    run = exe(inputs)
    result = RunResult(list(run.outputs.values()), {**run.stats,
                       **timed_calls(exe, inputs, args.repeats, run)}, run.memory, run.notes,
                       run.explain)
    if args.explain:
        for line in result.explain:   # the backend's own decisions (a kernel it did not compile)
            print(line, file=sys.stderr)
    measured = result.stats.pop("kernel_seconds", None)
    # a training step's param/grad/state bytes (ZeRO) come with the run's stats, as the API's
    stats: dict[str, Any] = {"entry": entry, "pipeline": args.passes, **result.stats}
    out = Outcome(func, inputs, result, stats, [], False, [], measured)
    outputs = [{"name": n, "shape": list(a.shape), "dtype": d}
               for n, a, d in zip(out.names, result.outputs, out.dtypes, strict=True)]
    if reference is not None:
        ref = reference_run(reference, entry, inputs)
        stats["reference"] = ref.stats
        for info, n, a, r, d in zip(outputs, out.names, result.outputs, ref.outputs, out.dtypes,
                                    strict=True):
            diff = compare(n, d, a, r)
            info.update(diff.as_dict())
            out.check_lines.append(diff.line(args.allow_nonfinite))
            if diff.nonfinite and not args.allow_nonfinite:
                out.nonfinite.append(n)
            out.failed |= not diff.ok or n in out.nonfinite
    stats["outputs"] = outputs
    staged = pipeline_stats(func, target or load_target("h100-node"))
    if staged is not None:   # a pipeline-staged step: its modeled bubble and per-stage busy time
        stats["bubble_fraction"] = staged["bubble_fraction"]
        stats["bubble_fraction_formula"] = staged["bubble_fraction_formula"]
        stats["stage_busy_seconds"] = staged["stage_busy_seconds"]
    return out


def stage_files(staged: StagedOutputs, args: argparse.Namespace, out: Outcome) -> None:
    """Every file the flags ask for, complete, ready to be put in place together."""
    if args.memory_plot:
        trace = out.result.memory
        if trace is None:
            raise LaminaError(f"--memory-plot: backend '{args.backend}' records no memory trace")
        fmt = plot_format(args.memory_plot)
        title = f"@{out.func.sym_name.data} on target '{args.target or 'none'}'"
        staged.add(args.memory_plot, lambda f: plot_memory(trace, f, fmt, title))
    if args.timeline:
        stage_timeline(staged, args, out)
    if args.write_inputs:
        staged.add_npz(args.write_inputs, dict(zip(input_keys(out.func), out.inputs, strict=True)))
    if args.stats_json:
        staged.add_text(args.stats_json, json.dumps(out.stats, indent=2) + "\n")
    if args.outputs and not out.failed:
        staged.add_npz(args.outputs, dict(zip(out.names, out.result.outputs, strict=True)))


def stage_timeline(staged: StagedOutputs, args: argparse.Namespace, out: Outcome) -> None:
    """`--timeline`: compute ops at their measured time per device where the backend timed them
    (its time over the devices it ran on, simulated one after another), the rest modeled."""
    target = cost_target(args.target, [args.passes])
    modeled = f"modeled on '{target.name}'"
    seconds: dict[int, float] | None = None
    if out.kernel_seconds is not None:
        seconds = {k.index: out.kernel_seconds[k.index] / len(k.devices)
                   for k in step_costs(out.func, target)
                   if k.kind == COMPUTE and k.index in out.kernel_seconds}
        times = f"compute measured on --backend {args.backend}, collectives and moves {modeled}"
    else:
        times = f"{modeled}: --backend {args.backend} does not time kernels"
    tl = schedule(out.func, target, seconds)
    fmt = timeline_format(args.timeline)
    title = f"@{out.func.sym_name.data} after -p '{args.passes}'"
    staged.add(args.timeline, lambda f: write_timeline(tl, f, fmt, title, times))


def run(argv: Sequence[str] | None = None) -> int:
    args = arg_parser().parse_args(argv)
    check_args(args)
    backend = get_backend(args.backend)  # an unknown backend is reported before any work
    check_backend_flags(args, backend)
    ctx = make_context()
    module: ModuleOp = load(args.file, ctx)
    reference = module.clone() if args.check else None
    passes = build_pipeline(args.passes, explain=args.explain)
    run_pipeline(ctx, module, passes)
    out = run_entry(args, backend, module, reference)
    if args.process_id:   # processes other than 0 of a multi-process run: no output
        return 1 if out.failed else 0
    for note in out.result.notes:
        print("\n".join(format_diagnostic(None, "note", note)), file=sys.stderr)
    print_report(out, args.print_outputs, sys.stderr if data_on_stdout(args) else sys.stdout)
    with StagedOutputs() as staged:
        stage_files(staged, args, out)
        staged.commit()
    if out.failed:
        print(f"lamina-run: error: {_failure(args, out)}", file=sys.stderr)
        return 1
    return 0


def _failure(args: argparse.Namespace, out: Outcome) -> str:
    """Why the check failed: a difference, else outputs that agree only by being non-finite."""
    if not all(info.get("ok", True) for info in out.stats["outputs"]):
        return f"outputs after '{args.passes}' differ from the program as parsed"
    many = len(out.nonfinite) > 1
    return f"output{'s' if many else ''} {', '.join(out.nonfinite)} agree{'' if many else 's'} " \
        "only by NaN or inf in the same places on both sides, which checks nothing there " \
        "(--allow-nonfinite accepts it)"


def main(argv: Sequence[str] | None = None) -> int:
    return guarded(run, argv)


if __name__ == "__main__":
    sys.exit(main())
