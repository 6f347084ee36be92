"""`--backend iree`: Lamina functions exported to linalg, compiled by IREE, run through its runtime.

- sample functions the export covers run with `lamina-run --backend iree --check` (a selection
  covering every family in `make test`, every one in the long run, as parsed and fused);
- a second process loads the compiled module from the disk cache instead of compiling;
- `lamina.compile` compiles once: three calls on different inputs equal the interpreter;
- dropout masks are the interpreter's bits; f64 stays f64; bf16 crosses the runtime's boundary
  and back as the interpreter's float32 storage, its bits, with scans and f64 sin/cos;
- a partly placed program is one diagnostic, a program the export refuses is the
  export's diagnostic (exit 1 both), and a target without a device is one diagnostic;
- a few random programs through the backend interface;
- pipeline-staged MLP steps (pipeline-stages, P = 2, M = 2: gpipe on a stage mesh, 1f1b on a
  data x stage 2 x 2 mesh) run one compiled module per stage and equal the SPMD interpreter,
  and `lamina-run --backend iree --check` runs a staged file.

IREE compiles take about a second each, so the cache directory is shared by the tests of one
worker (writes are atomic renames, so workers could even share it) except where a test counts
compiles, which gets its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lamina
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from lamina.backends.compare import compare
from lamina.backends.inputs import random_inputs
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import run_function
from lamina.cli.run import main as run_main
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.core.dtypes import tensor_dtype
from lamina.ir.text.source import make_context, parse_text, verify
from strategies import examples, is_long_run
from strategies.programs import ALL_FAMILIES, programs
from test_accumulate_gradients import Mlp, _inputs, mlps
from xdsl.dialects.builtin import ModuleOp

pytest.importorskip("iree.runtime")
pytest.importorskip("iree.compiler")
cache = pytest.importorskip("lamina.backends.iree.cache")

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"

# (sample, entry, pipeline): every family once, each feature the backend declares (fused
# kernels, an attention kernel, frees, tier moves), i1 and f64 results; the long run takes all
SELECTED = [
    ("elementwise.mlir", "binary", ""),
    ("dtypes.mlir", "compare_select", ""),
    ("dtypes.mlir", "double", "fuse-elementwise"),
    ("layout.mlir", "layout", ""),
    ("reductions.mlir", "norms", "fuse-elementwise"),
    ("attention.mlir", "causal_attention", "fuse-attention,fuse-elementwise"),
    ("long_chain_frees.mlir", "long_chain", "fuse-elementwise"),
    ("zero_offload_step.mlir", "zero_offload_step", ""),
]
EXPORTED = {   # every sample function the export covers (the rest: placed programs)
    "attention.mlir": ["causal_attention"], "dropout_seed_operand.mlir": ["seed_arg", "seed_constant"],
    "dtypes.mlir": ["half", "double", "casts", "compare_select"],
    "elementwise.mlir": ["unary", "binary"],
    "gpt2_block.mlir": ["gpt2_block"], "layernorm_gelu_dropout.mlir": ["ln_gelu_dropout",
                                                                       "ln_gelu_dropout_small"],
    "layout.mlir": ["layout"], "long_chain_frees.mlir": ["long_chain"], "mlp_block.mlir": ["mlp_block"],
    "mlp_layernorm_block.mlir": ["mlp"], "mlp_train.mlir": ["mlp_loss"],
    "mlp_training_forward.mlir": ["mlp_training_loss"],
    "mlp_training_offload.mlir": ["mlp_training_step"],
    "reductions.mlir": ["reduce", "norms", "softmaxes"], "tiny_lm.mlir": ["tiny_lm"],
    "zero_offload_step.mlir": ["zero_offload_step"]}
ALL = [(f, e, p) for f, entries in EXPORTED.items() for e in entries
       for p in ("", "fuse-attention,fuse-elementwise")]

SMALL = """\
func.func @f(%x: tensor<4x8xf32>, %g: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = lamina.layernorm %x scale %g {axis = -1 : i64, eps = 1.000000e-05 : f64} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = lamina.gelu %0 {approximate = "tanh"} : tensor<4x8xf32>
  func.return %1 : tensor<4x8xf32>
}
"""

DROPOUT = """\
func.func @drop(%x: tensor<64x128xf32>) -> tensor<64x128xf32> {
  %y = lamina.dropout %x {rate = 0.3 : f64, seed = 7 : i64} : tensor<64x128xf32>
  func.return %y : tensor<64x128xf32>
}
"""

# 1 + 1e-12 is 1 in f32: a demoted program would lose the difference entirely
F64 = """\
func.func @d(%x: tensor<16xf64>, %e: tensor<16xf64>) -> tensor<16xf64> {
  %s = lamina.add %x, %e : tensor<16xf64>
  %t = lamina.sub %s, %x : tensor<16xf64>
  %y = lamina.exp %t : tensor<16xf64>
  func.return %y : tensor<16xf64>
}
"""

# bf16 in and out (float32 arrays on the host), a scan, f64 sin and cos: what the export
# refused before, through the backend
MIXED = """\
func.func @f(%x: tensor<4x8xbf16>, %g: tensor<8xbf16>, %n: tensor<12xi64>, %t: tensor<16xf64>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<12xi64>, tensor<16xf64>) {
  %0 = lamina.mul %x, %g : (tensor<4x8xbf16>, tensor<8xbf16>) -> tensor<4x8xbf16>
  %1 = lamina.sub %0, %x : tensor<4x8xbf16>
  %2 = lamina.cumsum %1 {axis = 1 : i64, exclusive = true} : tensor<4x8xbf16>
  %3 = lamina.cumsum %n {axis = 0 : i64, reverse = true} : tensor<12xi64>
  %s = lamina.sin %t : tensor<16xf64>
  %c = lamina.cos %t : tensor<16xf64>
  %4 = lamina.mul %s, %c : tensor<16xf64>
  func.return %1, %2, %3, %4 : tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<12xi64>, tensor<16xf64>
}
"""

RESHARD = """\
lamina.mesh @m [a = 2]
func.func @f(%x: tensor<8x4xf32, #lamina.place<@m, [[a], []]>>) -> tensor<8x4xf32, #lamina.place<@m, [[], [a]]>> {
  %r = lamina.reshard %x : tensor<8x4xf32, #lamina.place<@m, [[a], []]>> -> tensor<8x4xf32, #lamina.place<@m, [[], [a]]>>
  func.return %r : tensor<8x4xf32, #lamina.place<@m, [[], [a]]>>
}
"""


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("iree-cache")


@pytest.fixture
def cache_dir(shared_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LAMINA_CACHE_DIR", str(shared_cache))
    return shared_cache


@pytest.fixture
def compiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts IREE compiles during the test, in a cache of the test's own."""
    monkeypatch.setenv("LAMINA_CACHE_DIR", str(tmp_path / "cache"))
    seen: list[str] = []
    real = cache.ic.compile_str

    def counting(text: str, **kw: object) -> object:
        seen.append(text)
        return real(text, **kw)

    monkeypatch.setattr(cache.ic, "compile_str", counting)
    return seen


