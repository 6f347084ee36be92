"""The one channel through which every Lamina pass says why it decided what it did.

A pass never prints. It calls `self.explain(op, "message")` (see `LaminaPass`); the line is kept
only when the pass runs with `explain=true` (or the driver's `--explain`, which switches it on for
every Lamina pass), and the drivers write the lines to stderr as

    [pass-name] file:line:col: message

so explanations can be filtered, diffed and pinned by filecheck tests (`2>&1`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, TextIO

from lamina.ir.core.diagnostics import LaminaError, op_loc
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass


@dataclass
class ExplainLog:
    """Explanation lines collected while a pass runs."""

    pass_name: str
    lines: list[str] = field(default_factory=list)

    def add(self, op: Operation | None, message: str) -> None:
        loc = op_loc(op) if op is not None else None
        where = f"{loc}: " if loc is not None else ""
        self.lines.append(f"[{self.pass_name}] {where}{message}")

    def flush(self, stream: TextIO | None = None) -> None:
        out = stream if stream is not None else sys.stderr
        for line in self.lines:
            print(line, file=out)
        self.lines.clear()


@dataclass(frozen=True)
class LaminaPass(ModulePass):
    """Base of Lamina's passes: a function of (module, options) that can explain itself.

    Subclasses implement `run(ctx, module, log)`; `log` is an `ExplainLog` when explanations are on
    and None otherwise, so passes pay nothing for explanations nobody asked for.
    """

    name: ClassVar[str] = "lamina-pass"
    # option (field name) -> smallest value it accepts; checked when the pass is built (with the
    # options' types), so a bad value is one diagnostic before any pass runs
    minimums: ClassVar[dict[str, int]] = {}
    # option -> the values it accepts
    choices: ClassVar[dict[str, tuple[str, ...]]] = {}
    explain: bool = False

    def __post_init__(self) -> None:
        hints = _type_hints(type(self))
        for dash, f in option_fields(type(self)).items():
            value, kind = getattr(self, f.name), hints[f.name]
            if not _has_type(value, kind):
                raise LaminaError(f"option '{dash}' for {self.name} expects {describe_type(kind)}, "
                                  f"got {_value_text(value)}")
        for option, low in self.minimums.items():
            value = getattr(self, option)
            if value < low:
                raise LaminaError(f"option '{_dash(option)}' for {self.name} must be at least "
                                  f"{low}, got {value}")
        for option, allowed in self.choices.items():
            value = getattr(self, option)
            if value not in allowed:
                *head, last = allowed
                words = f"{', '.join(head)} or {last}" if head else last
                raise LaminaError(f"option '{_dash(option)}' for {self.name} must be {words}, "
                                  f"got '{value}'")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        log = ExplainLog(self.name) if self.explain else None
        try:
            self.run(ctx, op, log)
        finally:
            if log is not None:
                log.flush()

    def run(self, ctx: Context, module: ModuleOp, log: ExplainLog | None) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement run()")


def _dash(field_name: str) -> str:
    return field_name.replace("_", "-")


def option_fields(cls: type[ModulePass]) -> dict[str, dataclasses.Field[Any]]:
    """A pass's options as pipelines spell them (`max-group-size`) -> their dataclass fields;
    the pass's own options first, `explain` (every Lamina pass has it) last."""
    fields = [f for f in dataclasses.fields(cls) if f.init and f.name != "name"]
    fields.sort(key=lambda f: f.name == "explain")
    return {_dash(f.name): f for f in fields}


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


# the option types passes declare, as messages name them
_TYPE_WORDS: dict[object, str] = {bool: "true or false", int: "an integer",
                                  float: "a finite number", str: "a string"}


def describe_type(kind: object) -> str:
    """How a message names an option of type `kind` ("an integer")."""
    return _TYPE_WORDS.get(kind, str(kind))


def _has_type(value: object, kind: object) -> bool:
    # exact types: a bool is not taken for an integer (`max-group-size=true`)
    if kind in (bool, int):
        return type(value) is kind
    if kind is float:  # an integer is a number too (`lr=1`); a bool is not
        return type(value) in (float, int) and math.isfinite(value)  # type: ignore[arg-type]
    return not isinstance(kind, type) or isinstance(value, kind)


def _value_text(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, str) else str(value)
