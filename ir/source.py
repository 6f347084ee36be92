"""Reading Lamina programs: the context, a parser that records where each op was written, and a
verifier whose errors point at that position.

xDSL's parser does not remember source positions and its verifier errors carry none, so
`LocatedParser` stamps every op it parses with a `FileLineColLoc` (the op's MLIR location, which
clones and rewrites keep), and `verify` runs each op's verifier itself to know which op failed.
"""

from __future__ import annotations

import dataclasses
import sys

from lamina.ir.diagnostics import LaminaError, error_at, from_parse_error
from lamina.ir.lamina import Lamina
from xdsl.context import Context
from xdsl.dialects.arith import Arith
from xdsl.dialects.builtin import Builtin, FileLineColLoc, IntAttr, ModuleOp, StringAttr, UnknownLoc
from xdsl.dialects.func import Func
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException


def make_context() -> Context:
    """A context with every dialect a Lamina program may use."""
    ctx = Context()
    for dialect in (Builtin, Func, Arith, Lamina):
        ctx.load_dialect(dialect)
    return ctx


class LocatedParser(Parser):
    """A parser that records each op's `file:line:col` as its location.

    `line_offset` shifts reported lines, for chunks of a `--split-input-file` input.
    """

    def __init__(self, ctx: Context, text: str | bytes, name: str = "<unknown>",
                 line_offset: int = 0) -> None:
        super().__init__(ctx, text, name)
        self.line_offset = line_offset

    def parse_operation(self) -> Operation:
        start = self._current_token.span
        op = super().parse_operation()
        if isinstance(op.location, UnknownLoc):
            name, line, col = start.get_location()
            op.location = FileLineColLoc(StringAttr(name), IntAttr(line + self.line_offset),
                                         IntAttr(col))
        return op


def parse_text(text: str | bytes, name: str = "<stdin>", ctx: Context | None = None,
               line_offset: int = 0) -> ModuleOp:
    """Parse a module; a malformed program raises `LaminaError` with its position."""
    parser = LocatedParser(ctx or make_context(), text, name, line_offset)
    try:
        return parser.parse_module()
    except ParseError as e:
        e.span = dataclasses.replace(e.span, line_offset=line_offset)
        raise from_parse_error(e) from None


def verify(module: Operation) -> None:
    """Verify every op, innermost first; the first failure raises `LaminaError` at its op."""
    for op in module.walk(reverse=False):
        try:
            op.verify(verify_nested_ops=False)
        except (VerifyException, DiagnosticException) as e:
            message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if not message.startswith(op.name):
                message = f"{op.name}: {message}"
            raise error_at(op, message) from None


def load(path: str, ctx: Context | None = None) -> ModuleOp:
    """Read, parse and verify the program in `path` ('-' for stdin)."""
    if path == "-":
        text = sys.stdin.buffer.read()
        name = "<stdin>"
    else:
        try:
            with open(path, "rb") as f:
                text = f.read()
        except OSError as e:
            raise LaminaError(f"cannot read '{path}': {e.strerror}") from None
        name = path
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LaminaError(f"'{name}' is not UTF-8 text (byte {e.start})") from None
    module = parse_text(decoded, name, ctx)
    verify(module)
    return module
