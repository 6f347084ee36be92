"""Sharding rules: how the placements of an op's operands determine the placement of its result.

Each op-table row holds its rule (`OpInfo.sharding`, one of the `ShardingRule` objects below) and
its linearity (`OpInfo.linearity`); this module implements the rules once, on plain `Spec`s, so
the verifier (a fully placed program must obey them), the propagation pass and the SPMD interpreter
all agree. A rule's `result` either returns the result's `Spec` or raises `ShardingError` whose
message names the rule that is broken; `operand_hint` maps a wanted result placement back onto an
operand and `follow` says how an operand lines up with another one (both for propagate-sharding),
and `local_attrs` rewrites attributes for one device's shard (the SPMD interpreter).

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
  concat dimension must be unsplit, and the operands agree elsewhere. pad: padded dimensions
  must be unsplit. constants are replicated.
- scan (cumsum): the scanned dimension must be unsplit, the others keep their splits. Each element
  depends on every element before it along that dimension, so a split scanned dimension would
  need a prefix-sum collective (each device adding the totals of the devices before it); Lamina
  has none, and `propagate-sharding` refuses such a program with a diagnostic (`refusal`) instead
  of gathering the dimension behind the user's back.
- partial values (linearity): ADDITIVE ops take all operands partial over the same axes or none;
  ONE_SIDED ops take at most one partial operand among their linear operands and none elsewhere;
  any other op rejects a partial operand ("reduce it first"). Only `sum` partials flow through ops;
  a `max` partial must be reduced before any use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from lamina.ir.core.shapes import TensorInfo

Axes = tuple[str, ...]
Hint = tuple[Axes | None, ...]   # per dimension: wanted split axes, or None when open


class Linearity(Enum):
    """Whether a value that is a pending sum over devices (`partial`) may flow through the op.

    ADDITIVE:   f(a1 + a2, b1 + b2) = f(a1, b1) + f(a2, b2): every operand may be partial (all or
                none), the result is partial (add, sub, neg, reduce_sum, layout ops, widening
                float casts).
    ONE_SIDED:  linear in each listed operand separately: exactly one of `linear_operands` may be
                partial and the others must not be (mul, matmul; div in its numerator).
    NONE:       a partial operand must be reduced first (exp, gelu, max, softmax, integer and
                narrowing casts, ...).
    """

    ADDITIVE = "additive"
    ONE_SIDED = "one_sided"
    NONE = "none"


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


class OpInfo(Protocol):
    """The facts of an op-table row (`lamina.ir.ops.optable.OpInfo`) the rules read."""

    @property
    def name(self) -> str: ...
    @property
    def full_name(self) -> str: ...
    def linearity_for(self, operands: Sequence[TensorInfo | None],
                      result: TensorInfo) -> Linearity: ...
    @property
    def linear_operands(self) -> tuple[int, ...]: ...
    @property
    def sharding(self) -> ShardingRule: ...


def _fmt(axes: Axes) -> str:
    return "[" + ", ".join(axes) + "]"


def _check_partial(info: OpInfo, ops: Sequence[TensorInfo | None], specs: Sequence[Spec | None],
                   result: TensorInfo) -> tuple[Axes, str]:
    """The partial axes the result inherits from its operands under the op's linearity."""
    partials = [(i, s) for i, s in enumerate(specs) if s is not None and s.partial]
    if not partials:
        return (), "sum"
    name = info.full_name
    linearity = info.linearity_for(ops, result)
    for i, s in partials:
        if s.partial_kind != "sum":
            raise ShardingError(f"{name}: operand {i} is a pending max over {_fmt(s.partial)}; "
                                "a max partial must be all-reduced before any use")
    if linearity is Linearity.NONE:
        i, s = partials[0]
        raise ShardingError(f"{name} is not linear: operand {i} is partial over "
                            f"{_fmt(s.partial)} and must be all-reduced first")
    if linearity is Linearity.ADDITIVE:
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


