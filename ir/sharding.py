"""Sharding rules: how the placements of an op's operands determine the placement of its result.

Each op-table entry names its rule (`OpInfo.sharding`) and its linearity (`OpInfo.linearity`); this
module implements the rules once, on plain `Spec`s, so the verifier (a fully placed program must obey
them), the propagation pass and the SPMD interpreter all agree. A rule either returns the result's
`Spec` or raises `ShardingError` whose message names the rule that is broken.

The rules:
- elementwise: dimensions aligned by NumPy broadcasting must carry the same split in every operand
  that has the full dimension; an operand dimension of size 1 that is broadcast must be unsplit.
- reduction: kept dimensions keep their splits; a reduced dimension split over axes A makes the
  result `partial = sum[A]` (reduce_sum) or `max[A]` (reduce_max); reduce_mean over a split
  dimension is rejected (the local means would need rescaling: gather or reduce_sum first).
- row_reduction (layernorm, rmsnorm, softmax): the normalized dimensions must be unsplit; the
  others keep their splits; scale and bias must be replicated.
- matmul: batch dimensions as elementwise; M from the lhs, N from the rhs; the contracting
  dimension must be split on the same axes on both sides, and then the result is `partial = sum`
  over those axes.
- transpose: splits move with the permutation. reshape: within each group of dimensions that
  reshape merges or splits, only the major-most dimension may be split, and its split moves to the
  major-most result dimension of the group (which must divide evenly).
- broadcast: operand dimension i's split moves to result dimension broadcast_dimensions[i]; new and
  broadcast (size-1) dimensions are unsplit. slice: sliced dimensions must be unsplit. concat: the
  concat dimension must be unsplit, and the operands agree elsewhere. constants are replicated.
- partial values (linearity): ADDITIVE ops take all operands partial over the same axes or none;
  ONE_SIDED ops take at most one partial operand among their linear operands and none elsewhere;
  any other op rejects a partial operand ("reduce it first"). Only `sum` partials flow through ops;
  a `max` partial must be reduced before any use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lamina.ir.optable import Linearity, OpInfo, Sharding
from lamina.ir.shapes import TensorInfo

Axes = tuple[str, ...]


@dataclass(frozen=True)
class Spec:
    """A placement without its mesh: per-dimension split axes and pending-reduction axes."""

    splits: tuple[Axes, ...]
    partial: Axes = ()
    partial_kind: str = "sum"

    @staticmethod
    def replicated(rank: int) -> Spec:
        return Spec(((),) * rank)

    def __str__(self) -> str:
        dims = "[" + ", ".join("[" + ", ".join(d) + "]" for d in self.splits) + "]"
        return dims + (f" partial = {self.partial_kind}[{', '.join(self.partial)}]"
                       if self.partial else "")


class ShardingError(Exception):
    """A placement that breaks an op's sharding rule (the message names the rule)."""


def _fmt(axes: Axes) -> str:
    return "[" + ", ".join(axes) + "]"


def _check_partial(info: OpInfo, specs: Sequence[Spec | None]) -> tuple[Axes, str]:
    """The partial axes the result inherits from its operands under the op's linearity."""
    partials = [(i, s) for i, s in enumerate(specs) if s is not None and s.partial]
    if not partials:
        return (), "sum"
    name = info.full_name
    for i, s in partials:
        if s.partial_kind != "sum":
            raise ShardingError(f"{name}: operand {i} is a pending max over {_fmt(s.partial)}; "
                                "a max partial must be all-reduced before any use")
    if info.linearity is Linearity.NONE:
        i, s = partials[0]
        raise ShardingError(f"{name} is not linear: operand {i} is partial over "
                            f"{_fmt(s.partial)} and must be all-reduced first")
    if info.linearity is Linearity.ADDITIVE:
        present = [s for s in specs if s is not None]
        axes = {s.partial for s in present}
        if len(axes) != 1:
            raise ShardingError(f"{name} is additive: its operands must all be partial over the "
                                f"same axes or none, got {', '.join(_fmt(s.partial) for s in present)}")
        return present[0].partial, "sum"
    # ONE_SIDED
    if len(partials) > 1:
        raise ShardingError(f"{name} is linear in one operand at a time: operands "
                            f"{', '.join(str(i) for i, _ in partials)} are all partial")
    i, s = partials[0]
    if i not in info.linear_operands:
        raise ShardingError(f"{name} is not linear in operand {i}, which is partial over "
                            f"{_fmt(s.partial)}; all-reduce it first")
    return s.partial, "sum"


