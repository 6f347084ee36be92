"""The linalg export (`lamina-opt -t linalg`) with IREE as the oracle.

- every single-device sample function the export covers, as parsed, after `fuse-elementwise`
  and after `fuse-attention,fuse-elementwise` (attention kernels), is compiled by IREE for the CPU (all of them as ONE module, one compile) and
  run on the inputs `lamina-run` draws: IREE's outputs match the NumPy interpreter's (float
  tolerance by element type, exact for integers and i1); f64 stays f64 (IREE is told not to
  demote it);
- dropout masks are the interpreter's bits (the hash is computed in the generic's body), and
  so are bf16 ops whose f32 value is exact and cumsum (f64, f32, integers);
- f64 sin and cos (computed in the body) are within 2 ulp of NumPy's;
- random programs of the fusion property test's generator (f16, bf16, f32 and f64), unfused and
  fused, the same way: every one exports;
- what the export refuses is one diagnostic naming the op (the CLI exits 1), a placed program is
  refused as such, and the output is the same bytes on every run.

IREE compiles take seconds, so the samples share one compile and the random programs are few.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lamina.analysis.linalg.export import boundary_dtype, export_function, export_module, wrap_module
from lamina.analysis.linalg.namespace import LinalgNamespace, Unsupported
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
# what the export covers of the samples: every other sample function is placed (it exports
# with its module, per device: tests/test_linalg_export_spmd.py)
REFUSED = ("is placed: export its module",)
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
  %s = lamina.sin %g : tensor<8x33xf64>
  %c = lamina.cos %e : tensor<8x33xf64>
  %sc = lamina.add %s, %c : tensor<8x33xf64>
  func.return %t, %sc, %e : tensor<8x33xf64>, tensor<8x33xf64>, tensor<8x33xf64>
}
"""


def test_f64_stays_f64(samples_on_iree) -> None:
    """f64 results are f64 and as close as f64 allows, not demoted to f32: the f64 samples and
    the functions IREE's CPU runtime lacks in f64 (tanh and log2 are exported through expm1
    and log, sin and cos computed in the body; see `Body.f64_form`)."""
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


