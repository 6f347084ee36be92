"""Building and running pass pipelines with Lamina's error rules.

Both drivers (`lamina-opt`, `lamina-run -p`) and the Python API build pipelines here, so an unknown
pass, a bad option or a pass that leaves invalid IR produce the same one-line diagnostics everywhere.

The pipeline syntax is xdsl-opt's (`pass-a{opt-one=3 flag=true},pass-b`), read by this module's own
parser rather than xDSL's `parse_pipeline`, because that one leaked its wording (`Provided arguments
["max_group"] not found ...`, underscores for the dashes the user wrote), took `max-group-size=true`
as the integer 1, raised ValueError on integers over 4,300 digits and refused an unquoted path
(`target=my.toml`: "Unknown token"). Here:

- options are separated by spaces; a value is a run of characters without spaces or braces
  (`target=my.toml`, `target=../t/my.toml`), or a quoted string ("..." or '...', with `\\"`,
  `\\'` and `\\\\` escapes) for anything else;
- every value is converted by the option's declared type: `true`/`false` for a bool (a bool option
  written alone, `{bucket}`, means true), a 64-bit decimal integer for an int, a finite decimal
  number (`1e-3`, `0.9`) for a float, any non-empty text for a string; an empty value, an option
  given twice, an unknown option (with a did-you-mean and the list of options) are each one
  diagnostic naming the pass and the option;
- range and choice rules are the pass's own (`LaminaPass.__post_init__`), so `lamina.apply` and a
  pass built in Python obey the same rules;
- a pass whose `target` option is left empty (`fuse-elementwise`: no target known) gets the target
  of the nearest later pass that has one, else of the nearest earlier one (`_share_target`): in
  `fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=tiny}` fusion keeps every
  kernel within tiny's sram.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass

from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.text.result_names import keep_result_names, names_by_function
from lamina.ir.text.source import verify
from lamina.passes.explain import LaminaPass, describe_type, option_fields
from lamina.passes.registry import SUMMARIES, available_passes
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_KEY = re.compile(r"[A-Za-z0-9_-]+")
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
# digits of the largest 64-bit integer: longer literals are refused before int() sees them
_INT_DIGITS = 19
_QUOTES = "\"'"


@dataclass(frozen=True)
class PassSpec:
    """One pipeline element as written: the pass name and its options' raw values (None for an
    option written without `=`)."""

    name: str
    options: dict[str, str | None]


class _SpecReader:
    """A hand-written reader of the pipeline syntax (module docstring), with column positions."""

    def __init__(self, spec: str) -> None:
        self.spec, self.pos = spec, 0

    def error(self, reason: str, pos: int | None = None) -> LaminaError:
        column = (self.pos if pos is None else pos) + 1
        return LaminaError(f"invalid pass pipeline '{self.spec}': column {column}: {reason}")

    def skip_spaces(self) -> None:
        while self.pos < len(self.spec) and self.spec[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        return self.spec[self.pos] if self.pos < len(self.spec) else ""

    def read(self) -> list[PassSpec]:
        specs: list[PassSpec] = []
        while True:
            self.skip_spaces()
            m = _NAME.match(self.spec, self.pos)
            if m is None:
                raise self.error("expected a pass name")
            self.pos = m.end()
            self.skip_spaces()
            options: dict[str, str | None] = {}
            if self.peek() == "{":
                options = self.read_options(m.group())
                self.skip_spaces()
            specs.append(PassSpec(m.group(), options))
            if self.pos == len(self.spec):
                return specs
            if self.peek() != ",":
                raise self.error(f"expected ',' or the end after pass '{m.group()}'")
            self.pos += 1

    def read_options(self, pass_name: str) -> dict[str, str | None]:
        opening = self.pos
        self.pos += 1
        options: dict[str, str | None] = {}
        while True:
            self.skip_spaces()
            if self.pos == len(self.spec):
                raise self.error(f"the options of '{pass_name}' have no closing '}}'", opening)
            if self.peek() == "}":
                self.pos += 1
                return options
            m = _KEY.match(self.spec, self.pos)
            if m is None:
                raise self.error("expected an option name")
            key, self.pos = m.group(), m.end()
            if key in options:
                raise LaminaError(f"option '{key}' given twice for {pass_name}")
            value = None
            if self.peek() == "=":
                self.pos += 1
                value = self.read_value(key)
            options[key] = value
            if self.peek() not in ("", "}") and not self.peek().isspace():
                raise self.error(f"expected a space or '}}' after option '{key}'")

    def read_value(self, key: str) -> str:
        quote = self.peek()
        if quote and quote in _QUOTES:
            start, out = self.pos, []
            self.pos += 1
            while self.pos < len(self.spec) and self.spec[self.pos] != quote:
                c = self.spec[self.pos]
                if c == "\\" and self.pos + 1 < len(self.spec):
                    self.pos += 1
                    c = self.spec[self.pos]
                out.append(c)
                self.pos += 1
            if self.pos == len(self.spec):
                raise self.error(f"the value of option '{key}' has no closing {quote}", start)
            self.pos += 1
            return "".join(out)
        start = self.pos
        while self.peek() and not self.peek().isspace() and self.peek() not in "{}" + _QUOTES:
            if self.peek() == "=":
                raise self.error(f"unexpected '=' in the value of option '{key}' (separate options "
                                 "with spaces: {a=1 b=2}; quote a value that contains '=')")
            self.pos += 1
        if self.peek() and self.peek() in "{" + _QUOTES:
            raise self.error(f"unexpected {self.peek()} in the value of option '{key}' (quote the "
                             "whole value)")
        return self.spec[start:self.pos]


def parse_pipeline_spec(spec: str) -> list[PassSpec]:
    """The elements of `spec` as written; LaminaError (with the column) on a syntax error."""
    if not spec.strip():
        return []
    return _SpecReader(spec).read()


def _show(raw: str, width: int = 40) -> str:
    return raw if len(raw) <= width else f"{raw[:width]}... ({len(raw)} characters)"


def convert_option(pass_name: str, key: str, kind: object, raw: str | None) -> object:
    """The value of option `key` written as `raw`, converted to the option's type `kind`."""
    where = f"option '{key}' for {pass_name}"
    if raw is None:
        if kind is bool:
            return True
        raise LaminaError(f"{where} needs a value ({key}=...)")
    if raw == "":
        raise LaminaError(f"{where} has an empty value (expected {describe_type(kind)})")
    if kind is bool:
        if raw not in ("true", "false"):
            raise LaminaError(f"{where} expects true or false, got '{_show(raw)}'")
        return raw == "true"
    if kind is int:
        if not _INT.fullmatch(raw):
            raise LaminaError(f"{where} expects an integer, got '{_show(raw)}'")
        digits = len(raw.lstrip("+-"))
        value = int(raw) if digits <= _INT_DIGITS else None
        if value is None or not -(2 ** 63) <= value < 2 ** 63:
            got = f"a {digits}-digit number" if value is None else raw
            raise LaminaError(f"{where} expects a 64-bit integer, got {got}")
        return value
    if kind is float:
        value = float(raw) if _FLOAT.fullmatch(raw) else None
        if value is None or not math.isfinite(value):
            raise LaminaError(f"{where} expects a finite number (like 1e-3 or 0.9), got "
                              f"'{_show(raw)}'")
        return value
    if kind is str:
        return raw
    raise LaminaError(f"{where} has type {kind}, which a pass pipeline cannot set")


