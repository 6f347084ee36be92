"""The ONNX backend node tests as an oracle for Lamina's ops and its ONNX importer.

    .venv/bin/python benchmarks/onnx_conformance.py              # regenerate, import, run, report
    .venv/bin/python benchmarks/onnx_conformance.py --cases DIR  # reuse cases generated before
    .venv/bin/python benchmarks/onnx_conformance.py -k layer_norm --verbose

onnx's wheel ships the node-test generators (`onnx.backend.test.case.node`), not their data; this
script regenerates every case with onnx's own writer (`onnx.backend.test.cmd_tools.generate_data`
pointed at the node cases) into a temporary directory, reads each back with onnx's loader, and
- leaves out of scope, by reason, every case whose graph uses an op the importer does not map
  ("unsupported op: Conv"), or whose import is refused (`ImportRefused.kind`: an attribute, an
  element type, a dynamic shape, control flow);
- imports every other case (expanded function-body variants are cases of their own), runs it on
  the NumPy interpreter, and on the JAX backend when `lamina.backends.registry.get_backend("jax")`
  works, and compares every output with the expected one as onnx's backend runner does (same
  shape and dtype, `assert_allclose` at rtol 1e-3 / atol 1e-7; a bf16 output may be two
  bfloat16 ulps off, as onnx's runner allows, and an f16 one two float16 ulps).
A graph input that determines a shape (a Reshape's shape, a reduction's axes) is bound to the
test's value and the case imported again, as torch.export specializes on shapes: Lamina's shapes
are static. An import that fails with anything but a refusal, or an output that differs, fails.

The report lists the failed cases with their largest error, every case that passed only under a
loosened tolerance (grouped by the tolerance it needed), then the out-of-scope counts by reason,
and ends with `N passed, M failed, K out of scope`; the exit code is 1 when M > 0.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
import unittest.mock
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from lamina import run
from lamina.backends.registry import get_backend
from lamina.frontends.common import ImportRefused, value_name
from lamina.frontends.onnx import StaticInputNeeded, import_model
from lamina.frontends.onnx.ops import folded_only, mapped
from lamina.ir.core.diagnostics import LaminaError
from onnx import numpy_helper

RTOL, ATOL = 1e-3, 1e-7          # onnx.backend.test.loader's defaults for node cases
BF16_RTOL = 2.0**-6              # two bfloat16 ulps, as onnx's runner allows
# two float16 ulps: the f16 test data were computed step by step in float16 NumPy, where Lamina
# computes each op in float32 and rounds once (as PyTorch does), so the two can differ by an ulp
# each way; a case that needs this (and not rtol) is reported as such
F16_RTOL = 2.0**-9
# the loosened tolerance of each element type that has one, and the name the report gives it
LOOSER = {"bfloat16": (BF16_RTOL, "two bfloat16 ulps (rtol 2^-6)"),
          "float16": (F16_RTOL, "two float16 ulps (rtol 2^-9)")}


@dataclass
class Case:
    name: str
    model: onnx.ModelProto
    data_sets: list[tuple[list[np.ndarray], list[np.ndarray]]]


@dataclass
class Result:
    name: str
    status: str                   # "passed", "failed", "out of scope"
    reason: str = ""              # the out-of-scope group, or what failed
    detail: str = ""
    error: float = 0.0            # the largest |got - want| of a failed output
    backends: list[str] = field(default_factory=list)
    loosened: str = ""            # the loosened tolerance(s) a pass needed ("" at rtol)


def generate_cases(directory: str | os.PathLike[str]) -> Path:
    """Every node case written by onnx's own writer (its `generate_data`, given the node cases
    instead of the model cases it writes by default) under `directory`/node."""
    import onnx.backend.test.case.model as model_cases
    import onnx.backend.test.cmd_tools as cmd_tools
    from onnx.backend.test.case import node

    # generate_data writes what onnx.backend.test.case.model.collect_testcases returns
    with unittest.mock.patch.object(model_cases, "collect_testcases", node.collect_testcases):
        cmd_tools.generate_data(argparse.Namespace(output=str(directory)))
    return Path(directory) / "node"


def _read_tensor(path: Path) -> np.ndarray:
    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(t)


def load_case(directory: Path) -> Case | str:
    """The case in `directory`, or why it cannot be read as tensors (sequences, maps, optionals)."""
    model = onnx.load(str(directory / "model.onnx"))
    sets = []
    for d in sorted(directory.glob("test_data_set_*")):
        try:
            ins = [_read_tensor(p) for p in sorted(d.glob("input_*.pb"),
                                                   key=lambda p: int(p.stem.split("_")[1]))]
            outs = [_read_tensor(p) for p in sorted(d.glob("output_*.pb"),
                                                    key=lambda p: int(p.stem.split("_")[1]))]
        except Exception:   # a SequenceProto / OptionalProto / MapProto file
            return "non-tensor inputs or outputs"
        sets.append((ins, outs))
    return Case(directory.name, model, sets)


def unmapped_ops(model: onnx.ModelProto) -> list[str]:
    known = set(mapped()) | set(folded_only())   # the latter are refused unless folded
    return sorted({n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
                   for n in model.graph.node
                   if n.domain not in ("", "ai.onnx") or n.op_type not in known})


def _import(case: Case, inputs: Sequence[np.ndarray]):
    """Import, binding every shape-determining graph input to the test's value."""
    names = [i.name for i in case.model.graph.input]
    static: dict[str, np.ndarray] = {}
    while True:
        try:
            module, weights = import_model(case.model, name=f"{case.name}.onnx",
                                           static_inputs=static)
            return module, weights, static
        except StaticInputNeeded as e:
            if not e.static_input or e.static_input in static or e.static_input not in names:
                raise
            static[e.static_input] = inputs[names.index(e.static_input)]


