"""The package's architecture rules, checked: layers, one op table, generated typed op classes.

- The import contracts (`[tool.importlinter]` in pyproject.toml: ir <- analysis <- passes |
  backends | frontends <- cli; the numpy, jax and compiled backends independent but for compiled
  building on numpy; inside `lamina.ir`, its sub-packages by concern: builder | text <- ops <-
  buffers <- mesh | autodiff <- core, every module of ir/ in one of them; no module of ir,
  analysis, passes, backends or frontends importing the API, the `lamina` root) hold, and they
  are not vacuous: the same check on a copy of the package with one upward import, one import of
  a backend by another, one import of the API from below or one ir module outside the layers
  added fails.
- No pass or backend names an op in a string literal: what they know about ops comes from the
  table's rows and the typed op classes.
- No pass, backend or analysis spells the collectives' vocabulary (a collective kind, an
  algorithm, a reduce kind, a placement op's attribute name) as a string literal: it comes from the
  table of collective kinds (`lamina.ir.mesh.collective_kinds`); the precise rule is
  `test_collective_vocabulary_stays_in_its_table`'s docstring.
- No two `lamina.ir` modules import each other, directly or through others (TYPE_CHECKING
  imports included): the op table, its rules, the op classes and the builders form a tree.
- `lamina/ir/ops/lamina.py` is what `lamina.ir.ops.opgen` generates from the table, with one class per row.
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
from lamina.ir.mesh.collective_kinds import ALGORITHMS, COLLECTIVE_KINDS, REDUCE_KINDS
from lamina.ir.mesh.collectives import COLLECTIVES
from lamina.ir.mesh.placement import PARTIAL_KINDS
from lamina.ir.ops import lamina as dialect
from lamina.ir.ops import opgen
from lamina.ir.ops.optable import OPS

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


def _lint_with_import(tmp_path: Path, module: str, line: str, *,
                      new: bool = False) -> subprocess.CompletedProcess[str]:
    """lint-imports on a copy of the installed package (its files, links resolved) in which
    `module` (a path under the package; with `new`, a module added there) ends with the import
    `line`."""
    pkg = Path(lamina.__file__).resolve().parent
    src = Path(lamina.__file__).parent            # the install's tree (links into the sources)
    copy = tmp_path / "lamina"
    shutil.copytree(src, copy, symlinks=False, ignore=shutil.ignore_patterns("__pycache__"))
    assert (copy / module).exists() != new, f"unexpected install layout under {src} ({pkg})"
    with open(copy / module, "a") as f:
        f.write(f"\n{line}  # noqa\n")
    return _lint_imports({**os.environ, "PYTHONPATH": str(tmp_path)})


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    """Make one ir module import a pass: lint-imports fails naming the broken layers contract."""
    r = _lint_with_import(tmp_path, "ir/core/dtypes.py", "from lamina.passes import pipeline as _upward")
    assert r.returncode != 0, r.stdout
    assert "BROKEN" in r.stdout and "lamina.ir.core.dtypes -> lamina.passes.pipeline" in r.stdout


def test_a_backend_importing_another_breaks_the_contract(tmp_path: Path) -> None:
    """Make the JAX backend's lowering import the NumPy backend's SPMD runner: lint-imports fails
    naming the backends' independence contract and the import."""
    r = _lint_with_import(tmp_path, "backends/jax/lower.py",
                          "from lamina.backends.numpy import spmd as _sideways")
    assert r.returncode != 0, r.stdout
    assert "backends numpy | jax | compiled | iree are independent" in r.stdout
    assert "BROKEN" in r.stdout and "lamina.backends.jax.lower -> lamina.backends.numpy.spmd" \
        in r.stdout


IR_CONTRACT = "ir by concern: builder | text <- ops <- buffers <- mesh | autodiff <- core"
API_CONTRACT = "the Python API (lamina, lamina.executable) is imported by no layer below it"


def test_ir_core_importing_the_op_table_breaks_the_ir_layers(tmp_path: Path) -> None:
    """The shared vocabulary (core) is the bottom of lamina.ir: its dtypes naming the op table is
    an upward import inside ir/, which the ir-wide layers contract alone would not see."""
    r = _lint_with_import(tmp_path, "ir/core/dtypes.py",
                          "from lamina.ir.ops import optable as _upward")
    assert r.returncode != 0, r.stdout
    assert f"{IR_CONTRACT} BROKEN" in r.stdout
    assert "lamina.ir.core.dtypes -> lamina.ir.ops.optable" in r.stdout