@settings(max_examples=examples(4), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(min_ops=2, max_ops=10, dtypes=("f16", "bf16", "f32", "f64"), families=ALL_FAMILIES))
def test_random_programs_run_on_iree_as_on_the_interpreter(prog) -> None:
    """A random program (dropout, cumsum, bf16 included), as generated and fused, in one IREE
    compile: the export covers every op and type the generator makes (nothing is refused), and
    IREE's outputs are the interpreter's within its float tolerance (bf16: reductions and
    matmuls sum in another order, and IREE's exp, tanh ... differ in f32's last bits, which a
    bf16 rounding can turn into one bf16 ulp)."""
    parts, cases = [], []
    for pipeline in ("", "fuse-elementwise"):
        func = _functions(_module(prog.text, "prog.mlir", pipeline))[0]
        parts.append(export_function(func, f"p{len(cases)}"))
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
    `iree-opt` (upstream MLIR's parser and verifiers, IREE's dialects registered) accepts."""
    parts = []
    for prog in progs:
        for pipeline in ("", "fuse-elementwise"):
            func = _functions(_module(prog.text, "prog.mlir", pipeline))[0]
            parts.append(export_function(func, f"p{len(parts)}"))
    res = subprocess.run([str(IREE_OPT), "-"], input=wrap_module(parts), capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("func.func @p") == len(parts)


def test_an_op_the_export_refuses_is_one_diagnostic(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """What is left to refuse (every table op and element type now exports): an unlowered
    reshard, one diagnostic at the op from the CLI, exit 1, no traceback."""
    t, r = "tensor<8x4xf32, #lamina.place<@m, [[a], []]>>", "tensor<8x4xf32, #lamina.place<@m, [[], [a]]>>"
    src = tmp_path / "prog.mlir"
    src.write_text(f"lamina.mesh @m [a = 2]\nfunc.func @f(%x: {t}) -> {r} {{\n"
                   f"  %r = lamina.reshard %x : {t} -> {r}\n  func.return %r : {r}\n}}\n",
                   encoding="utf-8")
    assert opt_main([str(src), "-t", "linalg"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("error:") == 1 and "Traceback" not in err, err
    assert "prog.mlir:3:3: error: lamina.reshard: not lowered to collectives" in err, err


def test_a_function_the_namespace_lacks_names_itself() -> None:
    """A formula calling an array-API function the namespace has no linalg form for raises
    `Unsupported` naming it (what `_refusal` turns into the op's diagnostic), never a guess."""
    ns = LinalgNamespace()
    x = ns.tensor("%arg0", (4,), np.float32)
    with pytest.raises(Unsupported, match=r"^xp\.sort$"):
        ns.sort(x)
    with pytest.raises(Unsupported, match="a branch on a value"):
        bool(x > 0)


BF16_EXACT = """\
func.func @bf16_exact(%x: tensor<6x40xbf16>, %y: tensor<40xbf16>, %h: tensor<6x40xf16>, %a: tensor<6x8xbf16>, %b: tensor<8x5xbf16>) -> (tensor<6x40xbf16>, tensor<6x40xbf16>, tensor<6x40xf16>, tensor<6x40xbf16>, tensor<6x5xbf16>, tensor<6xbf16>, tensor<6x40xbf16>) {
  %s = lamina.add %x, %y : (tensor<6x40xbf16>, tensor<40xbf16>) -> tensor<6x40xbf16>
  %m = lamina.mul %s, %x : tensor<6x40xbf16>
  %xx = lamina.mul %x, %x : tensor<6x40xbf16>
  %q = lamina.sqrt %xx : tensor<6x40xbf16>
  %d = lamina.div %m, %s : tensor<6x40xbf16>
  %lt = lamina.lt %x, %s : (tensor<6x40xbf16>, tensor<6x40xbf16>) -> tensor<6x40xi1>
  %sel = lamina.select %lt, %d, %q : (tensor<6x40xi1>, tensor<6x40xbf16>, tensor<6x40xbf16>) -> tensor<6x40xbf16>
  %hb = lamina.cast %h : (tensor<6x40xf16>) -> tensor<6x40xbf16>
  %bh = lamina.cast %sel : (tensor<6x40xbf16>) -> tensor<6x40xf16>
  %mm = lamina.matmul %a, %b : (tensor<6x8xbf16>, tensor<8x5xbf16>) -> tensor<6x5xbf16>
  %r = lamina.reduce_sum %a {axes = array<i64: 1>, keepdims = false} : (tensor<6x8xbf16>) -> tensor<6xbf16>
  %c = lamina.cumsum %s {axis = 1 : i64, reverse = true} : tensor<6x40xbf16>
  func.return %m, %sel, %bh, %hb, %mm, %r, %c : tensor<6x40xbf16>, tensor<6x40xbf16>, tensor<6x40xf16>, tensor<6x40xbf16>, tensor<6x5xbf16>, tensor<6xbf16>, tensor<6x40xbf16>
}
"""


def test_bf16_is_the_interpreters_bits() -> None:
    """bf16 computed as the interpreter does it (f32 per op, one `arith.truncf` to nearest even)
    gives its bits, exactly, wherever the two compute the same f32 value: the correctly rounded
    ops (add, mul, div, sqrt, compares, select, casts f16 <-> bf16 through f32, cumsum's
    left-to-right sum) on random values, and a matmul and a sum of small whole numbers (exact
    in f32 whatever the order; random ones are the tolerance test's above)."""
    (func,) = _functions(_module(BF16_EXACT, "bf16.mlir", "fuse-elementwise"))
    module = _compile([export_function(func)])
    inputs = random_inputs(func, 5)
    rng = np.random.default_rng(5)
    inputs[3:] = [rng.integers(-8, 9, a.shape).astype(np.float32) for a in inputs[3:]]
    got = _iree_outputs(module, "bf16_exact", func, inputs)
    want = run_function(func, inputs).outputs
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.dtype == w.dtype, i
        bits = np.uint16 if g.dtype == np.float16 else np.uint32
        assert np.array_equal(g.view(bits), np.asarray(w).view(bits)), (i, np.max(np.abs(g - w)))


CUMSUM = """\
func.func @scans(%x: tensor<5x37xf32>, %y: tensor<6x4x3xf64>, %n: tensor<3x9xi32>, %m: tensor<40xi64>) -> (tensor<5x37xf32>, tensor<6x4x3xf64>, tensor<3x9xi32>, tensor<40xi64>, tensor<5x37xf32>) {
  %a = lamina.cumsum %x {axis = 1 : i64} : tensor<5x37xf32>
  %b = lamina.cumsum %y {axis = 1 : i64, exclusive = true} : tensor<6x4x3xf64>
  %c = lamina.cumsum %n {axis = -1 : i64, reverse = true} : tensor<3x9xi32>
  %d = lamina.cumsum %m {axis = 0 : i64, exclusive = true, reverse = true} : tensor<40xi64>
  %e = lamina.mul %x, %x : tensor<5x37xf32>
  %f = lamina.cumsum %e {axis = 0 : i64} : tensor<5x37xf32>
  func.return %a, %b, %c, %d, %f : tensor<5x37xf32>, tensor<6x4x3xf64>, tensor<3x9xi32>, tensor<40xi64>, tensor<5x37xf32>
}
"""


def test_cumsum_is_the_interpreters_bits() -> None:
    """The scan sums each prefix left to right, the interpreter's order: f64, f32 and the
    integers (i32 wrapping) bit for bit, with `exclusive`, `reverse`, both, and a fused input."""
    (func,) = _functions(_module(CUMSUM, "scan.mlir", "fuse-elementwise"))
    module = _compile([export_function(func)])
    inputs = random_inputs(func, 2)
    inputs[2] = np.full((3, 9), 2**30, np.int32)   # i32 sums past 2^31 wrap, as the interpreter's
    got = _iree_outputs(module, "scans", func, inputs)
    want = run_function(func, inputs).outputs
    assert want[2].min() < 0
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.dtype == w.dtype and np.array_equal(g, w), (i, g, w)


SIN_COS_N = 1 << 18


def _ulps(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got - want) / np.spacing(np.abs(want))))


