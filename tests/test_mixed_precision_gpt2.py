"""bf16 training of the GPT-2 sample (tests/test_train_gpt2.py's model and batches) tracks the f32
loss curve over 200 steps (about 5 s for both runs, so in the normal run): every step's loss
within 2% of the f32 run's, or 0.01 absolute once the batches are memorized."""

from __future__ import annotations

import lamina
import numpy as np
from test_train_gpt2 import _tokens, imported  # noqa: F401 - `imported` is the module fixture
from xdsl.dialects.builtin import ModuleOp


def _losses(module: ModuleOp, weights: dict[str, np.ndarray], steps: int, pipeline: str
            ) -> list[float]:
    toks = _tokens()
    trainer = lamina.Trainer(module, {"idx": toks, "targets": toks}, init=weights,
                             optimizer="adamw", steps=steps, lr=3e-3, weight_decay=0.01,
                             pipeline=pipeline)
    return [r.loss for r in trainer.run()]


def test_bf16_gpt2_tracks_the_f32_loss_curve(
        imported: tuple[ModuleOp, dict[str, np.ndarray]]) -> None:  # noqa: F811
    module, weights = imported
    steps = 200
    want = _losses(module, weights, steps, "")
    got = _losses(module, weights, steps, "mixed-precision{compute=bf16}")
    # 2% of the f32 loss, or 0.01 absolute: past ~110 steps the five batches are memorized to a
    # loss of ~0.05, where bf16's rounding (2^-8 relative per op) is the larger term
    np.testing.assert_allclose(got, want, rtol=0.02, atol=0.01)
    assert got[-1] < 0.8 * got[0]   # it learns in bf16 too
