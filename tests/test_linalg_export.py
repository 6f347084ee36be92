"""The linalg export (`lamina-opt -t linalg`) with IREE as the oracle.

- every single-device sample function the export covers, as parsed, after `fuse-elementwise`
  and after `fuse-attention,fuse-elementwise` (attention kernels), is compiled by IREE for the CPU (all of them as ONE module, one compile) and
  run on the inputs `lamina-run` draws: IREE's outputs match the NumPy interpreter's (float
  tolerance by element type, exact for integers and i1); f64 stays f64 (IREE is told not to
  demote it);
- dropout masks are the interpreter's bits (the hash is computed in the generic's body);
- random programs of the fusion property test's generator (f32 and f64), unfused and fused, the
  same way;
- what the export refuses is one diagnostic naming the op (the CLI exits 1), a placed program is
  refused as such, and the output is the same bytes on every run.

IREE compiles take seconds, so the samples share one compile and the random programs are few.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lamina.analysis.linalg.export import boundary_dtype, export_function, export_module, wrap_module
from lamina.backends.compare import compare
from lamina.backends.inputs import random_inputs
from lamina.backends.numpy.runner import run_function
from lamina.cli.opt import main as opt_main
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.core.dtypes import STORAGE, tensor_dtype
from lamina.ir.ops.opbase import tensor_info
from lamina.ir.text.source import make_context, parse_text, verify
from lamina.passes.pipeline import build_pipeline, run_pipeline
from strategies import examples
from strategies.programs import ALL_FAMILIES, programs
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp

ic = pytest.importorskip("iree.compiler")
rt = pytest.importorskip("iree.runtime")

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(p for p in (ROOT / "samples").glob("*.mlir") if p.name != "bad.mlir")
IREE_FLAGS = ["--iree-llvmcpu-target-cpu=host", "--iree-input-demote-f64-to-f32=false"]
# what the export covers of the samples: every other sample function is refused for a reason
# this slice does not build yet (f16/bf16, placed programs)
REFUSED = ("f16 tensors", "bf16 tensors", "is placed: export its module")
MIN_EXPORTED = 60   # of the sample functions, counting every pipeline
SAMPLE_PIPELINES = ("", "fuse-elementwise", "fuse-attention,fuse-elementwise")
MAX_ELEMENTS = 1 << 20   # inputs of a sample function run here (larger ones are only compiled)


def _module(text: str, name: str, pipeline: str) -> ModuleOp:
    ctx = make_context()
    m = parse_text(text, name, ctx)
    verify(m)
    if pipeline:
        run_pipeline(ctx, m, build_pipeline(pipeline))
        verify(m)
    return m


def _elements(func: FuncOp) -> int:
    return sum(math.prod(tensor_info(t).shape) for t in func.function_type.inputs.data)


def _functions(m: ModuleOp) -> list[FuncOp]:
    return [op for op in m.ops if isinstance(op, FuncOp)]


def _compile(funcs: list[str]):
    vmfb = ic.compile_str(wrap_module(funcs), target_backends=["llvm-cpu"], extra_args=IREE_FLAGS)
    return rt.load_vm_flatbuffer(vmfb, driver="local-task")


def _iree_outputs(module, symbol: str, func: FuncOp, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The compiled function on the interpreter's storage arrays, its outputs back in storage
    dtypes (bf16 crosses IREE's boundary as ml_dtypes' bfloat16, the interpreter keeps float32)."""
    types = func.function_type
    got = getattr(module, symbol)(*[np.asarray(a, boundary_dtype(tensor_dtype(t)))
                                    for a, t in zip(inputs, types.inputs.data, strict=True)])
    got = list(got) if isinstance(got, tuple | list) else [got]
    return [np.asarray(g.to_host() if hasattr(g, "to_host") else g, STORAGE[tensor_dtype(t)])
            for g, t in zip(got, types.outputs.data, strict=True)]


def _assert_matches(module, symbol: str, func: FuncOp, inputs: list[np.ndarray], what: str) -> None:
    want = run_function(func, inputs).outputs
    got = _iree_outputs(module, symbol, func, inputs)
    assert len(got) == len(want), what
    for i, (g, w, t) in enumerate(zip(got, want, func.function_type.outputs.data, strict=True)):
        assert g.dtype == w.dtype, (what, i, g.dtype, w.dtype)
        d = compare(f"out{i}", tensor_dtype(t), g, w)
        assert d.ok, f"{what}: {d.line()}"