def test_f64_sin_cos_within_two_ulp_of_numpy() -> None:
    """f64 sin and cos computed in the generic's body (`Body.f64_sin_cos`) are within 2 ulp of
    NumPy's (1 measured) for |x| < 1e5: random x, x next to multiples of pi/2 (where the
    reduction cancels most), small x; NaN past 2^30 and for inf and NaN."""
    n = SIN_COS_N
    text = (f"func.func @sc(%x: tensor<{n}xf64>) -> (tensor<{n}xf64>, tensor<{n}xf64>) {{\n"
            f"  %s = lamina.sin %x : tensor<{n}xf64>\n  %c = lamina.cos %x : tensor<{n}xf64>\n"
            f"  func.return %s, %c : tensor<{n}xf64>, tensor<{n}xf64>\n}}\n")
    (func,) = _functions(_module(text, "sc.mlir", ""))
    module = _compile([export_function(func)])
    rng = np.random.default_rng(0)
    sign = rng.choice([-1.0, 1.0], n)
    near = np.nextafter(rng.integers(-63000, 63000, n) * (np.pi / 2), sign * np.inf)
    for x in (rng.uniform(-1e5, 1e5, n), near, sign * rng.uniform(0, 1, n) ** 8):
        s, c = _iree_outputs(module, "sc", func, [x])
        assert _ulps(s, np.sin(x)) <= 2 and _ulps(c, np.cos(x)) <= 2
    x = np.resize(np.array([np.inf, -np.inf, np.nan, 2.0**30 * 1.01, -1e300]), n)
    s, c = _iree_outputs(module, "sc", func, [x])
    assert np.all(np.isnan(s)) and np.all(np.isnan(c))


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
