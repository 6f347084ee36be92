"""The options of the IREE backend (importing this module does not load IREE)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IreeOptions:
    """Where the IREE backend compiles a program for.

    iree_target  IREE's target backend: "llvm-cpu" (the default: this machine's CPU, with its
                 own features) or "cuda" (where IREE's CUDA target and a CUDA GPU exist). Named
                 `iree_target`, not `target`: `lamina.compile`'s `target` is the memory target
                 of checked execution, which this backend does not have.
    """

    iree_target: str = "llvm-cpu"
