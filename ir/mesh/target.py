"""Target descriptions: the hardware a plan is made for, read from TOML data files.

Passes are functions of (IR, target). A target says how many devices there are, how fast each
computes, how the devices are connected (link levels with latency alpha and bandwidth beta) and
which memory tiers each device has (capacity, bandwidth to compute, bandwidth between tiers).
Built-in targets live in `lamina/ir/mesh/targets/*.toml`; users pass their own file by path.

File format (every number in SI units: bytes, seconds, bytes/s, FLOP/s):

    name = "h100-node"
    description = "8 x H100 SXM on NVLink 4"
    devices = 8
    flops = 989e12                 # peak dense FLOP/s per device
    [[links]]                      # innermost level first
    name = "nvlink"
    group = 8                      # devices that share this level (a node)
    alpha = 3e-6                   # seconds per message
    beta = 450e9                   # bytes/s per device per direction
    [[links]]
    name = "infiniband"
    group = 32                     # the next level joins groups of the previous one
    ...
    [[tiers]]                      # fastest first; compute reads only "sram" and "hbm"
    name = "hbm"
    capacity = 80e9                # bytes per device
    bandwidth = 3.35e12            # bytes/s between this tier and compute
    [[transfers]]                  # bandwidth of moves between two tiers (both directions)
    between = ["hbm", "host"]
    bandwidth = 55e9

Mesh axes map onto link levels by where their devices sit: devices are numbered row-major over the
mesh axes, so an axis whose devices are `stride` apart spans `stride * size` consecutive devices; it
uses the innermost level whose `group` holds that span (`axis_level`).
"""

from __future__ import annotations

import difflib
import math
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from lamina.ir.core.diagnostics import LaminaError

TIER_ORDER = ("sram", "hbm", "host", "nvme")


@dataclass(frozen=True)
class LinkLevel:
    name: str
    group: int          # devices per group at this level
    alpha: float        # seconds per message
    beta: float         # bytes/s per device per direction


@dataclass(frozen=True)
class Tier:
    name: str
    capacity: float     # bytes per device
    bandwidth: float    # bytes/s between this tier and compute


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    devices: int
    flops: float
    links: tuple[LinkLevel, ...]
    tiers: tuple[Tier, ...]
    transfers: dict[frozenset[str], float]
    source: str

    def tier(self, name: str) -> Tier:
        for t in self.tiers:
            if t.name == name:
                return t
        raise LaminaError(f"target '{self.name}' has no memory tier '{name}' "
                          f"(tiers: {', '.join(t.name for t in self.tiers)})")

    def transfer_bandwidth(self, a: str, b: str) -> float:
        """Bytes/s of a move between tiers a and b (direct, or through the tiers in between)."""
        if a == b:
            return math.inf
        direct = self.transfers.get(frozenset((a, b)))
        if direct is not None:
            return direct
        order = [t.name for t in self.tiers]
        i, j = sorted((order.index(a), order.index(b)))
        hops = [self.transfers.get(frozenset((order[k], order[k + 1]))) for k in range(i, j)]
        if any(h is None for h in hops):
            raise LaminaError(f"target '{self.name}' gives no transfer bandwidth between '{a}' "
                              f"and '{b}'")
        return min(h for h in hops if h is not None)

    def axis_level(self, mesh_shape: Sequence[int], axis: int) -> LinkLevel:
        """The link level a collective over mesh axis `axis` uses (see the module docstring)."""
        stride = 1
        for s in mesh_shape[axis + 1:]:
            stride *= s
        span = stride * mesh_shape[axis]
        for level in self.links:
            if span <= level.group:
                return level
        return self.links[-1]


def _num(d: dict[str, Any], key: str, where: str, *, integer: bool = False) -> Any:
    """`d[key]` when it is a positive integer (`integer`) or a positive finite number.

    TOML can write `nan` and `inf`; neither is a capacity or a bandwidth (a NaN capacity fits
    nothing and compares false with everything; an infinite one overflows the planner's sums),
    so they are refused here, where the file is read, with the key that has them."""
    if key not in d:
        raise LaminaError(f"{where}: missing '{key}'")
    v = d[key]
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    # an integer beyond 2**63 (TOML's own limit, which tomllib does not enforce) is no count
    # or size either, and would overflow float()
    if isinstance(v, bool) or not ok or abs(v) >= 2**63 or not math.isfinite(v) or v <= 0:
        kind = "a positive integer" if integer else "a positive finite number"
        raise LaminaError(f"{where}: '{key}' must be {kind}, got {v!r}")
    return v


def _tables(data: dict[str, Any], key: str, source: str) -> list[dict[str, Any]]:
    """The `[[key]]` array of tables (empty when absent); anything else is refused."""
    items = data.get(key, [])
    if not isinstance(items, list) or not all(isinstance(t, dict) for t in items):
        raise LaminaError(f"{source}: '{key}' must be a list of tables ([[{key}]] sections)")
    return items


