"""A stock Hugging Face model through Lamina: `transformers.GPT2LMHeadModel`, built from a small
config (2 layers, D = 32, vocabulary 96, random weights from seed 0; nothing is downloaded) and
called the way a user calls it, `model(input_ids, labels=labels)`, which returns HF's own loss
(`ForCausalLMLoss`: the labels shifted by one inside the model, padding pads to -100).

`make` is the factory `lamina-import torch samples/hf_gpt2.py:make` calls: the model wrapped to
return the loss alone, so the imported function is a forward that `lamina-train` trains as it
is. Run as a script, it writes inputs for it from a repeating token pattern: `input_ids` and
`labels` (equal: HF shifts them), one batch [2, 8] (what `lamina-run --inputs` reads), or with
`--batches N` training data [N, 2, 8] (what `lamina-train --data` reads).
Needs the `hf` extra (`transformers`), which `make` installs.

Run:
  lamina-import torch samples/hf_gpt2.py:make --args 2x8xi64,2x8xi64 -o hf_gpt2.mlir --weights hf_gpt2.npz
  python samples/hf_gpt2.py -o hf_gpt2_in.npz
  lamina-run hf_gpt2.mlir --inputs hf_gpt2_in.npz --inputs hf_gpt2.npz --backend compiled
  python samples/hf_gpt2.py --batches 4 -o hf_gpt2_data.npz
  lamina-train hf_gpt2.mlir --init hf_gpt2.npz --data hf_gpt2_data.npz --steps 1 --save hf_gpt2_trained.npz
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import transformers

VOCAB, BATCH, SEQ, BATCHES = 96, 2, 8, 4


class WithLoss(torch.nn.Module):
    """`model(input_ids, labels=labels).loss`: HF's causal-LM loss as the one output."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids, labels=labels).loss


def make() -> torch.nn.Module:
    """The small GPT-2 with its loss, weights from seed 0."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=VOCAB,
                                     n_positions=64, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config)
    model.loss_type = "ForCausalLM"    # the loss HF picks anyway, named so that it does not warn
    return WithLoss(model)


def data(batches: int = BATCHES) -> dict[str, np.ndarray]:
    """`batches` batches of [BATCH, SEQ] ids from the pattern t -> (5 t + 3) mod VOCAB."""
    start = np.arange(batches * BATCH, dtype=np.int64).reshape(batches, BATCH, 1) * 7
    ids = start + np.arange(SEQ, dtype=np.int64)
    ids = (5 * ids + 3) % VOCAB
    return {"input_ids": ids, "labels": ids.copy()}


def main() -> None:
    parser = argparse.ArgumentParser(description="Write inputs for the sample's GPT-2.")
    parser.add_argument("--batches", type=int, default=None, metavar="N",
                        help="write N batches (training data) instead of one batch")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.npz")
    args = parser.parse_args()
    arrays = data(args.batches or 1)
    if not args.batches:
        arrays = {k: v[0] for k, v in arrays.items()}
    np.savez(args.output, input_ids=arrays["input_ids"], labels=arrays["labels"])


if __name__ == "__main__":
    main()
