"""Building and running pass pipelines with Lamina's error rules.

Both drivers (`lamina-opt`, `lamina-run -p`) build pipelines here, so an unknown pass, a bad option
or a pass that leaves invalid IR produce the same one-line diagnostics everywhere.
"""

from __future__ import annotations

import dataclasses
import difflib
import os

from lamina.ir.diagnostics import LaminaError
from lamina.ir.source import verify
from lamina.passes.explain import LaminaPass
from lamina.passes.registry import available_passes
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline
from xdsl.utils.arg_spec import parse_pipeline
from xdsl.utils.exceptions import ArgSpecParseError


def build_pipeline(spec: str, explain: bool = False) -> list[ModulePass]:
    """The passes named by `spec` (`pass-a{opt=1},pass-b`); LaminaError on any problem."""
    if not spec.strip():
        return []
    registry = available_passes()
    try:
        specs = list(parse_pipeline(spec))
    except ArgSpecParseError as e:
        raise LaminaError(f"invalid pass pipeline '{spec}': {str(e).splitlines()[-1].strip()}") \
            from None
    passes: list[ModulePass] = []
    for s in specs:
        if s.name not in registry:
            close = difflib.get_close_matches(s.name, registry, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise LaminaError(f"unknown pass '{s.name}'{hint}; available passes: "
                              f"{', '.join(sorted(registry))}")
        cls = registry[s.name]()
        try:
            p = cls.from_pass_spec(s)
        except (Exception, ArgSpecParseError) as e:  # xDSL raises several kinds here
            fields = ", ".join(f.name.replace("_", "-") for f in dataclasses.fields(cls)) or "none"
            raise LaminaError(f"bad option for pass '{s.name}': {str(e).strip()} "
                              f"(options: {fields})") from None
        if explain and isinstance(p, LaminaPass):
            p = dataclasses.replace(p, explain=True)
        passes.append(p)
    return passes


def run_pipeline(ctx: Context, module: ModuleOp, passes: list[ModulePass]) -> None:
    """Apply `passes` in order, verifying after each one; failures become LaminaError."""

    def after(prev: ModulePass | None, mod: ModuleOp, nxt: ModulePass | None) -> None:
        if prev is None:
            return
        try:
            verify(mod)
        except LaminaError as e:
            raise LaminaError(f"after pass '{prev.name}': {e.message}", e.loc) from None

    pipeline = PassPipeline(tuple(passes), after)
    try:
        pipeline.apply(ctx, module)
    except LaminaError:
        raise
    except Exception as e:  # a pass bug must still end in a diagnostic, not a traceback
        if os.environ.get("LAMINA_TRACEBACK"):
            raise
        raise LaminaError(f"internal error while running passes: {type(e).__name__}: {e} "
                          "(set LAMINA_TRACEBACK=1 for the traceback)") from None
