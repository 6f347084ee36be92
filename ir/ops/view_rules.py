"""Index maps of the layout ops: how a layout op carries a block of its operand into its result.

A fused kernel reads its inputs through layout ops and writes its outputs through them without
materializing the value before the layout op: a tile of the group's rows, computed in the tile
buffer, lands directly in the right place of each output (`lamina.backends.numpy.fused`). Two
facts per layout op make that possible, and both live here, one `ViewRule` per op-table row
(`OpInfo.view`), so neither the fusion pass nor an executor names an op:

- `dims(call, j)`: for each dim of operand j, the result dim it becomes one to one (the same
  index, up to an offset: a slice's start, a concat's earlier operands), or None when the op
  mixes it with others (a reshape merging or splitting it) or steps through it (a strided slice).
  A tile that covers only part of a dim can be carried through the op only along such a dim;
  every other dim must be covered whole. The pass keeps a layout op in a kernel only if the
  kernel's tiled (row) dims all map one to one (`lamina.passes.fuse_elementwise`, rule 8).
- `box(call, j, arr, offs)`: the block `arr` of operand j whose corner is at `offs` (global
  indices), carried through the op: the result's block and its corner, or None when no element
  of the block reaches the result (a slice that cuts it away). `arr` may be a view; the result is
  a view where NumPy can make one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lamina.ir.ops.formulas import Call

Box = tuple[Any, tuple[int, ...]]   # (array block, its corner's global index per dim)


def reshape_dims(src: Sequence[int], dst: Sequence[int]) -> list[int | None]:
    """For each dim of `src`, the dim of `dst` it is one to one with under a row-major reshape,
    else None. Dims of extent 1 are left out first (a block always covers them whole, so they
    map to None); the others map one to one exactly where the prefix products of both shapes
    meet and the next dims are equal; between such points, dims are merged or split."""
    out: list[int | None] = [None] * len(src)
    if 0 in src or 0 in dst:
        return out
    si = [i for i, n in enumerate(src) if n != 1]
    di = [j for j, n in enumerate(dst) if n != 1]
    a, b = [src[i] for i in si], [dst[j] for j in di]
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i] == b[j]:
            out[si[i]] = di[j]
            i += 1
            j += 1
            continue
        p, q = a[i], b[j]
        i += 1
        j += 1
        while p != q and i <= len(a) and j <= len(b):
            if p < q and i < len(a):
                p *= a[i]
                i += 1
            elif q < p and j < len(b):
                q *= b[j]
                j += 1
            else:
                break
    return out


def _full(arr: Any, offs: Sequence[int], shape: Sequence[int], d: int) -> bool:
    return offs[d] == 0 and arr.shape[d] == shape[d]


@dataclass(frozen=True)
class ViewRule:
    """The index map of one layout op (see the module docstring); subclasses per op kind."""

    def dims(self, call: Call, j: int) -> list[int | None]:
        raise NotImplementedError

    def box(self, call: Call, j: int, arr: Any, offs: tuple[int, ...]) -> Box | None:
        raise NotImplementedError


@dataclass(frozen=True)
class TransposeView(ViewRule):
    """Result dim k is operand dim permutation[k]."""

    def dims(self, call: Call, j: int) -> list[int | None]:
        perm = list(call.attrs["permutation"])
        return [perm.index(d) for d in range(len(perm))]

    def box(self, call: Call, j: int, arr: Any, offs: tuple[int, ...]) -> Box | None:
        perm = tuple(call.attrs["permutation"])
        return arr.transpose(perm), tuple(offs[p] for p in perm)


@dataclass(frozen=True)
class ReshapeView(ViewRule):
    """Dims between the points where both shapes' prefix products meet are merged or split."""

    def dims(self, call: Call, j: int) -> list[int | None]:
        src = call.operands[j]
        assert src is not None
        return reshape_dims(src.shape, call.result.shape)

    def box(self, call: Call, j: int, arr: Any, offs: tuple[int, ...]) -> Box | None:
        src = call.operands[j]
        assert src is not None
        dst = call.result.shape
        m = reshape_dims(src.shape, dst)
        ext, corner = list(dst), [0] * len(dst)
        for d, k in enumerate(m):
            if k is None:
                if not _full(arr, offs, src.shape, d):
                    raise ValueError("reshape of a block that covers a merged or split dim "
                                     "only in part")
                continue
            ext[k], corner[k] = arr.shape[d], offs[d]
        return arr.reshape(tuple(ext)), tuple(corner)


@dataclass(frozen=True)
class SliceView(ViewRule):
    """Unit-stride dims keep their index (shifted by start); strided dims are stepped through."""

    def _strides(self, call: Call, n: int) -> list[int]:
        return list(call.attrs.get("strides") or [1] * n)

    def dims(self, call: Call, j: int) -> list[int | None]:
        n = len(call.attrs["start"])
        return [d if st == 1 else None for d, st in enumerate(self._strides(call, n))]

    def box(self, call: Call, j: int, arr: Any, offs: tuple[int, ...]) -> Box | None:
        src = call.operands[j]
        assert src is not None
        start, limit = list(call.attrs["start"]), list(call.attrs["limit"])
        index: list[slice] = []
        corner: list[int] = []
        for d, st in enumerate(self._strides(call, len(start))):
            if st != 1:
                if not _full(arr, offs, src.shape, d):
                    raise ValueError("strided slice of a block that covers the dim only in part")
                index.append(slice(start[d], limit[d], st))
                corner.append(0)
                continue
            lo, hi = max(offs[d], start[d]), min(offs[d] + arr.shape[d], limit[d])
            if hi <= lo:
                return None
            index.append(slice(lo - offs[d], hi - offs[d]))
            corner.append(lo - start[d])
        return arr[tuple(index)], tuple(corner)


@dataclass(frozen=True)
class ConcatView(ViewRule):
    """Every dim keeps its index; along `dim`, operand j starts after the operands before it."""

    def dims(self, call: Call, j: int) -> list[int | None]:
        t = call.operands[j]
        assert t is not None
        return list(range(len(t.shape)))

    def box(self, call: Call, j: int, arr: Any, offs: tuple[int, ...]) -> Box | None:
        t = call.operands[j]
        assert t is not None
        axis = call.attrs["dim"] % len(t.shape)
        shift = sum(o.shape[axis] for o in call.operands[:j] if o is not None)
        corner = list(offs)
        corner[axis] += shift
        return arr, tuple(corner)
