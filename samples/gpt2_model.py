"""A small GPT-2 as a plain `torch.nn.Module`: the model the README's import tour, the importer
tests and the import benchmark bring into Lamina.

Token and position embeddings, pre-LayerNorm blocks (causal self-attention, tanh-GeLU MLP, residual
connections, dropout), a final LayerNorm, an LM head tied to the token embedding, and the
cross-entropy loss of each position's logits against the next token. The causal mask is built
from `arange` (an iota in Lamina: no index tensor as a constant). `make_gpt2` is what
`lamina-import torch samples.gpt2_model:make_gpt2` calls; `GPT2Config` sizes it (`small()` is
GPT-2 small: 12 layers, D = 768, 12 heads, vocabulary 50257). Run as a script, it writes the same
model as an ONNX file (`torch.onnx.export(dynamo=True)`, weights in FILE.data beside it), or with
`--tokens -o IN.npz` its example inputs (`idx`, `targets`: what `lamina-run --inputs` reads
beside the weights `lamina-import --weights` wrote).

Run:
  lamina-import torch samples.gpt2_model:make_gpt2 --args 2x8xi64,2x8xi64 -o gpt2.mlir --weights gpt2.npz
  python samples/gpt2_model.py --tokens -o tokens.npz
  lamina-run gpt2.mlir --inputs tokens.npz --inputs gpt2.npz
  python samples/gpt2_model.py gpt2.onnx
  lamina-import onnx gpt2.onnx -o gpt2_onnx.mlir --weights gpt2_onnx.npz
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class GPT2Config:
    vocab: int = 96
    context: int = 16
    dim: int = 32
    heads: int = 4
    layers: int = 2
    dropout: float = 0.1

    @staticmethod
    def small() -> GPT2Config:
        return GPT2Config(vocab=50257, context=1024, dim=768, heads=12, layers=12)


class Block(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.ln_1 = nn.LayerNorm(cfg.dim)
        self.attn = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        self.ln_2 = nn.LayerNorm(cfg.dim)
        self.fc = nn.Linear(cfg.dim, 4 * cfg.dim)
        self.fc_proj = nn.Linear(4 * cfg.dim, cfg.dim)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        att = att.masked_fill(~causal, float("-inf"))
        att = self.drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
        x = x + self.drop(self.proj(y))
        h = F.gelu(self.fc(self.ln_2(x)), approximate="tanh")
        return x + self.drop(self.fc_proj(h))


class GPT2(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab, cfg.dim)
        self.wpe = nn.Embedding(cfg.context, cfg.dim)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.dim)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        self.lm_head.weight = self.wte.weight        # tied

    def forward(self, idx: torch.Tensor, targets: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        t = idx.shape[1]
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        causal = pos[None, :] <= pos[:, None]          # [t, t]: key position <= query position
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x, causal)
        logits = self.lm_head(self.ln_f(x))
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)),
                               targets[:, 1:].reshape(-1))
        return logits, loss


def make_gpt2(cfg: GPT2Config | None = None, seed: int = 0) -> GPT2:
    """The small model with seeded random weights (nothing is downloaded)."""
    torch.manual_seed(seed)
    return GPT2(cfg or GPT2Config())


class LossOnly(nn.Module):
    """The model returning its loss alone: what a trainer derives a step from (lamina.Trainer
    and lamina-train train a forward whose first result is the scalar loss)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.model(idx, targets)[1]


def example_inputs(cfg: GPT2Config, batch: int = 2, tokens: int = 8,
                   seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, cfg.vocab, (batch, tokens), generator=g)
    targets = torch.randint(0, cfg.vocab, (batch, tokens), generator=g)
    return idx, targets


def export_onnx(path: str, cfg: GPT2Config | None = None) -> None:
    """`make_gpt2(cfg)` in eval mode as an ONNX file at `path` (inputs `idx`, `targets`)."""
    cfg = cfg or GPT2Config()
    program = torch.onnx.export(make_gpt2(cfg).eval(), example_inputs(cfg), dynamo=True,
                                input_names=["idx", "targets"], verbose=False)
    assert program is not None
    program.save(path, external_data=True)


def save_tokens(path: str, cfg: GPT2Config | None = None) -> None:
    """`example_inputs(cfg)` as an .npz keyed by the model's argument names (`idx`, `targets`)."""
    idx, targets = example_inputs(cfg or GPT2Config())
    np.savez(path, idx=idx.numpy(), targets=targets.numpy())


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1:3] == ["--tokens", "-o"]:
        save_tokens(sys.argv[3])
    elif len(sys.argv) == 2 and not sys.argv[1].startswith("-"):
        export_onnx(sys.argv[1])
    else:
        sys.exit("usage: python samples/gpt2_model.py OUT.onnx | --tokens -o IN.npz")
