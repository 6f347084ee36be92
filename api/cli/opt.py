"""`lamina-opt`: parse, verify, run a pass pipeline and print, like `mlir-opt` / `xdsl-opt`.

    lamina-opt [FILE] [-p PIPELINE] [-o OUT] [-t mlir|linalg] [--split-input-file] [--verify-diagnostics]
               [--parsing-diagnostics] [--print-op-generic] [--print-debuginfo] [--explain]
               [--time-passes] [--print-between-passes] [--disable-verify] [--version]
               [--list-passes]

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

Every failure is one diagnostic on stderr (`file:line:col: error: message`, the source line and a
caret, notes) and exit code 1, never a traceback.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections.abc import Callable, Sequence
from importlib.metadata import version
from typing import Any, TextIO

import lamina
from lamina.analysis.linalg.export import export_module
from lamina.cli.diagnostic_verifier import Diagnostic, check, diagnostics_of, parse_expectations
from lamina.cli.entry import guarded
from lamina.cli.outputs import check_destination, write_text_atomic
from lamina.ir.core.diagnostics import LaminaError, UsageError, format_diagnostic
from lamina.ir.mesh.target import builtin_targets
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
    """Upstream MLIR (`lamina.analysis.linalg`); the flags of the Lamina printer do not apply."""
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
    p.add_argument("-p", "--passes", default="", metavar="PIPELINE",
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
    return p


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
        if self.args.output_file:   # refused before any work, not after a long pipeline
            check_destination(self.args.output_file)
        passes = build_pipeline(self.args.passes, explain=self.args.explain)
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
        text = (SPLIT_MARKER + "\n").join(outputs)
        if self.args.output_file:
            write_text_atomic(self.args.output_file, text)
        else:
            sys.stdout.write(text)
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