def _module(text: str) -> ModuleOp:
    m = parse_text(text, "t.mlir", make_context())
    verify(m)
    return m


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "prog.mlir"
    path.write_text(text, encoding="utf-8")
    return str(path)


def _assert_equal_to_interpreter(m: ModuleOp, exe: lamina.Executable, inputs: list[np.ndarray]
                                 ) -> None:
    func = find_entry(m, None)
    want = run_function(func, inputs).outputs
    got = list(exe(inputs).outputs.values())
    for g, w, t in zip(got, want, func.function_type.outputs.data, strict=True):
        assert g.dtype == w.dtype
        d = compare("out", tensor_dtype(t), g, w)
        assert d.ok, d.line()


@pytest.mark.parametrize(("sample", "entry", "pipeline"), ALL if is_long_run() else SELECTED)
def test_a_sample_runs_on_iree_as_on_the_interpreter(sample: str, entry: str, pipeline: str,
                                                     cache_dir: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    args = [str(SAMPLES / sample), "--entry", entry, "-p", pipeline, "--backend", "iree", "--check"]
    code = run_main(args)
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "check " in out and "check FAILED" not in out, out


def test_every_exported_sample_is_listed() -> None:
    """EXPORTED is what the export covers (a sample it starts covering joins the long sweep)."""
    from lamina.analysis.linalg.export import export_function
    from xdsl.dialects.func import FuncOp

    found: dict[str, list[str]] = {}
    for path in sorted(SAMPLES.glob("*.mlir")):
        if path.name == "bad.mlir":
            continue
        m = parse_text(path.read_text(encoding="utf-8"), str(path), make_context())
        for f in (op for op in m.ops if isinstance(op, FuncOp)):
            try:
                export_function(f)
            except LaminaError:
                continue
            found.setdefault(path.name, []).append(f.sym_name.data)
    assert found == EXPORTED


def test_a_second_process_loads_the_module_from_disk(tmp_path: Path, compiles: list[str],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """This process compiles (one module in the cache); a new one maps the file, compiling
    nothing (its statistics say so) and gets the same outputs."""
    prog = _write(tmp_path, SMALL)
    args = [prog, "--backend", "iree", "--stats-json", "-", "--check"]
    assert run_main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["module_compiled"] is True and len(compiles) == 1
    files = list((tmp_path / "cache").glob("iree*/m*.vmfb"))
    assert [str(f) for f in files] == [first["module_path"]]
    env = {**os.environ, "LAMINA_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-m", "lamina.cli.run", *args], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    second = json.loads(r.stdout)
    assert second["module_compiled"] is False
    assert second["module_path"] == first["module_path"]
    assert second["outputs"] == first["outputs"]


def test_compile_once_then_calls_equal_the_interpreter(compiles: list[str]) -> None:
    """`lamina.compile` compiles once; three calls on different inputs compile nothing more and
    each equals the interpreter; compiling the same program again loads it from the cache."""
    m = _module(SMALL)
    exe = lamina.compile(m, backend="iree")
    assert len(compiles) == 1
    for seed in range(3):
        _assert_equal_to_interpreter(m, exe, random_inputs(find_entry(m, None), seed))
    assert len(compiles) == 1
    again = lamina.compile(m, backend="iree")
    assert len(compiles) == 1
    assert again(random_inputs(find_entry(m, None), 0)).stats["module_compiled"] is False


def test_dropout_is_the_interpreters_bits(cache_dir: Path) -> None:
    m = _module(DROPOUT)
    x = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)
    got = lamina.compile(m, backend="iree")([x]).outputs["y"]
    want = run_function(find_entry(m, None), [x]).outputs[0]
    assert np.array_equal(got == 0, want == 0)
    assert 0.25 < np.mean(got == 0) < 0.35
    assert np.array_equal(got, want)


def test_f64_stays_f64(cache_dir: Path) -> None:
    m = _module(F64)
    x = np.linspace(-1, 1, 16)
    e = np.full(16, 1e-12)
    got = lamina.compile(m, backend="iree")([x, e]).outputs["y"]
    want = run_function(find_entry(m, None), [x, e]).outputs[0]
    assert got.dtype == np.float64
    assert np.all(got != 1.0)   # f32 would have rounded 1e-12 away: exp(0) == 1
    assert np.allclose(got, want, rtol=1e-12, atol=0)


F16 = """func.func @f(%x: tensor<4x8xf16>, %y: tensor<8xf16>) -> tensor<4x8xf16> {
  %a = lamina.add %x, %y : (tensor<4x8xf16>, tensor<8xf16>) -> tensor<4x8xf16>
  %g = lamina.gelu %a {approximate = "tanh"} : tensor<4x8xf16>
  %s = lamina.softmax %g {axis = -1 : i64} : tensor<4x8xf16>
  func.return %s : tensor<4x8xf16>
}
"""


def test_f16_is_the_interpreters_bits(cache_dir: Path) -> None:
    """f16 computed as the interpreter does (f32 per op, one round to nearest even): the same bits."""
    m = _module(F16)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(4, 8)).astype(np.float16), rng.normal(size=8).astype(np.float16)
    got = lamina.compile(m, backend="iree")([x, y]).outputs["s"]
    want = run_function(find_entry(m, None), [x, y]).outputs[0]
    assert got.dtype == np.float16
    assert np.array_equal(got.view(np.uint16), np.asarray(want).view(np.uint16))