def _elementwise(name: str, ops: Sequence[TensorInfo | None], specs: Sequence[Spec | None],
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
                    raise ShardingError(f"{name}: a broadcast dimension (size {size} -> "
                                        f"{result.shape[rd]}) cannot be split, got {_fmt(split)}")
                continue
            if out[rd] is None:
                out[rd] = split
            elif out[rd] != split:
                raise ShardingError(f"{name}: elementwise operands must split dimension "
                                    f"{rd} alike, got {_fmt(out[rd] or ())} and {_fmt(split)}")
    return tuple(o or () for o in out)


def _reshape_groups(src: Sequence[int], dst: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """Pair up minimal groups of source and result dims with equal element counts."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(src) or j < len(dst):
        gi: list[int] = []
        gj: list[int] = []
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


# ---- the rules -----------------------------------------------------------------------------------

class ShardingRule:
    """How one kind of op maps operand placements to its result placement (see the module
    docstring); the defaults say: nothing flows back, operands do not line up, attributes are the
    same on every device."""

    name = "rule"

    def result(self, info: OpInfo, ops: Sequence[TensorInfo | None], specs: Sequence[Spec | None],
               attrs: dict[str, Any], result: TensorInfo, partial: Axes, kind: str) -> Spec:
        raise NotImplementedError

    def operand_hint(self, i: int, shape: tuple[int, ...], rshape: tuple[int, ...], h: Hint,
                     attrs: dict[str, Any]) -> Hint | None:
        """The placement operand `i` (of `shape`) should have for the result to get hint `h`;
        None when this rule says nothing about that operand."""
        return None

    def follow(self, i: int, shape: tuple[int, ...], lshape: tuple[int, ...], leader: Spec,
               own: Spec, rshape: tuple[int, ...]) -> list[Axes] | None:
        """Splits operand `i` needs to agree with the leading operand placed `leader` (None: the
        rule cannot line them up; replicate)."""
        return None

    def local_attrs(self, attrs: dict[str, Any], operand: Spec | None,
                    local: TensorInfo | None) -> dict[str, Any]:
        """The attributes one device runs the op with on its shard."""
        return attrs

    def refusal(self, info: OpInfo, specs: Sequence[Spec | None],
                attrs: dict[str, Any]) -> str | None:
        """Why `propagate-sharding` must refuse these operand placements rather than reshard
        them to ones the rule accepts (None: resharding is fine, the default)."""
        return None

    def __repr__(self) -> str:
        return f"<sharding rule {self.name}>"


class Elementwise(ShardingRule):
    """Dimensions aligned by broadcasting keep their splits; broadcast dims must be unsplit."""

    name = "elementwise"

    def result(self, info, ops, specs, attrs, result, partial, kind):
        return Spec(_elementwise(info.full_name, ops, specs, result), partial, kind)

    def operand_hint(self, i, shape, rshape, h, attrs):
        rank = len(rshape)
        return tuple(h[d + rank - len(shape)] if size == rshape[d + rank - len(shape)] else ()
                     for d, size in enumerate(shape))

    def follow(self, i, shape, lshape, leader, own, rshape):
        rank = len(rshape)
        out: list[Axes] = []
        for d, size in enumerate(shape):
            rd = d + rank - len(shape)
            ld = rd - (rank - len(lshape))
            if size == rshape[rd] and 0 <= ld < len(lshape) and lshape[ld] == size:
                out.append(leader.splits[ld])
            else:
                out.append(())
        return out


class Reduction(ShardingRule):
    """Kept dims keep their splits; a reduced dim split over axes A leaves the result pending
    `combine`[A] ("sum" / "max"), or is refused when `combine` is None (a mean of unequal parts)."""

    name = "reduction"

    def __init__(self, combine: str | None):
        self.combine = combine

    def result(self, info, ops, specs, attrs, result, partial, kind):
        x, sx = ops[0], specs[0]
        assert x is not None and sx is not None
        rank = len(x.shape)
        axes = {a % rank for a in attrs["axes"]}
        keep = bool(attrs["keepdims"])
        splits: list[Axes] = []
        new_partial = list(partial)
        for d in range(rank):
            if d in axes:
                if sx.splits[d]:
                    if self.combine is None:
                        raise ShardingError(f"{info.full_name}: cannot {info.name} over split "
                                            f"dimension {d} ({_fmt(sx.splits[d])}); gather it or "
                                            "use reduce_sum")
                    if self.combine != "sum":
                        kind = self.combine
                    new_partial.extend(sx.splits[d])
                if keep:
                    splits.append(())
            else:
                splits.append(sx.splits[d])
        if kind == "max" and partial:
            raise ShardingError(f"{info.full_name}: cannot mix a pending sum with a pending max")
        return Spec(tuple(splits), tuple(new_partial), kind)

    def operand_hint(self, i, shape, rshape, h, attrs):
        if i != 0:
            return None
        axes = {a % len(shape) for a in attrs["axes"]} if shape else set()
        out: list[Axes | None] = [None] * len(shape)
        k = 0
        for d in range(len(shape)):
            if d in axes:
                k += 1 if attrs["keepdims"] else 0
                continue
            out[d] = h[k]
            k += 1
        return tuple(out)


class RowReduction(ShardingRule):
    """Composites (layernorm, rmsnorm, softmax): the normalized dims (axis..rank-1 when
    `trailing`, else only `axis`) must be unsplit, the others keep their splits; scale and bias
    are replicated."""

    name = "row_reduction"

    def __init__(self, trailing: bool):
        self.trailing = trailing

    def result(self, info, ops, specs, attrs, result, partial, kind):
        x, sx = ops[0], specs[0]
        assert x is not None and sx is not None
        rank = len(x.shape)
        first = attrs["axis"] % rank
        normalized = range(first, rank) if self.trailing else [first]
        for d in normalized:
            if sx.splits[d]:
                raise ShardingError(f"{info.full_name}: normalized dimension {d} must be unsplit, "
                                    f"got {_fmt(sx.splits[d])}")
        for i, s in enumerate(specs[1:], start=1):
            if s is not None and any(s.splits):
                raise ShardingError(f"{info.full_name}: operand {i} (scale/bias) must be "
                                    f"replicated, got {s}")
        return Spec(sx.splits, partial, kind)

    def operand_hint(self, i, shape, rshape, h, attrs):
        if i != 0:
            return None
        first = attrs["axis"] % len(shape)
        return tuple(() if d >= first else h[d] for d in range(len(shape)))


class Scan(ShardingRule):
    """A prefix combination along `axis` (cumsum): that dim must be unsplit, the others keep
    their splits. A split scanned dim is refused outright (`refusal`): it would need a prefix-sum
    collective, which Lamina does not have, and gathering the whole dim silently would hide a
    program that does not scale."""

    name = "scan"

    def _split_axis(self, specs: Sequence[Spec | None], attrs: dict[str, Any]) -> tuple[int, Axes]:
        sx = specs[0]
        assert sx is not None
        d = attrs["axis"] % len(sx.splits)
        return d, sx.splits[d]

    def result(self, info, ops, specs, attrs, result, partial, kind):
        d, split = self._split_axis(specs, attrs)
        if split:
            raise ShardingError(f"{info.full_name}: the scanned dimension {d} must be unsplit, "
                                f"got {_fmt(split)}")
        sx = specs[0]
        assert sx is not None
        return Spec(sx.splits, partial, kind)

    def operand_hint(self, i, shape, rshape, h, attrs):
        d = attrs["axis"] % len(shape)
        return tuple(() if k == d else h[k] for k in range(len(shape)))

    def refusal(self, info, specs, attrs):
        if specs[0] is None:
            return None
        d, split = self._split_axis(specs, attrs)
        if not split:
            return None
        return (f"{info.full_name} scans dimension {d}, which is split over {_fmt(split)}: a scan "
                "along a split dimension needs a prefix-sum collective, which Lamina does not "
                "have; place the scanned dimension unsplit (or reshard it before the scan)")


class Matmul(ShardingRule):
    """Batch dims as elementwise; M from the lhs, N from the rhs; the contracting dim split alike
    on both sides, which leaves the result pending sum over those axes."""

    name = "matmul"

    def result(self, info, ops, specs, attrs, result, partial, kind):
        x, sx, b, sb = ops[0], specs[0], ops[1], specs[1]
        assert x is not None and sx is not None and b is not None and sb is not None
        name = info.full_name
        ka, kb = sx.splits[-1], sb.splits[-2]
        if ka != kb:
            raise ShardingError(f"{name}: the contracting dimension must be split on the same axes "
                                f"on both sides, got lhs {_fmt(ka)} and rhs {_fmt(kb)}")
        if sx.splits[-2] and sx.splits[-2] == sb.splits[-1]:
            raise ShardingError(f"{name}: M and N cannot both be split on {_fmt(sx.splits[-2])}")
        batch_res = TensorInfo(result.shape[:-2], result.dtype)
        batch = _elementwise(name, [TensorInfo(x.shape[:-2], x.dtype),
                                    TensorInfo(b.shape[:-2], b.dtype)],
                             [Spec(sx.splits[:-2]), Spec(sb.splits[:-2])], batch_res)
        return Spec(batch + (sx.splits[-2], sb.splits[-1]), partial + ka, kind)

    def operand_hint(self, i, shape, rshape, h, attrs):
        if len(shape) < 2:
            return None
        out: list[Axes | None] = [None] * len(shape)
        if i == 0:
            out[-2] = h[-2]
        else:
            out[-1] = h[-1]
        return tuple(out)

    def follow(self, i, shape, lshape, leader, own, rshape):
        out: list[Axes] = [()] * len(shape)
        # batch dims aligned from the right of the batch part
        nb, lb = len(shape) - 2, len(lshape) - 2
        for d in range(nb):
            ld = d - (nb - lb)
            if 0 <= ld < lb and lshape[ld] == shape[d]:
                out[d] = leader.splits[ld]
        if i == 1:   # rhs follows lhs: K from lhs, keep own N
            out[-2], out[-1] = leader.splits[-1], own.splits[-1]
        else:        # lhs follows rhs: K from rhs, keep own M
            out[-1], out[-2] = leader.splits[-2], own.splits[-2]
        return out


class Transpose(ShardingRule):
    """Splits move with the permutation."""

    name = "transpose"

    def result(self, info, ops, specs, attrs, result, partial, kind):
        sx = specs[0]
        assert sx is not None
        return Spec(tuple(sx.splits[p] for p in attrs["permutation"]), partial, kind)

    def operand_hint(self, i, shape, rshape, h, attrs):
        out: list[Axes | None] = [None] * len(shape)
        for k, p in enumerate(attrs["permutation"]):
            out[p] = h[k]
        return tuple(out)


class Reshape(ShardingRule):
    """Within each group of dims that reshape merges or splits, only the major-most dim may be
    split, and its split moves to the group's major-most result dim (even division is checked
    against the mesh's sizes)."""

    name = "reshape"

    def result(self, info, ops, specs, attrs, result, partial, kind):
        x, sx = ops[0], specs[0]
        assert x is not None and sx is not None
        out: list[Axes] = [()] * len(result.shape)
        for gi, gj in _reshape_groups(x.shape, result.shape):
            split_dims = [d for d in gi if sx.splits[d]]
            if not split_dims:
                continue
            major = next((d for d in gi if x.shape[d] != 1), gi[0])
            if split_dims != [major] or not gj:
                raise ShardingError(f"{info.full_name}: only the major-most dimension of a "
                                    f"reshaped group may be split (dimensions {gi} -> {gj})")
            target = next((d for d in gj if result.shape[d] != 1), gj[0])
            out[target] = sx.splits[major]
        return Spec(tuple(out), partial, kind)


class Broadcast(ShardingRule):
    """Operand dim i's split moves to result dim broadcast_dimensions[i]; new and broadcast
    (size-1) dims are unsplit."""

    name = "broadcast"

    def result(self, info, ops, specs, attrs, result, partial, kind):
        x, sx = ops[0], specs[0]
        assert x is not None and sx is not None
        out: list[Axes] = [()] * len(result.shape)
        for i, d in enumerate(attrs["broadcast_dimensions"]):
            if sx.splits[i]:
                if x.shape[i] != result.shape[d]:
                    raise ShardingError(f"{info.full_name}: a broadcast dimension (size 1) cannot "
                                        "be split")
                out[d] = sx.splits[i]
        return Spec(tuple(out), partial, kind)

    def operand_hint(self, i, shape, rshape, h, attrs):
        return tuple(h[d] if shape[k] == rshape[d] else ()
                     for k, d in enumerate(attrs["broadcast_dimensions"]))


class Slice(ShardingRule):
    """Sliced dims must be unsplit; a split dim is taken whole on every device."""

    name = "slice"

    def result(self, info, ops, specs, attrs, result, partial, kind):
        x, sx = ops[0], specs[0]
        assert x is not None and sx is not None
        rank = len(x.shape)
        strides = attrs.get("strides") or [1] * rank
        for d in range(rank):
            whole = attrs["start"][d] == 0 and attrs["limit"][d] == x.shape[d] and strides[d] == 1
            if sx.splits[d] and not whole:
                raise ShardingError(f"{info.full_name}: sliced dimension {d} must be unsplit, got "
                                    f"{_fmt(sx.splits[d])}")
        return Spec(sx.splits, partial, kind)

    def operand_hint(self, i, shape, rshape, h, attrs):
        return tuple(h[d] if shape[d] == rshape[d] else () for d in range(len(shape)))

    def local_attrs(self, attrs, operand, local):
        if operand is None or local is None:
            return attrs
        limit = list(attrs["limit"])
        for d, axes in enumerate(operand.splits):
            if axes:
                limit[d] = local.shape[d]  # a split dimension is sliced whole
        return {**attrs, "limit": tuple(limit)}


class Pad(ShardingRule):
    """Padded dims must be unsplit (the fill goes at the ends of the whole dim, not of each
    device's block); the others keep their splits."""

    name = "pad"

    def result(self, info, ops, specs, attrs, result, partial, kind):
        sx = specs[0]
        assert sx is not None
        for d, (lo, hi) in enumerate(zip(attrs["low"], attrs["high"], strict=True)):
            if sx.splits[d] and (lo or hi):
                raise ShardingError(f"{info.full_name}: padded dimension {d} must be unsplit, "
                                    f"got {_fmt(sx.splits[d])}")
        return Spec(sx.splits, partial, kind)

    def operand_hint(self, i, shape, rshape, h, attrs):
        return tuple(h[d] if shape[d] == rshape[d] else () for d in range(len(shape)))


class Concat(ShardingRule):
    """The concat dim must be unsplit in every operand; the operands are split alike."""

    name = "concat"

    def result(self, info, ops, specs, attrs, result, partial, kind):
        first = specs[0]
        assert ops[0] is not None and first is not None
        dim = attrs["dim"] % len(ops[0].shape)
        for i, s in enumerate(specs):
            assert s is not None
            if s.splits[dim]:
                raise ShardingError(f"{info.full_name}: the concat dimension {dim} must be unsplit "
                                    f"in every operand (operand {i} has {_fmt(s.splits[dim])})")
            if s.splits != first.splits:
                raise ShardingError(f"{info.full_name}: operands must be split alike, got {first} "
                                    f"and {s}")
        return Spec(first.splits, partial, kind)

    def follow(self, i, shape, lshape, leader, own, rshape):
        return list(leader.splits)


class Replicated(ShardingRule):
    """Values made from attributes alone (constants) are replicated everywhere."""

    name = "replicated"

    def result(self, info, ops, specs, attrs, result, partial, kind):
        return Spec.replicated(len(result.shape))


def infer(info: OpInfo, ops: Sequence[TensorInfo | None], specs: Sequence[Spec | None],
          attrs: dict[str, Any], result: TensorInfo) -> Spec:
    """The result placement the op's rule gives for operand placements `specs`."""
    partial, kind = _check_partial(info, ops, specs, result)
    out = info.sharding.result(info, ops, specs, attrs, result, partial, kind)
    used = [a for d in out.splits for a in d] + list(out.partial)
    dup = sorted({a for a in used if used.count(a) > 1})
    if dup:
        raise ShardingError(f"{info.full_name}: the operands' placements would use mesh axis "
                            f"'{dup[0]}' twice in the result ({out})")
    return out