def test_placement_importing_the_op_table_breaks_the_ir_layers(tmp_path: Path) -> None:
    """The import this layout removed (placement reading `optable.OpInfo`; it reads sharding's
    protocol instead): with it back, mesh is no longer below ops."""
    r = _lint_with_import(tmp_path, "ir/mesh/placement.py",
                          "from lamina.ir.ops.optable import OpInfo as _row")
    assert r.returncode != 0, r.stdout
    assert f"{IR_CONTRACT} BROKEN" in r.stdout
    assert "lamina.ir.mesh.placement -> lamina.ir.ops.optable" in r.stdout


def test_an_ir_module_outside_the_layers_breaks_the_ir_layers(tmp_path: Path) -> None:
    """The contract is exhaustive: a new flat module of ir/ must be given a layer."""
    r = _lint_with_import(tmp_path, "ir/stray.py", "from lamina.ir.core import dtypes as _d",
                          new=True)
    assert r.returncode != 0, r.stdout
    assert f"{IR_CONTRACT} BROKEN" in r.stdout
    assert "not listed as layers" in r.stdout and "- lamina.ir.stray" in r.stdout


def test_a_backend_importing_the_api_breaks_the_api_contract(tmp_path: Path) -> None:
    """The NumPy backend reading `lamina.__version__` (the root, the Python API): the forbidden
    contract names the import, which no layers contract can (the root is above its children)."""
    r = _lint_with_import(tmp_path, "backends/numpy/spmd.py", "import lamina as _api")
    assert r.returncode != 0, r.stdout
    assert f"{API_CONTRACT} BROKEN" in r.stdout
    assert "lamina.backends.numpy.spmd -> lamina" in r.stdout


def test_an_indirect_import_of_the_api_breaks_the_api_contract(tmp_path: Path) -> None:
    """An ir module importing the API's executable is found too, and so is every module of the
    layers above that reaches the API through it."""
    r = _lint_with_import(tmp_path, "ir/text/result_names.py",
                          "from lamina.executable import Executable as _exe")
    assert r.returncode != 0, r.stdout
    assert f"{API_CONTRACT} BROKEN" in r.stdout
    assert "lamina.ir.text.result_names -> lamina.executable" in r.stdout


def _string_literals(path: Path) -> list[tuple[int, str]]:
    return [(n.lineno, value) for n, value in _literal_nodes(_parse(path))]


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _literal_nodes(tree: ast.Module) -> list[tuple[ast.Constant, str]]:
    """The string constants of `tree` that are not docstrings (f-strings' fixed parts included)."""
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef)
                  and n.body and isinstance(n.body[0], ast.Expr)
                  and isinstance(n.body[0].value, ast.Constant)}
    return [(n, n.value) for n in ast.walk(tree)
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


KIND_WORDS = {w for c in COLLECTIVE_KINDS.values() for w in (c.kind, c.op_name)} | set(ALGORITHMS)
ATTRIBUTE_WORDS = {a for c in COLLECTIVE_KINDS.values() for a in c.attrs}
PLACEMENT_MODULES = {"lamina.ir.mesh.placement", "lamina.ir.mesh.sharding", "lamina.ir.mesh.collectives",
                     "lamina.ir.mesh.collective_kinds"}
COLLECTIVE_FOLDERS = ("passes", "backends", "analysis")


def _handles_placements(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.ImportFrom) and n.module in PLACEMENT_MODULES
               or isinstance(n, ast.Import) and any(a.name in PLACEMENT_MODULES for a in n.names)
               for n in ast.walk(tree))


def _is_properties(e: ast.expr) -> bool:
    return isinstance(e, ast.Attribute) and e.attr == "properties"


def _attribute_keys(tree: ast.Module) -> set[int]:
    """The ids of the expressions used as an op attribute's key: `x.properties[K]`,
    `x.properties.get/pop/setdefault(K, ...)`, `x.int_attr(K)`, `K in x.properties`."""
    keys: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Subscript) and _is_properties(n.value):
            keys.add(id(n.slice))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.args and (
                n.func.attr == "int_attr" or n.func.attr in ("get", "pop", "setdefault")
                and _is_properties(n.func.value)):
            keys.add(id(n.args[0]))
        elif isinstance(n, ast.Compare) and isinstance(n.ops[0], ast.In | ast.NotIn) \
                and _is_properties(n.comparators[0]):
            keys.add(id(n.left))
    return keys


