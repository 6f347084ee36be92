"""Small helpers more than one test file needs, kept once here rather than copied per file."""

from __future__ import annotations

from typing import Any

import pytest
from lamina.ir.text.source import parse_text, verify
from xdsl.dialects.builtin import ModuleOp


def module(text: str, name: str = "t.mlir") -> ModuleOp:
    """`text` parsed and verified (as `lamina-opt` would before any pass)."""
    m = parse_text(text, name)
    verify(m)
    return m


def count_calls(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[int]:
    """Replace `owner.name` by a wrapper that counts its calls (one list entry each), for tests
    that say how often a plan or a kernel is made."""
    calls: list[int] = []
    real = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls
