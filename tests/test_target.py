"""Target descriptions: built-ins load, link levels map to mesh axes, bad files get diagnostics."""

from __future__ import annotations

from pathlib import Path

import pytest
from lamina.ir.diagnostics import LaminaError
from lamina.ir.target import builtin_targets, load_target, parse_target


def test_builtins_load_with_datasheet_figures() -> None:
    assert {"h100-node", "h100-cluster", "h200-node", "tiny"} <= set(builtin_targets())
    node = load_target("h100-node")
    assert node.devices == 8 and node.tier("hbm").capacity == 80e9
    assert [t.name for t in node.tiers] == ["sram", "hbm", "host", "nvme"]
    assert load_target("h200-node").tier("hbm").capacity == 141e9
    cluster = load_target("h100-cluster")
    assert [lvl.name for lvl in cluster.links] == ["nvlink", "infiniband"]
    assert cluster.devices == 32


def test_axis_level_follows_device_layout() -> None:
    cluster = load_target("h100-cluster")
    # mesh [node = 4, gpu = 8]: gpu is the minor axis, inside a node; node crosses nodes
    assert cluster.axis_level([4, 8], 1).name == "nvlink"
    assert cluster.axis_level([4, 8], 0).name == "infiniband"
    # mesh [a = 8, b = 4]: b spans 4 consecutive devices (NVLink); a has stride 4 -> spans 32
    assert cluster.axis_level([8, 4], 1).name == "nvlink"
    assert cluster.axis_level([8, 4], 0).name == "infiniband"


def test_transfer_bandwidth_goes_through_intermediate_tiers() -> None:
    node = load_target("h100-node")
    assert node.transfer_bandwidth("hbm", "host") == 64e9
    assert node.transfer_bandwidth("hbm", "nvme") == 7e9  # hbm -> host -> nvme: the slower hop


def test_user_file_by_path(tmp_path: Path) -> None:
    p = tmp_path / "mine.toml"
    p.write_text('name = "mine"\ndevices = 2\nflops = 1e12\n[[links]]\nname = "l"\ngroup = 2\n'
                 'alpha = 1e-6\nbeta = 1e9\n')
    t = load_target(str(p))
    assert t.name == "mine" and t.tiers == ()


@pytest.mark.parametrize("text, message", [
    ("name = ", "invalid TOML"),
    ('devices = 2\nflops = 1.0', "missing 'name'"),
    ('name = "x"\ndevices = 0\nflops = 1.0', "'devices' must be a positive integer"),
    ('name = "x"\ndevices = 2\nflops = 1.0', "at least one [[links]] level"),
    ('name = "x"\ndevices = 2\nflops = 1.0\n[[links]]\ngroup = 2\nalpha = 1e-6\n', "missing 'beta'"),
    ('name = "x"\ndevices = 2\nflops = 1.0\n[[links]]\ngroup = 2\nalpha = 1e-6\nbeta = 1.0\n'
     '[[tiers]]\nname = "l3"\ncapacity = 1\nbandwidth = 1\n', "tier name must be one of"),
    ('name = "x"\ndevices = 2\nflops = 1.0\n[[links]]\ngroup = 2\nalpha = 1e-6\nbeta = 1.0\n'
     '[[tiers]]\nname = "host"\ncapacity = 1\nbandwidth = 1\n[[tiers]]\nname = "hbm"\n'
     'capacity = 1\nbandwidth = 1\n', "fastest first"),
])
def test_bad_target_files(text: str, message: str) -> None:
    with pytest.raises(LaminaError) as e:
        parse_target(text, "bad.toml")
    assert message in e.value.message and e.value.message.startswith("bad.toml")


def test_unknown_builtin_names_the_choices() -> None:
    with pytest.raises(LaminaError, match="unknown target 'h900'.*h100-node"):
        load_target("h900")
