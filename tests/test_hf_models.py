"""Stock Hugging Face models import as they are (issue 25): the 19 call paths of
`tests/hf_models.py` (GPT-2 eager and sdpa, Llama, Mistral, Qwen2, Phi, BERT with and without an
attention mask; T5 encoder-decoder with and without one; ViT; GPT-2 and Llama with HF's own
`labels=` loss) each import with `lamina.frontends.torch.import_exported`, run on the numpy,
compiled and jax backends, and match eager torch on the same weights: f32, max error at most
1e-5 of the largest output magnitude. The two `labels=` paths also derive their backward pass
and match torch.autograd for every parameter's gradient (a tied weight, GPT-2's embedding and
LM head, is one tensor with one gradient, the sum over its uses, under the name the import
keeps).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

import lamina  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from hf_models import PATHS, CallPath, example, exported, model  # noqa: E402
from lamina.backends.interface import find_entry  # noqa: E402
from lamina.frontends.torch import import_exported  # noqa: E402
from xdsl.dialects.builtin import ModuleOp  # noqa: E402

BACKENDS = ("numpy", "compiled", "jax")
TOLERANCE = 1e-5


def _imported(path: CallPath) -> tuple[ModuleOp, dict[str, np.ndarray], list[str]]:
    """The path's module, its weights, and the names of its user inputs (the first arguments)."""
    module, weights = import_exported(exported(path))
    names = [a.name_hint or "" for a in find_entry(module, None).body.block.args]
    return module, weights, names[:len(path.kwargs)]


def _inputs(path: CallPath, names: list[str], weights: dict[str, np.ndarray]
            ) -> dict[str, np.ndarray]:
    return {**dict(zip(names, (t.numpy() for t in example(path)), strict=True)), **weights}


def _relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max()) / max(float(np.abs(want).max()), 1e-30)


@pytest.mark.parametrize("path", PATHS, ids=[p.id for p in PATHS])
def test_call_path_imports_and_matches_torch_on_every_backend(path: CallPath) -> None:
    module, weights, names = _imported(path)
    with torch.no_grad():
        want = model(path)(*example(path)).numpy()
    inputs = _inputs(path, names, weights)
    for backend in BACKENDS:
        (got,) = lamina.run(module, inputs, backend=backend).outputs.values()
        assert got.shape == want.shape, backend
        err = _relative(np.asarray(got, dtype=np.float64), want.astype(np.float64))
        assert err <= TOLERANCE, f"{path.id} on {backend}: {err:.3g}"


LOSS_PATHS = [p for p in PATHS if p.has_loss]


@pytest.mark.parametrize("path", LOSS_PATHS, ids=[p.id for p in LOSS_PATHS])
def test_hf_loss_gradients_equal_autograd(path: CallPath) -> None:
    module, weights, names = _imported(path)
    net = model(path)
    params = {n: p for n, p in net.named_parameters(remove_duplicate=False)}
    forward = find_entry(module, None).sym_name.data
    lamina.apply(module, f"derive-backward{{data={','.join(names)} loss=0}}")
    grad_fn = find_entry(module, f"{forward}_grad")
    # the default wrt: every weight but the buffers (Llama's rotary inv_freq is role "frozen"),
    # so the gradients are the parameters', in argument order
    trained = [n for n in weights if n in params]
    got = list(lamina.run(module, _inputs(path, names, weights),
                          entry=grad_fn.sym_name.data).outputs.values())
    loss = net(*example(path))
    loss.backward()
    np.testing.assert_allclose(got[0], loss.item(), rtol=1e-6)
    assert len(got) - 1 == len(trained) and trained
    for name, g in zip(trained, got[1:], strict=True):
        ref = params[name].grad
        assert ref is not None, name
        assert _relative(g, ref.numpy()) <= TOLERANCE, f"{path.id} d/d{name}"


SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "hf_gpt2.py"


def test_sample_run_lines_import_run_and_train_a_stock_model(tmp_path: Path) -> None:
    """samples/hf_gpt2.py's `Run:` lines as written (the README's import tour runs the same):
    the loss `lamina-run` prints is torch's, and the parameters after `lamina-train --steps 1`
    are torch.optim.AdamW's after one step with lamina-train's defaults (lr 1e-3, no decay)."""
    doc = SAMPLE.read_text().split('"""')[1]
    lines = [ln.strip() for ln in doc.split("Run:\n", 1)[1].splitlines() if ln.strip()]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    root = SAMPLE.parent.parent
    outs = []
    for line in lines:
        cmd = line.replace("samples/", f"{root}/samples/")
        res = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, (line, res.stderr[-2000:])
        outs.append(res.stdout)
    spec = importlib.util.spec_from_file_location("hf_gpt2", SAMPLE)
    assert spec is not None and spec.loader is not None
    sample = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sample)
    net = sample.make().eval()     # lamina-import exports in eval mode: dropout off
    batch = {k: torch.from_numpy(v[0]) for k, v in sample.data(4).items()}
    loss = net(batch["input_ids"], batch["labels"])
    printed = float(outs[2].split("mean ")[1].split()[0])
    assert abs(printed - loss.item()) <= 1e-5 * abs(loss.item())
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.0)
    loss.backward()
    opt.step()
    trained = np.load(tmp_path / "hf_gpt2_trained.npz")
    params = dict(net.named_parameters(remove_duplicate=False))
    assert set(trained.files) <= set(params) and "model.lm_head.weight" in trained.files  # tied
    # Adam's first step moves each weight by lr * g / (|g| + eps): about lr whatever g's size,
    # so where a gradient is near eps its rounding shows at a few percent of lr; 1% of lr bounds
    # the difference (the gradients themselves are held to 1e-5 above)
    for name in trained.files:
        err = float(np.abs(trained[name] - params[name].detach().numpy()).max())
        assert err <= 1e-2 * 1e-3, f"{name}: {err:.3g}"


SDPA_PATHS = [p for p in PATHS if p.model == "gpt2-sdpa"]


@pytest.mark.parametrize("path", SDPA_PATHS, ids=[p.id for p in SDPA_PATHS])
def test_sdpa_attention_fuses_and_still_matches_torch(path: CallPath) -> None:
    """GPT-2's `scaled_dot_product_attention` (with its masked-row guard a safe softmax) is what
    `fuse-attention` fuses: one attention kernel per layer, the logits unchanged."""
    module, weights, names = _imported(path)
    lamina.apply(module, "fuse-attention")
    fused = [op for op in module.walk() if op.name == "lamina.fused"
             and "attention" in str(op.attributes.get("kind", op.properties.get("kind")))]
    assert len(fused) == 2, lamina.to_text(module)[:2000]
    with torch.no_grad():
        want = model(path)(*example(path)).numpy()
    (got,) = lamina.run(module, _inputs(path, names, weights)).outputs.values()
    assert _relative(np.asarray(got, np.float64), want.astype(np.float64)) <= TOLERANCE