def _unknown_option(pass_name: str, key: str, fields: dict[str, dataclasses.Field[object]],
                    hints: dict[str, object]) -> LaminaError:
    if not fields:
        return LaminaError(f"unknown option '{key}' for {pass_name}; {pass_name} takes no options")
    names = list(fields)
    close = [key.replace("_", "-")] if key.replace("_", "-") in fields else \
        difflib.get_close_matches(key, names, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    listing = ", ".join(
        f"{dash} ({describe_type(hints[f.name])}, default {_default_text(f.default)})"
        for dash, f in fields.items())
    return LaminaError(f"unknown option '{key}' for {pass_name}{hint}; options: {listing}")


def _default_text(value: object) -> str:
    if value == "":
        return '""'
    return str(value).lower() if isinstance(value, bool) else str(value)


def instantiate(cls: type[ModulePass], spec: PassSpec) -> ModulePass:
    """The pass `cls` with the options of `spec`, each converted and checked."""
    fields = option_fields(cls)
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, object] = {}
    for key, raw in spec.options.items():
        f = fields.get(key)
        if f is None:
            raise _unknown_option(spec.name, key, fields, hints)
        kwargs[f.name] = convert_option(spec.name, key, hints[f.name], raw)
    try:
        return cls(**kwargs)
    except LaminaError:
        raise
    except (TypeError, ValueError) as e:  # a pass outside Lamina validating in its own way
        raise LaminaError(f"bad options for {spec.name}: {e}") from None


@dataclasses.dataclass(frozen=True)
class PassOption:
    """One option of a pass as a pipeline spells it: `name=default`, taking `kind` ("an integer")."""

    name: str
    kind: str
    default: str


