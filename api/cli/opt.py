"""`lamina-opt`: parse, verify, run a pass pipeline and print, like `mlir-opt` / `xdsl-opt`.

Built on xDSL's `xDSLOptMain` for its flags (`-p`, `-o`, `--split-input-file`,
`--verify-diagnostics`, `--parsing-diagnostics`, `--print-op-generic`, ...), with Lamina's rules on
top: every failure is one `file:line:col: error: message` line and exit code 1 (never a
traceback), and `-o` is written only when the whole run succeeded.

With `--verify-diagnostics` (verifier and pass errors) or `--parsing-diagnostics` (syntax errors)
the diagnostic is printed to stdout instead and the tool goes on with the next
`--split-input-file` chunk and exits 0, so invalid-input tests can pin messages with filecheck.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Sequence
from typing import ClassVar, NoReturn

import lamina
from lamina.cli.outputs import write_text_atomic
from lamina.ir.diagnostics import LaminaError, UsageError, report
from lamina.ir.source import make_context, parse_text, read_source, verify
from lamina.passes.pipeline import build_pipeline, run_pipeline
from lamina.passes.registry import available_passes
from xdsl.dialects.builtin import ModuleOp
from xdsl.printer import Printer
from xdsl.xdsl_opt_main import xDSLOptMain

SPLIT_MARKER = "// -----"


class LaminaOptMain(xDSLOptMain):
    version_format: ClassVar[str] = (f"lamina-opt {lamina.__version__} (Lamina), on xDSL "
                                     "{xdsl_version}")

    def __init__(self, args: Sequence[str] | None = None):
        super().__init__(description="Lamina's modular optimizer driver", args=args)

    def register_all_dialects(self) -> None:
        self.ctx = make_context()

    def register_all_passes(self) -> None:
        for name, factory in available_passes().items():
            self.register_pass(name, factory)

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        # xDSLOptMain builds its parser itself; make its usage errors one-line diagnostics
        # (`lamina-opt: error: ...`, exit 1) instead of argparse's usage block and exit 2.
        arg_parser.prog = "lamina-opt"
        arg_parser.error = _usage_error  # type: ignore[method-assign]
        arg_parser.add_argument("--explain", action="store_true",
                                help="every Lamina pass explains its decisions on stderr")

    def setup_pipeline(self) -> None:
        # Built lazily in `run`, where errors become diagnostics.
        pass

    def run(self) -> None:  # type: ignore[override]
        passes = build_pipeline(self.args.passes, explain=self.args.explain)
        source, display = read_source(self.args.input_file or "-")
        chunks = split_chunks(source) if self.args.split_input_file else [(source, 0)]
        out = io.StringIO()
        for i, (chunk, offset) in enumerate(chunks):
            if i > 0:
                out.write(SPLIT_MARKER + "\n")
            try:
                module = parse_text(chunk, display, self.ctx, offset)
            except LaminaError as e:
                if self.args.parsing_diagnostics:
                    out.write(e.render() + "\n")
                    continue
                raise
            try:
                verify(module)
                run_pipeline(self.ctx, module, passes)
            except LaminaError as e:
                if self.args.verify_diagnostics:
                    out.write(e.render() + "\n")
                    continue
                raise
            out.write(self.print_module(module))
        if self.args.output_file:
            write_text_atomic(self.args.output_file, out.getvalue())
        else:
            sys.stdout.write(out.getvalue())

    def print_module(self, module: ModuleOp) -> str:
        buf = io.StringIO()
        printer = Printer(stream=buf, print_generic_format=self.args.print_op_generic,
                          print_debuginfo=self.args.print_debuginfo)
        printer.print_op(module)
        buf.write("\n")
        return buf.getvalue()


def _usage_error(message: str) -> NoReturn:
    raise UsageError("lamina-opt", message)


def split_chunks(source: str) -> list[tuple[str, int]]:
    """Split at `// -----` lines; each chunk with the number of lines before it."""
    chunks: list[tuple[str, int]] = []
    offset = 0
    for part in source.split(SPLIT_MARKER):
        chunks.append((part, offset))
        offset += part.count("\n")
    return chunks


def main(argv: Sequence[str] | None = None) -> int:
    try:
        LaminaOptMain(argv).run()
    except SystemExit as e:  # argparse: usage errors exit 1 like every other error
        code = e.code if isinstance(e.code, int) else 1
        return 1 if code else 0
    except BaseException as e:  # noqa: BLE001 - every failure becomes one diagnostic
        if isinstance(e, KeyboardInterrupt):
            return 130
        if os.environ.get("LAMINA_TRACEBACK") and not isinstance(e, LaminaError):
            raise
        return report(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
