"""The README works as written: its tour's shell commands, its Python API code, its stats table.

- Every shell command of "A short tour" runs, in the order written, in a copy of the repository
  (the samples, and a link to `.venv`), in a shell whose PATH does not have the venv: the tour's
  first command, `source .venv/bin/activate`, is what puts the tools there, as it says. A command
  whose comment shows a diagnostic (`# samples/bad.mlir:11:3: error: ...`) must exit 1 with that
  line first on stderr; every other command must exit 0, and every file it names with `-o`,
  `--outputs`, `--write-inputs`, `--stats-json`, `--memory-plot`, `--weights`, `--save` or `--log`
  must exist afterwards. Nothing is written in the repository.
- The code blocks of "Python API" run, in order and in one namespace, from a copy of the repository.
- Every field `lamina-run --stats-json` writes is a row of the "Run statistics" table, and every row
  is a field some run writes; the keys of its nested entries are named in their row.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from lamina.cli.run import main as run_main

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
ACTIVATE = "source .venv/bin/activate"


def section(text: str, heading: str) -> str:
    """The text under `heading` (a whole line, e.g. '## A short tour') up to the next heading of
    the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    start = text.index("\n" + heading + "\n") + len(heading) + 2
    end = re.search(rf"\n#{{1,{level}}} ", text[start:])
    return text[start:start + end.start()] if end else text[start:]


def code_blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, re.M | re.S)


def shell_commands(text: str) -> list[str]:
    """Every command of the ```sh blocks of `text`, with backslash continuations joined."""
    out: list[str] = []
    for block in code_blocks(text, "sh"):
        pending = ""
        for line in block.splitlines():
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            command = (pending + line).strip()
            pending = ""
            if command and not command.startswith("#"):
                out.append(command)
    return out


_EXPECTED_ERROR = re.compile(r"\s#\s+(\S+:\d+:\d+: error: .*)$")
_WRITES = ("-o", "--outputs", "--write-inputs", "--stats-json", "--memory-plot", "--weights",
           "--save", "--log", "--plot")


def written_files(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    return [words[i + 1] for i, w in enumerate(words[:-1]) if w in _WRITES and words[i + 1] != "-"]


def repository_copy(tmp: Path) -> Path:
    """What the README's code needs of a checkout: the samples, and the venv `make demo` made."""
    copy = tmp / "lamina"
    copy.mkdir()
    shutil.copytree(ROOT / "samples", copy / "samples")
    (copy / ".venv").symlink_to(ROOT / ".venv")
    return copy


TOUR = shell_commands(section(README, "## A short tour"))


def test_tour_starts_by_activating_the_venv() -> None:
    assert TOUR[0] == ACTIVATE
    assert len(TOUR) >= 10
    assert not [c for c in TOUR[1:] if ".venv/bin" in c]   # one way to reach the tools


def _run_tour_command(command: str, copy: Path, env: dict[str, str]) -> str | None:
    """Run one command of the tour in `copy`; what went wrong, or None."""
    script = f"set -o pipefail\n{ACTIVATE}\n{command}\n"
    res = subprocess.run(["bash", "-c", script], cwd=copy, env=env, capture_output=True,
                         text=True, timeout=600)
    expected = _EXPECTED_ERROR.search(command)
    if expected:
        first = res.stderr.splitlines()[0] if res.stderr else ""
        if res.returncode != 1 or first != expected.group(1):
            return f"exit {res.returncode}, stderr starts {first!r}"
        return None
    if res.returncode != 0 or "Traceback" in res.stderr:
        return f"exit {res.returncode}: {res.stderr[-1500:]}"
    missing = [n for n in written_files(command) if not (copy / n).is_file()
               or (copy / n).stat().st_size == 0]
    return f"did not write {missing}" if missing else None


def test_tour_commands_run_as_written(tmp_path: Path) -> None:
    """All of the tour, in order, in one copy (a later command reads what an earlier wrote)."""
    copy = repository_copy(tmp_path)
    venv_bin = str(ROOT / ".venv" / "bin")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "LAMINA_TRACEBACK")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "/usr/bin:/bin").split(os.pathsep)
                                  if os.path.realpath(p) != os.path.realpath(venv_bin))
    failures = {c: why for c in TOUR[1:] if (why := _run_tour_command(c, copy, env)) is not None}
    assert not failures, "\n".join(f"{c}\n    {why}" for c, why in failures.items())
    assert not [p.name for p in copy.rglob(".lamina-*")]


def test_tour_shows_a_known_error_and_names_only_shipped_files() -> None:
    assert any(_EXPECTED_ERROR.search(c) for c in TOUR)
    made: set[str] = set()
    for command in TOUR[1:]:
        words = shlex.split(command, comments=True)
        for w in words:
            if w.endswith((".mlir", ".npz", ".toml")) and w not in made and \
                    not w.startswith("-") and words[words.index(w) - 1] not in _WRITES:
                assert (ROOT / w).is_file(), f"the tour reads {w}, which no earlier command " \
                                             "writes and the repository does not ship"
        made.update(written_files(command))


def test_python_api_section_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    blocks = code_blocks(section(README, "## Python API"), "python")
    assert len(blocks) >= 2
    monkeypatch.chdir(repository_copy(tmp_path))
    namespace: dict[str, Any] = {"__name__": "readme"}
    for block in blocks:
        exec(compile(block, "README.md (Python API)", "exec"), namespace)
    assert "bytes in HBM at most" in capsys.readouterr().out