def collective_words(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, literal) of every string literal in `tree` that spells the collectives' vocabulary
    outside their table (the rule: `test_collective_vocabulary_stays_in_its_table`)."""
    reduce_kinds = set(REDUCE_KINDS) if _handles_placements(tree) else set()
    keys = _attribute_keys(tree)
    return [(n.lineno, v) for n, v in _literal_nodes(tree)
            if v in KIND_WORDS or v in reduce_kinds or v in ATTRIBUTE_WORDS and id(n) in keys]


def test_collective_vocabulary_stays_in_its_table() -> None:
    """The rule, for every module of passes/, backends/ and analysis/, docstrings aside:

    - no string literal is a collective kind (`all_reduce`, ..., `reshard`), its op name
      (`lamina.all_reduce`) or a collective algorithm (`ring`, `tree`, `hierarchical`); these
      words mean nothing else there;
    - in a module that handles placements (it imports `lamina.ir.mesh.placement`, `.sharding`,
      `.collectives` or `.collective_kinds`), no string literal is a reduce kind (`sum`, `max`);
      elsewhere (the compiled backend's own trace) the words name other things;
    - no string literal is a placement op's attribute name (`axes`, `kind`, `algorithm`, `inner`,
      `dim`, `split_dim`, `concat_dim`) where it is the key of an op attribute: `x.properties[K]`,
      `x.properties.get(K)` (or pop / setdefault), `x.int_attr(K)`, `K in x.properties`. The same
      words are also op-table attributes (`axes`, `dim`), `--stats-json` field names and pass
      options, which stay spelt out.
    The words come from `lamina.ir.mesh.collective_kinds` (its records, `REDUCE_KINDS`, `ALGORITHMS`),
    so a new kind or attribute is covered as soon as it is in the table."""
    found = []
    for folder in COLLECTIVE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found += [f"{path.relative_to(ROOT)}:{line}: {value!r}"
                      for line, value in collective_words(_parse(path))]
    assert not found, "the collectives' vocabulary outside its table:\n" + "\n".join(found)


def test_the_collective_vocabulary_check_catches_each_rule() -> None:
    """The check is not vacuous: a module breaking each rule once is caught on those lines, and
    the uses the rule leaves alone are not."""
    src = (
        "from lamina.ir.mesh.sharding import Spec\n"
        "A = {'all_gather': 1.0}\n"                        # 2: a kind
        "B = op.algorithm_name() or 'ring'\n"              # 3: an algorithm
        "C = spec.partial_kind == 'max'\n"                 # 4: a reduce kind
        "D = op.properties['inner']\n"                     # 5: an attribute key
        "E = op.int_attr('split_dim')\n"                   # 6
        "F = {'kind': 1, 'axes': [], 'algorithm': 2}\n"    # a stats record: allowed
        "G = attrs['axes']\n"                              # an op-table attribute: allowed
    )
    assert [line for line, _ in collective_words(ast.parse(src))] == [2, 3, 4, 5, 6]
    no_placements = ast.parse("X = reduce('sum', x)\n")
    assert collective_words(no_placements) == []
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
    graph.add_import(importer="lamina.ir.autodiff.vjp", imported="lamina.ir.builder")
    cycles = _ir_cycles(graph)
    assert any(c.startswith("lamina.ir.ops.optable -> lamina.ir.autodiff.vjp -> lamina.ir.builder")
               for c in cycles), cycles


def test_generated_op_classes_are_current() -> None:
    assert opgen.target_path().read_text(encoding="utf-8") == opgen.render(), \
        "ir/ops/lamina.py is stale: run python -m lamina.ir.ops.opgen"


def test_one_typed_class_per_row() -> None:
    from lamina.ir.ops.lamina import DropoutOp, LayernormOp

    assert set(dialect.OP_CLASSES) == set(OPS)
    for name, cls in dialect.OP_CLASSES.items():
        assert cls.INFO is OPS[name]
        assert cls.name == f"lamina.{name}"
        assert getattr(dialect, opgen.class_name(OPS[name])) is cls
    # typed accessors from the generated IRDL fields
    assert {"input", "seed"} <= set(vars(DropoutOp)) and {"scale", "bias"} <= set(vars(LayernormOp))
