"""Target descriptions: built-ins load, link levels map to mesh axes, bad files get diagnostics."""

from __future__ import annotations

from pathlib import Path

import pytest
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.mesh.target import builtin_targets, load_target, parse_target


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


# -- issue 10's fuzz roots on the target side: each was an internal error or a crash --------------

_HEAD = 'name = "x"\ndevices = 1\nflops = 1e12\n[[links]]\nname = "l"\ngroup = 1\n'
_HBM = '[[tiers]]\nname = "hbm"\ncapacity = 1048576\nbandwidth = 1e12\n'


@pytest.mark.parametrize("key, value", [
    ("capacity", "nan"), ("capacity", "inf"), ("bandwidth", "nan"), ("bandwidth", "+inf"),
    ("capacity", "1" + "0" * 400),
])
def test_non_finite_tier_numbers_are_refused(key: str, value: str) -> None:
    """TOML writes nan and inf; main accepted them and the planner failed later with an
    AssertionError or OverflowError. Refused where the file is read, naming the key."""
    tier = _HBM.replace(f"{key} = " + ("1048576" if key == "capacity" else "1e12"),
                        f"{key} = {value}")
    with pytest.raises(LaminaError) as e:
        parse_target(_HEAD + "alpha = 1e-6\nbeta = 1e9\n" + tier, "bad.toml")
    assert e.value.message.startswith(f"bad.toml: tiers[0]: '{key}' must be a positive finite "
                                      "number, got "), e.value.message


@pytest.mark.parametrize("link", ["alpha = nan\nbeta = 1e9\n", "alpha = 1e-6\nbeta = inf\n"])
def test_non_finite_link_numbers_are_refused(link: str) -> None:
    with pytest.raises(LaminaError, match=r"links\[0\]: '(alpha|beta)' must be a positive finite"):
        parse_target(_HEAD + link, "bad.toml")


@pytest.mark.parametrize("text", ["tiers = 3\n" + _HEAD + "alpha = 1e-6\nbeta = 1e9\n",
                                  "tiers = [1, 2]\n" + _HEAD + "alpha = 1e-6\nbeta = 1e9\n",
                                  'name = "x"\ndevices = 1\nflops = 1e12\nlinks = "nvlink"\n'])
def test_sections_that_are_not_tables_are_refused(text: str) -> None:
    with pytest.raises(LaminaError, match=r"bad.toml: '(tiers|links)' must be a list of tables"):
        parse_target(text, "bad.toml")


def test_target_file_that_is_not_utf8(tmp_path: Path) -> None:
    p = tmp_path / "latin1.toml"
    p.write_bytes(b'name = "caf\xe9"\n')
    with pytest.raises(LaminaError) as e:
        load_target(str(p))
    assert e.value.message == f"cannot read target '{p}': not UTF-8 text (byte 11)"


LONG_CHAIN = """\
func.func @chain(%x: tensor<256x256xf32>) -> tensor<256x256xf32> {
  %a = lamina.tanh %x : tensor<256x256xf32>
  %b = lamina.neg %a : tensor<256x256xf32>
  %c = lamina.abs %b : tensor<256x256xf32>
  %d = lamina.add %a, %c : tensor<256x256xf32>
  %e = lamina.add %d, %x : tensor<256x256xf32>
  func.return %e : tensor<256x256xf32>
}
"""

HOST_ARG = """\
func.func @f(%big: tensor<1024x1024xf32, #lamina.place<tier = host>>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = lamina.neg %y : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
"""


def _plan(tmp_path: Path, program: str, target_toml: str, solver: str = "greedy") -> LaminaError:
    from lamina.ir.text.source import make_context, parse_text, verify
    from lamina.passes.pipeline import build_pipeline, run_pipeline

    (tmp_path / "t.toml").write_text(target_toml)
    ctx = make_context()
    module = parse_text(program, "p.mlir", ctx)
    verify(module)
    pipeline = f'assign-memory-tiers{{target="{tmp_path / "t.toml"}" solver={solver}}}'
    with pytest.raises(LaminaError) as e:
        run_pipeline(ctx, module, build_pipeline(pipeline))
    return e.value