@pytest.fixture(scope="module")
def samples_on_iree():
    """(compiled module, [(symbol, function, label)], refusal messages) for every sample."""
    parts, cases, refused = [], [], []
    for path in SAMPLES:
        text = path.read_text(encoding="utf-8")
        for pipeline in SAMPLE_PIPELINES:
            for func in _functions(_module(text, str(path), pipeline)):
                symbol = f"f{len(cases)}"
                label = f"{path.name}@{func.sym_name.data} [{pipeline or 'as parsed'}]"
                try:
                    parts.append(export_function(func, symbol))
                except LaminaError as e:
                    refused.append(f"{label}: {e}")
                    continue
                cases.append((symbol, func, label))
    return _compile(parts), cases, refused


def test_samples_run_on_iree_as_on_the_interpreter(samples_on_iree) -> None:
    module, cases, refused = samples_on_iree
    assert len(cases) >= MIN_EXPORTED, refused
    for msg in refused:
        assert any(r in msg for r in REFUSED), msg
    ran = 0
    for symbol, func, label in cases:
        if _elements(func) < MAX_ELEMENTS:   # the large samples compile, their runs are skipped
            _assert_matches(module, symbol, func, random_inputs(func, 0), label)
            ran += 1
    assert ran >= MIN_EXPORTED - 4


DROPOUT = """\
func.func @attr_seed(%x: tensor<6x40x7xf32>) -> tensor<6x40x7xf32> {
  %y = lamina.dropout %x {rate = 0.3 : f64, seed = 7 : i64} : tensor<6x40x7xf32>
  func.return %y : tensor<6x40x7xf32>
}
func.func @operand_seed(%x: tensor<33x5xf64>, %seed: tensor<i64>) -> tensor<33x5xf64> {
  %y = lamina.dropout %x seed %seed {rate = 0.5 : f64} : (tensor<33x5xf64>, tensor<i64>) -> tensor<33x5xf64>
  func.return %y : tensor<33x5xf64>
}
"""


def test_dropout_is_the_interpreters_bits() -> None:
    """The dropout hash runs in the generic's body on each element's flat index: IREE's result
    is the interpreter's bit for bit (the same elements dropped, the others scaled alike), with
    the seed an attribute or an operand."""
    funcs = _functions(_module(DROPOUT, "dropout.mlir", ""))
    module = _compile([export_function(f) for f in funcs])
    for func in funcs:
        inputs = random_inputs(func, 3)
        (got,) = _iree_outputs(module, func.sym_name.data, func, inputs)
        (want,) = run_function(func, inputs).outputs
        assert 0 < np.count_nonzero(want == 0) < want.size
        assert got.dtype == want.dtype and np.array_equal(got, want)


F64 = """\
func.func @f64_math(%x: tensor<8x33xf64>) -> (tensor<8x33xf64>, tensor<8x33xf64>, tensor<8x33xf64>) {
  %t = lamina.tanh %x : tensor<8x33xf64>
  %g = lamina.gelu %x {approximate = "tanh"} : tensor<8x33xf64>
  %n = lamina.layernorm %x {axis = -1 : i64, eps = 1.0e-05 : f64} : tensor<8x33xf64>
  %l = lamina.log_softmax %n {axis = 0 : i64} : tensor<8x33xf64>
  %e = lamina.erf %l : tensor<8x33xf64>
  func.return %t, %g, %e : tensor<8x33xf64>, tensor<8x33xf64>, tensor<8x33xf64>
}
"""


def test_f64_stays_f64(samples_on_iree) -> None:
    """f64 results are f64 and as close as f64 allows, not demoted to f32: the f64 samples and
    the functions IREE's CPU runtime lacks in f64 (tanh and log2 are exported through expm1
    and log; see `Body.f64_form`)."""
    module, cases, _ = samples_on_iree
    f64 = [(s, f) for s, f, _ in cases
           if any(tensor_dtype(t) == "f64" for t in f.function_type.outputs.data)]
    assert f64
    (func,) = _functions(_module(F64, "f64.mlir", ""))
    f64.append(("f64_math", func))
    own = _compile([export_function(func)])
    for symbol, func in f64:
        inputs = random_inputs(func, 1)
        got = _iree_outputs(own if symbol == "f64_math" else module, symbol, func, inputs)
        want = run_function(func, inputs).outputs
        for g, w in zip(got, want, strict=True):
            if w.dtype == np.float64:
                assert g.dtype == np.float64
                assert np.allclose(g, w, rtol=1e-12, atol=1e-13), np.max(np.abs(g - w))


