"""torch's scaled_dot_product_attention imports as one fusable attention with a safe softmax.

sdpa gives 0 for a query whose every key is masked (its math path's `_safe_softmax`); the
importer writes that as `lamina.softmax {safe = true}`, so the chain q k^T -> scale -> mask ->
softmax -> @ v reads each value once and `fuse-attention` fuses it. Checked here against eager
torch (1e-5): a boolean mask that masks a whole row, an additive float mask with -inf for a whole
row, `is_causal=True`, on every backend before and after fuse-attention, the fused IR holding
one `lamina.fused "attention"` per sdpa; `aten._safe_softmax` itself (a graph decomposed with
its table entry left out); and derive-backward through the masked attention against autograd.
"""

from __future__ import annotations

import lamina
import numpy as np
import pytest
import torch
from lamina.backends.interface import find_entry
from lamina.frontends.torch import import_exported
from lamina.ir.ops.fused import FusedOp
from xdsl.dialects.builtin import ModuleOp

F = torch.nn.functional
TOL = 1e-5
BACKENDS = ["numpy", "jax", "compiled"]


class Attend(torch.nn.Module):
    """sdpa with a boolean mask, with the same mask as an additive -inf mask, and causal."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor
                ) -> tuple[torch.Tensor, ...]:
        additive = torch.zeros(m.shape).masked_fill(~m, float("-inf"))
        return (F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                F.scaled_dot_product_attention(q, k, v, attn_mask=additive, scale=0.3),
                F.scaled_dot_product_attention(q, k, v, is_causal=True))


def _inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    """q [2, 3, 5, 8], k and v [2, 3, 6, 8], a mask [5, 6] whose row 2 masks every key (the
    other rows keep key 0 and a random rest)."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(s, generator=g) for s in ((2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 8)))
    m = torch.rand((5, 6), generator=g) > 0.5
    m[:, 0] = True
    m[2] = False
    return q, k, v, m


def _fused(module: ModuleOp) -> ModuleOp:
    out = lamina.parse(lamina.to_text(module))
    lamina.apply(out, "fuse-attention")
    return out


def _attention_ops(module: ModuleOp) -> list[FusedOp]:
    return [o for o in module.walk() if isinstance(o, FusedOp) and o.fusion_kind == "attention"]


@pytest.fixture(scope="module")
def imported() -> tuple[ModuleOp, ModuleOp, list[np.ndarray]]:
    xs = _inputs()
    module, weights = import_exported(torch.export.export(Attend(), xs))
    assert not weights
    return module, _fused(module), [x.numpy() for x in xs]


def test_sdpa_imports_as_safe_softmax_and_fuses(imported) -> None:
    module, fused, _ = imported
    text = lamina.to_text(module)
    assert text.count("safe = true") == 3 and "lamina.reduce_max" not in text
    ops = _attention_ops(fused)
    assert len(ops) == 3
    for op in ops:
        assert "lamina.softmax" in str(op) and "safe = true" in str(op)
    after = lamina.to_text(fused)
    assert after.count('lamina.fused "attention"') == 3 and after.count("lamina.softmax") == 3
    assert not [o for o in find_entry(fused, None).body.block.ops if o.name == "lamina.softmax"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fuse", [False, True], ids=["unfused", "fused"])
def test_sdpa_matches_torch_and_masked_rows_are_zero(imported, backend: str, fuse: bool) -> None:
    pytest.importorskip("jax" if backend == "jax" else "numpy")
    if backend == "compiled":
        pytest.importorskip("numba")
    module, fused, xs = imported
    got = lamina.run(fused if fuse else module, xs, backend=backend).outputs
    with torch.no_grad():
        want = Attend()(*(torch.from_numpy(x) for x in xs))
    for i, w in enumerate(want):
        g = np.asarray(got[f"out{i}"])
        assert not np.isnan(g).any(), i
        np.testing.assert_allclose(g, w.numpy(), rtol=TOL, atol=TOL, err_msg=f"output {i}")
    for i in (0, 1):   # row 2 attends no key: torch gives 0, and so does Lamina, exactly
        assert (want[i][:, :, 2] == 0).all()
        assert (np.asarray(got[f"out{i}"])[:, :, 2] == 0).all()


def test_safe_softmax_of_a_decomposed_graph_imports() -> None:
    """With `_safe_softmax` left out of the decomposition table, sdpa decomposes to its math
    path with `aten._safe_softmax.default` in the graph: it maps to the safe softmax."""
    xs = _inputs(1)
    table = torch.export.default_decompositions()
    del table[torch.ops.aten._safe_softmax.default]
    ep = torch.export.export(Attend(), xs).run_decompositions(table)
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert "aten._safe_softmax.default" in targets
    module, weights = import_exported(ep)
    assert lamina.to_text(module).count("safe = true") == 3
    got = lamina.run(module, [*(x.numpy() for x in xs), *weights.values()]).outputs
    with torch.no_grad():
        want = Attend()(*xs)
    for i, w in enumerate(want):
        np.testing.assert_allclose(got[f"out{i}"], w.numpy(), rtol=TOL, atol=TOL)


class Loss(torch.nn.Module):
    """A scalar of the masked attention (a weighted sum, so every output element counts)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor,
                w: torch.Tensor) -> torch.Tensor:
        return (F.scaled_dot_product_attention(q, k, v, attn_mask=m) * w).sum()


@pytest.mark.parametrize("fuse", [False, True], ids=["unfused", "forward-fused"])
def test_derive_backward_through_the_safe_softmax_matches_autograd(fuse: bool) -> None:
    """The gradients of q, k and v equal autograd's on eager torch; q's masked row gets 0
    (softmax's VJP p (g - sum(g p)) is 0 where p is). With `fuse`, fuse-attention runs after
    derive-backward: the forward fuses, the gradient function is unchanged."""
    q, k, v, m = _inputs(2)
    w = torch.randn(2, 3, 5, 8, generator=torch.Generator().manual_seed(3))
    module, _ = import_exported(torch.export.export(Loss(), (q, k, v, m, w)))
    lamina.apply(module, "derive-backward{wrt=q,k,v}" + (",fuse-attention" if fuse else ""))
    if fuse:
        assert len(_attention_ops(module)) == 1
    got = lamina.run(module, [x.numpy() for x in (q, k, v, m, w)], entry="forward_grad").outputs
    ts = [t.clone().requires_grad_(True) for t in (q, k, v)]
    loss = Loss()(*ts, m, w)
    want = torch.autograd.grad(loss, ts)
    names = list(got)
    np.testing.assert_allclose(got[names[0]], loss.detach().numpy(), rtol=TOL, atol=TOL)
    for name, wg in zip(names[1:], want, strict=True):
        np.testing.assert_allclose(got[name], wg.numpy(), rtol=TOL, atol=TOL, err_msg=name)
    assert (want[0][:, :, 2] == 0).all()
    assert (got[names[1]][:, :, 2] == 0).all()
