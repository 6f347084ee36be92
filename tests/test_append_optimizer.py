"""`append-optimizer`: training steps derived from forward functions.

- The two hand-written training samples are derived from their forward function
  (samples/mlp_training_forward.mlir): their hand-written backward passes equal the derived
  gradients, and their whole steps (Adam without bias correction; moments in host memory for
  zero_offload_step) equal the derived steps, on random inputs (a valid state: v >= 0).
- AdamW with bias correction and weight decay, and SGD with weight decay, follow torch.optim over
  three chained steps (f64, 1e-10 relative), the step count carried as an argument/result.
- Option values and misuse are one diagnostic each; every derived module reads back.
"""

from __future__ import annotations

from pathlib import Path

import lamina
import numpy as np
import pytest
import torch
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


MLP64 = """\
func.func @net(%x: tensor<6x5xf64>, %w: tensor<5x4xf64>, %b: tensor<4xf64>) -> tensor<f64> {
  %h = lamina.matmul %x, %w : (tensor<6x5xf64>, tensor<5x4xf64>) -> tensor<6x4xf64>
  %hb = lamina.add %h, %b : (tensor<6x4xf64>, tensor<4xf64>) -> tensor<6x4xf64>
  %t = lamina.tanh %hb : tensor<6x4xf64>
  %s = lamina.mul %t, %t : tensor<6x4xf64>
  %l = lamina.reduce_mean %s {axes = array<i64: 0, 1>} : (tensor<6x4xf64>) -> tensor<f64>
  func.return %l : tensor<f64>
}
"""


def _torch_steps(kind: str, x: np.ndarray, params: list[np.ndarray], steps: int, **hyper
                 ) -> list[np.ndarray]:
    ws = [torch.tensor(p, requires_grad=True) for p in params]
    opt = torch.optim.AdamW(ws, **hyper) if kind == "adamw" else torch.optim.SGD(ws, **hyper)
    xt = torch.tensor(x)
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.tanh(xt @ ws[0] + ws[1]).pow(2).mean()
        loss.backward()
        opt.step()
    return [w.detach().numpy() for w in ws]


@pytest.mark.parametrize("kind, options, hyper", [
    ("adamw", "lr=0.01 beta1=0.8 beta2=0.99 eps=1e-6 weight-decay=0.1",
     {"lr": 0.01, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1}),
    ("adamw", "", {"lr": 1e-3, "weight_decay": 0.0}),
    ("sgd", "lr=0.05 weight-decay=0.01", {"lr": 0.05, "weight_decay": 0.01}),
])
def test_steps_follow_torch_optim(kind: str, options: str, hyper: dict) -> None:
    module = derive(MLP64, f"derive-backward{{data=x}},append-optimizer{{kind={kind} {options}}}")
    step = find_entry(module, "net_step")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 5))
    initial = [rng.standard_normal((5, 4)), rng.standard_normal(4)]
    params = list(initial)
    state = [np.zeros_like(p) for p in params for _ in range(2)] if kind == "adamw" else []
    count = [np.asarray(0.0, np.float32)] if kind == "adamw" else []
    for _ in range(3):
        out = run_function(step, [x, *params, *state, *count]).outputs
        params, state = out[:2], out[2:2 + len(state)]
        count = out[2 + len(state):-1]
    if kind == "adamw":
        assert float(count[0]) == 3.0
    for got, want in zip(params, _torch_steps(kind, x, initial, 3, **hyper), strict=True):
        assert np.abs(got - initial[0 if got.ndim == 2 else 1]).max() > 1e-4  # it did move
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


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
