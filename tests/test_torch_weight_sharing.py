"""The torch importer's weights share the model's memory, read-only (issue 25).

Copying every weight made an import's peak memory twice the model's (a 1.1B-parameter Llama at
2.0x its weights, `benchmarks/bench_import.py --llama`). The imported arrays are now views of
torch's tensors where that is possible: these tests hold that they are views, that Lamina can
never write through them (the caller owns the model), and that the program still computes
what torch does; a bf16 or strided tensor is still copied into an array of its own.
"""

from __future__ import annotations

import lamina
import numpy as np
import pytest
import torch
from lamina.frontends.torch import import_exported


class Affine(torch.nn.Module):
    """x @ w.T + b, with a strided buffer (an expanded view) as a second addend."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(8, 4)
        self.register_buffer("shift", torch.arange(4, dtype=torch.float32).expand(3, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) + self.shift


def _imported(model: torch.nn.Module, x: torch.Tensor) -> tuple[dict[str, np.ndarray],
                                                                 dict[str, torch.Tensor]]:
    ep = torch.export.export(model.eval(), (x,))
    _, weights = import_exported(ep)
    return weights, dict(ep.state_dict)


def test_contiguous_weights_are_read_only_views_of_the_model() -> None:
    model = Affine()
    weights, state = _imported(model, torch.randn(3, 8))
    w, b = weights["lin.weight"], weights["lin.bias"]
    assert np.shares_memory(w, model.lin.weight.detach().numpy())
    assert np.shares_memory(b, model.lin.bias.detach().numpy())
    assert not w.flags.writeable and not b.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        w[0, 0] = 1.0
    assert set(state) >= {"lin.weight", "lin.bias"}


def test_a_strided_buffer_is_copied_into_a_contiguous_array() -> None:
    model = Affine()
    weights, _ = _imported(model, torch.randn(3, 8))
    shift = weights["shift"]
    assert shift.flags.c_contiguous and shift.flags.writeable
    assert not np.shares_memory(shift, model.get_buffer("shift").numpy())
    np.testing.assert_array_equal(shift, model.get_buffer("shift").numpy())


def test_bf16_weights_are_widened_into_new_arrays() -> None:
    model = torch.nn.Linear(8, 4).to(torch.bfloat16)
    weights, _ = _imported(model, torch.randn(3, 8, dtype=torch.bfloat16))
    w = weights["weight"]
    assert w.dtype == np.float32 and w.flags.writeable
    np.testing.assert_array_equal(w, model.weight.detach().float().numpy())


def test_the_shared_weights_compute_what_torch_does() -> None:
    model = Affine().eval()
    x = torch.randn(3, 8)
    ep = torch.export.export(model, (x,))
    module, weights = import_exported(ep)
    got = lamina.run(module, {"x": x.numpy(), **weights}).outputs
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(next(iter(got.values())), want, rtol=1e-6, atol=1e-6)
