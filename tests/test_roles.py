"""Argument roles (`lamina.role`, the table `lamina.ir.buffers.updates.ROLES`), the random inputs drawn for
what the IR says an argument holds, and `--check` on outputs that are NaN or inf on both sides.

- append-optimizer gives exactly the arguments it updates a role, and the passes after it keep them.
- `set_roles` keeps other argument attributes; the verifier refuses an unknown role and an
  `arg_attrs` of the wrong length, at the function.
- `random_inputs` draws a second moment >= 0 and a step count as a small whole number, and every
  other argument exactly as without roles; gather indices fall within their table's rows.
- A step's outputs on its default inputs are finite (they were NaN: sqrt of negative moments).
- `compare` counts NaN and inf on both sides; `lamina-run --check` exits 1 on them, naming the
  outputs, unless `--allow-nonfinite`.
"""

from __future__ import annotations

import json
from pathlib import Path

import lamina
import numpy as np
import pytest
from gradcheck import derive, optimizer_step
from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.backends.compare import compare
from lamina.backends.inputs import COUNT_HIGH, index_rows, random_inputs
from lamina.backends.interface import find_entry
from lamina.backends.numpy.backend import reference_run
from lamina.ir.buffers.updates import ROLES, Domain, roles_of, set_roles, updated_arguments
from lamina.ir.core.diagnostics import LaminaError
from strategies import examples
from strategies.programs import programs
from test_cli import assert_error, run, write
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, StringAttr
from xdsl.dialects.func import FuncOp

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
FORWARD = (SAMPLES / "mlp_training_forward.mlir").read_text()
DP_FORWARD = (SAMPLES / "mlp_dp_forward.mlir").read_text()


def _roles_by_name(func: FuncOp) -> dict[str, str]:
    args = func.body.block.args
    return {args[i].name_hint or f"arg{i}": role.name for i, role in roles_of(func).items()}


ADAM = {"w1": "parameter", "w2": "parameter", "m_w1": "first_moment", "v_w1": "second_moment",
        "m_w2": "first_moment", "v_w2": "second_moment"}


@pytest.mark.parametrize("options, want", [
    ("kind=adamw", {**ADAM, "step": "step_count"}),
    ("kind=adamw state-tier=host bias-correction=false", ADAM),
    ("kind=sgd", {"w1": "parameter", "w2": "parameter"}),
])
def test_append_optimizer_gives_each_updated_argument_its_role(options: str,
                                                               want: dict[str, str]) -> None:
    step = find_entry(derive(FORWARD, f"derive-backward{{data=x,y}},append-optimizer{{{options}}}"),
                      "mlp_training_loss_step")
    assert _roles_by_name(step) == want
    assert set(roles_of(step)) == updated_arguments(step)  # x and y, the data, have none


def test_the_passes_after_append_optimizer_keep_the_roles() -> None:
    step = find_entry(derive(DP_FORWARD, "derive-backward{data=x},append-optimizer{state-tier=host},"
                             "propagate-sharding,insert-collectives{target=h100-cluster},"
                             "fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=h100-node}"),
                      "dp_forward_step")
    params = ["w1", "b1", "w2", "b2"]
    want = {p: "parameter" for p in params} | {f"m_{p}": "first_moment" for p in params} | \
        {f"v_{p}": "second_moment" for p in params} | {"step": "step_count"}
    assert _roles_by_name(step) == want
    assert "tier = host" in str(step.function_type.inputs.data[6])  # %m_w1: retyped, role kept


PLAIN = """\
func.func @s(%x: tensor<4xf32> {mytool.tag = 7 : i64}, %w: tensor<4xf32>, %v: tensor<4xf32>) -> tensor<4xf32> {
  func.return %w : tensor<4xf32>
}
"""


