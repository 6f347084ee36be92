"""`lamina-opt`: parse, verify, run a pass pipeline and print, like `mlir-opt` / `xdsl-opt`.

    lamina-opt [FILE] [-p PIPELINE] [-o OUT] [-t mlir|linalg] [--split-input-file] [--verify-diagnostics]
               [--parsing-diagnostics] [--print-op-generic] [--print-debuginfo] [--explain]
               [--time-passes] [--print-between-passes] [--disable-verify] [--version]
               [--list-passes] [--report] [--compare A B] [--timeline OUT.png|OUT.json]
               [--cost-target NAME|FILE.toml]

The flags are declared here with argparse, not inherited from xDSL's `xDSLOptMain`: that class
listed flags that did nothing for Lamina (`--syntax-highlight`, `--shrink`, `--frontend`, eight
`-t` targets that printed the same MLIR, a `--disable-verify` that still verified), answered
`--target tiny` with xDSL's target list and printed timing and IR dumps in its own format. Every
flag below does what its help says, in mlir-opt's formats:

- `-p`: the pass pipeline (`lamina.passes.pipeline`); the module is verified after every pass.
- `-o`: written only when the whole run succeeded (all chunks, all checks), atomically.
- `-t/--target`: the output format: `mlir` (Lamina's text format) or `linalg` (the module exported
  to upstream func + tensor + linalg + arith + math, which `iree-compile` and `mlir-opt` read:
  `lamina.analysis.linalg`); another exporter plugs in as another entry of `OUTPUT_TARGETS`.
- `--split-input-file`: each `// -----` chunk is a separate module; outputs are joined by the marker.
- `--verify-diagnostics`: MLIR's: the `expected-*` annotations in the input are checked against the
  diagnostics each chunk produces (`lamina.cli.diagnostic_verifier`); a mismatch is reported on
  stderr and the exit code is 1; matched diagnostics are not printed.
- `--parsing-diagnostics`: xdsl-opt's: a chunk that does not parse prints its diagnostic on stdout
  instead of its module and the run goes on (exit 0). With `--verify-diagnostics` it changes
  nothing, since parse errors are checked against the annotations like every other diagnostic.
- `--time-passes` (`--mlir-timing`): MLIR's execution time report on stderr: wall time of the
  parser, the verifier, each pass and the output, accumulated over the chunks.
- `--print-between-passes` (`--mlir-print-ir-after-all`): after each pass (and its verification),
  the module on stderr under MLIR's header `// -----// IR Dump After Name (pass-name) //----- //`.
- `--disable-verify` (`--verify-each=false`, as mlir-opt's flag): the input is still parsed and
  verified, so no pass sees a program the verifier rejects, but the output of each pass is not
  verified; an invalid result of a buggy pass is then printed as it is.
- `--print-op-generic`, `--print-debuginfo`: MLIR's generic form; `loc(...)` annotations.
- `--explain`: every Lamina pass explains its decisions on stderr.
- `--report`: after the pipeline, per function, the cost model's table of kernels, collectives
  and moves and the totals (`lamina.cli.report`). It goes to stderr, so stdout stays the IR;
  with `-o` the IR goes to the file and the report to stdout.
- `--compare A B`: instead of `-p`, runs pipeline A and pipeline B on the input and prints their
  totals side by side (with B / A) on stdout, or to `-o`; no IR is printed.
- `--timeline OUT`: the modeled timeline of the (one) function after the pipeline, a Chrome
  trace for `.json`, else an image (`lamina.cli.timeline_plot`); written with `-o`, atomically.
- `--cost-target NAME|FILE.toml`: the hardware the three above model costs on; default: the
  `target=` the pipeline's passes name, else `h100-node` (`-t` stays the output format).

Every failure is one diagnostic on stderr (`file:line:col: error: message`, the source line and a
caret, notes) and exit code 1, never a traceback.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from collections.abc import Callable, Sequence
from importlib.metadata import version
from typing import Any, TextIO

import lamina
from lamina.analysis.timeline import schedule
from lamina.cli.diagnostic_verifier import Diagnostic, check, diagnostics_of, parse_expectations
from lamina.cli.entry import guarded
from lamina.cli.outputs import StagedOutputs, check_destination, is_stdout
from lamina.cli.report import bodies, compare_text, cost_target, report_text
from lamina.cli.timeline_plot import timeline_format, write_timeline
from lamina.ir.core.diagnostics import LaminaError, UsageError, format_diagnostic
from lamina.ir.mesh.target import Target, builtin_targets
from lamina.ir.text.source import make_context, parse_text, read_source, verify
from lamina.passes.pipeline import PassRun, build_pipeline, describe_passes, run_pipeline
from lamina.passes.registry import available_passes
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.printer import Printer

SPLIT_MARKER = "// -----"


def _print_mlir(module: ModuleOp, generic: bool, debuginfo: bool) -> str:
    buf = io.StringIO()
    Printer(stream=buf, print_generic_format=generic, print_debuginfo=debuginfo).print_op(module)
    buf.write("\n")
    return buf.getvalue()


# output format name -> printer (module, generic form?, debug info?) -> text
def _print_linalg(module: ModuleOp, generic: bool, debuginfo: bool) -> str:
    """Upstream MLIR (`lamina.analysis.linalg`); the flags of the Lamina printer do not apply.
    Imported here, not at startup: the export loads ml_dtypes (about 1 s), which every other
    lamina-opt run (and every lit test) would pay."""
    from lamina.analysis.linalg.export import export_module

    return export_module(module)


OUTPUT_TARGETS: dict[str, Callable[[ModuleOp, bool, bool], str]] = {"mlir": _print_mlir,
                                                                     "linalg": _print_linalg}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # exit 1, one line, like every other error
        raise UsageError(self.prog, message)


def _output_target(name: str) -> str:
    if name in OUTPUT_TARGETS:
        return name
    hint = ""
    if name in builtin_targets() or name.endswith(".toml"):
        what = "is a hardware target" if name in builtin_targets() else \
            "looks like a hardware target file"
        hint = (f"; '{name}' {what}, which passes take as an option "
                f"(-p 'assign-memory-tiers{{target={name}}}') and lamina-run as --target")
    raise argparse.ArgumentTypeError(
        f"invalid choice: '{name}' (output targets: {', '.join(OUTPUT_TARGETS)}){hint}")


def _file_name(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("expected a file name, got ''")
    return text


def _bool(text: str) -> bool:
    if text not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")
    return text == "true"


def pass_listing() -> str:
    """`--list-passes`' text: each pass, one line of what it does, then one line per option
    (`name=default  type`), as the registry and the pass classes define them."""
    lines: list[str] = []
    for d in describe_passes():
        lines.append(f"{d.name}: {d.summary}" if d.summary else d.name)
        width = max((len(o.name) + len(o.default) + 1 for o in d.options), default=0)
        for o in d.options:
            lines.append(f"    {f'{o.name}={o.default}':<{width}}  {o.kind}")
    return "\n".join(lines) + "\n"


class _ListPasses(argparse.Action):
    """`--list-passes`: print the listing and exit, as --help does (whatever else is given)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        sys.stdout.write(pass_listing())
        parser.exit()


