"""Frozen arguments (role `frozen`): a torch model's buffers are read, never trained.

- The torch importer gives the arguments made from buffers `lamina.role = "frozen"` (a float
  buffer and an integer one), the parameters and inputs none; the role reads back from the text.
- derive-backward's default `wrt` leaves them out (`@forward_grad` has no gradient for them and
  keeps their role); naming one in `wrt` still differentiates it (the user's request).
- `lamina.Trainer` trains 3 AdamW steps (with weight decay) on a module with a buffer and matches
  torch.optim.AdamW on the same module, every loss and final weight; the buffer stays as it was
  and is no parameter. Without `init` it refuses to step, naming the buffer (no drawn rotary
  table means anything); a resume needs no `init` (the checkpoint holds the buffer) and ends
  bit-identical to the uninterrupted run. `lamina-train` without `--init` refuses with one
  diagnostic and writes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lamina
import numpy as np
import pytest
from lamina.backends.inputs import random_inputs
from lamina.cli.outputs import save_npz_atomic
from lamina.cli.train import main as train_main
from lamina.ir.buffers.updates import FROZEN, gradients_problem, roles_of
from lamina.ir.core.diagnostics import LaminaError
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp

torch = pytest.importorskip("torch")

BATCHES, STEPS = 3, 3
SCALE = [0.5, 1.5, 2.0, -1.0]


class Scaled(torch.nn.Module):
    """A parameter (the linear layer) and two buffers: a float scale and integer columns."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("scale", torch.tensor(SCALE))
        self.register_buffer("cols", torch.tensor([3, 2, 1, 0]))

    def forward(self, x: Any, y: Any) -> Any:
        h = torch.index_select(x, 1, self.cols) * self.scale
        return ((self.lin(h) - y) ** 2).mean()


def _imported() -> tuple[ModuleOp, dict[str, np.ndarray]]:
    ep = torch.export.export(Scaled(), (torch.zeros(2, 4), torch.zeros(2, 3)))
    from lamina.frontends.torch import import_exported

    return import_exported(ep)


def _func(module: ModuleOp, name: str) -> FuncOp:
    return next(f for f in module.ops if isinstance(f, FuncOp) and f.sym_name.data == name)


def _roles(func: FuncOp) -> dict[str, str]:
    names = [a.name_hint for a in func.body.block.args]
    return {str(names[i]): r.name for i, r in roles_of(func).items()}


def _data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {"x": rng.standard_normal((BATCHES, 2, 4), dtype=np.float32),
            "y": rng.standard_normal((BATCHES, 2, 3), dtype=np.float32)}


def test_buffers_import_frozen_and_read_back() -> None:
    module, weights = _imported()
    forward = _func(module, "forward")
    assert _roles(forward) == {"scale": FROZEN, "cols": FROZEN}
    assert sorted(weights) == ["cols", "lin.bias", "lin.weight", "scale"]
    text = lamina.to_text(module)
    assert '{lamina.role = "frozen"}' in text
    for again in (lamina.parse(text), lamina.parse(lamina.to_text(module, generic=True))):
        assert _roles(_func(again, "forward")) == {"scale": FROZEN, "cols": FROZEN}
    drawn = random_inputs(forward, 0)   # drawn from the role's domain like any other argument
    assert [a.shape for a in drawn] == [(2, 4), (2, 3), (3, 4), (3,), (4,), (4,)]


def _gradient_names(module: ModuleOp) -> list[str]:
    grad = _func(module, "forward_grad")
    assert gradients_problem(grad) is None
    names = [str(a.name_hint) for a in grad.body.block.args]
    indices = grad.attributes["lamina.gradients"].get_values()  # type: ignore[union-attr]
    return [names[int(i)] for i in indices]


def test_default_wrt_leaves_frozen_out_and_the_grad_keeps_the_role() -> None:
    module, _ = _imported()
    lamina.apply(module, "derive-backward{data=x,y}")
    assert _gradient_names(module) == ["lin.weight", "lin.bias"]
    grad = _func(module, "forward_grad")
    assert len(grad.function_type.outputs.data) == 3   # the loss and two gradients
    assert _roles(grad) == {"scale": FROZEN, "cols": FROZEN}
    lamina.apply(module, "append-optimizer{kind=adamw}")
    step = _func(module, "forward_step")
    assert _roles(step)["scale"] == FROZEN
    names = [a.name_hint for a in step.body.block.args]
    assert "m_scale" not in names
    lamina.verify(module)


