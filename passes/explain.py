"""The one channel through which every Lamina pass says why it decided what it did.

A pass never prints. It calls `self.explain(op, "message")` (see `LaminaPass`); the line is kept
only when the pass runs with `explain=true` (or the driver's `--explain`, which switches it on for
every Lamina pass), and the drivers write the lines to stderr as

    [pass-name] file:line:col: message

so explanations can be filtered, diffed and pinned by filecheck tests (`2>&1`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import ClassVar, TextIO

from lamina.ir.diagnostics import op_loc
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
    # option (field name) -> smallest value it accepts; checked when the pass is built, so a bad
    # value is a "bad option" diagnostic before any pass runs
    minimums: ClassVar[dict[str, int]] = {}
    # option -> the values it accepts
    choices: ClassVar[dict[str, tuple[str, ...]]] = {}
    explain: bool = False

    def __post_init__(self) -> None:
        for option, low in self.minimums.items():
            value = getattr(self, option)
            if value < low:
                raise ValueError(f"{option.replace('_', '-')} must be at least {low}, got {value}")
        for option, allowed in self.choices.items():
            value = getattr(self, option)
            if value not in allowed:
                *head, last = allowed
                words = f"{', '.join(head)} or {last}" if head else last
                raise ValueError(f"{option.replace('_', '-')} must be {words}, got '{value}'")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        log = ExplainLog(self.name) if self.explain else None
        try:
            self.run(ctx, op, log)
        finally:
            if log is not None:
                log.flush()

    def run(self, ctx: Context, module: ModuleOp, log: ExplainLog | None) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement run()")
