"""bf16 training of the GPT-2 sample (tests/test_train_gpt2.py's model and batches) against f32.

- The loss curve over 200 steps (about 6 s for both runs, so in the normal run): every step's
  loss within 2% (relative, no absolute slack) of the f32 run's, on a stream of 200 distinct
  batches drawn from a fixed Markov chain over the vocabulary (four successors per token with
  probabilities .55/.25/.15/.05: 1.11 nats of entropy), so the loss falls from the random model's
  toward the chain's entropy as a pretraining loss does and is never memorized. Measured: at
  most 0.33% apart. (On five batches repeated until memorized, the curves agree within 1.6%
  until the f32 loss falls below 0.2 and then depart by up to 45% at losses of 0.001-0.01: there
  the loss is exp(-margin), so even the f32 run from its weights rounded once to bf16 departs by
  2.6%, and the bf16 loss gradient, log_softmax's VJP in bf16 as its rows say, cannot resolve
  p - 1 ~ -0.001 next to 1.)
- The activations the step holds for its backward (the forward's tensors live at the loss seed)
  in bf16 are at most 0.6x of f32's (issue 27; mixed-precision's narrow-saved).
"""

from __future__ import annotations

import lamina
import numpy as np
from lamina.backends.interface import find_entry
from lamina.ir.core.dtypes import nbytes
from lamina.passes.derive_backward import SEED_ATTR
from test_train_gpt2 import BATCH, CFG, SEQ, imported  # noqa: F401 - `imported` is the module fixture
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp


def _markov_tokens(batches: int, seed: int = 0) -> np.ndarray:
    """`batches` batches of [BATCH, SEQ] token ids, each row a walk of one fixed Markov chain
    (module docstring): data with structure to learn and noise no model removes."""
    rng = np.random.default_rng(seed)
    succ = np.stack([rng.permutation(CFG.vocab)[:4] for _ in range(CFG.vocab)])
    probs = np.array([0.55, 0.25, 0.15, 0.05])
    out = np.empty((batches, BATCH, SEQ), np.int64)
    for b in range(batches):
        for r in range(BATCH):
            tok = int(rng.integers(CFG.vocab))
            for s in range(SEQ):
                out[b, r, s] = tok
                tok = int(succ[tok, rng.choice(4, p=probs)])
    return out


def _losses(module: ModuleOp, weights: dict[str, np.ndarray], toks: np.ndarray,
            pipeline: str) -> list[float]:
    trainer = lamina.Trainer(module, {"idx": toks, "targets": toks}, init=weights,
                             optimizer="adamw", steps=len(toks), lr=3e-3, weight_decay=0.01,
                             pipeline=pipeline)
    return [r.loss for r in trainer.run()]


def test_bf16_gpt2_tracks_the_f32_loss_curve(
        imported: tuple[ModuleOp, dict[str, np.ndarray]]) -> None:  # noqa: F811
    module, weights = imported
    toks = _markov_tokens(200)   # one fresh batch per step
    want = np.asarray(_losses(module, weights, toks, ""))
    got = np.asarray(_losses(module, weights, toks, "mixed-precision{compute=bf16}"))
    np.testing.assert_allclose(got, want, rtol=0.02, atol=0)
    assert got[-1] < 0.2 * got[0]   # it learns in bf16 too


def _held_bytes(func: FuncOp) -> int:
    """Bytes of the forward's tensors the backward reads: defined before the seed, read after."""
    ops = list(func.body.block.ops)
    pos = {op: i for i, op in enumerate(ops)}
    seed = next(i for i, op in enumerate(ops) if SEED_ATTR in op.attributes)
    return sum(nbytes(r.type) for op in ops[:seed] for r in op.results
               if any(pos[u.operation] > seed for u in r.uses))


def test_bf16_holds_at_most_six_tenths_of_the_f32_activations(
        imported: tuple[ModuleOp, dict[str, np.ndarray]]) -> None:  # noqa: F811
    module, _ = imported
    text = lamina.to_text(module)
    step = "derive-backward{data=idx,targets},append-optimizer{kind=adamw}"
    held = {}
    for name, extra in (("f32", ""), ("bf16", ",mixed-precision{compute=bf16}"),
                        ("wide", ",mixed-precision{compute=bf16 narrow-saved=false}")):
        m = lamina.parse(text)
        lamina.apply(m, step + extra)
        held[name] = _held_bytes(find_entry(m, "forward_step"))
    assert held["bf16"] <= 0.6 * held["f32"]
    assert held["wide"] > 0.8 * held["f32"]   # what the casts alone kept: the f32 copies
