"""Which result of a step function updates which argument (placeholder until the updates branch)."""

from __future__ import annotations

from xdsl.dialects.builtin import DenseArrayBase
from xdsl.dialects.func import FuncOp

UPDATES_ATTR = "lamina.updates"


def updates_of(func: FuncOp) -> dict[int, int]:
    """Result index -> the index of the argument it replaces."""
    attr = func.attributes.get(UPDATES_ATTR)
    if not isinstance(attr, DenseArrayBase):
        return {}
    return {r: int(a) for r, a in enumerate(attr.get_values()) if int(a) >= 0}
