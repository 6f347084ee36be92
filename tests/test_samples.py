"""Every `samples/*.mlir` program: loads, round-trips in custom and generic form, and runs.

For each sample: parse + verify; printing, re-parsing and printing again gives the same text
(custom form); printing in generic form, re-parsing and printing in custom form gives the same
text; and every function whose arguments total fewer than 50M elements runs on the NumPy
interpreter with `random_inputs(func, 0)`, producing finite float outputs of the declared types.
A sample that shows an error (`samples/bad.mlir`) is not run: its `// RUN:` lines are, as lit
would run them, and the error it shows is checked at the line its annotation names.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from io import StringIO

import numpy as np
import pytest
from lamina.backends.inputs import random_inputs
from lamina.backends.interface import functions
from lamina.backends.numpy.runner import run_function
from lamina.cli.run import main as run_main
from lamina.ir.core.dtypes import STORAGE
from lamina.ir.ops.opbase import tensor_info
from lamina.ir.text.source import load, parse_text, verify
from sample_files import ALL, INVALID, VALID
from xdsl.printer import Printer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = VALID  # every sample but the ones that show an error (tests/sample_files.py)
MAX_ELEMENTS = 50_000_000


def _print(module, generic: bool = False) -> str:
    out = StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(module)
    return out.getvalue()


def _ids(paths: list[str]) -> list[str]:
    return [os.path.basename(p) for p in paths]


def test_samples_exist() -> None:
    assert SAMPLES, f"no samples/*.mlir under {ROOT}"


@pytest.mark.parametrize("path", SAMPLES, ids=_ids(SAMPLES))
def test_sample_custom_round_trip(path: str) -> None:
    module = load(path)
    printed = _print(module)
    again = parse_text(printed, name=path)
    verify(again)
    assert _print(again) == printed


@pytest.mark.parametrize("path", SAMPLES, ids=_ids(SAMPLES))
def test_sample_generic_round_trip(path: str) -> None:
    module = load(path)
    printed = _print(module)
    generic = _print(module, generic=True)
    from_generic = parse_text(generic, name=path)
    verify(from_generic)
    assert _print(from_generic) == printed
    assert _print(from_generic, generic=True) == generic


@pytest.mark.parametrize("path", SAMPLES, ids=_ids(SAMPLES))
def test_sample_runs_with_finite_outputs(path: str) -> None:
    module = load(path)
    funcs = functions(module)
    assert funcs, f"{path} has no function"
    ran = 0
    for func in funcs:
        infos = [tensor_info(t) for t in func.function_type.inputs.data]
        if sum(int(np.prod(i.shape, dtype=np.int64)) for i in infos) >= MAX_ELEMENTS:
            continue
        inputs = random_inputs(func, 0)
        result = run_function(func, inputs)
        outs = [tensor_info(t) for t in func.function_type.outputs.data]
        assert len(result.outputs) == len(outs)
        name = func.sym_name.data
        for k, (got, want) in enumerate(zip(result.outputs, outs, strict=True)):
            assert got.shape == want.shape, (name, k, got.shape, want)
            assert got.dtype == STORAGE[want.dtype], (name, k, got.dtype, want)
            if got.dtype.kind == "f":
                assert np.isfinite(got).all(), f"@{name} output {k} has non-finite values"
        ran += 1
    assert ran or all(
        sum(int(np.prod(tensor_info(t).shape, dtype=np.int64))
            for t in f.function_type.inputs.data) >= MAX_ELEMENTS for f in funcs)


def _entries() -> list[tuple[str, str]]:
    out = []
    for path in SAMPLES:
        for func in functions(load(path)):
            size = sum(int(np.prod(tensor_info(t).shape, dtype=np.int64))
                       for t in func.function_type.inputs.data)
            if size < MAX_ELEMENTS:
                out.append((path, func.sym_name.data))
    return out


ENTRIES = _entries()


@pytest.mark.parametrize("path, entry", ENTRIES,
                         ids=[f"{os.path.basename(p)}@{e}" for p, e in ENTRIES])
def test_sample_fuses_and_checks(path: str, entry: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`lamina-run SAMPLE --entry F -p fuse-elementwise --check` exits 0 on every sample function
    (placed samples that need propagation get `propagate-sharding,insert-collectives` first), and
    fusion never adds kernels."""
    with open(path, encoding="utf-8") as f:
        placed = "lamina.mesh" in f.read()
    pipeline = ("propagate-sharding,insert-collectives," if placed else "") + "fuse-elementwise"
    rc = run_main([path, "--entry", entry, "-p", pipeline, "--check", "--stats-json", "-"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    stats = json.loads(out[out.index("{"):])
    assert stats["kernels"] <= stats["reference"]["kernels"], stats


RUN_LINE = re.compile(r"^// RUN: (.*)$", re.M)


def _text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


WITH_RUN_LINES = [p for p in ALL if RUN_LINE.search(_text(p))]


def test_every_invalid_sample_has_a_run_line() -> None:
    """An error sample nothing runs could drift from the error it claims to show."""
    assert INVALID and set(INVALID) <= set(WITH_RUN_LINES)


@pytest.mark.parametrize("path", WITH_RUN_LINES, ids=_ids(WITH_RUN_LINES))
def test_sample_run_lines(path: str) -> None:
    """Each `// RUN:` line, `%s` for the sample, in bash with the venv's tools first on PATH
    (as tests/filecheck/lit.cfg does), from the repository root; each must exit 0."""
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep
           + os.environ.get("PATH", "")}
    env.pop("LAMINA_TRACEBACK", None)
    for command in RUN_LINE.findall(_text(path)):
        script = "set -o pipefail\n" + command.replace("%s", shlex.quote(path))
        res = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, (command, res.stdout[-2000:], res.stderr[-2000:])


_EXPECTED = re.compile(r"// expected-error @\+(\d+) \{\{(.*)\}\}")


@pytest.mark.parametrize("path", INVALID, ids=_ids(INVALID))
def test_invalid_sample_shows_its_error(path: str) -> None:
    """Plain `lamina-opt SAMPLE` exits 1 with one diagnostic at the annotated line: what a reader
    of the sample (and of the README tour) sees."""
    lines = _text(path).splitlines()
    [(index, (offset, message))] = [(i, m.groups()) for i, line in enumerate(lines)
                                    if (m := _EXPECTED.search(line))]
    line = index + 1 + int(offset)
    column = len(lines[line - 1]) - len(lines[line - 1].lstrip()) + 1
    rel = os.path.relpath(path, ROOT)
    res = subprocess.run([os.path.join(os.path.dirname(sys.executable), "lamina-opt"), rel],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.splitlines()[0] == f"{rel}:{line}:{column}: error: {message}"
