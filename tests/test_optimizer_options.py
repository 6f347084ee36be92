"""`append-optimizer`'s steps and options for a training loop, against torch.optim (f64, 1e-10).

- AdamW with bias correction and weight decay, and SGD with weight decay, at a fixed rate follow
  torch.optim over three chained steps, the step count carried as an argument/result.
- `lr-input=true`: the learning rate is the argument `%lr` (role `learning_rate`, replaced by no
  result); fed a different rate each step, the step follows torch with its param group's `lr`
  changed before each `opt.step()` (AdamW and SGD, with weight decay).
- `momentum=`: SGD's momentum buffer is an argument and result (role `momentum_buffer`); from a
  zero buffer, chained steps follow torch.optim.SGD(momentum=..., dampening=0, nesterov=False).
- `grad-clip=`: the gradients are scaled as torch.nn.utils.clip_grad_norm_ scales them, both when
  the norm is above the limit (scaled) and below it (left alone, coefficient 1).
- The defaults print the step exactly as before (bad values: tests/test_append_optimizer.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gradcheck import derive
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import run_function
from lamina.ir.buffers.updates import roles_of, updates_of
from lamina.ir.core.dtypes import STORAGE
from lamina.ir.ops.opbase import tensor_info
from xdsl.dialects.func import FuncOp

torch = pytest.importorskip("torch")

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
# rates exactly representable in f32, the type of the %lr input, so torch sees the same values
RATES = [0.0625, 0.125, 0.03125]


def _step(options: str) -> FuncOp:
    return find_entry(derive(MLP64, f"derive-backward{{data=x}},append-optimizer{{{options}}}"),
                      "net_step")


def _torch(kind: str, x: np.ndarray, initial: list[np.ndarray], rates: list[float],
           clip: float | None, **hyper: Any) -> list[np.ndarray]:
    ws = [torch.tensor(p, requires_grad=True) for p in initial]
    opt = torch.optim.AdamW(ws, lr=rates[0], **hyper) if kind == "adamw" else \
        torch.optim.SGD(ws, lr=rates[0], **hyper)
    xt = torch.tensor(x)
    for lr in rates:
        opt.zero_grad()
        torch.tanh(xt @ ws[0] + ws[1]).pow(2).mean().backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(ws, clip)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
    return [w.detach().numpy() for w in ws]


def _lamina(step: FuncOp, x: np.ndarray, initial: list[np.ndarray], rates: list[float]
            ) -> list[np.ndarray]:
    """Chain the step over `rates`, feeding each result back into the argument it replaces
    (`lamina.updates`) and each rate into the `learning_rate` argument (the roles)."""
    roles = {r.name: i for i, r in roles_of(step).items() if r.name == "learning_rate"}
    args: list[np.ndarray] = [x, *initial]
    for t in step.function_type.inputs.data[3:]:
        info = tensor_info(t)
        args.append(np.zeros(info.shape, STORAGE[info.dtype]))
    for lr in rates:
        if "learning_rate" in roles:
            args[roles["learning_rate"]] = np.asarray(lr, np.float32)
        out = run_function(step, args).outputs
        for r, a in updates_of(step).items():
            args[a] = out[r]
    return args[1:3]


def _data() -> tuple[np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(1)
    return rng.standard_normal((6, 5)), [rng.standard_normal((5, 4)), rng.standard_normal(4)]


@pytest.mark.parametrize("kind, options, hyper, clip", [
    ("adamw", "lr-input=true beta1=0.8 beta2=0.99 eps=1e-6 weight-decay=0.1",
     {"betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1}, None),
    ("adamw", "lr-input=true bias-correction=true", {"weight_decay": 0.0}, None),
    ("sgd", "lr-input=true weight-decay=0.01", {"weight_decay": 0.01}, None),
    ("sgd", "lr-input=true momentum=0.9 weight-decay=0.01",
     {"momentum": 0.9, "weight_decay": 0.01}, None),
    ("sgd", "lr=0.0625 momentum=0.5", {"momentum": 0.5}, None),
    ("sgd", "lr-input=true momentum=0.9 grad-clip=0.05", {"momentum": 0.9}, 0.05),
    ("sgd", "lr-input=true grad-clip=100", {}, 100.0),
    ("adamw", "lr-input=true weight-decay=0.01 grad-clip=0.05", {"weight_decay": 0.01}, 0.05),
])
def test_options_follow_torch(kind: str, options: str, hyper: dict[str, Any],
                              clip: float | None) -> None:
    step = _step(f"kind={kind} {options}")
    x, initial = _data()
    rates = RATES if "lr-input" in options else [0.0625] * 3
    got = _lamina(step, x, initial, rates)
    want = _torch(kind, x, initial, rates, clip, **hyper)
    for g, w, p in zip(got, want, initial, strict=True):
        assert np.abs(g - p).max() > 1e-4   # it did move
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_clipping_changes_the_update_only_above_the_limit() -> None:
    """The limit 0.05 is below the gradients' norm (the step differs from the unclipped one);
    100 is above it (the same step to the last bit but for the clip's multiply by 1)."""
    x, initial = _data()
    plain = _lamina(_step("kind=sgd lr=0.0625"), x, initial, [0.0625])
    low = _lamina(_step("kind=sgd lr=0.0625 grad-clip=0.05"), x, initial, [0.0625])
    high = _lamina(_step("kind=sgd lr=0.0625 grad-clip=100"), x, initial, [0.0625])
    assert np.abs(low[0] - plain[0]).max() > 1e-3
    np.testing.assert_array_equal(high[0], plain[0])


@pytest.mark.parametrize("options, roles", [
    ("kind=sgd lr-input=true", {"w": "parameter", "b": "parameter", "lr": "learning_rate"}),
    ("kind=sgd momentum=0.9", {"w": "parameter", "b": "parameter", "buf_w": "momentum_buffer",
                               "buf_b": "momentum_buffer"}),
    ("kind=adamw lr-input=true", {"w": "parameter", "b": "parameter", "m_w": "first_moment",
                                  "v_w": "second_moment", "m_b": "first_moment",
                                  "v_b": "second_moment", "step": "step_count",
                                  "lr": "learning_rate"}),
])
def test_roles_and_updates(options: str, roles: dict[str, str]) -> None:
    """The learning rate has a role but no result replaces it; a momentum buffer is replaced by
    its new value, which is typed as it is."""
    step = _step(options)
    args = step.body.block.args
    assert {args[i].name_hint: r.name for i, r in roles_of(step).items()} == roles
    updated = set(updates_of(step).values())
    assert {args[i].name_hint for i in updated} == set(roles) - {"lr"}
    if "lr" in roles:
        assert args[-1].name_hint == "lr" and str(args[-1].type) == "tensor<f32>"


@pytest.mark.parametrize("kind, options, hyper", [
    ("adamw", "lr=0.01 beta1=0.8 beta2=0.99 eps=1e-6 weight-decay=0.1",
     {"lr": 0.01, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1}),
    ("adamw", "", {"lr": 1e-3, "weight_decay": 0.0}),
    ("sgd", "lr=0.05 weight-decay=0.01", {"lr": 0.05, "weight_decay": 0.01}),
])
def test_steps_follow_torch_optim(kind: str, options: str, hyper: dict[str, Any]) -> None:
    """Three chained steps at a fixed rate, AdamW's step count carried as an argument/result."""
    step = _step(f"kind={kind} {options}")
    x, initial = _data()
    params = list(initial)
    state = [np.zeros_like(p) for p in params for _ in range(2)] if kind == "adamw" else []
    count = [np.asarray(0.0, np.float32)] if kind == "adamw" else []
    for _ in range(3):
        out = run_function(step, [x, *params, *state, *count]).outputs
        params, state = out[:2], out[2:2 + len(state)]
        count = out[2 + len(state):-1]
    if kind == "adamw":
        assert float(count[0]) == 3.0
    rest = {k: v for k, v in hyper.items() if k != "lr"}
    want = _torch(kind, x, initial, [hyper["lr"]] * 3, None, **rest)
    for got, w in zip(params, want, strict=True):
        assert np.abs(got - initial[0 if got.ndim == 2 else 1]).max() > 1e-4  # it did move
        np.testing.assert_allclose(got, w, rtol=1e-10, atol=1e-12)