@dataclasses.dataclass(frozen=True)
class PassDescription:
    """What `lamina-opt --list-passes` says about a pass: its name, one line, its options."""

    name: str
    summary: str
    options: tuple[PassOption, ...]


def describe_passes() -> list[PassDescription]:
    """Every registered pass with its summary and options, read from the registry and each pass
    class (its docstring's first line, its dataclass fields and their types and defaults), so
    the listing cannot drift from what a pipeline accepts."""
    out: list[PassDescription] = []
    for name, factory in available_passes().items():
        cls = factory()
        hints = typing.get_type_hints(cls)
        options = tuple(PassOption(dash, describe_type(hints[f.name]), _default_text(f.default))
                        for dash, f in option_fields(cls).items())
        out.append(PassDescription(name, SUMMARIES.get(name) or _summary(cls), options))
    return out


def _summary(cls: type[ModulePass]) -> str:
    """The first sentence-line of `cls`'s own docstring, without a pointer to the module's
    (a dataclass without a docstring gets its signature as `__doc__`: no summary)."""
    doc = cls.__dict__.get("__doc__") or ""
    lines = [line.strip() for line in doc.strip().splitlines()]
    if not lines or lines[0].startswith(f"{cls.__name__}("):
        return ""
    return lines[0].replace(" (see the module docstring)", "")


def build_pipeline(spec: str, explain: bool = False) -> list[ModulePass]:
    """The passes named by `spec` (`pass-a{opt=1},pass-b`); LaminaError on any problem."""
    registry = available_passes()
    passes: list[ModulePass] = []
    for s in parse_pipeline_spec(spec):
        if s.name not in registry:
            close = difflib.get_close_matches(s.name, registry, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise LaminaError(f"unknown pass '{s.name}'{hint}; available passes: "
                              f"{', '.join(sorted(registry))}")
        p = instantiate(registry[s.name](), s)
        if explain and isinstance(p, LaminaPass):
            p = dataclasses.replace(p, explain=True)
        passes.append(p)
    return _share_target(passes)


def _share_target(passes: list[ModulePass]) -> list[ModulePass]:
    """Give a pass whose `target` option is left empty (fuse-elementwise: "no target known") the
    target of the nearest pass after it that names one (assign-memory-tiers, insert-collectives;
    their default counts), else of the nearest before it: the pipeline compiles for that target,
    so a kernel fusion makes must fit it."""
    named = [t if isinstance(t := getattr(p, "target", ""), str) else "" for p in passes]
    out = list(passes)
    for i, p in enumerate(passes):
        if not isinstance(p, LaminaPass) or named[i] or not hasattr(p, "target"):
            continue
        shared = next((t for t in named[i + 1:] if t), None) or \
            next((t for t in reversed(named[:i]) if t), None)
        if shared is not None:
            out[i] = dataclasses.replace(p, target=shared)
    return out


@dataclass(frozen=True)
class PassRun:
    """What an observer of `run_pipeline` learns after each pass."""

    index: int                     # position in the pipeline
    pass_: ModulePass
    module: ModuleOp               # the module after the pass (verified unless verify_seconds is None)
    seconds: float                 # wall time of the pass
    verify_seconds: float | None   # wall time of the verifier after it; None when not verified


def run_pipeline(ctx: Context, module: ModuleOp, passes: list[ModulePass],
                 verify_each: bool = True,
                 observer: Callable[[PassRun], None] | None = None) -> None:
    """Apply `passes` in order, verifying after each one (unless `verify_each` is False, as
    mlir-opt's `--verify-each=false`); failures become LaminaError. `observer` is called after
    each pass and its verification (timing, IR dumps)."""
    for index, p in enumerate(passes):
        start = time.perf_counter()
        names = names_by_function(module)
        _apply(ctx, module, p)
        keep_result_names(module, names)   # results keep the names the program gave them
        applied = time.perf_counter()
        verify_seconds = None
        if verify_each:
            try:
                verify(module)
            except LaminaError as e:
                raise LaminaError(f"after pass '{p.name}': {e.message}", e.loc, e.notes) from None
            verify_seconds = time.perf_counter() - applied
        if observer is not None:
            observer(PassRun(index, p, module, applied - start, verify_seconds))


def _apply(ctx: Context, module: ModuleOp, p: ModulePass) -> None:
    try:
        p.apply(ctx, module)
    except LaminaError:
        raise
    except Exception as e:  # a pass bug must still end in a diagnostic, not a traceback
        if os.environ.get("LAMINA_TRACEBACK"):
            raise
        raise LaminaError(f"internal error while running passes: {type(e).__name__}: {e} "
                          "(set LAMINA_TRACEBACK=1 for the traceback)") from None
