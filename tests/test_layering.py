"""The package's architecture rules, checked: layers, one op table, generated typed op classes.

- The import contracts (`[tool.importlinter]` in pyproject.toml: ir <- analysis <- passes |
  backends | frontends <- cli; the numpy, jax and compiled backends independent but for compiled
  building on numpy) hold, and they are not vacuous: the same check on a copy of the package with
  one upward import, or one import of a backend by another, added fails.
- No pass or backend names an op in a string literal: what they know about ops comes from the
  table's rows and the typed op classes.
- `lamina/ir/lamina.py` is what `lamina.ir.opgen` generates from the table, with one class per row.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lamina
from lamina.ir import lamina as dialect
from lamina.ir import opgen
from lamina.ir.optable import OPS
from lamina.ir.placement import PARTIAL_KINDS

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"),
                           "--no-cache"], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300)


def test_import_contracts_hold() -> None:
    r = _lint_imports()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def _lint_with_import(tmp_path: Path, module: str, line: str) -> subprocess.CompletedProcess[str]:
    """lint-imports on a copy of the installed package (its files, links resolved) in which
    `module` (a path under the package) ends with the import `line`."""
    pkg = Path(lamina.__file__).resolve().parent
    src = Path(lamina.__file__).parent            # the install's tree (links into the sources)
    copy = tmp_path / "lamina"
    shutil.copytree(src, copy, symlinks=False, ignore=shutil.ignore_patterns("__pycache__"))
    assert (copy / module).exists(), f"unexpected install layout under {src} ({pkg})"
    with open(copy / module, "a") as f:
        f.write(f"\n{line}  # noqa\n")
    return _lint_imports({**os.environ, "PYTHONPATH": str(tmp_path)})


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    """Make one ir module import a pass: lint-imports fails naming the broken layers contract."""
    r = _lint_with_import(tmp_path, "ir/dtypes.py", "from lamina.passes import pipeline as _upward")
    assert r.returncode != 0, r.stdout
    assert "BROKEN" in r.stdout and "lamina.ir.dtypes -> lamina.passes.pipeline" in r.stdout


def test_a_backend_importing_another_breaks_the_contract(tmp_path: Path) -> None:
    """Make the JAX backend's lowering import the NumPy backend's SPMD runner: lint-imports fails
    naming the backends' independence contract and the import."""
    r = _lint_with_import(tmp_path, "backends/jax/lower.py",
                          "from lamina.backends.numpy import spmd as _sideways")
    assert r.returncode != 0, r.stdout
    assert "backends numpy | jax | compiled are independent" in r.stdout
    assert "BROKEN" in r.stdout and "lamina.backends.jax.lower -> lamina.backends.numpy.spmd" \
        in r.stdout


def _string_literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef)
                  and n.body and isinstance(n.body[0], ast.Expr)
                  and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def test_passes_and_backends_name_no_op() -> None:
    """`"gelu"` or `"lamina.dropout"` in a pass or backend is a list of ops kept outside the table.
    ("sum" and "max" are also the kinds of a pending reduction, a different vocabulary.)"""
    names = set(OPS) | {f"lamina.{n}" for n in OPS}
    allowed = set(PARTIAL_KINDS)
    found = []
    for folder in ("passes", "backends"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, value in _string_literals(path):
                if value in names and value not in allowed:
                    found.append(f"{path.relative_to(ROOT)}:{line}: {value!r}")
    assert not found, "op names outside the op table:\n" + "\n".join(found)


def test_generated_op_classes_are_current() -> None:
    assert opgen.target_path().read_text(encoding="utf-8") == opgen.render(), \
        "ir/lamina.py is stale: run python -m lamina.ir.opgen"


def test_one_typed_class_per_row() -> None:
    from lamina.ir.lamina import DropoutOp, LayernormOp

    assert set(dialect.OP_CLASSES) == set(OPS)
    for name, cls in dialect.OP_CLASSES.items():
        assert cls.INFO is OPS[name]
        assert cls.name == f"lamina.{name}"
        assert getattr(dialect, opgen.class_name(OPS[name])) is cls
    # typed accessors from the generated IRDL fields
    assert {"input", "seed"} <= set(vars(DropoutOp)) and {"scale", "bias"} <= set(vars(LayernormOp))
