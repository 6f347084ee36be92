"""One place that turns every failure into `file:line:col: error: message`.

Every Lamina tool reports bad input the same way: one line naming where the problem is (when there is
a source position) and what it is, then exit code 1. Code anywhere in Lamina raises `LaminaError` (or
lets an xDSL `ParseError`/`VerifyException` escape); the tools' `main` functions call `report` and
exit. Nothing else prints errors.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import NoReturn

from xdsl.dialects.builtin import FileLineColLoc
from xdsl.ir import Operation
from xdsl.utils.exceptions import ParseError


@dataclass(frozen=True)
class SourceLoc:
    """A 1-based position in a named source file."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class LaminaError(Exception):
    """A user-facing error: a message and, where known, the source position it refers to."""

    def __init__(self, message: str, loc: SourceLoc | None = None, notes: tuple[str, ...] = ()):
        super().__init__(message)
        self.message = message
        self.loc = loc
        self.notes = notes

    def render(self) -> str:
        head = f"{self.loc}: error: {self.message}" if self.loc else f"error: {self.message}"
        return "\n".join((head, *(f"note: {n}" for n in self.notes)))

    def __str__(self) -> str:
        return self.render()


class UsageError(LaminaError):
    """A bad command line, reported the way argparse words it: `prog: error: message`."""

    def __init__(self, prog: str, message: str):
        super().__init__(message)
        self.prog = prog

    def render(self) -> str:
        return f"{self.prog}: error: {self.message}"


def op_loc(op: Operation | None) -> SourceLoc | None:
    """The source position recorded for `op` (or its nearest located ancestor) while parsing."""
    while op is not None:
        loc = op.location
        if isinstance(loc, FileLineColLoc):
            return SourceLoc(loc.filename.data, loc.line.data, loc.column.data)
        op = op.parent_op()
    return None


def error_at(op: Operation | None, message: str, notes: tuple[str, ...] = ()) -> LaminaError:
    """A `LaminaError` positioned at `op`'s source line."""
    return LaminaError(message, op_loc(op), notes)


def from_parse_error(err: ParseError) -> LaminaError:
    """Convert xDSL's parse error (which knows its span) into a positioned `LaminaError`."""
    name, line, col = err.span.get_location()
    return LaminaError(err.msg.strip(), SourceLoc(name, line, col))


def fail(message: str, loc: SourceLoc | None = None) -> NoReturn:
    raise LaminaError(message, loc)


def report(err: BaseException, stream=None) -> int:
    """Print `err` as a one-line diagnostic and return the exit code (always 1)."""
    stream = stream if stream is not None else sys.stderr
    if isinstance(err, ParseError):
        err = from_parse_error(err)
    if isinstance(err, LaminaError):
        print(err.render(), file=stream)
    else:
        print(f"error: {type(err).__name__}: {err}", file=stream)
    return 1