def _close(got: np.ndarray, want: np.ndarray, rtol: float) -> tuple[bool, float]:
    g, w = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(invalid="ignore"):
        err = np.where(np.isnan(g) & np.isnan(w), 0.0, np.abs(g - w))
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        ok = same | (err <= ATOL + rtol * np.abs(w))
    worst = float(np.nanmax(np.where(same, 0.0, err), initial=0.0)) if err.size else 0.0
    return bool(ok.all()), worst if np.isfinite(worst) else float("inf")


def _compare(got: np.ndarray, want: np.ndarray) -> tuple[bool, float, str]:
    """onnx's runner's check: shape, dtype, then allclose at rtol (bf16 compared in float32).
    A bf16 or f16 output outside rtol but within two ulps of its type passes, and the third
    item names that tolerance (it is "" for a pass at rtol, or what failed), so the report can
    list every pass that needed it: one ulp of bf16 is eight times rtol."""
    looser = LOOSER.get(want.dtype.name)
    if want.dtype.name == "bfloat16":
        want = want.astype(np.float32)
    elif got.dtype != want.dtype:
        return False, float("inf"), f"dtype {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return False, float("inf"), f"shape {got.shape}, expected {want.shape}"
    if want.dtype.kind in "biu":
        bad = got != want
        return not bad.any(), float(np.abs(got.astype(np.float64) - want).max(initial=0)), ""
    ok, worst = _close(got, want, RTOL)
    if not ok and looser is not None and _close(got, want, looser[0])[0]:
        return True, worst, looser[1]
    return ok, worst, ""


def backends() -> list[str]:
    """The backends every case runs on: numpy, and jax where it is installed."""
    names = ["numpy"]
    try:
        get_backend("jax")
        names.append("jax")
    except LaminaError:
        pass
    return names


