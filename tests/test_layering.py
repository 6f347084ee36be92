"""The package's architecture rules, checked: layers, one op table, generated typed op classes.

- The import contracts (`[tool.importlinter]` in pyproject.toml: ir <- analysis <- passes |
  backends | frontends <- cli; the numpy, jax and compiled backends independent but for compiled
  building on numpy) hold, and they are not vacuous: the same check on a copy of the package with
  one upward import, or one import of a backend by another, added fails.
- No pass or backend names an op in a string literal: what they know about ops comes from the
  table's rows and the typed op classes.
- No two `lamina.ir` modules import each other, directly or through others (TYPE_CHECKING
  imports included): the op table, its rules, the op classes and the builders form a tree.
- `lamina/ir/lamina.py` is what `lamina.ir.opgen` generates from the table, with one class per row.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import lamina
from lamina.ir import lamina as dialect
from lamina.ir import opgen
from lamina.ir.collectives import COLLECTIVES
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


def _op_names() -> set[str]:
    """Every name a string literal could spell an op of the dialect by: `lamina.X` for each op of
    the `lamina` dialect (table rows, `lamina.fused` and its `yield`, mesh, memory and collective
    ops), and the bare `X` for all but the collectives, whose bare names are also the kinds of
    resharding steps (`lamina.analysis.reshard_plan.Step.kind`), a vocabulary of their own."""
    full = {op.name for op in dialect.Lamina.operations}
    collectives = {cls.name for cls in COLLECTIVES}
    assert {f"lamina.{n}" for n in OPS} <= full and collectives <= full
    return full | {n.removeprefix("lamina.") for n in full - collectives}


def test_passes_and_backends_name_no_op() -> None:
    """`"gelu"`, `"lamina.dropout"` or `"lamina.fused"` in a pass or backend is a list of ops kept
    outside the table and the dialect. ("sum" and "max" are also the kinds of a pending reduction,
    a different vocabulary.)"""
    names = _op_names()
    allowed = set(PARTIAL_KINDS)
    found = []
    for folder in ("passes", "backends"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, value in _string_literals(path):
                if value in names and value not in allowed:
                    found.append(f"{path.relative_to(ROOT)}:{line}: {value!r}")
    assert not found, "op names outside the op table:\n" + "\n".join(found)


def test_op_names_cover_the_dialect() -> None:
    """The check above knows the ops outside the table too, so it is not vacuous for them."""
    names = _op_names()
    assert {"fused", "lamina.fused", "yield", "mesh", "free", "move", "lamina.all_reduce",
            "gelu", "lamina.gelu"} <= names
    assert "all_reduce" not in names


def _ir_cycles(graph: grimp.ImportGraph) -> list[str]:
    """Every import between `lamina.ir` modules that closes a cycle, as the cycle's chain."""
    ir = {m for m in graph.modules if m.startswith("lamina.ir.")}
    cycles = []
    for module in sorted(ir):
        for dep in sorted(graph.find_modules_directly_imported_by(module) & ir):
            back = graph.find_shortest_chain(importer=dep, imported=module)
            if back is not None:
                cycles.append(" -> ".join((module, *back)))
    return cycles


def _import_graph() -> grimp.ImportGraph:
    """The package's imports as lint-imports sees them, TYPE_CHECKING imports included: a cycle
    closed only under TYPE_CHECKING still ties the modules together for pyright and for readers,
    and becomes an import-time failure the day one of them needs the name at run time."""
    return grimp.build_graph("lamina", exclude_type_checking_imports=False, cache_dir=None)


def test_ir_modules_import_no_cycle() -> None:
    cycles = _ir_cycles(_import_graph())
    assert not cycles, "import cycles among lamina.ir modules:\n" + "\n".join(cycles)


def test_an_import_cycle_is_found() -> None:
    """The rules' module naming the builder (which imports the op classes, which import the
    table, which imports the rules) is the cycle this check was written against."""
    graph = _import_graph()
    graph.add_import(importer="lamina.ir.vjp", imported="lamina.ir.program_builder")
    cycles = _ir_cycles(graph)
    assert any(c.startswith("lamina.ir.optable -> lamina.ir.vjp -> lamina.ir.program_builder")
               for c in cycles), cycles


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