# ---- the stats table -----------------------------------------------------------------------

STATS = section(README, "#### Run statistics")
ROWS = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+)` \|.*$", STATS, re.M)}

PLACED_FUSED = "samples/attention_heads.mlir"


def _stats(tmp_path: Path, name: str, *argv: str) -> dict[str, Any]:
    out = tmp_path / f"{name}.json"
    assert run_main([*argv, "--stats-json", str(out)]) == 0
    return json.loads(out.read_text())


def test_every_stats_field_is_documented_and_every_documented_field_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [
        _stats(tmp_path, "one", str(ROOT / "samples/mlp_block.mlir"), "-p", "fuse-elementwise",
               "--check"),
        _stats(tmp_path, "mesh", str(ROOT / PLACED_FUSED), "-p",
               "propagate-sharding,insert-collectives", "--check"),
        _stats(tmp_path, "tiers", str(ROOT / "samples/zero_offload_step.mlir"), "-p",
               "annotate-lifetimes,assign-memory-tiers{target=tiny}", "--target", "tiny"),
        # a training step (lamina.role): its param_bytes, grad_bytes, optimizer_state_bytes
        _stats(tmp_path, "step", str(ROOT / "samples/mlp_dp_forward.mlir"), "--entry",
               "dp_forward_step", "-p", "derive-backward{data=x},append-optimizer,"
               "shard-optimizer{stage=2},propagate-sharding,insert-collectives"),
        # a pipeline-staged step: bubble_fraction, its formula, stage_busy_seconds
        _stats(tmp_path, "staged", str(ROOT / "samples/mlp_train.mlir"), "--entry",
               "mlp_loss_grad", "-p", "derive-backward{data=x,y},pipeline-stages{stages=2 "
               "micro-batches=2}"),
    ]
    capsys.readouterr()
    written = {k for r in runs for k in r}
    assert written == set(ROWS), (sorted(written - set(ROWS)), sorted(set(ROWS) - written))
    nested = {"outputs": {k for r in runs for o in r["outputs"] for k in o},
              "collectives": {k for r in runs for c in r.get("collectives", []) for k in c},
              "reference": {k for r in runs for k in r.get("reference", {})},
              "peak_bytes": {k for r in runs for k in r["peak_bytes"]}}
    for field, keys in nested.items():
        assert keys, field
        for key in keys:
            assert f"`{key}`" in ROWS[field] or f'"{key}"' in ROWS[field], (field, key)
    assert any(r["moved_bytes"] for r in runs)


def test_cli_help_points_to_the_stats_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(["--help"]) == 0
    assert "README.md, section 'Run statistics'" in capsys.readouterr().out
    assert "#### Run statistics" in README


def test_the_summary_line_the_readme_shows_is_what_a_run_prints(
        capsys: pytest.CaptureFixture[str]) -> None:
    shown = re.search(r"for `(samples/\w+\.mlir)`: `(y: [^`]*)`", README, re.S)
    assert shown is not None
    assert run_main([str(ROOT / shown.group(1))]) == 0
    assert capsys.readouterr().out.splitlines()[0] == " ".join(shown.group(2).split())


def test_import_section_python_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Section 6's Python code as written: `lamina.frontends` reached from `import lamina`, every
    name it uses defined in it (it once used `model`, `idx` and `targets` without making them)."""
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    blocks = code_blocks(section(README, "### 6. Bring a model in: `lamina-import`"), "python")
    assert len(blocks) == 1
    copy = repository_copy(tmp_path)
    monkeypatch.chdir(copy)
    monkeypatch.syspath_prepend(str(copy))
    namespace: dict[str, Any] = {"__name__": "readme"}
    exec(compile(blocks[0], "README.md (section 6)", "exec"), namespace)
    assert (copy / "gpt2.onnx").is_file()


_FOLDERS = ("api", "ir", "analysis", "passes", "backends", "frontends", "tests", "samples",
            "benchmarks")
_PATH = re.compile(rf"`((?:{'|'.join(_FOLDERS)})/[\w/.*-]*)`")


def test_every_path_the_readme_names_exists() -> None:
    """A file or folder the README names (`ir/ops/optable.py`, `ir/mesh/targets/`,
    `frontends/onnx/ops_*.py`) is in the tree, so moving a module cannot leave the text behind."""
    named = {m.group(1) for m in _PATH.finditer(README)}
    assert "ir/ops/optable.py" in named and "ir/mesh/targets/" in named
    missing = sorted(p for p in named if not (list(ROOT.glob(p)) if "*" in p else (ROOT / p).exists()))
    assert not missing, f"the README names paths the tree does not have: {missing}"


def test_the_ir_layout_table_names_every_module() -> None:
    """Each sub-package of ir/ has a row in the README's `ir/` table naming every one of its
    modules, and each module at the top of ir/ is named in a row."""
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([\w.]+/?)`[^\n]*", README, re.M)}
    ir = ROOT / "ir"
    for sub in sorted(p for p in ir.iterdir() if (p / "__init__.py").exists()):
        row = rows.get(f"{sub.name}/")
        assert row is not None, f"ir/{sub.name}/ has no row in the README's ir/ table"
        for module in sorted(sub.glob("*.py")):
            if module.name != "__init__.py":
                assert f"`{module.name}`" in row, f"ir/{sub.name}/{module.name} is not in its row"
    top = [m.name for m in ir.glob("*.py") if m.name != "__init__.py"]
    table = "\n".join(rows.values())
    assert all(f"`{name}`" in table for name in top), top
