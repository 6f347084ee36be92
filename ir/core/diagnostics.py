"""One place that turns every failure into a diagnostic as `mlir-opt` prints it.

Every Lamina tool reports bad input the same way, one error per problem and exit code 1:

    prog.mlir:3:22: error: Expected ':'
      %0 = lamina.exp %x tensor<4xf32>
                         ^
    prog.mlir:2:3: note: operand #0 defined here
      %1 = lamina.exp %a : tensor<4xf32>
      ^

The first line names where the problem is (when there is a source position) and what it is; the
source line and a caret under the column follow, as LLVM's SourceMgr prints them, then any notes
in the same form. Code anywhere in Lamina raises `LaminaError` (or lets an xDSL
`ParseError`/`VerifyException` escape); the tools' `main` functions call `report` and exit.
Nothing else prints errors.

Echoing the line needs the text, which a location does not carry: `record_source` keeps the text
of the most recently parsed inputs (`lamina.ir.text.source.parse_text` records every input it parses),
by file name, the way MLIR's SourceMgr keeps its buffers. A location in a file that was not parsed
in this process (e.g. a `loc("other.mlir":5:3)` read back from printed IR) gets no echo. Echoes and
messages are cut to a bounded width, so an error in a 300 KB line prints a window around the
column, not the line.

`LaminaError.render()` (and `str()`) is the compact form without echoes: the head line and the
note lines, which is what the Python API and tests compare; `render(excerpts=True)` is what the
tools print.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn, TextIO

from xdsl.dialects.builtin import FileLineColLoc
from xdsl.ir import Operation
from xdsl.utils.exceptions import ParseError

# an echoed source line shows at most this many characters (a window around the column)
ECHO_WIDTH = 120
# a message longer than this is cut in the middle (some xDSL messages quote whole inputs)
MESSAGE_WIDTH = 2000
# the texts of this many input files are kept for echoes (the most recently parsed ones)
KEPT_SOURCES = 16
_ELLIPSIS = "..."


@dataclass(frozen=True)
class SourceLoc:
    """A 1-based position in a named source file.

    Line 0 means the file as a whole and column 0 the line as a whole: a model file (.onnx) has
    no lines, so importers name the file and say which node in the message, and a Python frame
    knows its line but not its column (the torch importer finds the op's name on the line when
    it can read the file). They print as `model.onnx`, `model.py:42` and `model.py:42:22`."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        if self.line <= 0:
            return self.file
        if self.col <= 0:
            return f"{self.file}:{self.line}"
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True)
class Note:
    """A note attached to an error: extra context, at its own position when it has one."""

    message: str
    loc: SourceLoc | None = None


class LaminaError(Exception):
    """A user-facing error: a message and, where known, the source position it refers to."""

    severity = "error"

    def __init__(self, message: str, loc: SourceLoc | None = None,
                 notes: Sequence[str | Note] = ()):
        super().__init__(message)
        self.message = message
        self.loc = loc
        self.notes = tuple(n if isinstance(n, Note) else Note(n) for n in notes)

    def render(self, excerpts: bool = False) -> str:
        """The diagnostic; with `excerpts`, each positioned line is followed by its source line
        and a caret (what the tools print)."""
        lines = format_diagnostic(self.loc, self.severity, self.message, excerpts)
        for note in self.notes:
            lines += format_diagnostic(note.loc, "note", note.message, excerpts)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()


class UsageError(LaminaError):
    """A bad command line, reported the way argparse words it: `prog: error: message`."""

    def __init__(self, prog: str, message: str):
        super().__init__(message)
        self.prog = prog

    def render(self, excerpts: bool = False) -> str:
        return f"{self.prog}: error: {self.message}"


def with_article(noun: str) -> str:
    """`noun` after "a" or "an" as it is spoken ("an int", "a float", "an OrderedDict", "a
    uint8"): messages name a Python type or a kind they are given, which may start with any
    letter, so the article cannot be written into the message."""
    word = noun.lstrip("_").lower()
    vowel = word[:1] in ("a", "e", "i", "o") or \
        (word[:1] == "u" and not word.startswith(("uni", "use", "usa", "uint", "utf", "user")))
    return f"{'an' if vowel else 'a'} {noun}"