def _export_or_refusal(func: FuncOp, symbol: str) -> str | None:
    """The function's export as `symbol`, or None when the export refuses it, after checking
    that the refusal names the op it has no lowering for (a scan, a cast to bf16)."""
    try:
        return export_function(func, symbol)
    except LaminaError as e:
        assert re.search(r"error: lamina\.\w+: no linalg lowering for ", str(e)), str(e)
        return None


@settings(max_examples=examples(4), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(min_ops=2, max_ops=10, dtypes=("f16", "f32", "f64"), families=ALL_FAMILIES))
def test_random_programs_run_on_iree_as_on_the_interpreter(prog) -> None:
    """A random program (dropout included), as generated and fused, in one IREE compile; one the
    export refuses (a scan, a cast to bf16) is skipped after checking that the refusal names
    the op."""
    parts, cases = [], []
    for pipeline in ("", "fuse-elementwise"):
        func = _functions(_module(prog.text, "prog.mlir", pipeline))[0]
        text = _export_or_refusal(func, f"p{len(cases)}")
        if text is None:
            return
        parts.append(text)
        cases.append((f"p{len(cases)}", func))
    module = _compile(parts)
    for symbol, func in cases:
        _assert_matches(module, symbol, func, list(prog.inputs), f"{symbol}\n{prog.text}")


IREE_OPT = Path(sys.executable).parent / "iree-opt"


@settings(max_examples=examples(3), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(programs(min_ops=2, max_ops=12, dtypes=("f32", "f64", "i32"),
                         families=ALL_FAMILIES), min_size=8, max_size=8))
def test_iree_opt_parses_the_export_of_random_programs(progs) -> None:
    """The parse-and-verify oracle, cheaper than a compile so it sees more programs: eight
    random programs a draw, each as generated and fused, exported into one module that
    `iree-opt` (upstream MLIR's parser and verifiers, IREE's dialects registered) accepts.
    Programs the export refuses are left out after the refusal is checked to name the op."""
    parts = []
    for prog in progs:
        for pipeline in ("", "fuse-elementwise"):
            func = _functions(_module(prog.text, "prog.mlir", pipeline))[0]
            text = _export_or_refusal(func, f"p{len(parts)}")
            if text is not None:
                parts.append(text)
    assert parts, "every program was refused"
    res = subprocess.run([str(IREE_OPT), "-"], input=wrap_module(parts), capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("func.func @p") == len(parts)


UNSUPPORTED = {
    "scan": ("""\
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  %y = lamina.cumsum %x {axis = 0 : i64} : tensor<8xf32>
  func.return %y : tensor<8xf32>
}
""", "error: lamina.cumsum: no linalg lowering for lamina.cumsum (its formula uses xp.cumulative_sum)"),
    # found when the expression is written: at the op, or at the kernel that holds it
    "f64_cos": ("""\
func.func @f(%x: tensor<8xf64>) -> tensor<8xf64> {
  %y = lamina.cos %x : tensor<8xf64>
  func.return %y : tensor<8xf64>
}
""", "error: lamina.cos: no linalg lowering for lamina.cos (its formula uses cos on float64"),
}


@pytest.mark.parametrize("case", sorted(UNSUPPORTED))
def test_an_unsupported_op_is_one_diagnostic(case: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    text, message = UNSUPPORTED[case]
    src = tmp_path / "prog.mlir"
    src.write_text(text, encoding="utf-8")
    assert opt_main([str(src), "-t", "linalg"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("error:") == 1, err
    assert f"prog.mlir:2:3: {message}" in err, err
    assert "Traceback" not in err


def test_a_partly_placed_program_is_refused() -> None:
    """As written (arguments placed, the rest not): the per-device export needs every value
    placed (tests/test_linalg_export_spmd.py exports it after propagate-sharding)."""
    m = _module((ROOT / "samples" / "mlp_megatron.mlir").read_text(encoding="utf-8"),
                "mlp_megatron.mlir", "")
    with pytest.raises(LaminaError, match="run -p propagate-sharding first"):
        export_module(m)


def test_the_export_is_deterministic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs of `lamina-opt -t linalg` (fused, with moves and frees) print the same bytes."""
    outs = []
    for _ in range(2):
        assert opt_main([str(ROOT / "samples" / "zero_offload_step.mlir"), "-p",
                         "fuse-elementwise", "-t", "linalg"]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]
    assert "linalg.generic" in outs[0] and "lamina." not in outs[0].replace("// lamina:", "")
