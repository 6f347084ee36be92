"""The ONNX backend node suite as an oracle: every in-scope case imports, runs and matches.

`benchmarks/onnx_conformance.py` regenerates onnx's node cases with onnx's own generator (once per
test session, into a temporary directory), imports every case whose graph uses only ops the
importer maps, runs it on the NumPy interpreter (and the JAX backend where installed) and
compares each output at onnx's backend-test tolerances. This test fails on any failed case, and
on a drop in the number of passing cases or a new out-of-scope reason (so a converter that starts
refusing what it used to import cannot hide as "out of scope").
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from strategies import is_long_run

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "onnx_conformance.py"
# what the README lists as deliberately out of scope (the refusal kinds, plus the suite's cases
# whose inputs or outputs are sequences / optionals / maps)
KNOWN_REASONS = {"unsupported op", "unsupported dtype", "unsupported attribute", "dynamic shape",
                 "control flow", "non-tensor inputs or outputs"}
MIN_PASSED = 994      # measured: see the README's conformance counts
JAX_EVERY = 8         # the share of in-scope cases `make test` also runs on the JAX backend


def _harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("onnx_conformance", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["onnx_conformance"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def conformance(tmp_path_factory: pytest.TempPathFactory):
    harness = _harness()
    root = harness.generate_cases(tmp_path_factory.mktemp("onnx-node-cases"))
    # every case on numpy; on jax every 8th (all of them under `make test-long`)
    return harness, harness.check_all(root, jax_every=1 if is_long_run() else JAX_EVERY)


def test_no_in_scope_case_fails(conformance) -> None:
    harness, results = conformance
    lines = harness.report(results)
    failed = [r for r in results if r.status == "failed"]
    assert not failed, "\n".join(lines)
    assert lines[-1].endswith("out of scope") and ", 0 failed, " in lines[-1]


def test_coverage_does_not_shrink(conformance) -> None:
    _, results = conformance
    passed = sum(r.status == "passed" for r in results)
    assert passed >= MIN_PASSED, f"{passed} cases pass, fewer than the {MIN_PASSED} measured"
    reasons = {r.reason.split(":")[0] for r in results if r.status == "out of scope"}
    assert reasons <= KNOWN_REASONS, reasons - KNOWN_REASONS
    assert len(results) > 1800, "the generator wrote fewer cases than onnx's suite has"


def test_jax_meets_a_sample_of_every_kind_of_case(conformance) -> None:
    """The cases run on JAX are spread over the suite (every JAX_EVERY-th loaded case), so
    each op family still meets XLA in `make test`."""
    _, results = conformance
    on_jax = [r for r in results if r.status == "passed" and "jax" in r.backends]
    if not any("jax" in r.backends for r in results if r.status == "passed"):
        pytest.skip("jax is not installed")
    passed = [r for r in results if r.status == "passed"]
    assert len(on_jax) >= len(passed) // JAX_EVERY - 1, (len(on_jax), len(passed))
    families = {r.name.split("_")[1] for r in on_jax}
    assert len(families) >= 40, sorted(families)


def test_expanded_function_bodies_are_covered(conformance) -> None:
    _, results = conformance
    names = {r.name for r in results if r.status == "passed"}
    for op in ("layer_normalization", "softmax", "gelu", "logsoftmax"):
        assert any(op in n and n.endswith("_expanded") for n in names), op
        assert any(op in n and not n.endswith("_expanded") for n in names), op


def test_the_readme_states_the_measured_counts(conformance) -> None:
    """The README's counts are the ones this run measures (so the note stays true)."""
    harness, results = conformance
    last = harness.report(results)[-1]
    readme = (BENCH.parent.parent / "README.md").read_text(encoding="utf-8")
    stated = re.search(r"\*\*(\d+ passed, \d+ failed, \d+ out of scope)\*\*", readme)
    assert stated is not None and stated[1] == last, (stated and stated[1], last)


def test_every_pass_under_a_loosened_tolerance_is_listed_with_it() -> None:
    """A bf16 or f16 output one ulp off passes only under its type's loosened tolerance, and the
    report names the case under that tolerance; a pass at rtol is not listed, two ulps more fail."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    import numpy as np

    harness = _harness()
    want = np.array([1.0, 1.5], dtype=ml_dtypes.bfloat16)
    one_ulp = np.array([1.0, 1.5 + 2.0**-7], dtype=np.float32)       # a bf16 ulp at 1.5
    assert harness._compare(want.astype(np.float32), want)[::2] == (True, "")
    assert harness._compare(one_ulp, want)[::2] == (True, "two bfloat16 ulps (rtol 2^-6)")
    assert not harness._compare(np.array([1.0, 1.5 + 2.0**-4], dtype=np.float32), want)[0]
    half = np.array([1.0, 1.5], dtype=np.float16)
    assert harness._compare(half + np.float16(2.0**-9), half)[::2] == (
        True, "two float16 ulps (rtol 2^-9)")
    results = [harness.Result("test_a_bf16", "passed", loosened="two bfloat16 ulps (rtol 2^-6)"),
               harness.Result("test_b", "passed"),
               harness.Result("test_c_bf16", "passed", loosened="two bfloat16 ulps (rtol 2^-6)"),
               harness.Result("test_d_fp16", "passed", loosened="two float16 ulps (rtol 2^-9)")]
    lines = harness.report(results)
    assert lines[:2] == [
        "2 passed only within two bfloat16 ulps (rtol 2^-6), not at rtol 0.001: test_a_bf16, "
        "test_c_bf16",
        "1 passed only within two float16 ulps (rtol 2^-9), not at rtol 0.001: test_d_fp16"]
