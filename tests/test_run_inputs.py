"""A run's inputs: the recipe `--write-inputs` writes, and what is refused before anything runs.

Each refusal here was an internal error, an allocation of terabytes or a silently changed input on
main: a huge shape in an `.npz` header (MemoryError), a program whose inputs exceed the machine's
memory, values the argument type cannot hold (2**40 into i32 gave 0), a negative seed, and
`LAMINA_FUSED_THREADS` written with digits `int()` does not read.
"""

from __future__ import annotations

import io
import os
import subprocess
import zipfile
from pathlib import Path

import lamina
import numpy as np
import pytest
from lamina.backends.inputs import check_input_memory, input_keys
from lamina.backends.interface import find_entry
from lamina.ir.core.diagnostics import LaminaError
from test_cli import GOOD, RUN, TWO, assert_error, load_npz, no_temp_files, run, write


def test_write_inputs_is_the_recipe_inputs_reads(tmp_path: Path) -> None:
    write(tmp_path, "two.mlir", TWO)
    res = run("two.mlir", "--entry", "b", "--seed", "7", "--write-inputs", "in.npz", "--outputs",
              "a.npz", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    inputs = load_npz(tmp_path / "in.npz")
    assert sorted(inputs) == ["n", "x"]                       # keyed by argument name
    assert inputs["x"].dtype == np.float32 and inputs["n"].dtype == np.int32
    module = lamina.parse(TWO)
    want = lamina.inputs(module, "b", seed=7)
    for k in want:
        np.testing.assert_array_equal(inputs[k], want[k])
    res = run("two.mlir", "--entry", "b", "--inputs", "in.npz", "--outputs", "b.npz",
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    a, b = load_npz(tmp_path / "a.npz"), load_npz(tmp_path / "b.npz")
    assert sorted(a) == sorted(b) == ["out0", "out1"]
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    no_temp_files(tmp_path)


COLLIDING = """\
func.func @f(%arg1: tensor<2xf32>, %1: tensor<2xf32>) -> tensor<2xf32> {
  %0 = lamina.sub %arg1, %1 : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
"""


def test_inputs_are_keyed_by_position_when_names_collide(tmp_path: Path) -> None:
    """`%arg1` first and an unnamed second argument (`arg1` by position) would share a key: then
    every argument is keyed by position, in the recipe and when it is read back."""
    func = find_entry(lamina.parse(COLLIDING), None)
    assert input_keys(func) == ["arg0", "arg1"]
    write(tmp_path, "c.mlir", COLLIDING)
    np.savez(tmp_path / "in.npz", arg0=np.array([5, 5], np.float32),
             arg1=np.array([1, 2], np.float32))
    res = run("c.mlir", "--inputs", "in.npz", "--outputs", "o.npz", "--write-inputs", "w.npz",
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    np.testing.assert_array_equal(load_npz(tmp_path / "o.npz")["out0"], [4, 3])
    assert sorted(load_npz(tmp_path / "w.npz")) == ["arg0", "arg1"]


def _npz_with_header(path: Path, key: str, header_shape: tuple[int, ...]) -> None:
    """An .npz whose member `key` declares `header_shape` (float32) and holds no data."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False,
                                               "shape": header_shape})
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(key + ".npy", buf.getvalue())   # magic and header, then no data


def test_npz_header_with_a_huge_shape_is_refused_before_reading(tmp_path: Path) -> None:
    """main allocated the declared array (a MemoryError for 4 TB); the header is read first."""
    write(tmp_path, "two.mlir", TWO)
    _npz_with_header(tmp_path / "huge.npz", "x", (10**12,))
    with zipfile.ZipFile(tmp_path / "huge.npz", "a") as z:
        z.writestr("n.npy", _npy(np.zeros(4, np.int32)))
    res = run("two.mlir", "--entry", "b", "--inputs", "huge.npz", cwd=tmp_path)
    assert_error(res, "error: input 'x' has shape (1000000000000,), argument type is "
                 "tensor<4xf32>", "two.mlir:5:1")


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def test_npz_member_that_is_not_an_array(tmp_path: Path) -> None:
    write(tmp_path, "two.mlir", TWO)
    with zipfile.ZipFile(tmp_path / "odd.npz", "w") as z:
        z.writestr("x.npy", _npy(np.zeros(4, np.float32)))
        z.writestr("n.npy", b"not an array at all")
    assert_error(run("two.mlir", "--entry", "b", "--inputs", "odd.npz", cwd=tmp_path),
                 "error: cannot read inputs 'odd.npz': member 'n.npy' is not an .npy array")


HUGE = """\
func.func @huge(%x: tensor<100000000x100000000xf32>) -> tensor<100000000x100000000xf32> {
  %0 = lamina.neg %x : tensor<100000000x100000000xf32>
  func.return %0 : tensor<100000000x100000000xf32>
}
"""


def test_inputs_beyond_the_machine_memory_are_refused_up_front(tmp_path: Path) -> None:
    """40 PB of inputs: main tried to draw them (MemoryError or NumPy's 'array is too big')."""
    write(tmp_path, "huge.mlir", HUGE)
    res = run("huge.mlir", cwd=tmp_path)
    line = assert_error(res, "error: the inputs of @huge need 3.725e+07 GiB "
                        "(40000000000000000 bytes), more than this machine's ", "huge.mlir:1:1")
    assert line.endswith(" of memory")
    module = lamina.parse(TWO)
    with pytest.raises(LaminaError, match=r"the inputs of @b need 32 B \(32 bytes; largest: x 16 "
                       r"B, n 16 B\), more than this machine's 31 B of memory"):
        check_input_memory(find_entry(module, "b"), limit=31)
    check_input_memory(find_entry(module, "b"), limit=32)


@pytest.mark.parametrize("arrays, message", [
    ({"x": np.zeros(4, np.float32), "n": np.array([2**40, 0, 0, 0], np.int64)},
     "input 'n' does not fit its argument type tensor<4xi32>: 1099511627776 at index (0,) is "
     "outside i32's range [-2147483648, 2147483647]"),
    ({"x": np.array([0, 1e300, 0, 0]), "n": np.zeros(4, np.int32)},
     "input 'x' does not fit its argument type tensor<4xf32>: 1e+300 at index (1,) is beyond "
     "f32's largest finite value (it would become infinite)"),
])
def test_values_the_argument_type_cannot_hold_are_refused(tmp_path: Path, arrays, message) -> None:
    write(tmp_path, "two.mlir", TWO)
    np.savez(tmp_path / "in.npz", **arrays)
    assert_error(run("two.mlir", "--entry", "b", "--inputs", "in.npz", "--outputs", "o.npz",
                     cwd=tmp_path), message, "two.mlir:5:1")
    assert not (tmp_path / "o.npz").exists()
    with pytest.raises(LaminaError, match="does not fit its argument type"):
        lamina.run(lamina.parse(TWO), arrays, entry="b")
    # in range, a wider dtype is still accepted and converted
    ok = {"x": np.array([0.5, 1e30, -2, 0]), "n": np.array([2**31 - 1, -2**31, 0, 1], np.int64)}
    got = lamina.run(lamina.parse(TWO), ok, entry="b")
    np.testing.assert_array_equal(got.outputs["out1"].ravel(), ok["n"].astype(np.int32))


def test_negative_seed_in_the_api() -> None:
    with pytest.raises(LaminaError, match="the seed for random inputs must be a non-negative "
                       "integer, got -1"):
        lamina.run(lamina.parse(TWO), entry="a", seed=-1)


@pytest.mark.parametrize("value", ["²", "٣x", "two", "0", "-3"])
def test_fused_threads_environment_variable(tmp_path: Path, value: str) -> None:
    """'²' passes str.isdigit() and then int() refused it with a traceback-worthy ValueError."""
    write(tmp_path, "ok.mlir", GOOD)
    res = subprocess.run([str(RUN), "ok.mlir", "-p", "fuse-elementwise"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "LAMINA_FUSED_THREADS": value})
    assert_error(res, f"error: LAMINA_FUSED_THREADS must be a positive integer, got '{value}'")


def test_fused_threads_environment_variable_with_many_digits(tmp_path: Path) -> None:
    write(tmp_path, "ok.mlir", GOOD)
    res = subprocess.run([str(RUN), "ok.mlir", "-p", "fuse-elementwise"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "LAMINA_FUSED_THREADS": "9" * 5000})
    assert res.returncode == 0, res.stderr[-500:]
