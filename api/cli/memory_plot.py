"""`lamina-run --memory-plot`: each tier's bytes per device over the program points of a run.

The image format follows the destination's extension (`mem.png`, `mem.svg`, `mem.pdf`, ...; PNG
when it has none), as matplotlib's `savefig` reads it; `plot_format` checks it, and that matplotlib
is installed, before the program runs, so a bad `--memory-plot` is refused up front. The figure is
drawn into the file object the caller stages (`lamina.cli.outputs`), so the plot is written only
when every output of the run is.
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO

from lamina.analysis.sizes import fmt_bytes
from lamina.backends.interface import MemoryTrace
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.mesh.placement import TIERS


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise LaminaError("--memory-plot needs matplotlib: pip install 'lamina[plot]'") from None
    return plt


def plot_format(path: str) -> str:
    """The image format `path` asks for (its extension, else png); LaminaError when matplotlib is
    missing or cannot write that format."""
    plt = _pyplot()
    ext = os.path.splitext(path)[1][1:].lower()
    fmt = ext or "png"
    fig = plt.figure()
    try:
        supported = sorted(fig.canvas.get_supported_filetypes())
    finally:
        plt.close(fig)
    if fmt not in supported:
        raise LaminaError(f"--memory-plot: cannot write '{path}': unknown image format '{fmt}' "
                          f"(formats: {', '.join(supported)})")
    return fmt


def plot_memory(trace: MemoryTrace, out: BinaryIO, fmt: str, title: str = "") -> None:
    """Each tier's occupancy over program points, its capacity as a line, moves marked; drawn in
    image format `fmt` (from `plot_format`) to `out`.

    Tiers that never hold a byte are left out, except hbm, which is always drawn (a program that
    holds nothing anywhere, e.g. with only empty tensors, still gets a plot, of zeros)."""
    plt = _pyplot()
    tiers = [t for t in TIERS if t == "hbm" or any(p[t] for p in trace.timeline)]
    fig, axes = plt.subplots(len(tiers), 1, figsize=(10, 2.2 * len(tiers) + 0.6), sharex=True,
                             squeeze=False)
    try:
        xs = list(range(len(trace.timeline)))
        for ax, tier in zip(axes[:, 0], tiers, strict=True):
            ys = [p[tier] for p in trace.timeline]
            ax.step(xs, ys, where="post", label=f"{tier} bytes/device")
            ax.fill_between(xs, ys, step="post", alpha=0.25)
            cap = trace.capacities.get(tier)
            if cap is not None:
                ax.axhline(cap, color="red", linestyle="--", label=f"capacity {fmt_bytes(cap)}")
            for index, src, dst, _ in trace.moves:
                if tier in (src, dst):
                    ax.axvline(index, color="green" if dst == tier else "orange", alpha=0.5,
                               linewidth=1)
            ax.set_ylabel(tier)
            ax.legend(loc="upper right", fontsize="small")
        axes[-1, 0].set_xlabel("program point (green: move into the tier, orange: move out)")
        fig.suptitle(title or "memory per tier per device")
        fig.tight_layout()
        fig.savefig(out, format=fmt)
    finally:
        plt.close(fig)