def format_diagnostic(loc: SourceLoc | None, severity: str, message: str,
                      excerpts: bool = True) -> list[str]:
    """`file:line:col: severity: message`, then (with `excerpts`, when the text of `loc`'s file
    is known) the source line and a caret under the column."""
    message = _cut_message(message)
    head = f"{loc}: {severity}: {message}" if loc else f"{severity}: {message}"
    if not excerpts or loc is None:
        return [head]
    return [head, *source_excerpt(loc)]


def _cut_message(message: str) -> str:
    if len(message) <= MESSAGE_WIDTH:
        return message
    keep = MESSAGE_WIDTH // 2
    return f"{message[:keep]} {_ELLIPSIS} ({len(message) - 2 * keep} characters cut) " \
           f"{_ELLIPSIS} {message[-keep:]}"


# file name -> chunks of its text as (number of lines before the chunk, chunk text); an input
# split with --split-input-file is recorded one chunk at a time
_SOURCES: OrderedDict[str, list[tuple[int, str]]] = OrderedDict()


def record_source(name: str, text: str | bytes, line_offset: int = 0) -> None:
    """Remember the text of input `name` (starting after `line_offset` lines) for echoes.

    A chunk at offset 0 starts the file afresh; later chunks of a split input are added to it."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if line_offset == 0 or name not in _SOURCES:
        _SOURCES[name] = []
    _SOURCES[name].append((line_offset, text))
    _SOURCES.move_to_end(name)
    while len(_SOURCES) > KEPT_SOURCES:
        _SOURCES.popitem(last=False)


def source_line(file: str, line: int) -> str | None:
    """Line `line` (1-based) of recorded input `file`, without its newline; None if unknown."""
    for offset, text in reversed(_SOURCES.get(file, ())):
        if line <= offset:
            continue
        lines = text.split("\n", line - offset)
        if line - offset <= len(lines):
            return lines[line - offset - 1].rstrip("\r")
    return None


def source_excerpt(loc: SourceLoc) -> list[str]:
    """The source line at `loc` and a caret line under its column ([] when the text is unknown),
    cut to a window of ECHO_WIDTH characters around the column for long lines."""
    text = source_line(loc.file, loc.line) if loc.line > 0 and loc.col > 0 else None
    if text is None:
        return []
    col = len(text[:loc.col - 1].expandtabs(8))  # 0-based display column (LLVM expands tabs)
    shown = "".join(c if c.isprintable() else "?" for c in text.expandtabs(8))
    col = min(col, len(shown))
    start, prefix, suffix = 0, "", ""
    if len(shown) > ECHO_WIDTH:
        start = max(0, min(col - ECHO_WIDTH // 2, len(shown) - ECHO_WIDTH))
        prefix = _ELLIPSIS if start > 0 else ""
        suffix = _ELLIPSIS if start + ECHO_WIDTH < len(shown) else ""
        shown = shown[start:start + ECHO_WIDTH]
    return [prefix + shown + suffix, " " * (len(prefix) + col - start) + "^"]


def op_loc(op: Operation | None) -> SourceLoc | None:
    """The source position recorded for `op` (or its nearest located ancestor) while parsing."""
    while op is not None:
        loc = op.location
        if isinstance(loc, FileLineColLoc):
            return SourceLoc(loc.filename.data, loc.line.data, loc.column.data)
        op = op.parent_op()
    return None


def error_at(op: Operation | None, message: str, notes: Sequence[str | Note] = ()) -> LaminaError:
    """A `LaminaError` positioned at `op`'s source line."""
    return LaminaError(message, op_loc(op), notes)


def note_at(op: Operation | None, message: str) -> Note:
    """A note positioned at `op`'s source line (e.g. where a value is defined)."""
    return Note(message, op_loc(op))


def from_parse_error(err: ParseError) -> LaminaError:
    """Convert xDSL's parse error (which knows its span) into a positioned `LaminaError`."""
    name, line, col = err.span.get_location()
    return LaminaError(err.msg.strip(), SourceLoc(name, line, col))


def fail(message: str, loc: SourceLoc | None = None) -> NoReturn:
    raise LaminaError(message, loc)


def report(err: BaseException, stream: TextIO | None = None) -> int:
    """Print `err` as a diagnostic with its source excerpts and return the exit code (always 1)."""
    stream = stream if stream is not None else sys.stderr
    if isinstance(err, ParseError):
        err = from_parse_error(err)
    if isinstance(err, LaminaError):
        print(err.render(excerpts=True), file=stream)
    else:
        print(f"error: {type(err).__name__}: {_cut_message(str(err))}", file=stream)
    return 1