def arg_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="lamina-opt", description="Lamina's modular optimizer driver: parse, verify, "
                "transform and print Lamina programs.")
    p.add_argument("input_file", nargs="?", default="-", metavar="FILE",
                   help="program (.mlir); '-' or nothing reads stdin")
    p.add_argument("-v", "--version", action="version",
                   version=f"lamina-opt {lamina.__version__} (Lamina), on xDSL {version('xdsl')}")
    p.add_argument("-p", "--passes", default=None, metavar="PIPELINE",
                   help="pass pipeline, e.g. 'cse,fuse-elementwise{max-group-size=64}'; passes: "
                        + ", ".join(available_passes()) + " (--list-passes describes each)")
    p.add_argument("--list-passes", action=_ListPasses,
                   help="list every pass, what it does and its options with their types and "
                        "defaults, and exit")
    p.add_argument("-o", "--output-file", default=None, metavar="OUT", type=_file_name,
                   help="write the output here (only if the whole run succeeds) instead of stdout")
    p.add_argument("-t", "--target", default="mlir", type=_output_target,
                   help=f"output format: {', '.join(OUTPUT_TARGETS)} (default mlir)")
    p.add_argument("--split-input-file", action="store_true",
                   help=f"process each '{SPLIT_MARKER}' chunk of the input as a separate module")
    p.add_argument("--verify-diagnostics", action="store_true",
                   help="check the diagnostics against the input's expected-error/-warning/-note "
                        "annotations (as mlir-opt); exit 1 on any mismatch")
    p.add_argument("--parsing-diagnostics", action="store_true",
                   help="print a chunk's parse error on stdout instead of its module and go on "
                        "(as xdsl-opt)")
    p.add_argument("--print-op-generic", action="store_true", help="print MLIR's generic form")
    p.add_argument("--print-debuginfo", action="store_true", help="print each op's loc(...)")
    p.add_argument("--explain", action="store_true",
                   help="every Lamina pass explains its decisions on stderr")
    p.add_argument("--time-passes", "--mlir-timing", dest="time_passes", action="store_true",
                   help="print the wall time of parsing, verifying, each pass and printing "
                        "(MLIR's execution time report) on stderr")
    p.add_argument("--print-between-passes", "--mlir-print-ir-after-all", dest="print_ir",
                   action="store_true", help="print the IR after each pass on stderr")
    p.add_argument("--disable-verify", dest="verify_each", action="store_false",
                   help="do not verify the output of each pass (the input is still verified); "
                        "the same as --verify-each=false")
    p.add_argument("--verify-each", dest="verify_each", type=_bool, metavar="BOOL",
                   help="verify the module after each pass (default true)")
    p.set_defaults(verify_each=True)
    cost = p.add_argument_group("modeled costs")
    cost.add_argument("--report", action="store_true",
                      help="after the pipeline, print each function's kernels, collectives and "
                           "moves with their modeled costs and the totals (stderr; stdout with -o)")
    cost.add_argument("--compare", nargs=2, metavar=("A", "B"), default=None,
                      help="instead of -p: run pipelines A and B and print their totals side by "
                           "side (kernels, bytes moved and sent, peaks, modeled step time)")
    cost.add_argument("--timeline", default=None, metavar="OUT.png|OUT.json", type=_file_name,
                      help="draw the modeled timeline after the pipeline: a Chrome trace for "
                           ".json (Perfetto opens it), else an image (needs matplotlib)")
    cost.add_argument("--cost-target", default=None, metavar="NAME|FILE.toml", type=_file_name,
                      help="hardware the costs are modeled on (default: the target= of the "
                           "pipeline's passes, else h100-node)")
    return p


