"""The JAX backend against the NumPy interpreter, on whole programs and on the bit-exact parts.

- Every sample function (large dims shrunk) before and after the README tour's pipelines: the
  same outputs as the interpreter runs on the same program (`lamina.backends.compare` tolerances;
  integer and i1 outputs exactly), or the same diagnostic where the interpreter refuses it; placed
  ones compile to exactly the collectives Lamina inserted.
- Random programs of the program strategy (f32, f64, bf16, f16), unfused and fused.
- Bit-exact: dropout masks (attribute and operand seeds, and 64-bit global indices past 2**32),
  layout ops, and f16/bf16 arithmetic rounded once per op (XLA's excess precision is off).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import lamina  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from lamina.backends.compare import TOLERANCES, compare  # noqa: E402
from lamina.backends.inputs import random_inputs  # noqa: E402
from lamina.backends.interface import find_entry, functions  # noqa: E402
from lamina.backends.jax.lower import evaluate  # noqa: E402
from lamina.backends.numpy.kernels import kernel  # noqa: E402
from lamina.ir.core.diagnostics import LaminaError  # noqa: E402
from lamina.ir.core.dtypes import tensor_dtype  # noqa: E402
from lamina.ir.core.shapes import TensorInfo  # noqa: E402
from lamina.ir.ops.formulas import Block, Call  # noqa: E402
from lamina.ir.ops.opbase import tensor_info  # noqa: E402
from lamina.ir.ops.optable import OPS  # noqa: E402
from sample_files import VALID  # noqa: E402
from strategies import examples  # noqa: E402
from strategies.programs import programs  # noqa: E402
from xdsl.dialects.builtin import ModuleOp  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = VALID
MAX_ELEMENTS = 2_000_000
TOUR = {  # the README tour's pipelines (the placed ones only where the sample has a mesh)
    "as parsed": "",
    "fused": "fuse-elementwise",
    "placed": "propagate-sharding,insert-collectives{target=h100-node}",
    "placed+fused": "propagate-sharding,insert-collectives{target=h100-node},fuse-elementwise",
    "tiers": "fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=tiny}",
}


def shrink(text: str) -> str:
    """A sample with its large dims (1024, 2048, 4096) made 32, 64, 128 (the tests' usual cut)."""
    return text.replace("2048x", "64x").replace("x4096", "x128").replace("4096x", "128x") \
        .replace("<4096", "<128").replace("x1024", "x32").replace("1024x", "32x") \
        .replace("<1024", "<32")


PRECISION = ("bf16", "f16", "f32", "f64")   # least precise first


def tolerance_dtype(dtype: str, module: ModuleOp) -> str:
    """The element type whose tolerance an output of `dtype` is compared with: the least precise
    float type the program computes in, if that is less precise (an f64 cast of an f32 mean
    carries the f32 rounding, and XLA reduces in another order than NumPy)."""
    if dtype not in PRECISION:
        return dtype
    text = lamina.to_text(module)
    used = [d for d in PRECISION if f"x{d}" in text or f"<{d}" in text]
    return max(used[:1] + [dtype], key=lambda d: TOLERANCES[d][0])


def run_both(module: ModuleOp, entry: str | None, inputs: list[np.ndarray]
             ) -> tuple[lamina.Run | LaminaError, lamina.Run | LaminaError]:
    out: list[lamina.Run | LaminaError] = []
    for backend in ("numpy", "jax"):
        try:
            out.append(lamina.run(module, inputs, entry=entry, backend=backend))
        except LaminaError as e:
            out.append(e)
    return out[0], out[1]


def assert_same(module: ModuleOp, entry: str | None, inputs: list[np.ndarray], what: str,
                exact: bool = False) -> None:
    """The JAX backend's outputs equal the interpreter's, or both refuse with the same message."""
    ref, got = run_both(module, entry, inputs)
    if isinstance(ref, LaminaError) or isinstance(got, LaminaError):
        assert isinstance(ref, LaminaError) and isinstance(got, LaminaError), (what, ref, got)
        assert got.message == ref.message, what
        return
    func = find_entry(module, entry)
    for (name, r), t in zip(ref.outputs.items(), func.function_type.outputs.data, strict=True):
        diff = compare(name, tolerance_dtype(tensor_dtype(t), module), got.outputs[name], r,
                       exact=exact)
        assert diff.ok, f"{what}: {diff.line()}"
    if "hlo_matches_plan" in got.stats:   # a placed program: exactly Lamina's collectives
        assert got.stats["hlo_matches_plan"], (what, got.stats["hlo_collectives"])


def _entries() -> list[tuple[str, str]]:
    out = []
    for path in SAMPLES:
        with open(path, encoding="utf-8") as f:
            module = lamina.parse(shrink(f.read()), path)
        for func in functions(module):
            size = sum(int(np.prod(tensor_info(t).shape)) for t in func.function_type.inputs.data)
            if size <= MAX_ELEMENTS:
                out.append((path, func.sym_name.data))
    return out


ENTRIES = _entries()


@pytest.mark.parametrize("path, entry", ENTRIES,
                         ids=[f"{os.path.basename(p)}@{e}" for p, e in ENTRIES])
def test_sample_on_jax_equals_the_interpreter(path: str, entry: str) -> None:
    with open(path, encoding="utf-8") as f:
        text = shrink(f.read())
    placed = "lamina.mesh" in text
    ran = []
    for name, pipeline in TOUR.items():
        if name.startswith("placed") and not placed:
            continue
        module = lamina.parse(text, path)
        try:
            lamina.apply(module, pipeline)
        except LaminaError:
            continue   # the pipeline refuses this sample (e.g. it does not fit `tiny`)
        inputs = random_inputs(find_entry(module, entry), 0)
        assert_same(module, entry, inputs, f"{os.path.basename(path)}@{entry} {name}")
        ran.append(name)
    assert "as parsed" in ran and "fused" in ran


@settings(max_examples=examples(8), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs(max_ops=10, dtypes=("f32", "f64", "bf16", "f16")))
def test_random_programs_on_jax_equal_the_interpreter(prog) -> None:
    module = lamina.parse(prog.text, "gen.mlir")
    assert_same(module, None, prog.inputs, "unfused\n" + prog.text)
    lamina.apply(module, "fuse-elementwise")
    assert_same(module, None, prog.inputs, "fused\n" + prog.text)


def test_layout_ops_are_exact() -> None:
    path = os.path.join(ROOT, "samples", "layout.mlir")
    module = lamina.load(path)
    for func in functions(module):
        entry = func.sym_name.data
        assert_same(module, entry, random_inputs(func, 3), entry, exact=True)


NARROW = """
func.func @f(%a: tensor<64x33xT>, %b: tensor<64x33xT>) -> (tensor<64x33xT>, tensor<64x33xT>) {
  %s = lamina.add %a, %b : tensor<64x33xT>
  %m = lamina.mul %s, %a : tensor<64x33xT>
  %d = lamina.div %m, %b : tensor<64x33xT>
  %q = lamina.abs %d : tensor<64x33xT>
  %r = lamina.sqrt %q : tensor<64x33xT>
  %t = lamina.sub %r, %s : tensor<64x33xT>
  %c = lamina.cast %t : (tensor<64x33xT>) -> tensor<64x33xf32>
  %u = lamina.mul %c, %c : tensor<64x33xf32>
  %v = lamina.cast %u : (tensor<64x33xf32>) -> tensor<64x33xT>
  func.return %t, %v : tensor<64x33xT>, tensor<64x33xT>
}
"""


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_narrow_floats_round_once_per_op(dtype: str) -> None:
    """Correctly rounded ops (+ - * / sqrt, casts) give the interpreter's bits exactly in f16 and
    bf16: every op computes in float32 and rounds its result once, and nothing keeps the float32
    value between ops (a lowering that kept it differs in most elements of this chain)."""
    module = lamina.parse(NARROW.replace("xT>", f"x{dtype}>"))
    assert_same(module, None, random_inputs(find_entry(module, None), 5), dtype, exact=True)


DROPOUT = """
func.func @f(%x: tensor<33x65xf32>, %s64: tensor<i64>, %s32: tensor<i32>) -> (tensor<33x65xf32>, tensor<33x65xf32>, tensor<33x65xf32>) {
  %a = lamina.dropout %x {rate = 3.000000e-01 : f64, seed = 12345678901 : i64} : tensor<33x65xf32>
  %b = lamina.dropout %x seed %s64 {rate = 5.000000e-01 : f64} : (tensor<33x65xf32>, tensor<i64>) -> tensor<33x65xf32>
  %c = lamina.dropout %x seed %s32 {rate = 1.000000e-01 : f64} : (tensor<33x65xf32>, tensor<i32>) -> tensor<33x65xf32>
  func.return %a, %b, %c : tensor<33x65xf32>, tensor<33x65xf32>, tensor<33x65xf32>
}
"""


def test_dropout_masks_are_bit_exact() -> None:
    module = lamina.parse(DROPOUT)
    x = np.ones((33, 65), np.float32)
    for s64, s32 in ((7, 7), (-3, -3), (2**40 + 5, 2**31 - 1)):
        inputs = [x, np.array(s64, np.int64), np.array(s32, np.int32)]
        assert_same(module, None, inputs, f"seeds {s64} {s32}", exact=True)


def test_dropout_mask_past_2_to_the_32_elements() -> None:
    """A block deep inside a tensor of 2**33 elements (a device's shard of a huge activation): the
    64-bit global index is exact under jax (x64), so the mask is the interpreter's."""
    info = OPS["dropout"]
    local = TensorInfo((3, 40), "f32")
    call = Call({"rate": 0.25, "seed": 99}, [local, None], local,
                Block((2**20, 2**13), (2**19 + 7, 4096)))
    x = np.ones(local.shape, np.float32)
    want = kernel(info)([x, None], call)
    with jax.enable_x64(True):
        got = np.asarray(jax.jit(lambda a: evaluate(info, [a, None], call))(x))
    np.testing.assert_array_equal(got, want)
    assert 0 < np.count_nonzero(want == 0) < want.size
