"""The collectives in an XLA-compiled program, read from its HLO text (`compiled.as_text()`).

What a placed program communicates is decided by Lamina (insert-collectives), and the JAX backend
promises that XLA adds nothing: these are the facts that let a test, `--stats-json` and the
benchmark check it. Every all-reduce, all-gather, reduce-scatter, all-to-all and
collective-permute instruction (the `-start` half of an asynchronous pair) is one `HloCollective`
with its replica groups as explicit device lists, in every form XLA prints them:

    replica_groups={{0,1,2,3},{4,5,6,7}}      explicit (an empty {} means one group of all)
    replica_groups=[2,4]<=[8]                  iota: arange(8) reshaped to [2,4], one group a row
    replica_groups=[4,2]<=[2,4]T(1,0)          iota of a transposed [2,4] device array
    replica_groups=mesh['x'=2,'y'=4], device_ids=([2,4]T(1,0)) {'y'}
                                               a named mesh over the listed device ids (iota
                                               form, or [0,1,...]): one group per position on
                                               the other axes, along the braced axes

Bytes follow Lamina's convention (`lamina.analysis.comm_cost`): `payload` is the per-device
buffer B (all_reduce: the local buffer; all_gather: the gathered result; reduce_scatter: the
local input; all_to_all: the local block) and `sent` what a ring sends per device.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from lamina.analysis.comm_cost import ring_sent
from lamina.ir.mesh.collective_kinds import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    COLLECTIVE_PERMUTE,
    REDUCE_SCATTER,
)

KINDS = {"all-reduce": ALL_REDUCE.kind, "all-gather": ALL_GATHER.kind,
         "reduce-scatter": REDUCE_SCATTER.kind, "all-to-all": ALL_TO_ALL.kind,
         "collective-permute": COLLECTIVE_PERMUTE.kind}   # HLO opcode -> Lamina's kind
_ITEM = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2, "s64": 8, "u64": 8, "s32": 4, "u32": 4,
         "s16": 2, "u16": 2, "s8": 1, "u8": 1, "pred": 1}
_LINE = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+ = (?P<type>.+?) (?P<kind>"
                   + "|".join(KINDS) + r")(?P<start>-start)?\(")
_SHAPE = re.compile(r"\b(" + "|".join(_ITEM) + r")\[([0-9,]*)\]")
_EXPLICIT = re.compile(r"replica_groups=\{((?:\{[0-9,]*\},?)*)\}")
_MESH = re.compile(r"replica_groups=mesh\[([^\]]*)\](?:, device_ids=\((.*?)\))? \{([^}]*)\}")
_IOTA = re.compile(r"replica_groups=\[([0-9,]+)\]<=\[([0-9,]+)\](?:T\(([0-9,]+)\))?")


@dataclass(frozen=True)
class HloCollective:
    kind: str                                # Lamina's spelling: all_reduce, all_gather, ...
    groups: tuple[tuple[int, ...], ...]      # device ids, each group in XLA's order
    payload: int                             # bytes B per device (see the module docstring)
    shape: str                               # the instruction's result type, as printed

    @property
    def group_size(self) -> int:
        return len(self.groups[0]) if self.groups else 1

    @property
    def sent(self) -> float:
        if self.kind == COLLECTIVE_PERMUTE.kind:
            return float(self.payload)
        return ring_sent(self.kind, self.group_size, self.payload)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "replica_groups": [list(g) for g in self.groups],
                "shape": self.shape, "payload_bytes": self.payload,
                "bytes_per_device": int(self.sent)}


def _bytes(text: str) -> list[int]:
    return [math.prod(int(d) for d in dims.split(",") if d) * _ITEM[dt]
            for dt, dims in _SHAPE.findall(text)]


def _iota_groups(shape: list[int], dims: list[int], perm: list[int] | None
                 ) -> tuple[tuple[int, ...], ...]:
    """XLA's iota replica groups: arange(prod(dims)) as `dims`, transposed by `perm`, reshaped."""
    strides = [math.prod(dims[i + 1:]) for i in range(len(dims))]
    order = perm if perm is not None else list(range(len(dims)))
    tdims = [dims[p] for p in order]
    flat: list[int] = []
    for k in range(math.prod(tdims)):
        rest, dev = k, 0
        for axis in range(len(tdims) - 1, -1, -1):
            rest, c = divmod(rest, tdims[axis])
            dev += c * strides[order[axis]]
        flat.append(dev)
    size = shape[-1]
    return tuple(tuple(flat[i:i + size]) for i in range(0, len(flat), size))


