"""The stock Hugging Face call paths the torch importer is held to (issue 25), built from small
random-init `transformers` configs (never a download) and exported with `torch.export`.

Each `CallPath` is one model class called the way a user calls it: `model(input_ids)`, with the
`attention_mask` a tokenizer returns (the second row padded), with `labels=` for HF's own loss,
T5 with `decoder_input_ids`, ViT on `pixel_values`. `exported(path)` builds the model from a
fixed seed, exports the default call and keeps the export on disk under `.cache/hf/` (keyed by
the torch and transformers versions and the path), so a second test run skips the export;
`reference(path)` is eager torch on the same weights. The module (and transformers) is imported
only by the tests that need it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers as hf

VOCAB, SEQ, BATCH, DECODER_SEQ = 96, 8, 2, 4
CACHE = Path(__file__).resolve().parent.parent / ".cache" / "hf"
_DECODER = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64)


def _gpt2(attn: str) -> Callable[[], torch.nn.Module]:
    def make() -> torch.nn.Module:
        config = hf.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=64,
                               bos_token_id=0, eos_token_id=0)
        config._attn_implementation = attn    # what `attn_implementation=` sets
        return hf.GPT2LMHeadModel(config)
    return make


def _decoder(model: str, config: str) -> Callable[[], torch.nn.Module]:
    return lambda: getattr(hf, model)(getattr(hf, config)(**_DECODER))


MODELS: dict[str, Callable[[], torch.nn.Module]] = {
    "gpt2": _gpt2("eager"),
    "gpt2-sdpa": _gpt2("sdpa"),
    "llama": _decoder("LlamaForCausalLM", "LlamaConfig"),
    "mistral": _decoder("MistralForCausalLM", "MistralConfig"),
    "qwen2": _decoder("Qwen2ForCausalLM", "Qwen2Config"),
    "phi": lambda: hf.PhiForCausalLM(hf.PhiConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        vocab_size=VOCAB, max_position_embeddings=64)),
    "bert": lambda: hf.BertForMaskedLM(hf.BertConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        vocab_size=VOCAB, max_position_embeddings=64)),
    "t5": lambda: hf.T5ForConditionalGeneration(hf.T5Config(
        d_model=32, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4, d_kv=8,
        vocab_size=VOCAB)),
    "vit": lambda: hf.ViTModel(hf.ViTConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        image_size=16, patch_size=4)),
}


@dataclass(frozen=True)
class CallPath:
    """One model called with keyword arguments `kwargs` (their names, in the export's order)."""

    model: str
    kwargs: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.model}({','.join(self.kwargs)})"

    @property
    def has_loss(self) -> bool:
        return "labels" in self.kwargs


def _paths() -> list[CallPath]:
    paths = [CallPath(m, kw) for m in ("gpt2", "gpt2-sdpa", "llama", "mistral", "qwen2", "phi",
                                       "bert")
             for kw in (("input_ids",), ("input_ids", "attention_mask"))]
    paths += [CallPath("t5", ("input_ids", "decoder_input_ids")),
              CallPath("t5", ("input_ids", "attention_mask", "decoder_input_ids")),
              CallPath("vit", ("pixel_values",)),
              CallPath("gpt2", ("input_ids", "labels")),
              CallPath("llama", ("input_ids", "labels"))]
    return paths


PATHS = _paths()


class Call(torch.nn.Module):
    """`model(**dict(zip(kwargs, args)))` with one tensor out: the loss with `labels=`, else
    the logits (or ViT's last hidden state)."""

    def __init__(self, model: torch.nn.Module, kwargs: tuple[str, ...]) -> None:
        super().__init__()
        self.m = model
        self.kwargs = kwargs

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        out: Any = self.m(**dict(zip(self.kwargs, args, strict=True)))
        if "labels" in self.kwargs:
            return out.loss
        return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state


def example(path: CallPath) -> tuple[torch.Tensor, ...]:
    """The call's arguments, from a fixed seed: token ids, a mask padding the second row's last
    three tokens (as a tokenizer pads a shorter sequence), labels equal to the ids (HF shifts
    them), decoder ids, pixels."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
    mask[1, SEQ - 3:] = 0
    values = {"input_ids": ids, "attention_mask": mask, "labels": ids,
              "decoder_input_ids": torch.randint(0, VOCAB, (BATCH, DECODER_SEQ), generator=g),
              "pixel_values": torch.randn(BATCH, 3, 16, 16, generator=g)}
    return tuple(values[k] for k in path.kwargs)


def model(path: CallPath) -> Call:
    """The path's model in eval mode, its weights drawn from a fixed seed."""
    torch.manual_seed(0)
    return Call(MODELS[path.model](), path.kwargs).eval()


def _key(path: CallPath) -> str:
    spec = json.dumps([torch.__version__, hf.__version__, path.model, path.kwargs, VOCAB, SEQ,
                       BATCH, DECODER_SEQ])
    return hashlib.sha256(spec.encode()).hexdigest()[:16]


def exported(path: CallPath) -> torch.export.ExportedProgram:
    """`torch.export.export` of the path's default call, from the on-disk cache when present
    (written atomically, so an interrupted run leaves no half file)."""
    file = CACHE / f"{path.model}-{len(path.kwargs)}-{_key(path)}.pt2"
    if file.exists():
        return torch.export.load(file)
    ep = torch.export.export(model(path), example(path))
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(f".{os.getpid()}.tmp.pt2")
    torch.export.save(ep, tmp)
    os.replace(tmp, file)
    return ep