def test_set_roles_keeps_other_argument_attributes_and_reads_back() -> None:
    module = lamina.parse(PLAIN)
    func = find_entry(module, "s")
    set_roles(func, {1: "parameter", 2: "second_moment"})
    assert func.arg_attrs is not None and len(func.arg_attrs.data) == 3
    assert func.arg_attrs.data[0] == DictionaryAttr({"mytool.tag": func.arg_attrs.data[0]
                                                     .data["mytool.tag"]})
    assert func.arg_attrs.data[2].data["lamina.role"] == StringAttr("second_moment")
    for printed in (lamina.to_text(module), lamina.to_text(module, generic=True)):
        again = find_entry(lamina.parse(printed), "s")
        assert roles_of(again) == {1: ROLES["parameter"], 2: ROLES["second_moment"]}
    func.arg_attrs = ArrayAttr([DictionaryAttr({})])  # written before two arguments were added
    set_roles(func, {2: "step_count"})
    assert [dict(d.data) for d in func.arg_attrs.data] == \
        [{}, {}, {"lamina.role": StringAttr("step_count")}]
    with pytest.raises(ValueError, match="no role 'variance' for argument #1"):
        set_roles(func, {1: "variance"})
    with pytest.raises(ValueError, match="no role 'parameter' for argument #3"):
        set_roles(func, {3: "parameter"})


_ONE_OF = ('must be a role, one of "parameter", "first_moment", "second_moment", '
           '"step_count", "momentum_buffer", "learning_rate", "loss_scale", "good_steps", "frozen"')


@pytest.mark.parametrize("attrs, message", [
    ('{lamina.role = "variance"}',
     f"argument #2 (%v): attribute 'lamina.role' {_ONE_OF}, got \"variance\""),
    ("{lamina.role = 2 : i64}", f"argument #2 (%v): attribute 'lamina.role' {_ONE_OF}, got 2 : i64"),
    ("{lamina.role = [\"parameter\"]}",
     f"argument #2 (%v): attribute 'lamina.role' {_ONE_OF}, got [\"parameter\"]"),
])
def test_the_verifier_refuses_an_unknown_role_at_the_function(attrs: str, message: str) -> None:
    with pytest.raises(LaminaError) as e:
        lamina.parse(PLAIN.replace("%v: tensor<4xf32>", f"%v: tensor<4xf32> {attrs}"), "p.mlir")
    assert str(e.value) == f"p.mlir:1:1: error: func.func @s: {message}"


def test_the_verifier_wants_one_argument_dictionary_per_argument() -> None:
    generic = lamina.to_text(lamina.parse(PLAIN), generic=True)
    short = generic.replace('arg_attrs = [{mytool.tag = 7 : i64}, {}, {}]',
                            'arg_attrs = [{mytool.tag = 7 : i64}, {}]')
    assert short != generic
    with pytest.raises(LaminaError, match="func.func @s: arg_attrs has 2 entries for 3 arguments "
                       r"\(one per argument\)"):
        lamina.parse(short)


# ---- the inputs drawn for a role --------------------------------------------------------------


def _step(options: str = "kind=adamw") -> FuncOp:
    return find_entry(derive(FORWARD, f"derive-backward{{data=x,y}},append-optimizer{{{options}}}"),
                      "mlp_training_loss_step")


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_a_role_changes_only_its_own_arguments_draw(seed: int) -> None:
    """The step drawn with its roles and the same step with them removed: the same arrays, except
    that each second moment is the absolute value, the step count a whole number and the
    learning rate (`lr-input=true`) a small positive number made from the same normal draw."""
    step = _step("kind=adamw lr-input=true")
    with_roles = random_inputs(step, seed)
    roles = roles_of(step)
    step.arg_attrs = None
    plain = random_inputs(step, seed)
    for i, (a, b) in enumerate(zip(with_roles, plain, strict=True)):
        domain = roles[i].domain if i in roles else Domain.REAL
        if domain is Domain.NONNEGATIVE:
            np.testing.assert_array_equal(a, np.abs(b))
        elif domain is Domain.COUNT:
            assert a.shape == () and float(a) == int(a) and 0 <= a < COUNT_HIGH
        elif domain is Domain.RATE:
            assert a.shape == () and 1e-4 < a < 1e-2
            assert a == np.float32(1e-3 * np.exp(np.clip(b, -2, 2)))  # from the same draw
        else:
            np.testing.assert_array_equal(a, b)
    assert {r.domain for r in roles.values()} == set(Domain)