def _iota_list(text: str) -> list[int]:
    """Device ids written as `[2,4]T(1,0)` (an iota, reshaped and transposed) or `0,1,2`."""
    m = re.fullmatch(r"\[([0-9,]+)\](?:T\(([0-9,]+)\))?", text.strip())
    if not m:
        return [int(d) for d in re.findall(r"\d+", text)]
    dims = [int(d) for d in m.group(1).split(",")]
    perm = [int(p) for p in m.group(2).split(",")] if m.group(2) else None
    return [d for g in _iota_groups([math.prod(dims)], dims, perm) for d in g]


def _mesh_groups(m: re.Match[str]) -> tuple[tuple[int, ...], ...]:
    axes = [(a, int(n)) for a, n in re.findall(r"'([^']+)'=(\d+)", m.group(1))]
    sizes = [n for _, n in axes]
    ids = _iota_list(m.group(2)) if m.group(2) else list(range(math.prod(sizes)))
    along = [a.strip().strip("'") for a in m.group(3).split(",") if a.strip()]
    names = [a for a, _ in axes]
    strides = [math.prod(sizes[i + 1:]) for i in range(len(sizes))]
    rest = [i for i, a in enumerate(names) if a not in along]
    inner = [names.index(a) for a in along]

    def positions(dims: list[int]) -> list[int]:
        out = [0]
        for i in dims:
            out = [p + c * strides[i] for p in out for c in range(sizes[i])]
        return out

    return tuple(tuple(ids[base + off] for off in positions(inner)) for base in positions(rest))


def replica_groups(line: str, devices: int) -> tuple[tuple[int, ...], ...]:
    """The replica groups of one HLO instruction line (all `devices` when it names none)."""
    mesh = _MESH.search(line)
    if mesh:
        return _mesh_groups(mesh)
    m = _IOTA.search(line)
    if m:
        perm = [int(p) for p in m.group(3).split(",")] if m.group(3) else None
        return _iota_groups([int(s) for s in m.group(1).split(",")],
                            [int(d) for d in m.group(2).split(",")], perm)
    m = _EXPLICIT.search(line)
    if m and m.group(1):
        return tuple(tuple(int(d) for d in g.split(",") if d)
                     for g in re.findall(r"\{([0-9,]*)\}", m.group(1)))
    pairs = re.search(r"source_target_pairs=\{((?:\{\d+,\d+\},?)*)\}", line)
    if pairs:
        return tuple(tuple(int(d) for d in p.split(","))
                     for p in re.findall(r"\{(\d+,\d+)\}", pairs.group(0)))
    return (tuple(range(devices)),)


def collectives(hlo: str, devices: int) -> list[HloCollective]:
    """Every collective instruction in the HLO module text `hlo`, in text order."""
    found: list[HloCollective] = []
    for line in hlo.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        kind = KINDS[m.group("kind")]
        sizes = _bytes(m.group("type"))
        if m.group("start") and kind in (ALL_GATHER.kind, KINDS["collective-permute"]) and len(sizes) > 1:
            sizes = sizes[len(sizes) // 2:]   # async start: (operands, results)
        groups = replica_groups(line, devices)
        n = len(groups[0]) if groups and kind != COLLECTIVE_PERMUTE.kind else 1
        out = sum(sizes)
        payload = out * n if kind == REDUCE_SCATTER.kind else out
        found.append(HloCollective(kind, groups, payload, m.group("type").strip()))
    return found
