"""`derive-backward`: the gradient function it adds, its options, its diagnostics, and gradients.

- Structure: `@NAME_grad` takes the forward's arguments (plus `%d_<result>` for a non-scalar
  loss), returns (loss, gradients of the differentiated arguments in argument order), records
  them in `lamina.gradients`, copies only the ops the loss depends on, leaves the forward as it
  was; every derived module verifies and reads back identically (custom and generic form).
- Options: `wrt` and `data` by name or position, `loss`, `func`; each bad use one diagnostic.
- Non-differentiable paths: an argument that reaches the loss only through a compare, select's
  condition or a cast to an integer type is an error at that op; one that does not reach it at
  all gets zeros.
- Gradients: on random programs (the program strategy with a sum-of-squares loss appended),
  against torch.autograd with the tolerances of `gradcheck` per dtype; a diagnostic is accepted
  only where autograd also finds no path; and in float64 against central finite differences.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import lamina
import ml_dtypes
import numpy as np
import pytest
import torch_ref
from gradcheck import (
    Derived,
    autograd_checks,
    check_gradient,
    derive,
    derive_all,
    float_dtype,
    with_sum_of_squares,
)
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import run_function
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.core.dtypes import nbytes
from lamina.ir.ops.lamina import CastOp
from lamina.passes.derive_backward import SEED_ATTR
from strategies import examples
from strategies.programs import programs
from xdsl.context import Context
from xdsl.dialects.func import FuncOp
from xdsl.ir import SSAValue
from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination

MLP = """\
func.func @mlp(%x: tensor<8x16xf32>, %y: tensor<8x4xf32>, %w1: tensor<16x32xf32>, %b1: tensor<32xf32>, %w2: tensor<32x4xf32>) -> (tensor<f32>, tensor<8x4xf32>) {
  %h = lamina.matmul %x, %w1 : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %hb = lamina.add %h, %b1 : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %g = lamina.gelu %hb : tensor<8x32xf32>
  %o = lamina.matmul %g, %w2 : (tensor<8x32xf32>, tensor<32x4xf32>) -> tensor<8x4xf32>
  %d = lamina.sub %o, %y : tensor<8x4xf32>
  %d2 = lamina.mul %d, %d : tensor<8x4xf32>
  %loss = lamina.reduce_mean %d2 {axes = array<i64: 0, 1>} : (tensor<8x4xf32>) -> tensor<f32>
  %t = lamina.tanh %y : tensor<8x4xf32>
  func.return %loss, %t : tensor<f32>, tensor<8x4xf32>
}
"""


def _inputs(func, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    from lamina.ir.ops.opbase import tensor_info
    return [rng.standard_normal(tensor_info(t).shape).astype(np.float32)
            for t in func.function_type.inputs.data]


def _error(text: str, pipeline: str) -> str:
    with pytest.raises(LaminaError) as e:
        lamina.apply(lamina.parse(text, "p.mlir"), pipeline)
    return str(e.value)


def test_grad_function_signature_and_record() -> None:
    module = derive(MLP, "derive-backward{data=x,y}")
    text = lamina.to_text(module)
    assert "func.func @mlp_grad(%x: tensor<8x16xf32>, %y: tensor<8x4xf32>, %w1: tensor<16x32xf32>, " \
        "%b1: tensor<32xf32>, %w2: tensor<32x4xf32>) -> (tensor<f32>, tensor<16x32xf32>, " \
        "tensor<32xf32>, tensor<32x4xf32>) attributes {lamina.gradients = array<i64: 2, 3, 4>}" in text
    assert "func.return %loss, %d_w1, %d_b1, %d_w2 :" in text
    grad = find_entry(module, "mlp_grad")
    assert not any(op.name == "lamina.tanh" for op in grad.walk()), "ops off the loss are dropped"
    fwd = lamina.to_text(lamina.parse(MLP))
    assert text.startswith(fwd.rsplit("}", 1)[0].rstrip()[:-1]), "the forward is unchanged"


def test_gradients_equal_autograd_and_loss_is_the_forward_loss() -> None:
    module = derive(MLP, "derive-backward{data=x,y}")
    f = find_entry(module, "mlp")
    ins = _inputs(f)
    out = run_function(find_entry(module, "mlp_grad"), ins).outputs
    assert out[0] == run_function(f, ins).outputs[0]
    _, ref = torch_ref.gradients(f, ins, [2, 3, 4], 0, upcast="f32")
    _, own = torch_ref.gradients(f, ins, [2, 3, 4], 0)
    for got, r, o in zip(out[1:], ref, own, strict=True):
        assert check_gradient(got, r, o, "f32").ok


def test_wrt_by_name_and_position_and_data() -> None:
    for option in ("wrt=w2", "wrt=arg4", "wrt=%w2"):
        text = lamina.to_text(derive(MLP, f"derive-backward{{{option}}}"))
        assert "func.return %loss, %d_w2 : tensor<f32>, tensor<32x4xf32>" in text, option
        assert "lamina.gradients = array<i64: 4>" in text
    # default: every float argument but the data ones, in argument order
    text = lamina.to_text(derive(MLP, "derive-backward{data=y}"))
    assert "lamina.gradients = array<i64: 0, 2, 3, 4>" in text


def test_non_scalar_result_takes_a_seed_cotangent() -> None:
    module = derive(MLP, "derive-backward{loss=1 wrt=y}")
    grad = find_entry(module, "mlp_grad")
    assert [a.name_hint for a in grad.body.block.args][-1] == "d_t"
    f = find_entry(module, "mlp")
    ins = _inputs(f)
    seed = np.random.default_rng(5).standard_normal((8, 4)).astype(np.float32)
    out = run_function(grad, [*ins, seed]).outputs
    t = np.tanh(ins[1].astype(np.float64))
    np.testing.assert_allclose(out[1], seed * (1 - t * t), rtol=1e-5, atol=1e-6)


def test_argument_off_the_loss_gets_zeros_and_is_explained(capsys) -> None:
    module = lamina.parse(MLP)
    lamina.apply(module, "derive-backward{wrt=w1,y}", explain=True)
    err = capsys.readouterr().err
    assert "[derive-backward] <string>:1:1: %y: the loss does not depend on it" not in err
    out = run_function(find_entry(module, "mlp_grad"), _inputs(find_entry(module, "mlp"))).outputs
    assert out[1].shape == (8, 4) and np.any(out[1] != 0)  # y does reach the loss (results in
    assert out[2].shape == (16, 32)                           # argument order: y, then w1)
    text = MLP.replace("%d = lamina.sub %o, %y", "%d = lamina.sub %o, %o")
    module = lamina.parse(text)
    lamina.apply(module, "derive-backward{wrt=w1,y}", explain=True)
    err = capsys.readouterr().err
    assert "%y: the loss does not depend on it; its gradient is zeros" in err
    assert "@mlp_grad: d(result 0: tensor<f32>)/d(%y, %w1), seeded with 1" in err
    out = run_function(find_entry(module, "mlp_grad"), _inputs(find_entry(module, "mlp"))).outputs
    assert not np.any(out[1]) and not np.any(out[2])  # d = o - o = 0: the loss is 0, so is dW1


def test_dropout_vjp_reuses_the_mask_without_storing_it() -> None:
    text = """func.func @f(%x: tensor<16x16xf32>) -> tensor<f32> {
  %y = lamina.dropout %x {rate = 0.5 : f64, seed = 3 : i64} : tensor<16x16xf32>
  %s = lamina.reduce_sum %y {axes = array<i64: 0, 1>} : (tensor<16x16xf32>) -> tensor<f32>
  func.return %s : tensor<f32>
}
"""
    module = derive(text, "derive-backward")
    grad = find_entry(module, "f_grad")
    drops = [op for op in grad.walk() if op.name == "lamina.dropout"]
    assert len(drops) == 2 and drops[1].attr_values() == drops[0].attr_values()  # type: ignore
    x = np.ones((16, 16), np.float32)
    dropped = lamina.parse("""func.func @d(%x: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %y = lamina.dropout %x {rate = 0.5 : f64, seed = 3 : i64} : tensor<16x16xf32>
  func.return %y : tensor<16x16xf32>
}
""")
    kept = run_function(find_entry(dropped, None), [x]).outputs[0] != 0
    dx = run_function(grad, [x]).outputs[1]
    assert 0 < kept.sum() < kept.size and np.array_equal(dx != 0, kept)
    np.testing.assert_array_equal(dx[kept], 2.0)  # the kept elements' scale 1 / (1 - rate)


BLOCKED = """\
func.func @f(%x: tensor<4xf32>, %t: tensor<4xf32>) -> tensor<f32> {
  %z = lamina.constant dense<0.0> : tensor<f32>
  %c = lamina.gt %t, %z : (tensor<4xf32>, tensor<f32>) -> tensor<4xi1>
  %s = lamina.select %c, %x, %z : (tensor<4xi1>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %r = lamina.reduce_sum %s {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  func.return %r : tensor<f32>
}
"""


@pytest.mark.parametrize("pipeline, message", [
    ("derive-backward", "p.mlir:3:3: error: derive-backward: the loss of @f depends on %t only "
     "through this lamina.gt, which is not differentiable (a comparison's i1 result carries no "
     "gradient); name %t in data= or leave it out of wrt="),
    ("fuse-elementwise,derive-backward", "error: derive-backward runs before fuse-elementwise: @f "
     "holds a lamina.fused kernel; differentiate the unfused program, then fuse forward and "
     "backward together"),
    ("derive-backward{data=q}", "p.mlir:1:1: error: derive-backward: option data names 'q', which "
     "is not an argument of @f (arguments: x, t)"),
    ("derive-backward{wrt=x data=x}", "p.mlir:1:1: error: derive-backward: argument %x is named "
     "both in wrt and in data"),
    ("derive-backward{loss=1}", "p.mlir:1:1: error: derive-backward: loss=1, but @f has 1 result(s)"),
    ("derive-backward{func=g}", "error: derive-backward: option func names @g, which is not a "
     "function of the module (functions: f)"),
    ("derive-backward{data=t},derive-backward{func=f data=t}", "p.mlir:1:1: error: derive-backward: "
     "@f_grad already exists"),
])
def test_diagnostics(pipeline: str, message: str) -> None:
    got = _error(BLOCKED, pipeline)
    assert got.endswith(message) if message.startswith("error") else got.startswith(message), got


def test_gradient_passes_through_tier_moves_and_collectives_are_refused() -> None:
    text = """func.func @f(%x: tensor<4xf32>) -> tensor<f32> {
  %h = lamina.move %x to host : tensor<4xf32> -> tensor<4xf32, #lamina.place<tier = host>>
  %d = lamina.move %h to hbm : tensor<4xf32, #lamina.place<tier = host>> -> tensor<4xf32, #lamina.place<tier = hbm>>
  %e = lamina.exp %d : tensor<4xf32, #lamina.place<tier = hbm>>
  %r = lamina.reduce_sum %e {axes = array<i64: 0>} : (tensor<4xf32, #lamina.place<tier = hbm>>) -> tensor<f32>
  func.return %r : tensor<f32>
}
"""
    module = derive(text, "derive-backward")
    x = np.linspace(-1, 1, 4).astype(np.float32)
    dx = run_function(find_entry(module, "f_grad"), [x]).outputs[1]
    np.testing.assert_allclose(dx, np.exp(x), rtol=1e-6)
    sample = (Path(__file__).parents[1] / "samples" / "mlp_dp_training_step.mlir").read_text()
    with pytest.raises(LaminaError) as e:
        lamina.apply(lamina.parse(sample, "dp.mlir"), "derive-backward{data=x,dy}")
    assert str(e.value).startswith("dp.mlir:")
    assert e.value.message == ("derive-backward: lamina.all_reduce has no VJP (only op-table ops "
                               "and tier moves are differentiated): derive the backward before "
                               "insert-collectives")


def test_frees_are_not_copied() -> None:
    module = derive(MLP, "annotate-lifetimes,derive-backward{data=x,y},annotate-lifetimes")
    grad = find_entry(module, "mlp_grad")
    f = find_entry(module, "mlp")
    assert any(op.name == "lamina.free" for op in grad.walk())
    plain = derive(MLP, "derive-backward{data=x,y}")
    ins = _inputs(f)
    for a, b in zip(run_function(grad, ins).outputs,
                    run_function(find_entry(plain, "mlp_grad"), ins).outputs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_cast_to_integer_blocks_and_float_cast_does_not() -> None:
    text = """func.func @f(%x: tensor<4xf32>, %n: tensor<4xi32>) -> tensor<f32> {
  %i = lamina.cast %x : (tensor<4xf32>) -> tensor<4xi32>
  %b = lamina.cast %i : (tensor<4xi32>) -> tensor<4xf64>
  %c = lamina.cast %b : (tensor<4xf64>) -> tensor<4xf32>
  %r = lamina.reduce_sum %c {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  func.return %r : tensor<f32>
}
"""
    assert _error(text, "derive-backward").startswith(
        "p.mlir:2:3: error: derive-backward: the loss of @f depends on %x only through this "
        "lamina.cast, which is not differentiable (its result is i32: gradients flow only through "
        "floats)")
    assert _error(text, "derive-backward{wrt=n}").startswith(
        "p.mlir:1:1: error: derive-backward: argument %n is tensor<4xi32>; only float arguments "
        "have gradients")
    ok = derive(text.replace("%i = lamina.cast %x : (tensor<4xf32>) -> tensor<4xi32>",
                             "%i = lamina.cast %x : (tensor<4xf32>) -> tensor<4xf64>")
                .replace("(tensor<4xi32>) -> tensor<4xf64>", "(tensor<4xf64>) -> tensor<4xf64>"),
                "derive-backward{data=n}")
    out = run_function(find_entry(ok, "f_grad"), [np.ones(4, np.float32), np.zeros(4, np.int32)])
    np.testing.assert_array_equal(out.outputs[1], np.ones(4, np.float32))


def test_cli_diagnostic_is_one_error_and_exit_1(tmp_path: Path) -> None:
    path = tmp_path / "p.mlir"
    path.write_text(BLOCKED)
    opt = Path(sys.executable).with_name("lamina-opt")
    r = subprocess.run([str(opt), str(path), "-p", "derive-backward"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert lines[0].startswith(f"{path}:3:3: error: derive-backward: the loss of @f depends on %t")
    assert sum("error:" in line for line in lines) == 1
    assert "Traceback" not in r.stderr


# ---- random programs ----------------------------------------------------------------------------

def derive_random(text: str) -> tuple[str, Derived] | None:
    """The program with a sum-of-squares loss appended (its text) and its derivation."""
    module = lamina.parse(text)
    if not with_sum_of_squares(module):
        return None
    forward = lamina.to_text(module)
    return forward, derive_all(forward, "main", name="gen.mlir")


def check_random(prog) -> None:
    made = derive_random(prog.text)
    if made is None:
        return
    forward, got = made
    f = find_entry(lamina.parse(forward), None)
    dtype = float_dtype(f)
    for i in got.blocked:
        _, ref = torch_ref.gradients(f, prog.inputs, [i], 0, upcast=dtype)
        assert ref[0] is None, f"arg{i} was refused, but autograd finds a path:\n{forward}"
    if got.module is None:
        return
    for i, c in autograd_checks(got.module, "main", prog.inputs, got.wrt):
        assert c.ok, f"d/d arg{i}: error {c.err:.3g} > allowed {c.allowed:.3g}\n" + \
            lamina.to_text(got.module)


@settings(max_examples=examples(25))
@given(prog=programs(max_ops=10, dtypes=("f32", "f64")))
def test_random_programs_match_autograd(prog) -> None:
    check_random(prog)


@settings(max_examples=examples(15))
@given(prog=programs(max_ops=8, dtypes=("bf16", "f16")))
def test_random_low_precision_programs_match_autograd(prog) -> None:
    check_random(prog)


FD_STEP = 1e-6
FD_RTOL = 1e-5


@settings(max_examples=examples(15))
@given(prog=programs(max_ops=6, dtypes=("f64",), max_dim=4), data=st.data())
def test_f64_gradients_match_central_differences(prog, data) -> None:
    """<grad, u> against (L(x + h u) - L(x - h u)) / 2h for a random direction u per argument,
    h = 1e-6: the truncation error is O(h^2 L''') and the rounding O(eps L / h), so both sides
    agree to about 1e-8 of the loss's scale; required: 1e-5 of max(|<grad, u>|, |L|, 1)."""
    assume(not any(t in prog.text for t in ("f32>", "f16>")))  # no rounding casts inside
    made = derive_random(prog.text)
    if made is None or made[1].module is None:
        return
    module, wrt = made[1].module, made[1].wrt
    f, g = find_entry(module, "main"), find_entry(module, "main_grad")
    out = run_function(g, prog.inputs).outputs
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    dirs = {i: rng.standard_normal(prog.inputs[i].shape) for i in wrt}
    predicted = sum(float(np.sum(out[1 + k] * dirs[i])) for k, i in enumerate(wrt))

    def loss_at(step: float) -> float:
        moved = [a + step * dirs[i] if i in dirs else a for i, a in enumerate(prog.inputs)]
        return float(run_function(f, moved).outputs[0])

    measured = (loss_at(FD_STEP) - loss_at(-FD_STEP)) / (2 * FD_STEP)
    scale = max(abs(predicted), abs(float(out[0])), 1.0)
    assert abs(predicted - measured) <= FD_RTOL * scale, (predicted, measured,
                                                          lamina.to_text(module))


# the forward widens a bf16 value and an i1 mask to f32; the backward reads both wide copies
WIDENED = """
func.func @f(%x: tensor<4x8xbf16>, %m: tensor<4x8xi1>, %w: tensor<8x3xf32>) -> tensor<f32> {
  %s = lamina.mul %x, %x : tensor<4x8xbf16>
  %sf = lamina.cast %s : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  %mf = lamina.cast %m : (tensor<4x8xi1>) -> tensor<4x8xf32>
  %y = lamina.mul %sf, %mf : tensor<4x8xf32>
  %z = lamina.mul %y, %sf : tensor<4x8xf32>
  %h = lamina.matmul %z, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %t = lamina.tanh %h : tensor<4x3xf32>
  %l = lamina.reduce_mean %t {axes = array<i64: 0, 1>} : (tensor<4x3xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
"""


def _held(func: FuncOp) -> list[SSAValue]:
    """The values defined before the loss seed and read after it (what the backward holds)."""
    ops = list(func.body.block.ops)
    pos = {op: i for i, op in enumerate(ops)}
    seed = next(i for i, op in enumerate(ops) if SEED_ATTR in op.attributes)
    return [r for op in ops[:seed] for r in op.results if any(pos[u.operation] > seed
                                                               for u in r.uses)]


def test_the_backward_recomputes_widening_casts_at_the_same_bits() -> None:
    """save_narrow: the backward casts %s and %m again instead of holding their f32 copies, and
    computes the same bits as the program with those casts merged back (CSE undoes it)."""
    module = derive(WIDENED, "derive-backward{data=m}")
    grad = find_entry(module, "f_grad")
    held = _held(grad)
    assert not [v for v in held if isinstance(v.owner, CastOp)]
    merged = lamina.parse(lamina.to_text(module))
    CommonSubexpressionElimination().apply(Context(), merged)
    merged_grad = find_entry(merged, "f_grad")
    def casts(f: FuncOp) -> int:
        return sum(isinstance(op, CastOp) for op in f.body.block.ops)
    assert casts(merged_grad) == casts(grad) - 2
    # held: the bf16 %s instead of its f32 copy %sf, and nothing for the mask's f32 copy %mf
    assert {v.name_hint for v in _held(merged_grad)} - {v.name_hint for v in held} == {"sf", "mf"}
    assert "s" in {v.name_hint for v in held}
    assert sum(nbytes(v.type) for v in held) < sum(nbytes(v.type) for v in _held(merged_grad))
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((4, 8)).astype(ml_dtypes.bfloat16), rng.random((4, 8)) < 0.5,
              rng.standard_normal((8, 3)).astype(np.float32)]
    got = [np.asarray(o).tobytes() for o in run_function(grad, inputs).outputs]
    want = [np.asarray(o).tobytes() for o in run_function(merged_grad, inputs).outputs]
    assert got == want
