"""Reusable test-data generators for Lamina (see `strategies.programs`)."""

from __future__ import annotations


def scaled(factor: float, minimum: int = 5) -> int:
    """`factor` times the active Hypothesis profile's max_examples (at least `minimum`).

    Use as `@settings(max_examples=scaled(0.3))` so example counts follow HYPOTHESIS_PROFILE.
    """
    from hypothesis import settings

    current = settings.default
    assert current is not None, "no Hypothesis profile loaded (tests/conftest.py loads one)"
    return max(minimum, int(current.max_examples * factor))