def _elementwise(info: OpInfo, ops: Sequence[TensorInfo | None], specs: Sequence[Spec | None],
                 result: TensorInfo) -> tuple[Axes, ...]:
    rank = len(result.shape)
    out: list[Axes | None] = [None] * rank
    for t, s in zip(ops, specs, strict=True):
        if t is None or s is None:
            continue
        off = rank - len(t.shape)
        for d, size in enumerate(t.shape):
            rd = d + off
            split = s.splits[d]
            if size != result.shape[rd]:
                if split:
                    raise ShardingError(f"{info.full_name}: a broadcast dimension (size {size} -> "
                                        f"{result.shape[rd]}) cannot be split, got {_fmt(split)}")
                continue
            if out[rd] is None:
                out[rd] = split
            elif out[rd] != split:
                raise ShardingError(f"{info.full_name}: elementwise operands must split dimension "
                                    f"{rd} alike, got {_fmt(out[rd] or ())} and {_fmt(split)}")
    return tuple(o or () for o in out)


def _reshape_groups(src: Sequence[int], dst: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """Pair up minimal groups of source and result dims with equal element counts."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(src) or j < len(dst):
        gi, gj = [], []
        pi = pj = 1
        while True:
            if pi <= pj and i < len(src):
                pi *= src[i]
                gi.append(i)
                i += 1
            elif j < len(dst):
                pj *= dst[j]
                gj.append(j)
                j += 1
            else:
                break
            if pi == pj and (i == len(src) or src[i] != 1 or j == len(dst)) and gi and gj:
                break
        groups.append((gi, gj))
    return groups


def infer(info: OpInfo, ops: Sequence[TensorInfo | None], specs: Sequence[Spec | None],
          attrs: dict[str, Any], result: TensorInfo) -> Spec:
    """The result placement the op's rule gives for operand placements `specs`."""
    out = _infer(info, ops, specs, attrs, result)
    used = [a for d in out.splits for a in d] + list(out.partial)
    dup = sorted({a for a in used if used.count(a) > 1})
    if dup:
        raise ShardingError(f"{info.full_name}: the operands' placements would use mesh axis "
                            f"'{dup[0]}' twice in the result ({out})")
    return out


def _infer(info: OpInfo, ops: Sequence[TensorInfo | None], specs: Sequence[Spec | None],
           attrs: dict[str, Any], result: TensorInfo) -> Spec:
    partial, kind = _check_partial(info, specs)
    rule = info.sharding
    name = info.full_name
    x, sx = (ops[0], specs[0]) if ops else (None, None)  # constants have no operands
    if rule is Sharding.ELEMENTWISE:
        return Spec(_elementwise(info, ops, specs, result), partial, kind)
    if rule is Sharding.REPLICATED:
        return Spec.replicated(len(result.shape))
    assert x is not None and sx is not None
    rank = len(x.shape)
    if rule is Sharding.REDUCTION:
        axes = {a % rank for a in attrs["axes"]}
        keep = bool(attrs["keepdims"])
        splits: list[Axes] = []
        new_partial = list(partial)
        for d in range(rank):
            if d in axes:
                if sx.splits[d]:
                    if info.split_reduce is None:
                        raise ShardingError(f"{name}: cannot {info.name} over split dimension {d} "
                                            f"({_fmt(sx.splits[d])}); gather it or use reduce_sum")
                    if info.split_reduce != "sum":
                        kind = info.split_reduce
                    new_partial.extend(sx.splits[d])
                if keep:
                    splits.append(())
            else:
                splits.append(sx.splits[d])
        if kind == "max" and partial:
            raise ShardingError(f"{name}: cannot mix a pending sum with a pending max")
        return Spec(tuple(splits), tuple(new_partial), kind)
    if rule is Sharding.ROW_REDUCTION:
        first = attrs["axis"] % rank
        normalized = range(first, rank) if info.normalizes_trailing else [first]
        for d in normalized:
            if sx.splits[d]:
                raise ShardingError(f"{name}: normalized dimension {d} must be unsplit, got "
                                    f"{_fmt(sx.splits[d])}")
        for i, s in enumerate(specs[1:], start=1):
            if s is not None and any(s.splits):
                raise ShardingError(f"{name}: operand {i} (scale/bias) must be replicated, got {s}")
        return Spec(sx.splits, partial, kind)
    if rule is Sharding.MATMUL:
        b, sb = ops[1], specs[1]
        assert b is not None and sb is not None
        ka, kb = sx.splits[-1], sb.splits[-2]
        if ka != kb:
            raise ShardingError(f"{name}: the contracting dimension must be split on the same axes "
                                f"on both sides, got lhs {_fmt(ka)} and rhs {_fmt(kb)}")
        if sx.splits[-2] and sx.splits[-2] == sb.splits[-1]:
            raise ShardingError(f"{name}: M and N cannot both be split on {_fmt(sx.splits[-2])}")
        batch_res = TensorInfo(result.shape[:-2], result.dtype)
        batch = _elementwise(info, [TensorInfo(x.shape[:-2], x.dtype),
                                    TensorInfo(b.shape[:-2], b.dtype)],
                             [Spec(sx.splits[:-2]), Spec(sb.splits[:-2])], batch_res)
        return Spec(batch + (sx.splits[-2], sb.splits[-1]), partial + ka, kind)
    if rule is Sharding.TRANSPOSE:
        return Spec(tuple(sx.splits[p] for p in attrs["permutation"]), partial, kind)
    if rule is Sharding.RESHAPE:
        out: list[Axes] = [()] * len(result.shape)
        for gi, gj in _reshape_groups(x.shape, result.shape):
            split_dims = [d for d in gi if sx.splits[d]]
            if not split_dims:
                continue
            major = next((d for d in gi if x.shape[d] != 1), gi[0])
            if split_dims != [major] or not gj:
                raise ShardingError(f"{name}: only the major-most dimension of a reshaped group may "
                                    f"be split (dimensions {gi} -> {gj})")
            target = next((d for d in gj if result.shape[d] != 1), gj[0])
            out[target] = sx.splits[major]  # even division is checked with the mesh's sizes
        return Spec(tuple(out), partial, kind)
    if rule is Sharding.BROADCAST:
        dims = list(attrs["broadcast_dimensions"])
        out_b: list[Axes] = [()] * len(result.shape)
        for i, d in enumerate(dims):
            if sx.splits[i]:
                if x.shape[i] != result.shape[d]:
                    raise ShardingError(f"{name}: a broadcast dimension (size 1) cannot be split")
                out_b[d] = sx.splits[i]
        return Spec(tuple(out_b), partial, kind)
    if rule is Sharding.SLICE:
        strides = attrs.get("strides") or [1] * rank
        for d in range(rank):
            whole = attrs["start"][d] == 0 and attrs["limit"][d] == x.shape[d] and strides[d] == 1
            if sx.splits[d] and not whole:
                raise ShardingError(f"{name}: sliced dimension {d} must be unsplit, got "
                                    f"{_fmt(sx.splits[d])}")
        return Spec(sx.splits, partial, kind)
    if rule is Sharding.CONCAT:
        dim = attrs["dim"] % rank
        first = specs[0]
        assert first is not None
        for i, s in enumerate(specs):
            assert s is not None
            if s.splits[dim]:
                raise ShardingError(f"{name}: the concat dimension {dim} must be unsplit in every "
                                    f"operand (operand {i} has {_fmt(s.splits[dim])})")
            if s.splits != first.splits:
                raise ShardingError(f"{name}: operands must be split alike, got {first} and {s}")
        return Spec(first.splits, partial, kind)
    raise AssertionError(f"no sharding rule for {rule}")
