"""`lamina-run --memory-plot`: each tier's bytes per device over the program points of a run."""

from __future__ import annotations

from lamina.analysis.sizes import fmt_bytes
from lamina.backends.interface import MemoryTrace
from lamina.ir.diagnostics import LaminaError
from lamina.ir.placement import TIERS


def plot_memory(trace: MemoryTrace, path: str, title: str = "") -> None:
    """Each tier's occupancy over program points, its capacity as a line, moves marked."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise LaminaError("--memory-plot needs matplotlib: pip install 'lamina[plot]'") from None
    tiers = [t for t in TIERS if any(p[t] for p in trace.timeline)
             or (t == "hbm" and t in trace.capacities)]
    fig, axes = plt.subplots(len(tiers), 1, figsize=(10, 2.2 * len(tiers) + 0.6), sharex=True,
                             squeeze=False)
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
    fig.savefig(path)
    plt.close(fig)
