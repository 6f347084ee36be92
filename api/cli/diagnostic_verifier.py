"""`lamina-opt --verify-diagnostics`: check the diagnostics a program produces against the
`expected-*` annotations written in it, as MLIR's `SourceMgrDiagnosticVerifierHandler` does.

    %0 = lamina.exp %x tensor<4xf32>   // expected-error {{Expected ':'}}
    // expected-error @+1 {{lamina.add: operand shapes (4, 8), (3,) do not broadcast}}
    %1 = lamina.add %a, %b : (tensor<4x8xf32>, tensor<3xf32>) -> tensor<4x8xf32>

An annotation is `expected-(error|warning|note|remark)[-re] [@WHERE] {{TEXT}}` at the end of a
line. WHERE is the line the diagnostic must be on: absent (this line), `+N` / `-N` (relative),
`above` / `below` (the nearest line that is not itself an annotation) or `unknown` (a diagnostic
without a position). A diagnostic matches when its kind and line agree and its message contains
TEXT; with `-re`, TEXT is literal text with `{{regex}}` parts. A diagnostic's notes are checked
like diagnostics of kind `note`, at their own positions. Every annotation nobody matched is an
error (`expected error "..." was not produced`, at the annotation), and so is every diagnostic no
annotation matched (`unexpected error: ...`, at the diagnostic), each in MLIR's wording.

Two things go beyond MLIR, both so that a test can never pass by accident:
- a column: `@+1:22`, `@-2:5`, `@above:3`, `@below:3` or `@:22` (this line), in the spirit of
  Swift's `-verify` (MLIR's annotations carry no column); a diagnostic at another column is an
  error naming both columns. Without a column any column matches, as in MLIR.
- a line that looks like an annotation (`expected-error` followed by `@` or `{`) but does not
  parse is an error, where MLIR would silently ignore it.
A near miss (right line and text, wrong kind or column) is reported once, not also as "not
produced".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lamina.ir.core.diagnostics import LaminaError, SourceLoc

_ANNOTATION = re.compile(
    r"expected-(?P<kind>error|note|remark|warning)(?P<re>-re)? *"
    r"(?:(?P<at>@)(?P<where>[+-][0-9]+|above|below|unknown)?(?::(?P<col>[0-9]+))?)? *"
    r"\{\{(?P<text>.*)\}\}$")
_LOOKS_LIKE = re.compile(r"expected-(?:error|note|remark|warning)(?:-re)? *[@{]")
_FORM = "expected-error [@+N|@-N|@above|@below|@unknown][:COL] {{message}}"


@dataclass(frozen=True)
class Diagnostic:
    """One produced diagnostic: its kind, position (None: unknown) and message."""

    kind: str
    loc: SourceLoc | None
    message: str


@dataclass
class Expectation:
    """One `expected-*` annotation."""

    kind: str
    line: int                      # the line the diagnostic must be on (0: an unknown position)
    col: int | None                # the column, when the annotation names one
    text: str
    regex: re.Pattern[str] | None  # for `-re` annotations
    where: SourceLoc               # the annotation itself, where reports about it point
    matched: bool = False
    reported: bool = False         # a near miss was already reported for it

    @property
    def unknown(self) -> bool:
        return self.line == 0

    def matches_text(self, message: str) -> bool:
        return self.regex.search(message) is not None if self.regex else self.text in message


def diagnostics_of(err: LaminaError) -> list[Diagnostic]:
    """An error and its notes as the diagnostics the annotations are checked against (a note
    without a position of its own is at the error's position, as in MLIR)."""
    return [Diagnostic(err.severity, err.loc, err.message),
            *(Diagnostic("note", n.loc or err.loc, n.message) for n in err.notes)]


def _regex(text: str) -> re.Pattern[str]:
    """MLIR's `-re` text: literal text with `{{regex}}` parts."""
    parts, rest = [], text
    while (start := rest.find("{{")) >= 0:
        end = rest.find("}}", start + 2)
        if end < 0:
            raise ValueError("found start of regex with no end '}}'")
        parts += [re.escape(rest[:start]), f"({rest[start + 2:end]})"]
        rest = rest[end + 2:]
    parts.append(re.escape(rest))
    try:
        return re.compile("".join(parts))
    except re.error as e:
        raise ValueError(f"invalid regex: {e}") from None


def parse_expectations(text: str, file: str, line_offset: int = 0
                       ) -> tuple[list[Expectation], list[Diagnostic]]:
    """The annotations in `text` (a whole input, or a `--split-input-file` chunk whose first
    line is line `line_offset + 1` of `file`), and an error for each malformed one."""
    expectations: list[Expectation] = []
    problems: list[Diagnostic] = []
    below: list[Expectation] = []   # waiting for the next line that is not an annotation
    last_plain = line_offset        # the last line that was not an annotation
    lines = text.split("\n")
    for i, raw in enumerate(lines):
        number = line_offset + i + 1
        line = raw.rstrip()
        m = _ANNOTATION.search(line)
        if m is None or (m.group("at") and not (m.group("where") or m.group("col"))) \
                or (m.group("where") == "unknown" and m.group("col")):
            if (bad := _LOOKS_LIKE.search(line)) is not None:
                problems.append(Diagnostic("error", SourceLoc(file, number, bad.start() + 1),
                                           f"malformed annotation; the form is {_FORM}"))
                continue
            for e in below:
                e.line = number
            below.clear()
            last_plain = number
            continue
        where = SourceLoc(file, number, m.start() + 1)
        try:
            regex = _regex(m.group("text")) if m.group("re") else None
        except ValueError as e:
            problems.append(Diagnostic("error", where, str(e)))
            continue
        col = int(m.group("col")) if m.group("col") else None
        e = Expectation(m.group("kind"), number, col, m.group("text"), regex, where)
        spec = m.group("where") or ""
        if spec[:1] in ("+", "-"):
            e.line = number + int(spec)
        elif spec == "unknown":
            e.line = 0
        elif spec == "above":
            e.line = last_plain
        elif spec == "below":
            e.line = line_offset + len(lines)  # if no plain line follows (never matches)
            below.append(e)
        expectations.append(e)
    return expectations, problems


def check(produced: list[Diagnostic], expectations: list[Expectation], file: str
          ) -> list[Diagnostic]:
    """The errors of matching `produced` against `expectations` (annotations of `file`):
    unexpected diagnostics, near misses, then annotations not produced. Empty: all agree."""
    failures: list[Diagnostic] = []
    for d in produced:
        failures += _match(d, expectations, file)
    for e in expectations:
        if not e.matched and not e.reported:
            failures.append(Diagnostic("error", e.where,
                                       f'expected {e.kind} "{e.text}" was not produced'))
    return failures


def _match(d: Diagnostic, expectations: list[Expectation], file: str) -> list[Diagnostic]:
    located = d.loc is not None and d.loc.file == file
    if d.loc is not None and not located:
        candidates: list[Expectation] = []  # a position in another file: no annotation there
    else:
        candidates = [e for e in expectations if e.unknown != located]
    near: tuple[Expectation, str] | None = None
    for e in candidates:
        if (d.loc is not None and e.line != d.loc.line) or not e.matches_text(d.message):
            continue
        if e.kind != d.kind:
            near = near or (e, f"'{d.kind}' diagnostic emitted when expecting a '{e.kind}'")
        elif e.col is not None and d.loc is not None and e.col != d.loc.col:
            near = near or (e, f'expected {e.kind} "{e.text}" at column {e.col} was produced at '
                               f"column {d.loc.col}")
        else:
            e.matched = True
            return []
    if near is not None:
        near[0].reported = True
        return [Diagnostic("error", near[0].where, near[1])]
    return [Diagnostic("error", d.loc, f"unexpected {d.kind}: {d.message}")]
