"""`append-optimizer`: training steps derived from forward functions.

- The two hand-written training samples are derived from their forward function
  (samples/mlp_training_forward.mlir): their hand-written backward passes equal the derived
  gradients, and their whole steps (Adam without bias correction; moments in host memory for
  zero_offload_step) equal the derived steps, on random inputs (a valid state: v >= 0).
- Every bad option value (of the step and of the training-loop options, whose steps follow
  torch.optim in tests/test_optimizer_options.py) and misuse are one diagnostic each; every
  derived module reads back.
"""

from __future__ import annotations

from pathlib import Path

import lamina
import numpy as np
import pytest
from gradcheck import derive
from lamina.backends.compare import compare
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import run_function
from lamina.ir.buffers.memory import MoveOp
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.mesh.placement import tier_of
from lamina.ir.ops.opbase import tensor_info
from lamina.passes.pipeline import build_pipeline
from xdsl.dialects.builtin import FunctionType
from xdsl.dialects.func import ReturnOp

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
FORWARD = (SAMPLES / "mlp_training_forward.mlir").read_text()
DERIVE = "derive-backward{data=x,y}"


def _state_inputs(func, seed: int = 0) -> list[np.ndarray]:
    """Standard normal inputs, the second moments (`v...`) made non-negative, as a real state is."""
    rng = np.random.default_rng(seed)
    out = []
    for a in func.body.block.args:
        x = rng.standard_normal(tensor_info(a.type).shape).astype(np.float32)
        out.append(np.abs(x) if (a.name_hint or "").startswith("v") else x)
    return out


def _same(got: list[np.ndarray], want: list[np.ndarray], where: str) -> None:
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        d = compare(f"out{k}", "f32", g, w)
        assert d.ok, f"{where}: {d.line()}"


def test_hand_written_backward_equals_the_derived_gradients() -> None:
    sample = lamina.load(str(SAMPLES / "mlp_training_offload.mlir"))
    step = find_entry(sample, "mlp_training_step")
    values = {r.name_hint: r for op in step.walk() for r in op.results}
    ret = step.body.block.last_op
    assert isinstance(ret, ReturnOp)
    ret.operands = [values["gw1"], values["gw2"]]
    step.function_type = FunctionType.from_lists(list(step.function_type.inputs.data),
                                                 [values["gw1"].type, values["gw2"].type])
    derived = derive(FORWARD, DERIVE)
    inputs = _state_inputs(step)
    hand = run_function(step, inputs).outputs
    grads = run_function(find_entry(derived, "mlp_training_loss_grad"), inputs[:4]).outputs
    _same(grads[1:], hand, "dW1, dW2")


@pytest.mark.parametrize("sample, entry, options", [
    ("mlp_training_offload.mlir", "mlp_training_step", "bias-correction=false"),
    ("zero_offload_step.mlir", "zero_offload_step", "bias-correction=false state-tier=host"),
])
def test_hand_written_steps_equal_the_derived_steps(sample: str, entry: str, options: str) -> None:
    hand = find_entry(lamina.load(str(SAMPLES / sample)), entry)
    module = derive(FORWARD, f"{DERIVE},append-optimizer{{{options}}}")
    step = find_entry(module, "mlp_training_loss_step")
    assert step.function_type == hand.function_type  # same arguments, results, tiers
    assert sum(isinstance(op, MoveOp) for op in step.walk()) == \
        sum(isinstance(op, MoveOp) for op in hand.walk())
    for seed in range(3):
        inputs = _state_inputs(hand, seed)
        _same(run_function(step, inputs).outputs, run_function(hand, inputs).outputs, sample)


def test_state_tier_puts_moments_in_host_memory() -> None:
    step = find_entry(derive(FORWARD, f"{DERIVE},append-optimizer{{state-tier=host}}"),
                      "mlp_training_loss_step")
    args = {a.name_hint: a for a in step.body.block.args}
    assert [tier_of(args[n].type) for n in ("m_w1", "v_w1", "m_w2", "v_w2", "w1")] == \
        ["host"] * 4 + [None]
    assert [tier_of(t) for t in step.function_type.outputs.data] == \
        [None, None, "host", "host", "host", "host", None, None]


@pytest.mark.parametrize("spec, message", [
    ("append-optimizer{kind=adam}", "option 'kind' for append-optimizer must be sgd or adamw, "
     "got 'adam'"),
    ("append-optimizer{beta1=1}", "option 'beta1' for append-optimizer must be in [0, 1), got 1.0"),
    ("append-optimizer{lr=-1}", "option 'lr' for append-optimizer must be >= 0, got -1.0"),
    ("append-optimizer{lr=fast}", "option 'lr' for append-optimizer expects a finite number (like "
     "1e-3 or 0.9), got 'fast'"),
    ("append-optimizer{eps=inf}", "option 'eps' for append-optimizer expects a finite number (like "
     "1e-3 or 0.9), got 'inf'"),
    ("append-optimizer{state-tier=disk}", "option 'state-tier' for append-optimizer must be none, "
     "host or nvme, got 'disk'"),
    ("append-optimizer{kind=adamw momentum=0.9}", "option 'momentum' for append-optimizer applies "
     "to kind=sgd (adamw keeps moments of its own), got momentum=0.9 with kind=adamw"),
    ("append-optimizer{kind=sgd momentum=-1}", "option 'momentum' for append-optimizer must be "
     ">= 0, got -1.0"),
    ("append-optimizer{grad-clip=-0.5}", "option 'grad-clip' for append-optimizer must be >= 0 "
     "(0: no clipping), got -0.5"),
])
def test_option_errors(spec: str, message: str) -> None:
    with pytest.raises(LaminaError) as e:
        build_pipeline(spec)
    assert e.value.message == message


def test_float_options_accept_numbers() -> None:
    (p,) = build_pipeline("append-optimizer{lr=1e-4 beta1=.5 beta2=0 eps=3 weight-decay=+0.25}")
    assert (p.lr, p.beta1, p.beta2, p.eps, p.weight_decay) == (1e-4, 0.5, 0.0, 3.0, 0.25)  # type: ignore[attr-defined]


@pytest.mark.parametrize("pipeline, message", [
    ("append-optimizer", "error: append-optimizer: the module has no gradient function (run "
     "derive-backward first)"),
    ("append-optimizer{func=mlp_training_loss}", "p.mlir:15:1: error: append-optimizer: "
     "@mlp_training_loss is not a gradient function (run derive-backward first: it returns the "
     "loss and the gradients, and records them in lamina.gradients)"),
    (f"{DERIVE},append-optimizer,append-optimizer", "error: append-optimizer: the module has no "
     "gradient function (run derive-backward first)"),
])
def test_misuse_is_one_diagnostic(pipeline: str, message: str) -> None:
    module = lamina.parse(FORWARD, "p.mlir")
    with pytest.raises(LaminaError) as e:
        lamina.apply(module, pipeline)
    assert str(e.value) == message


def test_explain(capsys) -> None:
    lamina.apply(lamina.parse(FORWARD, "p.mlir"), f"{DERIVE},append-optimizer{{state-tier=host}}",
                 explain=True)
    err = capsys.readouterr().err
    assert "[append-optimizer] p.mlir:15:1: %w1: adamw update from its gradient; moments %m_w1, " \
        "%v_w1 in tier host" in err
    assert "@mlp_training_loss_grad -> @mlp_training_loss_step: adamw (lr=0.001, weight-decay=0.0, " \
        "beta1=0.9, beta2=0.999, eps=1e-08, bias-correction=true) on 2 parameter(s)" in err
