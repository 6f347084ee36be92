"""Command-line flags that act or refuse, never nothing (issue 23, items 4 and 5).

- `lamina-run --inputs` repeats: the files merge by key (a model's inputs and the weights
  `lamina-import --weights` wrote), a key in two files is one error naming both, and a missing or
  extra key is the single-file diagnostic naming the files.
- An `.npz` array the argument's element type cannot hold exactly (float64 for an f32, int64 for
  an i32) is converted with a note naming it and both types; one out of the type's range is
  refused with no note about a conversion that never happened.
- A backend's flag given to another backend (`--devices` to numpy / compiled, `--threads` to jax)
  is one error naming the backends it applies to; `--repeats N` prints the median per call on
  every backend.
- `lamina-import` refuses a model with weights when `--weights` is missing (nothing written),
  takes `path/to/model.py:FACTORY`, and imports `nn.RMSNorm(d)` (eps=None) with torch's epsilon.

The tools run in process (their `main`), which is what their console scripts call.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from lamina.backends.registry import BACKENDS, get_backend
from lamina.cli.run import BACKEND_FLAGS
from lamina.cli.run import main as run_main
from lamina.ir.core.diagnostics import LaminaError

ROOT = Path(__file__).resolve().parent.parent

TWO = """\
func.func @b(%x: tensor<4xf32>, %n: tensor<4xi32>) -> (tensor<4xf32>, tensor<2x2xi32>) {
  %0 = lamina.neg %x : tensor<4xf32>
  %1 = lamina.reshape %n : (tensor<4xi32>) -> tensor<2x2xi32>
  func.return %0, %1 : tensor<4xf32>, tensor<2x2xi32>
}
"""
X4 = np.arange(4, dtype=np.float32) - 1.5
N4 = np.arange(4, dtype=np.int32)


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "two.mlir").write_text(TWO)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def lamina_run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run_main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def npz(name: str, **arrays: np.ndarray) -> str:
    np.savez(name, **arrays)  # type: ignore[arg-type]
    return name


def outputs(path: str) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as d:
        return {k: d[k] for k in d.files}


# ---- several --inputs files -----------------------------------------------------------------

def test_inputs_from_several_files_merge_by_name(here: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    npz("x.npz", x=X4)
    npz("n.npz", n=N4)
    code, _, err = lamina_run(capsys, "two.mlir", "--inputs", "x.npz", "--inputs", "n.npz",
                              "--outputs", "o.npz", "--write-inputs", "used.npz")
    assert code == 0 and err == "", err
    got = outputs("o.npz")
    np.testing.assert_array_equal(got["out0"], -X4)
    np.testing.assert_array_equal(got["out1"], N4.reshape(2, 2))
    used = outputs("used.npz")   # the merged inputs, one file that reads back alone
    assert sorted(used) == ["n", "x"]
    code, _, err = lamina_run(capsys, "two.mlir", "--inputs", "used.npz", "--outputs", "p.npz")
    assert code == 0 and err == "", err
    np.testing.assert_array_equal(outputs("p.npz")["out0"], got["out0"])


def test_a_name_in_two_files_is_an_error_naming_both(here: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    npz("a.npz", x=X4, n=N4)
    npz("b.npz", n=N4)
    code, out, err = lamina_run(capsys, "two.mlir", "--inputs", "a.npz", "--inputs", "b.npz",
                                "--outputs", "o.npz")
    assert code == 1 and out == ""
    assert err == "error: inputs 'a.npz' and 'b.npz' both have an array 'n'\n", err
    assert not (here / "o.npz").exists()


def test_missing_and_extra_names_across_files(here: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    npz("x.npz", x=X4)
    npz("z.npz", z=X4)
    code, _, err = lamina_run(capsys, "two.mlir", "--inputs", "x.npz", "--inputs", "z.npz")
    assert code == 1
    assert err == ("error: x.npz, z.npz: no array for argument 'n' (expected key 'n' or 'arg1'; "
                   "files have: x, z)\n"), err
    npz("n.npz", n=N4)
    code, _, err = lamina_run(capsys, "two.mlir", "--inputs", "x.npz", "--inputs", "n.npz",
                              "--inputs", "z.npz")
    assert code == 1
    assert err == ("error: x.npz, n.npz, z.npz: arrays z match no argument of @b (arguments: "
                   "x, n)\n"), err


# ---- conversions of .npz arrays ---------------------------------------------------------------

def test_narrowing_dtypes_are_cast_with_a_note(here: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    npz("x64.npz", x=X4.astype(np.float64) + 1e-12)   # not a float32 value: it is rounded
    npz("n.npz", n=N4.astype(np.int16))               # int16 -> i32 keeps every value: no note
    code, _, err = lamina_run(capsys, "two.mlir", "--inputs", "x64.npz", "--inputs", "n.npz",
                              "--outputs", "o.npz")
    assert code == 0
    assert err == ("note: x64.npz: array 'x' is float64; cast to f32, the element type of its "
                   "argument (tensor<4xf32>)\n"), err
    np.testing.assert_array_equal(outputs("o.npz")["out0"], -X4)


def test_values_out_of_range_are_refused_without_a_cast_note(
        here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    npz("big.npz", x=X4, n=np.array([0, 1, 2, 2**40], dtype=np.int64))
    code, _, err = lamina_run(capsys, "two.mlir", "--inputs", "big.npz")
    assert code == 1 and "note" not in err, err
    assert "error: input 'n' does not fit its argument type tensor<4xi32>: 1099511627776 at " \
        "index (3,) is outside i32's range" in err, err


# ---- backend flags ------------------------------------------------------------------------------

def _backend_available(name: str) -> bool:
    try:
        get_backend(name)
    except LaminaError:
        return False
    return True


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_backend_flags_table_matches_each_backends_options(name: str) -> None:
    """`BACKEND_FLAGS` says which backends take each flag without importing them; it must be
    what each backend's options type has."""
    if not _backend_available(name):
        pytest.skip(f"backend {name} is not installed")
    takes = {f.name for f in fields(get_backend(name).Options)}
    for flag, backends in BACKEND_FLAGS.items():
        assert (flag in takes) == (name in backends), (flag, name)


