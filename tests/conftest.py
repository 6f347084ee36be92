"""Test setup: `tests/` on sys.path (so tests import `strategies.programs`) and Hypothesis profiles.

Profiles (pick with the environment variable HYPOTHESIS_PROFILE, default "ci"):
  ci        deadline=None, too_slow suppressed, max_examples=100, derandomized: `make test` and
            CI draw the same examples every run, so a red run is reproducible and never luck
  thorough  max_examples=2000, randomized: explores new examples each run (failures are saved
            in .hypothesis/ and replayed first next time)
  dev       max_examples=20 (quick local iteration)

Tests that need fewer or more examples than a normal test should scale with the profile instead of
hard-coding a count: `@settings(max_examples=scaled(0.3))` with
`from strategies import scaled` (30 under ci, 600 under thorough).
"""

from __future__ import annotations

import os
import sys

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

from hypothesis import HealthCheck, settings  # noqa: E402

# shared by every profile; spelled as keywords (not a **dict) so the checker sees each one's type
_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("ci", max_examples=100, derandomize=True, deadline=None,
                          suppress_health_check=_SUPPRESS)
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=_SUPPRESS)
settings.register_profile("dev", max_examples=20, deadline=None, suppress_health_check=_SUPPRESS)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


from strategies import scaled  # noqa: E402,F401  (re-exported for tests)