def test_an_explicit_wrt_differentiates_a_frozen_argument() -> None:
    module, _ = _imported()
    lamina.apply(module, "derive-backward{data=x,y wrt=lin.weight,scale}")
    assert _gradient_names(module) == ["lin.weight", "scale"]


def _torch_adamw(data: dict[str, np.ndarray], hyper: dict[str, float]
                 ) -> tuple[list[float], dict[str, np.ndarray], np.ndarray]:
    model = Scaled()
    opt = torch.optim.AdamW(model.parameters(), **hyper)
    losses = []
    for i in range(STEPS):
        opt.zero_grad()
        loss = model(torch.tensor(data["x"][i % BATCHES]), torch.tensor(data["y"][i % BATCHES]))
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    params = {n: p.detach().numpy() for n, p in model.named_parameters()}
    return losses, params, model.scale.numpy()


def test_trainer_keeps_the_buffer_and_matches_torch_adamw() -> None:
    module, weights = _imported()
    data, hyper = _data(), {"lr": 0.05, "weight_decay": 0.1}
    trainer = lamina.Trainer(module, data, init=weights, optimizer="adamw", steps=STEPS,
                             lr=hyper["lr"], weight_decay=hyper["weight_decay"])
    assert sorted(trainer.parameters) == ["lin.bias", "lin.weight"]
    got = [r.loss for r in trainer.run()]
    want, final, scale = _torch_adamw(data, hyper)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert got[-1] != got[0]
    lin = trainer.parameters
    np.testing.assert_allclose(lin["lin.weight"], final["lin.weight"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lin["lin.bias"], final["lin.bias"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(trainer.frozen["scale"], np.array(SCALE, np.float32))
    np.testing.assert_array_equal(scale, np.array(SCALE, np.float32))
    assert "scale" not in trainer.state


def test_without_init_the_trainer_refuses_naming_the_buffer() -> None:
    module, weights = _imported()
    trainer = lamina.Trainer(module, _data(), steps=STEPS)
    with pytest.raises(LaminaError, match=r"init: no array for frozen arguments scale, cols of "
                       r"@forward \(model state that is read, never trained"):
        trainer.step()
    partial = {k: v for k, v in weights.items() if k != "scale"}
    with pytest.raises(LaminaError, match=r"init: no array for frozen argument scale \(read, "
                       r"never trained\) \(it has: cols, lin.bias, lin.weight\)"):
        lamina.Trainer(module, _data(), init=partial, steps=STEPS)


def test_a_resume_needs_no_init_and_is_bit_identical(tmp_path: Path) -> None:
    module, weights = _imported()
    full = lamina.train(module, _data(), steps=5, init=weights)
    lamina.train(module, _data(), steps=2, init=weights, checkpoint=str(tmp_path / "ck"))
    resumed = lamina.train(module, _data(), steps=5, resume=str(tmp_path / "ck"))
    for name, a in full.parameters.items():
        np.testing.assert_array_equal(resumed.parameters[name], a, err_msg=name)
    np.testing.assert_array_equal(resumed.frozen["scale"], np.array(SCALE, np.float32))


def test_lamina_train_without_init_is_one_diagnostic(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    module, weights = _imported()
    program = tmp_path / "scaled.mlir"
    program.write_text(lamina.to_text(module))
    save_npz_atomic(str(tmp_path / "data.npz"), _data())
    save_npz_atomic(str(tmp_path / "init.npz"), weights)
    common = [str(program), "--data", str(tmp_path / "data.npz"), "--steps", "2"]
    assert train_main([*common, "--save", str(tmp_path / "out.npz")]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith("error: --init: no array for frozen "
                                          "arguments scale, cols of @forward"), err
    assert "Traceback" not in err
    assert not (tmp_path / "out.npz").exists()
    assert train_main([*common, "--init", str(tmp_path / "init.npz"), "--save",
                       str(tmp_path / "out.npz")]) == 0
    with np.load(tmp_path / "out.npz") as saved:
        assert sorted(saved.files) == ["lin.bias", "lin.weight"]