@pytest.mark.parametrize(("backend", "flag", "applies"), [
    ("numpy", ["--devices", "2"], "--devices applies to --backend jax"),
    ("compiled", ["--devices", "2"], "--devices applies to --backend jax"),
    ("numpy", ["--coordinator", "localhost:1", "--num-processes", "2", "--process-id", "0"],
     "--coordinator applies to --backend jax"),
    ("jax", ["--threads", "2"], "--threads applies to --backend compiled, numpy"),
])
def test_a_flag_of_another_backend_is_refused(here: Path, capsys: pytest.CaptureFixture[str],
                                              backend: str, flag: list[str], applies: str) -> None:
    if not _backend_available(backend):
        pytest.skip(f"backend {backend} is not installed")
    code, out, err = lamina_run(capsys, "two.mlir", "--backend", backend, *flag,
                                "--outputs", "o.npz")
    assert code == 1 and out == ""
    assert err == f"lamina-run: error: {applies}\n", err
    assert not (here / "o.npz").exists()
    # refused before any work: the program is not even read
    code, _, err = lamina_run(capsys, "absent.mlir", "--backend", backend, *flag)
    assert code == 1 and err == f"lamina-run: error: {applies}\n", err


@pytest.mark.parametrize("backend", ["numpy", "compiled", "jax"])
def test_repeats_print_the_median_per_call_on_every_backend(
        here: Path, capsys: pytest.CaptureFixture[str], backend: str) -> None:
    if not _backend_available(backend):
        pytest.skip(f"backend {backend} is not installed")
    code, out, err = lamina_run(capsys, "two.mlir", "--backend", backend, "--repeats", "3",
                                "--stats-json", "s.json")
    assert code == 0, err
    stats = json.loads((here / "s.json").read_text())
    assert stats["repeats"] == 3 and len(stats["run_seconds_all"]) == 3
    lines = [line for line in out.splitlines() if line.startswith("timing:")]
    assert len(lines) == 1, out
    m = re.fullmatch(r"timing: median (\S+) ms per call over 3 calls \(compile (\S+) s\)", lines[0])
    assert m is not None, lines[0]
    assert float(m[1]) == pytest.approx(stats["run_seconds"] * 1e3, rel=1e-3)
    assert float(m[1]) == pytest.approx(float(np.median(stats["run_seconds_all"])) * 1e3,
                                        rel=1e-3)
    code, out, _ = lamina_run(capsys, "two.mlir", "--backend", backend)
    assert code == 0 and "timing:" not in out   # no repeats, no timing line