def _same_file(a: str, b: str) -> bool:
    def key(p: str) -> str:
        return "-" if is_stdout(p) else os.path.realpath(p)

    return key(a) == key(b)


def check_cost_flags(args: argparse.Namespace) -> None:
    """Refuse, before any work, cost flags that cannot be honoured together."""
    def refuse(message: str) -> None:
        raise UsageError("lamina-opt", message)

    if args.compare is not None:
        for given, flag in ((args.passes is not None, "-p"), (args.report, "--report"),
                            (args.timeline, "--timeline"),
                            (args.split_input_file, "--split-input-file"),
                            (args.verify_diagnostics, "--verify-diagnostics")):
            if given:
                refuse(f"--compare runs its own two pipelines and prints their comparison; it "
                       f"does not go with {flag}")
    elif args.cost_target is not None and not (args.report or args.timeline):
        refuse("--cost-target applies to --report, --compare and --timeline, none of which "
               "is given")
    if args.timeline is not None:
        if args.split_input_file:
            refuse("--timeline draws one module; it does not go with --split-input-file")
        if _same_file(args.timeline, args.output_file or "-"):
            refuse(f"--timeline and {'-o' if args.output_file else 'the IR (stdout)'} both "
                   f"write '{args.timeline}'")
        check_destination(args.timeline)
        timeline_format(args.timeline)


