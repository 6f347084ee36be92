"""`lamina.updates`: which result of a training step replaces which argument (`lamina.ir.buffers.updates`).

- append-optimizer writes it on the sample training programs (adamw and sgd, host-tier moments,
  no bias correction, the data-parallel MLP), with every result typed exactly like its argument,
  and explains it; it reads back through the custom and the generic form.
- Passes that rewrite a step's signature keep it valid: propagate-sharding places an unplaced new
  parameter like its argument, assign-memory-tiers moves a result to its argument's tier.
- Each verifier rule is one diagnostic at the function, also from `lamina-opt` (exit 1).
- Random differentiable programs: every parameter, moment and the step count is recorded.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import lamina
import pytest
from gradcheck import derive, optimizer_step
from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.backends.interface import find_entry
from lamina.ir.buffers.updates import (
    UPDATES_ATTR,
    set_updates,
    updated_arguments,
    updates_of,
    updates_problem,
    verify_updates,
)
from lamina.ir.core.diagnostics import LaminaError
from strategies import examples
from strategies.programs import programs
from xdsl.dialects.func import FuncOp

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
FORWARD = (SAMPLES / "mlp_training_forward.mlir").read_text()
DP_FORWARD = (SAMPLES / "mlp_dp_forward.mlir").read_text()


def _by_name(func: FuncOp) -> dict[int, str]:
    names = [a.name_hint or f"arg{i}" for i, a in enumerate(func.body.block.args)]
    return {r: names[a] for r, a in updates_of(func).items()}


def _typed_like(func: FuncOp) -> None:
    ins, outs = func.function_type.inputs.data, func.function_type.outputs.data
    for r, a in updates_of(func).items():
        assert outs[r] == ins[a], (r, a)
    assert updates_problem(func) is None


ADAM_MLP = {0: "w1", 1: "w2", 2: "m_w1", 3: "v_w1", 4: "m_w2", 5: "v_w2"}


@pytest.mark.parametrize("options, want", [
    ("kind=adamw", {**ADAM_MLP, 6: "step"}),
    ("kind=adamw state-tier=host", {**ADAM_MLP, 6: "step"}),
    ("kind=adamw state-tier=nvme bias-correction=false", ADAM_MLP),
    ("kind=sgd weight-decay=0.1", {0: "w1", 1: "w2"}),
])
def test_append_optimizer_records_every_update(options: str, want: dict[int, str]) -> None:
    module = derive(FORWARD, f"derive-backward{{data=x,y}},append-optimizer{{{options}}}")
    step = find_entry(module, "mlp_training_loss_step")
    assert _by_name(step) == want
    n = len(step.function_type.outputs.data)
    assert n == len(want) + 1 and n - 1 not in updates_of(step)  # the loss, last, replaces none
    entries = step.attributes[UPDATES_ATTR]
    assert list(entries.get_values())[-1] == -1  # type: ignore[attr-defined]
    assert updated_arguments(step) == {i for i, a in enumerate(step.body.block.args)
                                       if a.name_hint in want.values()}
    assert 0 not in updated_arguments(step) and 1 not in updated_arguments(step)  # x, y: data
    _typed_like(step)


@pytest.mark.parametrize("pipeline", [
    "derive-backward{data=x},append-optimizer",
    "derive-backward{data=x},append-optimizer{state-tier=host},propagate-sharding,"
    "insert-collectives{target=h100-cluster}",
    "derive-backward{data=x},append-optimizer{kind=sgd},propagate-sharding,fuse-elementwise,"
    "annotate-lifetimes,assign-memory-tiers{target=h100-node}",
])
def test_data_parallel_step(pipeline: str) -> None:
    step = find_entry(derive(DP_FORWARD, pipeline), "dp_forward_step")
    params = ["w1", "b1", "w2", "b2"]
    want = dict(enumerate(params))
    if "sgd" not in pipeline:
        want.update(enumerate([f"{s}_{p}" for p in params for s in "mv"], start=4))
        want[12] = "step"
    assert _by_name(step) == want  # %d_y, the seed cotangent, is no parameter
    _typed_like(step)


def test_round_trip_custom_and_generic() -> None:
    module = derive(FORWARD, "derive-backward{data=x,y},append-optimizer")
    step = find_entry(module, "mlp_training_loss_step")
    text = lamina.to_text(module)
    assert "attributes {lamina.updates = array<i64: 2, 3, 4, 5, 6, 7, 8, -1>}" in text
    for printed in (text, lamina.to_text(module, generic=True)):
        again = find_entry(lamina.parse(printed), "mlp_training_loss_step")
        assert again.attributes[UPDATES_ATTR] == step.attributes[UPDATES_ATTR]
        assert updates_of(again) == updates_of(step)


def test_explain_names_each_update(capsys) -> None:
    lamina.apply(lamina.parse(FORWARD, "p.mlir"), "derive-backward{data=x,y},append-optimizer",
                 explain=True)
    err = capsys.readouterr().err
    assert "[append-optimizer] p.mlir:15:1: @mlp_training_loss_step: lamina.updates (result -> " \
        "the argument it replaces): #0 -> %w1, #1 -> %w2, #2 -> %m_w1, #3 -> %v_w1, #4 -> " \
        "%m_w2, #5 -> %v_w2, #6 -> %step; #7 (the loss) replaces none" in err


def test_assign_memory_tiers_returns_each_result_in_its_arguments_tier(capsys) -> None:
    module = derive(FORWARD, "derive-backward{data=x,y},append-optimizer,annotate-lifetimes")
    lamina.apply(module, "assign-memory-tiers{target=h100-node hbm-capacity=1000000}",
                 explain=True)
    step = find_entry(module, "mlp_training_loss_step")
    _typed_like(step)
    err = capsys.readouterr().err
    assert "before the return: it replaces argument %m_w2 (lamina.updates)" in err
    tiers = {str(t) for t in step.function_type.inputs.data}
    assert any("tier = host" in t for t in tiers) and any("tier = hbm" in t for t in tiers)


UNPLACED_WEIGHT = """\
lamina.mesh @m [data = 2, model = 2]
func.func @f(%x: tensor<8x4xf32, #lamina.place<@m, [[data], []]>>, %w: tensor<4x6xf32>, %w2: tensor<6x4xf32, #lamina.place<@m, [[model], []]>>) -> tensor<f32> {
  %h = lamina.matmul %x, %w : (tensor<8x4xf32, #lamina.place<@m, [[data], []]>>, tensor<4x6xf32>) -> tensor<8x6xf32>
  %o = lamina.matmul %h, %w2 : (tensor<8x6xf32>, tensor<6x4xf32, #lamina.place<@m, [[model], []]>>) -> tensor<8x4xf32>
  %l = lamina.reduce_mean %o {axes = array<i64: 0, 1>} : (tensor<8x4xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
"""


def test_propagate_sharding_places_a_new_parameter_like_its_argument() -> None:
    """%w is unplaced: placed by its value's splits, %new_w would be [[data], [model]]."""
    step = find_entry(derive(UNPLACED_WEIGHT, "derive-backward{data=x},append-optimizer{"
                             "state-tier=host},propagate-sharding"), "f_step")
    assert _by_name(step)[0] == "w"
    assert str(step.function_type.outputs.data[0]) == \
        "tensor<4x6xf32, #lamina.place<@m, [[], [model]]>>"
    _typed_like(step)


# ---- the verifier -------------------------------------------------------------------------------

STEP = """\
func.func @s(%x: tensor<4xf32>, %w: tensor<4xf32>, %m: tensor<4xf32, #lamina.place<tier = host>>) -> (tensor<4xf32>, tensor<4xf32, #lamina.place<tier = host>>, tensor<f32>) attributes {lamina.updates = ATTR} {
  %l = lamina.reduce_sum %x {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  func.return %w, %m, %l : tensor<4xf32>, tensor<4xf32, #lamina.place<tier = host>>, tensor<f32>
}
"""
HEAD = "p.mlir:1:1: error: func.func @s: lamina.updates"
KIND_HEAD = "p.mlir:1:1: error: func.func @s: attribute 'lamina.updates'"


@pytest.mark.parametrize("attr, message", [
    ("array<i64: 1, 2, -1, -1>", f"{HEAD} has 4 entries for 3 results (one per result)"),
    ("array<i64: 1>", f"{HEAD} has 1 entry for 3 results (one per result)"),
    ("array<i64: 1, 3, -1>", f"{HEAD}: result #1 names argument #3, which does not exist "
     "(3 arguments; -1 for a result that replaces none)"),
    ("array<i64: 1, 2, -2>", f"{HEAD}: result #2 names argument #-2, which does not exist "
     "(3 arguments; -1 for a result that replaces none)"),
    ("array<i64: 1, 1, -1>", f"{HEAD}: results #0 and #1 both update argument #1 (%w)"),
    ("array<i64: 2, 1, -1>", f"{HEAD}: result #0 updates argument #2 (%m) but has type "
     "tensor<4xf32>, not the argument's tensor<4xf32, #lamina.place<tier = host>>"),
    ("array<i64: -1, -1, 0>", f"{HEAD}: result #2 updates argument #0 (%x) but has type "
     "tensor<f32>, not the argument's tensor<4xf32>"),
    ("array<i32: 1, 2, -1>", f"{KIND_HEAD} must be an array<i64: ...> with one argument index "
     "(or -1) per result, got array<i32: 1, 2, -1>"),
    ('"w"', f'{KIND_HEAD} must be an array<i64: ...> with one argument index (or -1) per result, '
     'got "w"'),
    ("3 : i64", f"{KIND_HEAD} must be an array<i64: ...> with one argument index (or -1) per "
     "result, got 3 : i64"),
])
def test_verifier_errors(attr: str, message: str) -> None:
    with pytest.raises(LaminaError) as e:
        lamina.parse(STEP.replace("ATTR", attr), "p.mlir")
    assert str(e.value) == message


def test_a_valid_attribute_verifies_and_reads() -> None:
    module = lamina.parse(STEP.replace("ATTR", "array<i64: 1, 2, -1>"))
    lamina.verify(module)
    func = find_entry(module, "s")
    assert updates_of(func) == {0: 1, 1: 2} and updated_arguments(func) == {1, 2}
    verify_updates(func)


def test_set_updates() -> None:
    func = find_entry(lamina.parse(STEP.replace("ATTR", "array<i64: 1, 2, -1>")), "s")
    set_updates(func, {1: 2})
    assert str(func.attributes[UPDATES_ATTR]) == "array<i64: -1, 2, -1>"
    set_updates(func, {})
    assert UPDATES_ATTR not in func.attributes and updates_of(func) == {}
    assert updated_arguments(func) == set()
    with pytest.raises(ValueError, match="has no result #3"):
        set_updates(func, {3: 0})


def test_cli_reports_a_bad_attribute_with_exit_1(tmp_path: Path) -> None:
    path = tmp_path / "p.mlir"
    path.write_text(STEP.replace("ATTR", "array<i64: 1, 1, -1>"))
    opt = Path(sys.executable).with_name("lamina-opt")
    r = subprocess.run([str(opt), str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines()[0] == f"{path}:1:1: error: func.func @s: lamina.updates: " \
        "results #0 and #1 both update argument #1 (%w)"


# ---- random programs ----------------------------------------------------------------------------

@settings(max_examples=examples(15))
@given(prog=programs(max_ops=8, dtypes=("f32", "f64")),
       options=st.sampled_from(["kind=sgd", "kind=adamw", "kind=adamw state-tier=host",
                                "kind=adamw bias-correction=false"]))
def test_random_steps_record_every_update(prog, options: str) -> None:
    derived = optimizer_step(prog.text, options)
    if derived is None:
        return
    got, step = derived
    assert got.module is not None
    n_args = len(find_entry(got.module, "main").body.block.args)
    names = [a.name_hint or f"arg{i}" for i, a in enumerate(step.body.block.args)]
    want = dict(enumerate(got.wrt))  # the new parameters, in gradient order
    if "adamw" in options:
        want.update(enumerate(range(n_args, n_args + 2 * len(got.wrt)), start=len(got.wrt)))
        if "bias-correction=false" not in options:
            want[3 * len(got.wrt)] = n_args + 2 * len(got.wrt)
    assert updates_of(step) == want, (names, want)
    assert len(step.function_type.outputs.data) == len(want) + 1
    _typed_like(step)
