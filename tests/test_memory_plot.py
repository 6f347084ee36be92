"""`--memory-plot`'s figure, checked through matplotlib's objects (panels, axis limits, labels,
legend placement), not pixels: each axis is scaled to its data in a binary unit, a capacity far
off scale is not drawn, tick labels carry no offset, the legend is beside the curve, and sram has
its panel."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from lamina.backends.interface import MemoryTrace

pytest.importorskip("matplotlib")

from lamina.cli.memory_plot import CAPACITY_DRAW_FACTOR, axis_unit, memory_figure  # noqa: E402

MIB = 2**20
GIB = 2**30


def trace(hbm: list[int], sram: list[int] | None = None, host: list[int] | None = None,
          capacities: dict[str, float] | None = None) -> MemoryTrace:
    n = len(hbm)
    timeline = [{"sram": (sram or [0] * n)[i], "hbm": hbm[i], "host": (host or [0] * n)[i],
                 "nvme": 0} for i in range(n)]
    return MemoryTrace(timeline, [f"p{i}" for i in range(n)], [], capacities or {})


@pytest.fixture
def figures() -> Iterator[list[Any]]:
    import matplotlib.pyplot as plt

    made: list[Any] = []
    yield made
    for fig in made:
        plt.close(fig)


def panels(fig: Any) -> dict[str, Any]:
    fig.canvas.draw()   # lays out ticks, offsets and legends
    return {ax.get_ylabel().split(" ")[0]: ax for ax in fig.axes}


def test_small_program_is_scaled_to_its_data_not_to_the_capacity(figures: list[Any]) -> None:
    # 3 MiB peak on an 80 GiB HBM: the curve fills the panel, the capacity is named only
    fig = memory_figure(trace([MIB, 3 * MIB, 2 * MIB], capacities={"hbm": 80 * GIB}))
    figures.append(fig)
    hbm = panels(fig)["hbm"]
    assert hbm.get_ylabel() == "hbm (MiB)"
    low, high = hbm.get_ylim()
    assert low == 0 and 3 <= high <= 3.5
    assert not [line for line in hbm.get_lines() if line.get_linestyle() == "--"]
    texts = [t.get_text() for t in hbm.get_legend().get_texts()]
    assert "capacity 80 GiB (off scale)" in texts


def test_capacity_near_the_data_is_drawn_in_the_axis_unit(figures: list[Any]) -> None:
    fig = memory_figure(trace([GIB, 3 * GIB], capacities={"hbm": 4 * GIB}))
    figures.append(fig)
    hbm = panels(fig)["hbm"]
    assert hbm.get_ylabel() == "hbm (GiB)"
    dashed = [line for line in hbm.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and list(dashed[0].get_ydata()) == [4.0, 4.0]
    assert hbm.get_ylim()[1] == pytest.approx(4.4)
    assert 4 * GIB <= CAPACITY_DRAW_FACTOR * 3 * GIB


def test_tick_labels_have_no_offset_text(figures: list[Any]) -> None:
    # bytes near 1e10 used to be labelled `1e10` + offsets under a MiB/GiB legend
    big = 10_000_000_000
    fig = memory_figure(trace([big, big + 1000, big + 2000]))
    figures.append(fig)
    hbm = panels(fig)["hbm"]
    assert hbm.yaxis.get_offset_text().get_text() == ""
    labels = [t.get_text() for t in hbm.get_yticklabels() if t.get_text()]
    assert labels and all("e" not in label for label in labels)
    assert hbm.get_ylabel() == "hbm (GiB)"


def test_legend_is_beside_the_curve(figures: list[Any]) -> None:
    fig = memory_figure(trace([MIB, 2 * MIB]))
    figures.append(fig)
    for ax in panels(fig).values():
        renderer = fig.canvas.get_renderer()
        assert ax.get_legend().get_window_extent(renderer).x0 >= \
            ax.get_window_extent(renderer).x1


def test_sram_and_hbm_always_have_panels_host_when_used(figures: list[Any]) -> None:
    fig = memory_figure(trace([MIB, MIB]))
    figures.append(fig)
    assert list(panels(fig)) == ["sram", "hbm"]
    assert panels(fig)["sram"].get_ylabel() == "sram (B)"
    assert panels(fig)["sram"].get_ylim() == (0, 1)
    fig = memory_figure(trace([MIB, MIB], sram=[0, 48 * 1024], host=[0, 5 * MIB]))
    figures.append(fig)
    got = panels(fig)
    assert list(got) == ["sram", "hbm", "host"]
    assert got["sram"].get_ylabel() == "sram (KiB)" and got["sram"].get_ylim()[1] > 48


def test_axis_unit_is_the_largest_the_peak_reaches() -> None:
    assert axis_unit(0) == ("B", 1)
    assert axis_unit(1023) == ("B", 1)
    assert axis_unit(1024) == ("KiB", 1024)
    assert axis_unit(5 * GIB) == ("GiB", GIB)
