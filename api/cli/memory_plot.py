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


def pyplot(flag: str = "--memory-plot") -> Any:
    """matplotlib's pyplot on the Agg backend (no display needed), or one error naming the flag
    that needs it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise LaminaError(f"{flag} needs matplotlib: pip install 'lamina[plot]'") from None
    return plt


def plot_format(path: str, flag: str = "--memory-plot") -> str:
    """The image format `path` asks for (its extension, else png); LaminaError (naming `flag`)
    when matplotlib is missing or cannot write that format."""
    plt = pyplot(flag)
    ext = os.path.splitext(path)[1][1:].lower()
    fmt = ext or "png"
    fig = plt.figure()
    try:
        supported = sorted(fig.canvas.get_supported_filetypes())
    finally:
        plt.close(fig)
    if fmt not in supported:
        raise LaminaError(f"{flag}: cannot write '{path}': unknown image format '{fmt}' "
                          f"(formats: {', '.join(supported)})")
    return fmt


# A capacity more than this many times a panel's peak is named in the legend but not drawn:
# drawn, it would set the scale and flatten the curve to a line at 0 (80 GiB of HBM against a
# program of a few MiB).
CAPACITY_DRAW_FACTOR = 4.0

# binary units for the y axes, chosen per panel by its largest value
_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))


def axis_unit(peak: float) -> tuple[str, int]:
    """The unit an axis whose values reach `peak` bytes is labelled in: the largest binary unit
    the peak reaches (B below 1 KiB, so a small program reads `bytes`, not 0.001 MiB)."""
    for unit, size in _UNITS:
        if peak >= size:
            return unit, size
    return "B", 1


def plot_memory(trace: MemoryTrace, out: BinaryIO, fmt: str, title: str = "") -> None:
    """`memory_figure` drawn in image format `fmt` (from `plot_format`) to `out`."""
    plt = pyplot()
    fig = memory_figure(trace, title)
    try:
        fig.savefig(out, format=fmt, bbox_inches="tight")
    finally:
        plt.close(fig)


def memory_figure(trace: MemoryTrace, title: str = "") -> Any:
    """The matplotlib figure of each tier's occupancy over program points, one panel per tier,
    moves marked; the caller closes it.

    sram and hbm always have a panel (sram is what fused kernels hold while they run, hbm where
    values live by default: a zero there says something), host and nvme only when they hold a
    byte. Each panel's y axis is scaled to its own data, in the binary unit its peak reaches,
    with plain tick labels (no `1e10` offset); the target's capacity is a dashed line when it is
    within `CAPACITY_DRAW_FACTOR` of the peak, else named in the legend only. Legends sit to the
    right of the panels, never over the curve."""
    plt = pyplot()
    tiers = [t for t in TIERS if t in ("sram", "hbm") or any(p[t] for p in trace.timeline)]
    fig, axes = plt.subplots(len(tiers), 1, figsize=(11, 2.2 * len(tiers) + 0.6), sharex=True,
                             squeeze=False)
    try:
        xs = list(range(len(trace.timeline)))
        for ax, tier in zip(axes[:, 0], tiers, strict=True):
            ys = [p[tier] for p in trace.timeline]
            peak = max(ys, default=0)
            cap = trace.capacities.get(tier)
            drawn_cap = cap if cap is not None and 0 < cap <= CAPACITY_DRAW_FACTOR * max(peak, 1) \
                else None
            unit, size = axis_unit(max(peak, drawn_cap or 0))
            scaled = [y / size for y in ys]
            ax.step(xs, scaled, where="post", label=f"{tier} per device (peak {fmt_bytes(peak)})")
            ax.fill_between(xs, scaled, step="post", alpha=0.25)
            if drawn_cap is not None:
                ax.axhline(drawn_cap / size, color="red", linestyle="--",
                           label=f"capacity {fmt_bytes(drawn_cap)}")
            elif cap is not None:
                ax.plot([], [], " ", label=f"capacity {fmt_bytes(cap)} (off scale)")
            for index, src, dst, _ in trace.moves:
                if tier in (src, dst):
                    ax.axvline(index, color="green" if dst == tier else "orange", alpha=0.5,
                               linewidth=1)
            top = max(peak, drawn_cap or 0) / size
            ax.set_ylim(0, top * 1.1 if top > 0 else 1)
            ax.ticklabel_format(axis="y", style="plain", useOffset=False)
            ax.set_ylabel(f"{tier} ({unit})")
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small",
                      borderaxespad=0)
        axes[-1, 0].set_xlabel("program point (green: move into the tier, orange: move out)")
        fig.suptitle(title or "memory per tier per device")
        fig.tight_layout()
    except BaseException:
        plt.close(fig)   # not returned: nobody else can close it
        raise
    return fig