@pytest.mark.parametrize("seed", [0, 3])
def test_a_step_on_its_default_inputs_has_finite_outputs(seed: int) -> None:
    """On main the moments were standard normal: sqrt(v') of the negative ones made NaN."""
    module = derive(FORWARD, "derive-backward{data=x,y},append-optimizer")
    step = find_entry(module, "mlp_training_loss_step")
    outputs = reference_run(module, "mlp_training_loss_step", random_inputs(step, seed)).outputs
    assert all(np.isfinite(o).all() for o in outputs)


@settings(max_examples=examples(15))
@given(prog=programs(max_ops=8, dtypes=("f32", "f64")), seed=st.integers(0, 2**16),
       options=st.sampled_from(["kind=adamw", "kind=adamw bias-correction=false",
                                "kind=adamw state-tier=host"]))
def test_random_steps_draw_each_role_from_its_domain(prog, seed: int, options: str) -> None:
    derived = optimizer_step(prog.text, options)
    if derived is None:
        return
    _, step = derived
    roles = roles_of(step)
    assert set(roles) == updated_arguments(step)
    inputs = random_inputs(step, seed)
    for i, role in roles.items():
        a = inputs[i]
        if role.domain is Domain.NONNEGATIVE:
            assert (a >= 0).all(), (i, role)
        if role.domain is Domain.COUNT:
            assert (a == np.round(a)).all() and (a >= 0).all() and (a < COUNT_HIGH).all()


GATHERS = """\
func.func @emb(%ids: tensor<8x8xi32>, %wte: tensor<5x4xf32>, %small: tensor<3x4xf32>, %cols: tensor<16xi64, #lamina.place<tier = host>>, %t: tensor<3x7xf32, #lamina.place<tier = hbm>>, %free: tensor<16xi32>) -> (tensor<64x4xf32>, tensor<8x8x4xf32>, tensor<3x16xf32, #lamina.place<tier = hbm>>) {
  %flat = lamina.reshape %ids : (tensor<8x8xi32>) -> tensor<64xi32>
  %e = lamina.gather %wte, %flat : (tensor<5x4xf32>, tensor<64xi32>) -> tensor<64x4xf32>
  %e2 = lamina.gather %small, %ids : (tensor<3x4xf32>, tensor<8x8xi32>) -> tensor<8x8x4xf32>
  %cm = lamina.move %cols to hbm : tensor<16xi64, #lamina.place<tier = host>> -> tensor<16xi64, #lamina.place<tier = hbm>>
  %c = lamina.gather %t, %cm {axis = 1 : i64} : (tensor<3x7xf32, #lamina.place<tier = hbm>>, tensor<16xi64, #lamina.place<tier = hbm>>) -> tensor<3x16xf32, #lamina.place<tier = hbm>>
  func.return %e, %e2, %c : tensor<64x4xf32>, tensor<8x8x4xf32>, tensor<3x16xf32, #lamina.place<tier = hbm>>
}
"""


def test_gather_indices_are_drawn_within_the_rows_of_their_table() -> None:
    """%ids indexes 5 rows (through a reshape) and 3 rows: it stays below 3; %cols indexes the 7
    columns of %t (axis 1) through a move; %free indexes nothing and is drawn in [0, 1000)."""
    module = lamina.parse(GATHERS)
    func = find_entry(module, "emb")
    assert index_rows(func) == {0: 3, 3: 7}
    ids, _, _, cols, _, free = inputs = random_inputs(func, 0)
    assert ids.min() >= 0 and ids.max() == 2 and cols.min() >= 0 and cols.max() == 6
    assert free.max() >= 7 and free.max() < 1000
    outputs = reference_run(module, "emb", inputs).outputs
    for o in outputs:  # an index out of range reads a row of zeros: none does
        assert np.abs(o).sum(axis=-1).min() > 0