# ---- lamina-import -------------------------------------------------------------------------------

MODEL = """import torch


class Norm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.norm = torch.nn.RMSNorm(8)          # eps=None: torch's rule

    def forward(self, x):
        return self.norm(self.proj(x))


class Plain(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x)


def make():
    torch.manual_seed(0)
    return Norm()


def plain():
    return Plain()
"""


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    path = folder / "norm_model_for_flags.py"
    path.write_text(MODEL)
    return path


def lamina_import(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from lamina.cli.importer import main

    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_import_without_weights_refuses_and_writes_nothing(
        tmp_path: Path, model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "never.mlir"
    code, stdout, err = lamina_import(capsys, "torch", f"{model_file}:make", "--args", "2x8xf32",
                                      "-o", str(out))
    assert code == 1 and stdout == ""
    assert err == ("lamina-import: error: the model has 3 weight arrays; give --weights OUT.npz "
                   "to write them (they stay arguments of the function: training updates them)\n"
                   ), err
    assert not out.exists()
    # a model without weights needs no --weights
    code, stdout, err = lamina_import(capsys, "torch", f"{model_file}:plain", "--args", "2x8xf32",
                                      "-o", str(out))
    assert code == 0 and err == "" and out.exists(), err


def test_import_takes_a_file_path_and_runs_with_merged_inputs(
        tmp_path: Path, model_file: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """FILE.py:FACTORY from another directory, then `lamina-run --inputs in --inputs weights`
    gives torch's result (RMSNorm with eps=None included)."""
    torch = pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    code, _, err = lamina_import(capsys, "torch", "models/norm_model_for_flags.py:make", "--args",
                                 "2x8xf32", "-o", "m.mlir", "--weights", "w.npz")
    assert code == 0, err
    x = (np.random.default_rng(0).standard_normal((2, 8)) * 1e-3).astype(np.float32)
    npz("in.npz", x=x)
    code, _, err = lamina_run(capsys, "m.mlir", "--inputs", "in.npz", "--inputs", "w.npz",
                              "--outputs", "o.npz")
    assert code == 0, err
    spec = importlib.util.spec_from_file_location("norm_ref", model_file)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with torch.no_grad():
        want = mod.make().eval()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(outputs("o.npz")["out0"], want, rtol=1e-5, atol=1e-5)


def test_import_of_a_missing_file_is_one_diagnostic(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    code, _, err = lamina_import(capsys, "torch", f"{tmp_path}/nothing.py:make", "--args",
                                 "2xf32", "-o", str(tmp_path / "never.mlir"))
    assert code == 1 and err == f"error: cannot import '{tmp_path}/nothing.py': no such file\n", err
    assert not (tmp_path / "never.mlir").exists()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
def test_rmsnorm_default_eps_is_torchs(dtype: str) -> None:
    """`nn.RMSNorm(d)` leaves eps None: torch then adds the machine epsilon of the type it
    computes in (float32's for f16 / bf16 / f32), which on rows of small norm is most of the
    result; the imported program equals torch eager."""
    torch = pytest.importorskip("torch")
    import lamina
    from lamina.frontends.torch import import_exported

    tdtype = getattr(torch, dtype)
    model = torch.nn.RMSNorm(16, elementwise_affine=False).to(tdtype).eval()
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(3, 16, generator=g) * 1e-3).to(tdtype)
    module, weights = import_exported(torch.export.export(model, (x,)))
    assert weights == {}
    feed = x.float().numpy() if tdtype in (torch.bfloat16, torch.float16) else x.numpy()
    if tdtype is torch.float16:
        feed = feed.astype(np.float16)
    got = lamina.run(module, [feed]).outputs["out0"]
    with torch.no_grad():
        want = model(x).double().numpy()
    tol = {"float32": 1e-5, "float64": 1e-12}.get(dtype, 1e-2)
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol)


def test_an_empty_inputs_value_among_several_is_refused(here: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    npz("x.npz", x=X4)
    code, _, err = lamina_run(capsys, "two.mlir", "--inputs", "x.npz", "--inputs", "")
    assert code == 1 and err == "lamina-run: error: argument --inputs: expected a value, got ''\n"
