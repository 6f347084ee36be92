"""Layout ops at the edges of a fused kernel, in the NumPy tile loop.

A fused body reads inputs through layout ops (input views: they run once per kernel, as NumPy
views where NumPy can make one) and writes outputs through them (output views, this module): a
tile computed in the tile loop is carried through the layout ops' index maps
(`lamina.ir.ops.view_rules`) and stored straight into its place in the kernel's result, so the
value before the layout op is never stored whole. A `ViewPath` is one route from a per-tile
value to such a result (a concat's result has one per operand).

For that the tile must be a box of the kernel's rows whose partly covered dims the layout ops
keep one to one (`ViewPath.kept`): `box_tiling` picks tiles that are boxes (a fixed index in
the outer row dims, a run of one dim, the dims after it whole) with every dim from the least
kept one on covered whole.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from lamina.analysis.fusion import kept_prefix, view_positions
from lamina.ir.core.dtypes import STORAGE
from lamina.ir.ops.formulas import Call
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from lamina.ir.ops.optable import Fusion
from lamina.ir.ops.view_rules import ViewRule
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, SSAValue


def _shape(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def _call(op: LaminaOp) -> Call:
    return Call(op.attr_values(), op.operand_infos(), tensor_info(op.results[0].type))


@dataclass
class ViewPath:
    """From per-tile value `source` (its step's slot `slot`) through `chain` (each layout op's
    rule, call and which operand the route enters by) into `dest`, the kernel's result; `kept`:
    how many leading dims of `source` the chain keeps one to one."""

    source: SSAValue
    slot: int
    chain: list[tuple[ViewRule, Call, int]]
    dest: np.ndarray
    kept: int


def static_output_views(body: Sequence[Operation]) -> set[Operation]:
    """The layout ops of a body that write outputs: those reading a value a non-layout,
    non-constant op of the body computes, or another such layout op (the rest read inputs)."""
    computed: set[SSAValue] = set()
    out: set[Operation] = set()
    for o in body:
        if not isinstance(o, LaminaOp):
            continue
        if o.info.fusion == Fusion.LAYOUT:
            if any(v in computed for v in o.operands):
                out.add(o)
                computed.update(o.results)
        elif o.info.fusion != Fusion.SOURCE:
            computed.update(o.results)
    return out


def static_kept(body: Sequence[Operation]) -> int:
    """The least number of leading dims any output view of `body` keeps one to one, of the value
    its route starts at (a large number when the body writes through none)."""
    views = static_output_views(body)
    pos: dict[SSAValue, tuple[tuple[int | None, ...], tuple[int, ...]]] = {}
    kept = 1 << 30
    for o in body:
        if o not in views:
            continue
        assert isinstance(o, LaminaOp)
        known = [pos.get(v, (tuple(range(len(_shape(v)))), _shape(v))) for v in o.operands]
        res = view_positions(o, [k[0] for k in known])
        if res is None or len({k[1] for k in known}) != 1:
            return 0
        pos[o.results[0]] = (res, known[0][1])
        kept = min(kept, kept_prefix(res, known[0][1]))
    return kept


def output_paths(results: Sequence[SSAValue], views: Mapping[SSAValue, LaminaOp],
                 slot_of: Mapping[SSAValue, int]
                 ) -> tuple[list[ViewPath], dict[SSAValue, np.ndarray]]:
    """Every route from a per-tile value to a result the kernel writes through layout ops, and
    each such result's array (allocated once, shared by its routes)."""
    paths: list[ViewPath] = []
    dests: dict[SSAValue, np.ndarray] = {}

    def walk(v: SSAValue, chain: list[tuple[ViewRule, Call, int]], dest: np.ndarray) -> None:
        op = views[v]
        rule = op.info.view
        assert rule is not None
        call = _call(op)
        for j, x in enumerate(op.operands):
            c = [(rule, call, j), *chain]
            if x in views:
                walk(x, c, dest)
            else:
                paths.append(ViewPath(x, slot_of[x], c, dest, _chain_kept(x, c)))

    for y in results:
        if y in views and y not in dests:
            dests[y] = np.empty(_shape(y), dtype=STORAGE[tensor_info(y.type).dtype])
            walk(y, [], dests[y])
    return paths, dests


def _chain_kept(source: SSAValue, chain: list[tuple[ViewRule, Call, int]]) -> int:
    shape = _shape(source)
    pos: tuple[int | None, ...] = tuple(range(len(shape)))
    for rule, call, j in chain:
        m = rule.dims(call, j)
        pos = tuple(None if p is None else m[p] for p in pos)
    return kept_prefix(pos, shape)


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


@dataclass(frozen=True)
class BoxTiling:
    """Tiles of `rows` (the flattened `lead`) that are boxes: dims before `q - 1` fixed, dim
    `q - 1` in runs of `c`, dims from `q` on whole (`q` = 0: one tile of every row)."""

    lead: tuple[int, ...]
    rows: int      # rows per tile
    q: int
    c: int

    def box(self, r0: int) -> tuple[list[int], list[int]]:
        """(corner, extents) over `lead` of the tile starting at row `r0`."""
        lead = self.lead
        corner = [0] * len(lead)
        rem = r0
        for d in range(len(lead) - 1, -1, -1):
            corner[d] = rem % lead[d] if lead[d] else 0
            rem = rem // lead[d] if lead[d] else 0
        ext = [1] * len(lead)
        if self.q == 0:
            return [0] * len(lead), list(lead)
        ext[self.q - 1] = self.c
        ext[self.q:] = lead[self.q:]
        return corner, ext


def box_tiling(lead: tuple[int, ...], kept: int, want: int) -> BoxTiling:
    """The box tiling of rows `lead` with about `want` rows per tile (at most, when a box of
    that size exists), covering every dim from `kept` on whole."""
    p = min(kept, len(lead))
    if p == 0 or math.prod(lead) == 0:
        return BoxTiling(lead, max(1, math.prod(lead)), 0, 1)
    best: tuple[int, int, int] | None = None
    for q in range(1, p + 1):
        g = math.prod(lead[q:])
        for c in _divisors(lead[q - 1]):
            tr = c * g
            if tr <= want and (best is None or tr > best[0]):
                best = (tr, q, c)
    if best is None:
        best = (math.prod(lead[p:]), p, 1)
    return BoxTiling(lead, *best)


def write_paths(paths: Sequence[ViewPath], vals: Sequence[np.ndarray | None],
                corner: Sequence[int], ext: Sequence[int]) -> None:
    """Carry this tile (rows `corner` + `ext`) of every path's source into its result."""
    for p in paths:
        src = vals[p.slot]
        assert src is not None
        arr = src.reshape(tuple(ext) + src.shape[1:])
        offs = tuple(corner) + (0,) * (arr.ndim - len(corner))
        for rule, call, j in p.chain:
            r = rule.box(call, j, arr, offs)
            if r is None:
                break
            arr, offs = r
        else:
            p.dest[tuple(slice(o, o + e) for o, e in zip(offs, arr.shape, strict=True))] = arr