class Timing:
    """Wall time per step, accumulated over the chunks, printed in the layout of MLIR's
    `--mlir-timing` report (`mlir/lib/Support/Timing.cpp`, text output, wall time only)."""

    TITLE = "... Execution time report ..."

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.rows: dict[tuple[str, int], list[Any]] = {}  # key -> [label, seconds]

    def add(self, key: tuple[str, int], label: str, seconds: float) -> None:
        self.rows.setdefault(key, [label, 0.0])[1] += seconds

    def report(self) -> str:
        total = time.perf_counter() - self.start
        rule = "===" + "-" * 73 + "==="
        lines = [rule, " " * ((80 - len(self.TITLE)) // 2) + self.TITLE, rule,
                 f"  Total Execution Time: {total:.4f} seconds", "",
                 "  ----Wall Time----  ----Name----"]
        rows = [(label, seconds) for label, seconds in self.rows.values()]
        rest = max(0.0, total - sum(s for _, s in rows))
        for label, seconds in [*rows, ("Rest", rest), ("Total", total)]:
            share = 100.0 * seconds / total if total > 0 else 0.0
            lines.append(f"  {seconds:8.4f} ({share:5.1f}%)  {label}")
        return "\n".join(lines) + "\n"


def dump_header(p: ModulePass) -> str:
    """MLIR's `--mlir-print-ir-after-all` header: the pass's class name, then its pipeline name."""
    return f"// -----// IR Dump After {type(p).__name__} ({p.name}) //----- //"


class OptRun:
    """One `lamina-opt` invocation: the chunks of one input through one pipeline."""

    def __init__(self, args: argparse.Namespace, err: TextIO) -> None:
        self.args = args
        self.err = err
        self.timing = Timing() if args.time_passes else None
        self.ctx = make_context()
        self.modules: list[ModuleOp] = []   # each chunk's module after the pipeline

    def _timed(self, key: tuple[str, int], label: str, step: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        try:
            return step()
        finally:
            if self.timing is not None:
                self.timing.add(key, label, time.perf_counter() - start)

    def print_module(self, module: ModuleOp) -> str:
        return OUTPUT_TARGETS[self.args.target](module, self.args.print_op_generic,
                                                self.args.print_debuginfo)

    def after_pass(self, run: PassRun) -> None:
        if self.timing is not None:
            self.timing.add(("pass", run.index), run.pass_.name, run.seconds)
            if run.verify_seconds is not None:
                self.timing.add(("verify", run.index), "Verifier", run.verify_seconds)
        if self.args.print_ir:
            self.err.write(f"{dump_header(run.pass_)}\n{self.print_module(run.module)}\n")

    def parse(self, chunk: str, offset: int, name: str) -> ModuleOp:
        return self._timed(("parser", 0), "Parser",
                           lambda: parse_text(chunk, name, self.ctx, offset))

    def transform(self, module: ModuleOp, passes: list[ModulePass]) -> str:
        """Verify, transform and print one parsed chunk; LaminaError on the first problem."""
        self._timed(("verify", -1), "Verifier", lambda: verify(module))
        run_pipeline(self.ctx, module, passes, verify_each=self.args.verify_each,
                     observer=self.after_pass)
        self.modules.append(module)
        return self._timed(("output", 0), "Output", lambda: self.print_module(module))

    def chunk(self, chunk: str, offset: int, name: str, passes: list[ModulePass]
              ) -> tuple[str, list[Diagnostic]]:
        """One chunk's output, and under --verify-diagnostics the mismatches with its
        annotations."""
        if not self.args.verify_diagnostics:
            try:
                module = self.parse(chunk, offset, name)
            except LaminaError as e:
                if not self.args.parsing_diagnostics:
                    raise
                return e.render(excerpts=True) + "\n", []
            return self.transform(module, passes), []
        expectations, failures = parse_expectations(chunk, name, offset)
        produced: list[Diagnostic] = []
        output = ""
        try:
            output = self.transform(self.parse(chunk, offset, name), passes)
        except LaminaError as e:
            produced = diagnostics_of(e)
        return output, failures + check(produced, expectations, name)

    def run(self) -> int:
        check_cost_flags(self.args)
        if self.args.output_file:   # refused before any work, not after a long pipeline
            check_destination(self.args.output_file)
        if self.args.compare is not None:
            return self.compare(self.args.compare[0], self.args.compare[1])
        spec = self.args.passes or ""
        passes = build_pipeline(spec, explain=self.args.explain)
        target = cost_target(self.args.cost_target, [spec]) \
            if self.args.report or self.args.timeline else None
        source, name = read_source(self.args.input_file)
        chunks = split_chunks(source) if self.args.split_input_file else [(source, 0)]
        outputs: list[str] = []
        failures: list[Diagnostic] = []
        for chunk, offset in chunks:
            output, failed = self.chunk(chunk, offset, name, passes)
            outputs.append(output)
            failures += failed
        for f in failures:
            print("\n".join(format_diagnostic(f.loc, f.kind, f.message)), file=self.err)
        if failures:
            return 1
        self.write((SPLIT_MARKER + "\n").join(outputs), target, spec)
        return 0

    def write(self, text: str, target: Target | None, spec: str) -> None:
        """The IR (stdout or -o), the report and the timeline, once the whole run succeeded."""
        report = "".join(report_text(m, target) for m in self.modules) \
            if self.args.report and target is not None else ""
        with StagedOutputs() as staged:
            if self.args.timeline and target is not None:
                self.stage_timeline(staged, target, spec)
            if self.args.output_file:
                staged.add_text(self.args.output_file, text)
            staged.commit()
        if not self.args.output_file:
            sys.stdout.write(text)
        (sys.stdout if self.args.output_file else self.err).write(report)

    def stage_timeline(self, staged: StagedOutputs, target: Target, spec: str) -> None:
        path = self.args.timeline
        funcs = [f for m in self.modules for f in bodies(m)]
        if len(funcs) != 1:
            names = ", ".join(f"@{f.sym_name.data}" for f in funcs) or "none"
            raise LaminaError(f"--timeline draws one function; the module has {len(funcs)} "
                              f"({names})")
        func = funcs[0]
        tl = schedule(func, target)
        fmt = timeline_format(path)
        title = f"@{func.sym_name.data} after -p '{spec}'"
        times = f"modeled on cost target '{target.name}'"
        staged.add(path, lambda f: write_timeline(tl, f, fmt, title, times))

    def compare(self, a: str, b: str) -> int:
        """`--compare A B`: both pipelines on the input, their totals side by side."""
        target = cost_target(self.args.cost_target, [a, b])
        source, name = read_source(self.args.input_file)
        modules = []
        for spec in (a, b):
            passes = build_pipeline(spec, explain=self.args.explain)
            module = self.parse(source, 0, name)
            self.transform(module, passes)
            modules.append(module)
        text = compare_text(modules[0], modules[1], (a, b), target)
        with StagedOutputs() as staged:
            staged.add_text(self.args.output_file or "-", text)
            staged.commit()
        return 0


def split_chunks(source: str) -> list[tuple[str, int]]:
    """Split at `// -----` lines; each chunk with the number of lines before it."""
    chunks: list[tuple[str, int]] = []
    offset = 0
    for part in source.split(SPLIT_MARKER):
        chunks.append((part, offset))
        offset += part.count("\n")
    return chunks


def main(argv: Sequence[str] | None = None) -> int:
    """`lamina-opt`, ended by `guarded`; the `--time-passes` report comes after the run's
    diagnostic, also when the run failed (a slow pass before a failure is what it is for)."""
    started: list[OptRun] = []

    def run(argv: Sequence[str] | None) -> int:
        started.append(OptRun(arg_parser().parse_args(argv), sys.stderr))
        return started[0].run()

    try:
        return guarded(run, argv)
    finally:
        if started and started[0].timing is not None:
            sys.stderr.write(started[0].timing.report())


if __name__ == "__main__":
    sys.exit(main())