def check_case(case: Case, on: Sequence[str]) -> Result:
    missing = unmapped_ops(case.model)
    if missing:
        return Result(case.name, "out of scope", f"unsupported op: {missing[0]}")
    worst, notes, loosened = 0.0, [], set()
    for inputs, outputs in case.data_sets:
        try:
            module, weights, static = _import(case, inputs)
        except ImportRefused as e:
            return Result(case.name, "out of scope", f"{e.kind}: {e.op}" if e.op else e.kind,
                          str(e))
        except LaminaError as e:
            return Result(case.name, "failed", "import error", str(e), float("inf"))
        names = [i.name for i in case.model.graph.input]
        feeds = {value_name(n): a for n, a in zip(names, inputs, strict=False)
                 if n not in static}
        for backend in on:
            try:
                got = run(module, {**feeds, **weights}, backend=backend).outputs
            except LaminaError as e:
                return Result(case.name, "failed", f"{backend}: run error", str(e), float("inf"))
            for k, want in enumerate(outputs):
                ok, err, why = _compare(got[f"out{k}"], want)
                worst = max(worst, err)
                if not ok:
                    notes.append(f"{backend} output {k}: {why or f'max error {err:.3g}'}")
                elif why:
                    loosened.add(why)
    if notes:
        return Result(case.name, "failed", "wrong output", "; ".join(notes), worst)
    return Result(case.name, "passed", backends=list(on), loosened=", ".join(sorted(loosened)))


def check_all(root: Path, pattern: str | None = None, jax_every: int = 1) -> list[Result]:
    """Every case under `root` (matching `pattern`) on the NumPy interpreter, and every
    `jax_every`-th case that loads on the other backends too (JAX compiles each case anew, five
    times the interpreter's cost: a sample of the cases keeps the suite's time down while every
    kind of case still meets XLA; 1, the default, runs them all)."""
    on = backends()
    results = []
    loaded = 0
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        if pattern and not re.search(pattern, d.name):
            continue
        case = load_case(d)
        if isinstance(case, str):
            results.append(Result(d.name, "out of scope", case))
            continue
        results.append(check_case(case, on if loaded % jax_every == 0 else on[:1]))
        loaded += 1
    return results


def _loosened(passed: list[Result]) -> list[str]:
    """One line per loosened tolerance: how many passes needed it, and which."""
    by_tolerance: dict[str, list[str]] = {}
    for r in passed:
        if r.loosened:
            by_tolerance.setdefault(r.loosened, []).append(r.name)
    return [f"{len(names)} passed only within {tolerance}, not at rtol {RTOL}: "
            + ", ".join(names) for tolerance, names in sorted(by_tolerance.items())]


def report(results: Iterable[Result], verbose: bool = False) -> list[str]:
    results = list(results)
    lines: list[str] = []
    passed = [r for r in results if r.status == "passed"]
    failed = [r for r in results if r.status == "failed"]
    out = [r for r in results if r.status == "out of scope"]
    if verbose:
        lines += [f"PASS {r.name} ({', '.join(r.backends)})" for r in passed]
    for r in failed:
        lines.append(f"FAIL {r.name}: {r.reason} (largest error {r.error:.3g}): {r.detail}")
    lines += _loosened(passed)
    groups = Counter(r.reason.split(":")[0] for r in out)
    lines.append("out of scope by reason (and op):")
    for reason, n in groups.most_common():
        lines.append(f"  {reason}: {n}")
        ops = Counter(r.reason.split(": ", 1)[1] for r in out
                      if r.reason.startswith(reason + ": "))
        if ops:
            lines.append("    " + ", ".join(f"{op} {c}" for op, c in ops.most_common()))
    if verbose:
        lines += [f"  - {r.name}: {r.reason}: {r.detail}" for r in out if r.detail]
    lines.append(f"{len(passed)} passed, {len(failed)} failed, {len(out)} out of scope")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--cases", help="a directory of node cases generated before (its node/)")
    ap.add_argument("-k", dest="pattern", help="only cases whose name matches this regex")
    ap.add_argument("--verbose", action="store_true", help="list every case")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="onnx-node-cases-") as tmp:
        root = Path(args.cases) / "node" if args.cases else generate_cases(tmp)
        generated = time.perf_counter()
        results = check_all(root, args.pattern)
    lines = report(results, args.verbose)
    print(f"backends: {', '.join(backends())}; cases from onnx {onnx.__version__} "
          f"({generated - start:.1f} s to generate, {time.perf_counter() - generated:.1f} s "
          "to import and run)")
    print("\n".join(lines))
    return 1 if any(r.status == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