def test_target_without_offload_tier_is_a_diagnostic(tmp_path: Path) -> None:
    """A target with HBM only: the greedy planner indexed `prob.tiers()[0]` of an empty list
    (IndexError) as soon as HBM overflowed; now the overflow is the pass's diagnostic at the op,
    saying there is nowhere to offload to."""
    hbm = _HBM.replace("1048576", "600000")
    err = _plan(tmp_path, LONG_CHAIN, _HEAD + "alpha = 1e-6\nbeta = 1e9\n" + hbm)
    assert err.loc is not None and err.loc.file == "p.mlir"
    assert err.message.startswith("assign-memory-tiers: no assignment fits tier 'hbm' at program "
                                  "point "), err.message
    assert err.message.endswith("; target 'x' has no host or nvme tier to offload values to")


def test_arguments_declared_in_host_beyond_its_capacity(tmp_path: Path) -> None:
    """Arguments the program itself puts in host, more than the target's host holds: the greedy
    solver ended in a bare `assert best.fits()`; now one diagnostic naming them."""
    host = ('[[tiers]]\nname = "host"\ncapacity = 1048576\nbandwidth = 1e10\n'
            '[[transfers]]\nbetween = ["hbm", "host"]\nbandwidth = 1e10\n')
    toml = _HEAD + "alpha = 1e-6\nbeta = 1e9\n" + _HBM.replace("1048576", "16777216") + host
    err = _plan(tmp_path, HOST_ARG, toml)
    assert err.loc is not None
    assert err.message.startswith("assign-memory-tiers: no assignment fits tier 'host'"), \
        err.message
    assert err.message.endswith("; arguments declared in 'host' take 4194304 bytes "
                                "(%big (4194304 B))")


@pytest.mark.parametrize("text, message", [
    # a typo in a key was ignored (and then "missing 'bandwidth'" hid the cause), an extra key
    # was taken silently
    (_HEAD + "alpha = 1e-6\nbeta = 1e9\n" + _HBM.replace("bandwidth", "bandwith"),
     "bad.toml: tiers[0]: unknown key 'bandwith' (did you mean 'bandwidth'?); keys: name, "
     "capacity, bandwidth"),
    (_HEAD + "alpha = 1e-6\nbeta = 1e9\nlatency = 2\n",
     "bad.toml: links[0]: unknown key 'latency'; keys: name, group, alpha, beta"),
    ('name = "x"\ndevice = 1\n', "bad.toml: unknown key 'device' (did you mean 'devices'?); "
     "keys: name, description, devices, flops, links, tiers, transfers"),
    (_HEAD + "alpha = 1e-6\nbeta = 1e9\n" + _HBM
     + '[[transfers]]\nbetween = ["hbm", "hbm"]\nbandwidth = 1\nspeed = 3\n',
     "bad.toml: transfers[0]: unknown key 'speed'"),
    # values of the wrong kind: main printed "missing 'name'" for a number, str()-ed the rest
    ("name = 3\ndevices = 1\n", "bad.toml: 'name' must be a non-empty string, got 3"),
    ('name = "x"\ndescription = ["a"]\n', "bad.toml: 'description' must be a non-empty string"),
    (_HEAD.replace('name = "l"', "name = 1.5") + "alpha = 1e-6\nbeta = 1e9\n",
     "bad.toml: links[0]: 'name' must be a non-empty string, got 1.5"),
])
def test_unknown_keys_and_wrongly_typed_values_are_one_diagnostic(text: str, message: str) -> None:
    with pytest.raises(LaminaError) as e:
        parse_target(text, "bad.toml")
    assert e.value.message.startswith(message), e.value.message


def test_bad_target_file_through_lamina_run_is_one_line(tmp_path: Path) -> None:
    from test_cli import GOOD, assert_error, run, write

    write(tmp_path, "ok.mlir", GOOD)
    (tmp_path / "t.toml").write_text(_HEAD + "alpha = 1e-6\nbeta = 1e9\n"
                                     + _HBM.replace("capacity", "capacty"))
    assert_error(run("ok.mlir", "--target", "t.toml", cwd=tmp_path),
                 "error: t.toml: tiers[0]: unknown key 'capacty' (did you mean 'capacity'?)")