def test_a_partly_placed_program_is_one_diagnostic(capsys: pytest.CaptureFixture[str]) -> None:
    """Placed programs run per device (tests/test_linalg_export_spmd.py); one whose values are
    not all placed is refused, telling the user to place them."""
    assert run_main([str(SAMPLES / "mlp_megatron.mlir"), "--backend", "iree"]) == 1
    out, err = capsys.readouterr()
    assert err.count("error:") == 1, err
    assert "run -p propagate-sharding first" in err, err
    assert "Traceback" not in err and out == ""


def test_a_program_the_export_refuses_is_its_diagnostic(
        tmp_path: Path, compiles: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """An unlowered reshard (what is left to refuse: every table op and element type exports)."""
    assert run_main([_write(tmp_path, RESHARD), "--backend", "iree", "--check"]) == 1
    out, err = capsys.readouterr()
    assert err.count("error:") == 1, err
    assert "prog.mlir:3:3: error: lamina.reshard: not lowered to collectives" in err, err
    assert "Traceback" not in err and out == "" and compiles == []


def test_bf16_scans_and_f64_sin_cos_through_the_backend(cache_dir: Path) -> None:
    """bf16 arguments and results cross IREE's runtime as bfloat16 and come back as the
    interpreter's float32 storage, its bits (each op of a fused chain rounded, as the
    interpreter does: mul then sub differs from one rounding); the scans are its bits too
    (f64 sin/cos: test_linalg_export measures their ulps)."""
    m = _module(MIXED)
    lamina.apply(m, "fuse-elementwise")
    func = find_entry(m, None)
    inputs = random_inputs(func, 4)
    got = list(lamina.compile(m, backend="iree")(inputs).outputs.values())
    want = run_function(func, inputs).outputs
    for g, w in zip(got[:3], want[:3], strict=True):
        assert g.dtype == w.dtype and np.array_equal(g, w)
    assert got[0].dtype == np.float32 and got[3].dtype == np.float64
    assert np.allclose(got[3], want[3], rtol=1e-15, atol=1e-16)


def test_a_target_without_its_device_is_one_diagnostic(compiles: list[str]) -> None:
    m = _module(SMALL)
    with pytest.raises(LaminaError, match=r"unknown target 'tpu' \(targets: llvm-cpu, cuda\)"):
        lamina.compile(m, backend="iree", iree_target="tpu")
    try:
        lamina.compile(m, backend="iree", iree_target="cuda")
    except LaminaError as e:
        assert "target 'cuda' needs a device of IREE's 'cuda' driver" in str(e)
    else:   # a machine with a CUDA GPU: the program ran there
        assert len(compiles) == 1
    with pytest.raises(LaminaError, match="backend 'iree' has no option 'target'"):
        lamina.compile(m, backend="iree", target="h100")


@settings(max_examples=examples(3), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(min_ops=2, max_ops=8, dtypes=("bf16", "f32", "f64"), families=ALL_FAMILIES))
def test_random_programs_through_the_backend(prog) -> None:
    """A random program (bf16 among its types) through `lamina.compile` equals the interpreter."""
    m = _module(prog.text)
    _assert_equal_to_interpreter(m, lamina.compile(m, backend="iree"), list(prog.inputs))


STEP = """\
func.func @step(%w: tensor<8xf32>, %g: tensor<8xf32>) -> tensor<8xf32> attributes {lamina.updates = array<i64: 0>} {
  %n = lamina.sub %w, %g : tensor<8xf32>
  func.return %n : tensor<8xf32>
}
"""


def test_donation_is_accepted_and_reuses_no_buffer(cache_dir: Path) -> None:
    """IREE copies arguments in: a donated argument's array is left as it was and the result is
    a new array (the module docstring's promise)."""
    exe = lamina.compile(_module(STEP), backend="iree", donate=True)
    assert exe.donated == ("w",)
    w, g = np.arange(8, dtype=np.float32), np.ones(8, dtype=np.float32)
    out = exe([w, g]).outputs["n"]
    assert np.array_equal(w, np.arange(8, dtype=np.float32))
    assert np.array_equal(out, w - g) and not np.shares_memory(out, w)


def test_iree_target_flag_is_the_backend_option(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """`lamina-run --iree-target` reaches the backend's `iree_target`: llvm-cpu runs and checks,
    an unknown target is the backend's one diagnostic, and the flag on another backend is
    refused rather than ignored."""
    from lamina.cli.run import main

    prog = tmp_path / "small.mlir"
    prog.write_text(SMALL)
    assert main([str(prog), "--backend", "iree", "--iree-target", "llvm-cpu", "--check"]) == 0
    capsys.readouterr()
    assert main([str(prog), "--backend", "iree", "--iree-target", "tpu"]) == 1
    assert "unknown target 'tpu' (targets: llvm-cpu, cuda)" in capsys.readouterr().err
    assert main([str(prog), "--iree-target", "llvm-cpu"]) == 1
    assert capsys.readouterr().err.strip() == \
        "lamina-run: error: --iree-target applies to --backend iree"


# (mesh, head of the pipeline, pipeline-stages' options): P = 2, M = 2 either way
STAGINGS = {
    "gpipe on stage = 2": ("derive-backward{data=x,y}", "stages=2 micro-batches=2 schedule=gpipe"),
    "1f1b on data x stage 2 x 2": (
        "place-batch{data=x,y axis=data size=2},derive-backward{data=x,y},"
        "accumulate-gradients{micro-batches=2},propagate-sharding,insert-collectives",
        "stages=2 schedule=1f1b"),
}


def _staged_step(mlp: Mlp, staging: str) -> ModuleOp:
    head, options = STAGINGS[staging]
    module = lamina.parse(mlp.text())
    lamina.apply(module, f"{head},pipeline-stages{{{options}}}")
    return module


@pytest.mark.parametrize("staging", sorted(STAGINGS))
@settings(max_examples=examples(1), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(mlp=mlps(("f32",)))
def test_staged_steps_run_one_module_per_stage_as_on_the_spmd_interpreter(
        mlp: Mlp, staging: str, compiles: list[str]) -> None:
    """A random MLP step staged by pipeline-stages: compiled once, two stage modules (each
    stage's devices run theirs, permutes as sends and receives); two calls equal the SPMD
    interpreter and compile nothing more."""
    from lamina.backends.numpy.spmd import run_spmd

    mlp = Mlp(8, mlp.widths, mlp.acts, mlp.loss, mlp.dtype)   # 8 rows: 2 x 2 x 2 cuts
    module = _staged_step(mlp, staging)
    func = find_entry(module, "f_grad")
    start = len(compiles)   # the fixture's cache lives across Hypothesis' examples
    exe = lamina.compile(module, "f_grad", backend="iree")
    made = compiles[start:]   # none when an earlier example drew the same step
    assert len(made) in (0, 2) and all("every device of stage stage[" in t for t in made)
    for seed in (0, 1):
        inputs = _inputs(func, seed)
        got = exe(inputs)
        assert len(set(got.stats["module_paths"])) == 2
        want = run_spmd(func, inputs).outputs
        for (name, g), w, t in zip(got.outputs.items(), want, func.function_type.outputs.data,
                                   strict=True):
            diff = compare(name, tensor_dtype(t), g, w)
            assert diff.ok, f"{staging}, seed {seed}: {diff.line()}\n{mlp.text()}"
    assert len(compiles) == start + len(made)


def test_lamina_run_backend_iree_checks_a_staged_file(tmp_path: Path, cache_dir: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`lamina-run X --backend iree --check` on a file pipeline-stages wrote (1f1b, data x
    stage): every output of the staged step is checked against the interpreter."""
    mlp = Mlp(8, (3, 4, 2), ("tanh", "gelu"), "mean", "f32")
    path = tmp_path / "staged.mlir"
    path.write_text(str(_staged_step(mlp, "1f1b on data x stage 2 x 2")), encoding="utf-8")
    assert run_main([str(path), "--entry", "f_grad", "--backend", "iree", "--check"]) == 0
    out, err = capsys.readouterr()
    assert out.count(": ok ") == 5 and "error" not in err, (out, err)
