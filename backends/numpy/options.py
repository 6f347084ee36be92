"""The options of the NumPy interpreter (and of the compiled backend, which builds on it)."""

from __future__ import annotations

from dataclasses import dataclass

from lamina.ir.mesh.target import Target


@dataclass(frozen=True)
class NumpyOptions:
    """How the NumPy interpreter runs a program; no result bit depends on any of them.

    threads     threads for fused kernels' tile loops (None: LAMINA_FUSED_THREADS, else one per
                core)
    tile_bytes  bytes per tile buffer of a fused kernel (None: the measured defaults)
    target      check every tier's capacity against this target while running (checked
                execution)
    kernel_times  time each op of the checked call (`runner.KernelTimer`); the seconds by body
                index are its statistic `kernel_seconds` (`lamina-run --timeline`)
    """

    threads: int | None = None
    tile_bytes: int | None = None
    target: Target | None = None
    kernel_times: bool = False
