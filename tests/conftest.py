"""Test setup: `tests/` on sys.path (so tests import `strategies.programs`) and Hypothesis profiles.

Profiles (pick with the environment variable HYPOTHESIS_PROFILE, default "ci"). Every property
test states its own example count, `@settings(max_examples=examples(N))` with
`from strategies import examples` (tests/strategies/__init__.py; tests/test_test_budget.py checks
that each one does, within a bound); a profile scales that count:
  ci        N examples, derandomized: `make test` and CI draw the same examples every run, so a
            red run is reproducible and never luck; deadline=None, too_slow suppressed
  thorough  20 x N examples, randomized, and `strategies.signatures` widens the compiled backend's
            fixed shapes to random ones: `make test-long` (failures are saved in .hypothesis/ and
            replayed first next time)
  dev       N / 4 examples (at least 1), randomized: quick local iteration
The profile's own max_examples is only a fallback for a test that states no count.

JAX: XLA reads its host device count once, when jax starts its backends, so it is set here,
before any test imports jax: 8 host CPU devices (the 2 x 4 and 2 x 2 x 2 meshes of the JAX
backend's tests; subprocesses inherit it). JAX_PLATFORMS defaults to cpu so the same 8 devices
exist on any machine (a GPU machine runs its GPU checks with JAX_PLATFORMS set explicitly).
"""

from __future__ import annotations

import os
import sys

_COUNT_FLAG = "--xla_force_host_platform_device_count"
os.environ["XLA_FLAGS"] = " ".join(
    [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(_COUNT_FLAG)]
    + [f"{_COUNT_FLAG}=8"])
os.environ.setdefault("JAX_PLATFORMS", "cpu")

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)
SAMPLES_DIR = os.path.join(os.path.dirname(TESTS_DIR), "samples")   # samples/gpt2_model.py
if SAMPLES_DIR not in sys.path:
    sys.path.append(SAMPLES_DIR)

from hypothesis import HealthCheck, settings  # noqa: E402
from strategies import LONG_PROFILE, examples, profile_name  # noqa: E402

# shared by every profile; spelled as keywords (not a **dict) so the checker sees each one's type
_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("ci", max_examples=examples(20, "ci"), derandomize=True, deadline=None,
                          suppress_health_check=_SUPPRESS)
settings.register_profile(LONG_PROFILE, max_examples=examples(20, LONG_PROFILE), deadline=None,
                          suppress_health_check=_SUPPRESS)
settings.register_profile("dev", max_examples=examples(20, "dev"), deadline=None,
                          suppress_health_check=_SUPPRESS)
settings.load_profile(profile_name())