# the keys each part of a target file may have; anything else is most likely a typo (`bandwith`)
# that would otherwise be ignored, leaving a default or a "missing" error that hides the cause
_KEYS = {"": ("name", "description", "devices", "flops", "links", "tiers", "transfers"),
         "links": ("name", "group", "alpha", "beta"),
         "tiers": ("name", "capacity", "bandwidth"),
         "transfers": ("between", "bandwidth")}


def _text(d: dict[str, Any], key: str, where: str, *, required: bool = False) -> str:
    """`d[key]` when it is a non-empty string ("" when absent and not `required`)."""
    if key not in d:
        if required:
            raise LaminaError(f"{where}: missing '{key}'")
        return ""
    v = d[key]
    if not isinstance(v, str) or not v:
        raise LaminaError(f"{where}: '{key}' must be a non-empty string, got {v!r}")
    return v


def _check_keys(d: dict[str, Any], part: str, where: str) -> None:
    """Refuse a key `part` of a target file does not have, suggesting the closest one."""
    known = _KEYS[part]
    for key in d:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise LaminaError(f"{where}: unknown key '{key}'{hint}; keys: {', '.join(known)}")


def parse_target(text: str, source: str) -> Target:
    """A `Target` from TOML text; LaminaError naming the file and the problem otherwise."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise LaminaError(f"{source}: invalid TOML: {e}") from None
    _check_keys(data, "", source)
    name = _text(data, "name", source, required=True)
    description = _text(data, "description", source)
    devices = _num(data, "devices", source, integer=True)
    flops = _num(data, "flops", source)
    links = []
    for i, link in enumerate(_tables(data, "links", source)):
        where = f"{source}: links[{i}]"
        _check_keys(link, "links", where)
        links.append(LinkLevel(_text(link, "name", where) or f"level{i}",
                               _num(link, "group", where, integer=True),
                               float(_num(link, "alpha", where)), float(_num(link, "beta", where))))
    if not links:
        raise LaminaError(f"{source}: a target needs at least one [[links]] level")
    for a, b in zip(links, links[1:], strict=False):
        if b.group <= a.group or b.group % a.group:
            raise LaminaError(f"{source}: link level '{b.name}' must join whole groups of "
                              f"'{a.name}' (group {b.group} vs {a.group})")
    tiers = []
    for i, tier in enumerate(_tables(data, "tiers", source)):
        where = f"{source}: tiers[{i}]"
        _check_keys(tier, "tiers", where)
        tname = tier.get("name")
        if tname not in TIER_ORDER:
            raise LaminaError(f"{where}: tier name must be one of {', '.join(TIER_ORDER)}, "
                              f"got {tname!r}")
        tiers.append(Tier(tname, float(_num(tier, "capacity", where)),
                          float(_num(tier, "bandwidth", where))))
    names = [t.name for t in tiers]
    if len(set(names)) != len(names):
        raise LaminaError(f"{source}: a tier is listed twice")
    if [n for n in TIER_ORDER if n in names] != names:
        raise LaminaError(f"{source}: tiers must be listed fastest first ({', '.join(TIER_ORDER)})")
    transfers: dict[frozenset[str], float] = {}
    for i, tr in enumerate(_tables(data, "transfers", source)):
        where = f"{source}: transfers[{i}]"
        _check_keys(tr, "transfers", where)
        between = tr.get("between")
        if not (isinstance(between, list) and len(between) == 2 and all(b in names for b in between)
                and between[0] != between[1]):
            raise LaminaError(f"{where}: 'between' must name two different tiers of this target")
        transfers[frozenset(between)] = float(_num(tr, "bandwidth", where))
    return Target(name, description, devices, float(flops), tuple(links),
                  tuple(tiers), transfers, source)


def builtin_targets() -> list[str]:
    folder = resources.files("lamina.ir.mesh.targets")
    return sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))


def load_target(spec: str) -> Target:
    """A built-in target by name (`h100-node`) or a TOML file by path."""
    if spec.endswith(".toml") or "/" in spec or Path(spec).exists():
        try:
            raw = Path(spec).read_bytes()
        except OSError as e:
            raise LaminaError(f"cannot read target '{spec}': {e.strerror}") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise LaminaError(f"cannot read target '{spec}': not UTF-8 text (byte {e.start})") \
                from None
        return parse_target(text, spec)
    names = builtin_targets()
    if spec not in names:
        raise LaminaError(f"unknown target '{spec}' (built-in targets: {', '.join(names)}; or "
                          "give a path to a .toml file)")
    text = resources.files("lamina.ir.mesh.targets").joinpath(f"{spec}.toml").read_text("utf-8")
    return parse_target(text, f"<builtin {spec}>")
