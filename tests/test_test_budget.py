"""The test suite's time budget, checked on the test sources, so `make test` cannot regrow unseen.

`make test` once ran for the better part of an hour, looking hung: example counts were fractions
and multiples of the profile's default (`scaled(25)` was 2,500 examples, each a new shape and so a
new numba compile), and plain `@given` tests ran the default 100. The rules, read from each test
module's syntax tree (nothing is imported or run):

- every `@given` test has a `@settings(max_examples=examples(N))` (directly, or through a module
  constant bound to `examples(N)` or to `settings(max_examples=examples(N), ...)`), N a literal;
- N is at most `MAX_EXAMPLES`, and at most `MAX_COSTLY_EXAMPLES` in a module whose examples run
  the compiled (numba) or jax backend;
- nothing in tests/ uses `scaled`, the old profile-relative count.

`examples` itself (the count under each profile) is checked here too.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from strategies import (
    LONG_PROFILE,
    MAX_COSTLY_EXAMPLES,
    MAX_EXAMPLES,
    MULTIPLIERS,
    examples,
    is_long_run,
    signatures,
)

TESTS = Path(__file__).resolve().parent
# a module runs costly examples when it runs the compiled or jax backend (numba compiles a kernel
# per new signature; jax traces and compiles per shape)
COSTLY = re.compile(r"\bjax\b|['\"]compiled['\"]|backends\.compiled|backends import compiled")


@dataclass(frozen=True)
class GivenTest:
    module: str
    name: str
    line: int
    count: int | None          # the literal N of examples(N); None when there is none
    costly: bool


def _name_of(node: ast.expr) -> str | None:
    """`given` for `given(...)`, `hypothesis.given(...)` and `given` alike."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _examples_count(node: ast.expr, constants: dict[str, ast.expr]) -> int | None:
    """N when `node` is `examples(N)` (N an int literal) or a module constant bound to one."""
    if isinstance(node, ast.Name) and node.id in constants:
        node = constants[node.id]
    if (isinstance(node, ast.Call) and _name_of(node.func) == "examples" and len(node.args) == 1
            and isinstance(node.args[0], ast.Constant) and type(node.args[0].value) is int):
        return node.args[0].value
    return None


def _settings_count(node: ast.expr, constants: dict[str, ast.expr]) -> int | None:
    """N of a `settings(max_examples=examples(N), ...)` decorator or of a constant bound to one."""
    if isinstance(node, ast.Name) and node.id in constants:
        node = constants[node.id]
    if not (isinstance(node, ast.Call) and _name_of(node.func) == "settings"):
        return None
    for kw in node.keywords:
        if kw.arg == "max_examples":
            return _examples_count(kw.value, constants)
    return None


def given_tests(path: Path) -> list[GivenTest]:
    """Every function of the module decorated with `given`, with its stated example count."""
    source = path.read_text()
    tree = ast.parse(source, str(path))
    constants = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)}
    costly = bool(COSTLY.search(source))
    found: list[GivenTest] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if not any(_name_of(d) == "given" for d in node.decorator_list):
            continue
        counts = [c for d in node.decorator_list if (c := _settings_count(d, constants)) is not None]
        found.append(GivenTest(path.name, node.name, node.lineno, counts[0] if counts else None,
                               costly))
    return found


def _modules() -> list[Path]:
    return sorted(TESTS.glob("test_*.py"))


def test_the_scan_sees_the_suites_property_tests() -> None:
    """Not vacuous: the suite has dozens of property tests, in the modules known to hold them."""
    tests = [t for p in _modules() for t in given_tests(p)]
    assert len(tests) >= 60, len(tests)
    modules = {t.module for t in tests}
    assert {"test_compiled_attention.py", "test_compiled_matmul_root.py", "test_ops.py",
            "test_programs.py", "test_intervals.py"} <= modules
    assert all(t.costly for t in tests if t.module.startswith(("test_compiled", "test_jax")))


def test_every_property_test_states_a_small_count() -> None:
    bad = []
    for path in _modules():
        for t in given_tests(path):
            bound = MAX_COSTLY_EXAMPLES if t.costly else MAX_EXAMPLES
            if t.count is None:
                bad.append(f"{t.module}:{t.line}: {t.name}: no @settings(max_examples=examples(N))")
            elif t.count > bound:
                bad.append(f"{t.module}:{t.line}: {t.name}: examples({t.count}) exceeds {bound}"
                           + (" (its module runs the compiled or jax backend)" if t.costly else ""))
    assert not bad, "\n".join(bad)


def test_nothing_uses_scaled() -> None:
    """`scaled(f)` (f x the profile's default) is gone: a count must read as a count."""
    users = []
    for path in sorted(TESTS.rglob("*.py")):
        if "filecheck" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Name) and node.id == "scaled":
                users.append(f"{path.relative_to(TESTS)}:{node.lineno}")
            elif isinstance(node, ast.alias) and node.name == "scaled":
                users.append(f"{path.relative_to(TESTS)}: imports scaled")
    assert not users, users


@pytest.mark.parametrize("source, count", [
    ("@settings(max_examples=examples(7))\n@given(st.integers())\ndef test_a(x): pass\n", 7),
    ("@given(st.integers())\n@settings(max_examples=examples(3), deadline=None)\n"
     "def test_a(x): pass\n", 3),
    ("E = examples(4)\n@settings(max_examples=E)\n@given(st.integers())\ndef test_a(x): pass\n", 4),
    ("S = settings(max_examples=examples(9))\n@S\n@hypothesis.given(st.integers())\n"
     "def test_a(x): pass\n", 9),
    ("@given(st.integers())\ndef test_a(x): pass\n", None),
    ("@settings(max_examples=300)\n@given(st.integers())\ndef test_a(x): pass\n", None),
    ("@settings(max_examples=examples(n))\n@given(st.integers())\ndef test_a(x): pass\n", None),
])
def test_the_scan_reads_each_spelling(tmp_path: Path, source: str, count: int | None) -> None:
    """The forms the rule accepts give their N; a missing count, a bare literal (which the
    profiles do not scale) or a computed N give none, so the budget test reports them."""
    path = tmp_path / "test_x.py"
    path.write_text(source)
    [t] = given_tests(path)
    assert t.count == count


def test_examples_is_the_count_under_ci_and_scales_with_the_profile() -> None:
    assert examples(7, "ci") == 7
    assert examples(7, LONG_PROFILE) == round(7 * MULTIPLIERS[LONG_PROFILE]) > 7
    assert 1 <= examples(7, "dev") < 7
    assert examples(1, "dev") == 1
    with pytest.raises(ValueError, match="unknown Hypothesis profile 'nope'"):
        examples(3, "nope")
    with pytest.raises(ValueError, match="at least one example"):
        examples(0, "ci")


def test_signatures_are_fixed_except_in_the_long_run() -> None:
    """Outside the long run only the fixed values are drawn (a bounded set of kernels)."""
    from hypothesis import find
    from hypothesis import strategies as st
    from hypothesis.errors import NoSuchExample
    fixed = [(1, 2), (3, 4)]
    wide = st.tuples(st.integers(5, 9), st.integers(5, 9))
    with pytest.raises(NoSuchExample):
        find(signatures(fixed, wide, "ci"), lambda v: v not in fixed)
    assert find(signatures(fixed, wide, "ci"), lambda v: v == (3, 4)) == (3, 4)
    assert not is_long_run("ci") and is_long_run(LONG_PROFILE)
    assert find(signatures(fixed, wide, LONG_PROFILE), lambda v: v not in fixed) not in fixed