# ---- --check on non-finite outputs ------------------------------------------------------------


def test_compare_counts_nonfinite_elements_on_both_sides() -> None:
    ref = np.array([1.0, np.nan, np.inf, -np.inf, np.nan], dtype=np.float32)
    same = compare("out0", "f32", ref.copy(), ref)
    assert same.ok and same.nonfinite and (same.nan, same.inf) == (2, 2)
    assert same.line() == ("out0: NONFINITE shape [5] f32 max abs err 0 max rel err 0 (rtol 2e-05, "
                           "atol 2e-06): 2 NaN, 2 inf on both sides")
    assert same.line(allow_nonfinite=True).startswith("out0: ok shape [5] ")
    assert same.line(allow_nonfinite=True).endswith(": 2 NaN, 2 inf on both sides (allowed)")
    assert same.as_dict()["nan"] == 2 and same.as_dict()["inf"] == 2
    moved = compare("out0", "f32", np.roll(ref, 1), ref)
    assert not moved.ok and not moved.nonfinite and "MISMATCH" in moved.line()
    finite = compare("out0", "f32", np.ones(3, np.float32), np.ones(3, np.float32))
    assert finite.ok and not finite.nonfinite and (finite.nan, finite.inf) == (0, 0)
    ints = compare("out0", "i32", np.arange(3, dtype=np.int32), np.arange(3, dtype=np.int32))
    assert ints.ok and not ints.nonfinite


NONFINITE = """\
func.func @f(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %neg = lamina.constant dense<-1.0> : tensor<4xf32>
  %s = lamina.sqrt %neg : tensor<4xf32>
  %y = lamina.add %x, %s : tensor<4xf32>
  %z = lamina.mul %x, %x : tensor<4xf32>
  func.return %y, %z : tensor<4xf32>, tensor<4xf32>
}
"""


def test_check_of_nan_outputs_exits_1_unless_allowed(tmp_path: Path) -> None:
    write(tmp_path, "nan.mlir", NONFINITE)
    res = run("nan.mlir", "-p", "cse", "--check", "--stats-json", "s.json", "--outputs", "o.npz",
              cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert res.stdout.splitlines()[2] == (
        "check FAILED y: NONFINITE shape [4] f32 max abs err 0 max rel err 0 (rtol 2e-05, "
        "atol 2e-06): 4 NaN, 0 inf on both sides")
    assert res.stderr == "lamina-run: error: output y agrees only by NaN or inf in the same " \
        "places on both sides, which checks nothing there (--allow-nonfinite accepts it)\n"
    stats = json.loads((tmp_path / "s.json").read_text())
    assert [(o["ok"], o["nan"], o["inf"]) for o in stats["outputs"]] == [(True, 4, 0), (True, 0, 0)]
    assert not (tmp_path / "o.npz").exists()  # a failed check writes no outputs

    res = run("nan.mlir", "-p", "cse", "--check", "--allow-nonfinite", "--outputs", "o.npz",
              cwd=tmp_path)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert res.stdout.splitlines()[2].endswith(": 4 NaN, 0 inf on both sides (allowed)")
    assert (tmp_path / "o.npz").exists()


def test_allow_nonfinite_without_check_is_refused(tmp_path: Path) -> None:
    write(tmp_path, "nan.mlir", NONFINITE)
    assert_error(run("nan.mlir", "--allow-nonfinite", cwd=tmp_path),
                 "--allow-nonfinite applies to --check, which is not given")


def test_check_of_a_step_on_its_default_inputs_is_finite(tmp_path: Path) -> None:
    module = derive(FORWARD, "derive-backward{data=x,y},append-optimizer")
    write(tmp_path, "step.mlir", lamina.to_text(module))
    res = run("step.mlir", "--entry", "mlp_training_loss_step", "-p", "fuse-elementwise",
              "--check", "--stats-json", "-", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    outputs = json.loads(res.stdout)["outputs"]
    assert len(outputs) == 8 and all(o["ok"] and o["nan"] == o["inf"] == 0 for o in outputs)
