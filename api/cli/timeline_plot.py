"""`--timeline OUT`: a scheduled step (`lamina.analysis.timeline`) as a picture or a Chrome trace.

- `OUT.json`: the Chrome trace event format, which Perfetto and chrome://tracing open: one
  complete event (`"ph": "X"`, `ts` and `dur` in microseconds) per bar, `pid` the device and
  `tid` its lane (0 compute, 1 comm), `process_name` / `thread_name` metadata events naming them
  (`device 3 (data=1, pp=1)`), and `otherData` with the step time, the bubble fraction and where
  the times come from.
- any other extension: an image in that format (PNG when it has none), drawn with matplotlib's
  Agg backend as `--memory-plot` is (`lamina.cli.memory_plot`): one row per device with its
  compute lane and, thinner above it, its comm lane; bars coloured by kind (compute blue,
  collective orange, move green), the `NAMED` kernels with the most time each a shade of their
  kind's colour in the legend, every other kernel one grey "other" entry; the title gives the
  modeled step time and the bubble fraction.

`timeline_format` checks the destination before any work; the file is staged with the run's
other outputs (`lamina.cli.outputs`), so it is written whole or not at all.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Any, BinaryIO

from lamina.analysis.step_cost import COLLECTIVE, COMPUTE, MOVE
from lamina.analysis.timeline import LANES, Bar, Timeline
from lamina.cli.memory_plot import plot_format, pyplot

FLAG = "--timeline"
JSON = "json"
NAMED = 40   # kernels named in the legend; the rest are one "other" entry
# per kind: the colour map its named kernels take shades from
CMAPS = {COMPUTE: "Blues", COLLECTIVE: "Oranges", MOVE: "Greens"}
OTHER = "#b0b0b0"


def timeline_format(path: str) -> str:
    """`json` for a Chrome trace, else the image format `path` asks for (LaminaError when
    matplotlib is missing or cannot write it)."""
    if os.path.splitext(path)[1].lower() == ".json":
        return JSON
    return plot_format(path, FLAG)


def summary_line(tl: Timeline) -> str:
    """`step 12.3 us, bubble 25.0%`: what the title says under the caller's line."""
    return f"step {tl.step_time * 1e6:.4g} us, bubble {tl.bubble_fraction * 100:.1f}%"


def chrome_trace(tl: Timeline, title: str, times: str) -> dict[str, Any]:
    """The Chrome trace of `tl` (see the module docstring); `times` says where they come from."""
    events: list[dict[str, Any]] = []
    for d, label in sorted(tl.lane_labels.items()):
        events.append({"name": "process_name", "ph": "M", "pid": d, "args": {"name": label}})
        for tid, lane in enumerate(LANES):
            events.append({"name": "thread_name", "ph": "M", "pid": d, "tid": tid,
                           "args": {"name": lane}})
    for b in tl.bars:
        events.append({"name": b.name, "cat": b.kind, "ph": "X", "ts": b.start * 1e6,
                       "dur": (b.end - b.start) * 1e6, "pid": b.device,
                       "tid": LANES.index(b.lane), "args": {"op": b.index}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"title": title, "times": times, "step_time_us": tl.step_time * 1e6,
                          "bubble_fraction": tl.bubble_fraction, "devices": tl.devices}}


def write_timeline(tl: Timeline, out: BinaryIO, fmt: str, title: str, times: str) -> None:
    """`tl` in format `fmt` (from `timeline_format`) to `out`."""
    if fmt == JSON:
        out.write((json.dumps(chrome_trace(tl, title, times)) + "\n").encode("utf-8"))
        return
    plt = pyplot(FLAG)
    fig = timeline_figure(tl, title, times)
    try:
        fig.savefig(out, format=fmt, bbox_inches="tight")
    finally:
        plt.close(fig)


def legend_colors(bars: list[Bar]) -> dict[tuple[str, str], str]:
    """A colour per (kind, kernel name) of the `NAMED` kernels with the most bar time, a shade
    of its kind's colour map, longest first; the rest are not in the map (drawn `OTHER`)."""
    plt = pyplot(FLAG)
    total: dict[tuple[str, str], float] = defaultdict(float)
    for b in bars:
        total[(b.kind, b.name)] += b.end - b.start
    top = sorted(total, key=lambda k: (-total[k], k))[:NAMED]
    per_kind: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for k in top:
        per_kind[k[0]].append(k)
    colors: dict[tuple[str, str], str] = {}
    for kind, keys in per_kind.items():
        cmap = plt.get_cmap(CMAPS.get(kind, "Greys"))
        for j, k in enumerate(keys):
            shade = 0.85 - 0.5 * j / max(1, len(keys) - 1) if len(keys) > 1 else 0.65
            colors[k] = cmap(shade)
    return {k: colors[k] for k in top}


def timeline_figure(tl: Timeline, title: str, times: str) -> Any:
    """The matplotlib figure of `tl` (see the module docstring); the caller closes it."""
    plt = pyplot(FLAG)
    n = max(1, tl.devices)
    fig, ax = plt.subplots(figsize=(13, min(60.0, 1.6 + 0.6 * n)))
    try:
        colors = legend_colors(tl.bars)
        spans: dict[tuple[int, str, Any], list[tuple[float, float]]] = defaultdict(list)
        for b in tl.bars:
            color = colors.get((b.kind, b.name), OTHER)
            spans[(b.device, b.lane, color)].append((b.start * 1e6, (b.end - b.start) * 1e6))
        for (d, lane, color), xs in spans.items():
            y, h = (d + 0.45, 0.45) if lane == "compute" else (d + 0.05, 0.3)
            ax.broken_barh(xs, (y, h), facecolors=color, edgecolor="black", linewidth=0.2)
        for (kind, name), color in colors.items():
            ax.bar(0, 0, width=0, color=color, label=f"{name} ({kind})")
        if any((b.kind, b.name) not in colors for b in tl.bars):
            ax.bar(0, 0, width=0, color=OTHER, label="other")
        ticks = [y for d in range(n) for y in (d + 0.2, d + 0.675)]
        labels = [t for d in range(n) for t in ("comm", tl.lane_labels.get(d, f"device {d}"))]
        ax.set_yticks(ticks, labels, fontsize="small")
        ax.set_ylim(n, 0)
        ax.set_xlim(0, max(tl.step_time * 1e6, 1e-9) * 1.01)
        ax.set_xlabel("microseconds from the start of the step")
        ax.set_title(f"{title}\n{summary_line(tl)} ({times})")
        if colors or tl.bars:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="x-small",
                      borderaxespad=0, ncol=1 if len(colors) <= 20 else 2)
        fig.tight_layout()
    except BaseException:
        plt.close(fig)
        raise
    return fig
