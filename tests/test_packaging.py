"""The package ships what the tree has: a wheel built from the checkout holds every module of every
code folder under its `lamina.*` name (and nothing else), the built-in targets, and a version the
tools report; the build prints no warning. The code folders are listed once, in setup.py's
CODE_FOLDERS: the Makefile reads its list from there, and pyright's `include` names the same
folders (then tests, benchmarks, samples)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import lamina
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from setup import CODE_FOLDERS  # noqa: E402  (the one list of code folders)

sys.path.remove(str(ROOT))


def _tree_modules() -> set[str]:
    """lamina/... paths of every .py file under the code folders, as the wheel should hold them."""
    out: set[str] = set()
    for folder, package in CODE_FOLDERS.items():
        root = ROOT / folder
        if not (root / "__init__.py").exists():
            continue
        prefix = package.replace(".", "/")
        for path in root.rglob("*.py"):
            rel = path.relative_to(root)
            if "__pycache__" not in rel.parts:
                out.add(f"{prefix}/{rel.as_posix()}")
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-w", str(out), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = out.glob("lamina-*.whl")
    return whl, r.stdout + r.stderr


def test_wheel_holds_exactly_the_tree(wheel: tuple[Path, str]) -> None:
    whl, _ = wheel
    names = set(zipfile.ZipFile(whl).namelist())
    modules = {n for n in names if n.endswith(".py")}
    assert modules == _tree_modules()
    targets = {n for n in names if n.startswith("lamina/ir/mesh/targets/") and n.endswith(".toml")}
    assert {"lamina/ir/mesh/targets/h100-node.toml", "lamina/ir/mesh/targets/tiny.toml"} <= targets
    assert "lamina/py.typed" in names
    assert not any(n.startswith(("ir/", "passes/", "backends/", "tests/")) for n in names)


def test_build_prints_no_warning(wheel: tuple[Path, str]) -> None:
    _, log = wheel
    assert "warning" not in log.lower(), log


def test_version_everywhere(wheel: tuple[Path, str]) -> None:
    whl, _ = wheel
    assert whl.name.startswith(f"lamina-{lamina.__version__}-")
    for tool in ("lamina-opt", "lamina-run"):
        exe = Path(sys.executable).with_name(tool)
        r = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and lamina.__version__ in r.stdout, (tool, r.stdout, r.stderr)


def _make_code_folders(cwd: Path) -> list[str]:
    r = subprocess.run(["make", "-s", "--no-print-directory", "code-folders"], capture_output=True,
                       text=True, cwd=cwd, timeout=60,
                       env={**os.environ, "PYTHON": sys.executable, "MAKEFLAGS": ""})
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.split()


def test_the_folder_map_is_in_one_place() -> None:
    """`make`'s code list is setup.py's CODE_FOLDERS (read, not copied), and pyright checks
    exactly those folders plus the tests, benchmarks and samples."""
    assert _make_code_folders(ROOT) == list(CODE_FOLDERS)
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert " ".join(CODE_FOLDERS) not in makefile, "the Makefile spells the code folders itself"
    include = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "pyright"]["include"]
    assert include == [*CODE_FOLDERS, "tests", "benchmarks", "samples"]


def test_the_makefile_follows_setup_py(tmp_path: Path) -> None:
    """The derivation is live: with a code folder added to setup.py's map, `make` lists it."""
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    text = (ROOT / "setup.py").read_text(encoding="utf-8")
    anchor = "CODE_FOLDERS = {\n"
    assert anchor in text
    (tmp_path / "setup.py").write_text(
        text.replace(anchor, anchor + '    "extra": "lamina.extra",\n'), encoding="utf-8")
    assert _make_code_folders(tmp_path) == ["extra", *CODE_FOLDERS]
