"""derive-backward on the frontends' GPT-2 (issue 14): the model imported from torch.export, its
gradient function derived from the op table's VJPs, against torch.autograd on the same weights.

The imported program reads the tied token embedding once, as `lm_head.weight` (the embedding
lookup and the LM head both read it), so its one gradient is torch's gradient of the shared
parameter: the sum over both uses, which the gather VJP (a one-hot matmul) and the matmul VJP
add up. Eval mode (dropout off), float32; tolerance 1e-5 of each gradient's largest magnitude
(the f32 tolerance of `tests/gradcheck.py`).
"""

from __future__ import annotations

import lamina
import numpy as np
import torch
from gpt2_model import GPT2Config, example_inputs, make_gpt2
from lamina.backends.interface import find_entry
from lamina.frontends.torch import import_exported


def test_imported_gpt2_gradients_equal_autograd() -> None:
    cfg = GPT2Config()
    model = make_gpt2(cfg).eval()
    idx, targets = example_inputs(cfg)
    module, weights = import_exported(torch.export.export(model, (idx, targets)))
    forward = find_entry(module, None).sym_name.data
    lamina.apply(module, "derive-backward{data=idx,targets loss=1}")
    grad_fn = find_entry(module, f"{forward}_grad")
    got = lamina.run(module, {"idx": idx.numpy(), "targets": targets.numpy(), **weights},
                     entry=grad_fn.sym_name.data).outputs
    _, loss = model(idx, targets)
    loss.backward()
    params = dict(model.named_parameters())
    tied = {"lm_head.weight": "wte.weight"}   # one tensor, two names
    names = [a.name_hint or "" for a in grad_fn.body.block.args
             if a.name_hint not in ("idx", "targets")]
    values = list(got.values())
    np.testing.assert_allclose(values[0], loss.item(), rtol=1e-6)
    assert len(values) - 1 == len(names) == len(params)
    for name, g in zip(names, values[1:], strict=True):
        ref = params[tied.get(name, name)].grad
        assert ref is not None, name
        want = ref.numpy()
        err = float(np.abs(g - want).max()) / max(float(np.abs(want).max()), 1e-30)
        assert err < 1e-5, f"{name}: {err:.3g}"
