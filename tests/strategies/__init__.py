"""Reusable test-data generators for Lamina (see `strategies.programs`), and the test budget.

Every Hypothesis test states how many examples it runs as a count, `examples(n)`, chosen by what
one example costs (a pure-Python property: 20-50; one that compiles numba kernels or runs jax:
3-10). The count is what `make test` runs; the profile (HYPOTHESIS_PROFILE, registered in
tests/conftest.py) only scales it: the long run (`make test-long`) multiplies it, `dev` shrinks it.
A count instead of a fraction of the profile's default is what keeps `make test` short: with
fractions, a test asking for "25 x the default" quietly ran 2,500 numba compiles.
`tests/test_test_budget.py` checks that every test states its count and that none exceeds the
bounds below, so the budget cannot regrow unnoticed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from operator import itemgetter
from typing import Any, TypeVar

from hypothesis import strategies as st

T = TypeVar("T")

PROFILE_ENV = "HYPOTHESIS_PROFILE"
DEFAULT_PROFILE = "ci"
LONG_PROFILE = "thorough"
# how each profile scales a test's count: ci runs it as written (derandomized, so `make test` is
# reproducible), the long run 20 times over (randomized: new examples each run), dev a quarter
MULTIPLIERS: dict[str, float] = {DEFAULT_PROFILE: 1.0, LONG_PROFILE: 20.0, "dev": 0.25}

# the most a test may ask for: any test, and one whose examples compile kernels (numba) or run jax
MAX_EXAMPLES = 50
MAX_COSTLY_EXAMPLES = 10


def profile_name() -> str:
    """The Hypothesis profile this run uses (what tests/conftest.py loads)."""
    return os.environ.get(PROFILE_ENV, DEFAULT_PROFILE)


def _multiplier(profile: str | None) -> float:
    name = profile_name() if profile is None else profile
    if name not in MULTIPLIERS:
        known = ", ".join(sorted(MULTIPLIERS))
        raise ValueError(f"unknown Hypothesis profile {name!r} ({PROFILE_ENV}); known: {known}")
    return MULTIPLIERS[name]


def examples(n: int, profile: str | None = None) -> int:
    """The number of examples a test that asks for `n` runs under `profile` (default: this run's).

    Use as `@settings(max_examples=examples(20))`: 20 under ci (`make test`), 400 in the long run,
    5 under dev; never fewer than 1.
    """
    if n < 1:
        raise ValueError(f"a property test runs at least one example, not {n}")
    return max(1, round(n * _multiplier(profile)))


def is_long_run(profile: str | None = None) -> bool:
    """Whether this is the long randomized run (`make test-long`), which may widen the draws."""
    _multiplier(profile)
    return (profile_name() if profile is None else profile) == LONG_PROFILE


def signatures(fixed: Sequence[T], wide: st.SearchStrategy[T] | None = None,
               profile: str | None = None) -> st.SearchStrategy[T]:
    """One of the `fixed` values; in the long run also anything `wide` draws.

    For tests whose examples compile a kernel per distinct shape (the compiled backend): drawing
    shapes from a short fixed list bounds the compiles `make test` does (numba caches a kernel per
    signature, so the list's kernels are compiled once however many examples run), while the long
    run explores shapes at random.
    """
    if not fixed:
        raise ValueError("signatures() needs at least one fixed value")
    base = st.sampled_from(list(fixed))
    if wide is not None and is_long_run(profile):
        return st.one_of(base, wide)
    return base


def signature_parts(fixed: Sequence[tuple[Any, ...]],
                    wide: st.SearchStrategy[tuple[Any, ...]] | None = None, *, key: str,
                    profile: str | None = None) -> tuple[st.SearchStrategy[Any], ...]:
    """One strategy per field of a signature drawn by `signatures(fixed, wide)`, all from the
    same draw (a `st.shared` value under `key`, which must be unique to the test): a test keeps
    one argument per dimension (`@given(rows=mm[0], k=mm[1], ...)`) while the dimensions
    together come from the fixed list."""
    sizes = {len(f) for f in fixed}
    if len(sizes) != 1:
        raise ValueError(f"signature_parts() needs fixed tuples of one length, got {sorted(sizes)}")
    whole = st.shared(signatures(fixed, wide, profile), key=key)
    return tuple(whole.map(itemgetter(i)) for i in range(sizes.pop()))
