"""Shape and element-type rules of Lamina's ops, on plain (shape, dtype) descriptions.

Each rule takes the operands' `TensorInfo`s, the op's attributes as Python values and the declared
result, and returns the result `TensorInfo` the op produces, or raises `ShapeError` with a message
that says what is wrong. The verifier compares the returned info with the declared result type;
importers and builders can call the same rules to infer types. Rules know nothing about xDSL, so
other front ends (torch, ONNX) and back ends (JAX) can share them; `info_of` is the one bridge,
reading an xDSL value's type as a `TensorInfo` for them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lamina.ir.core.dtypes import FLOAT_TYPES, INT_TYPES, tensor_dtype, tensor_shape

if TYPE_CHECKING:
    from xdsl.ir import SSAValue


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]
    dtype: str

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        return "tensor<" + "".join(f"{d}x" for d in self.shape) + self.dtype + ">"


def info_of(v: SSAValue) -> TensorInfo:
    """The (shape, element type) of a tensor value, as the rules take it.

    The one bridge from xDSL values to rules, kept beside `TensorInfo` because this is the lowest
    module every reader shares: the VJP rules need it and are imported by the op table, so it can
    live in nothing that imports the table (the builder, `opbase`)."""
    return TensorInfo(tensor_shape(v.type), tensor_dtype(v.type))


@dataclass(frozen=True)
class TensorLiteral:
    """A constant's value: its type, and a function that materializes its elements on demand
    (verification only needs the type; large literals are converted only when run)."""

    shape: tuple[int, ...]
    dtype: str
    materialize: Callable[[], Any]


class ShapeError(Exception):
    """An operand, attribute or result that breaks an op's rule (message says which)."""


Attrs = dict[str, Any]
Operands = Sequence[TensorInfo | None]


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy broadcasting of `shapes`; ShapeError naming the shapes when they do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for i in range(rank):
        size = 1
        for s in shapes:
            d = s[i - rank + len(s)] if i - rank + len(s) >= 0 else 1
            if d != 1:
                if size != 1 and size != d:
                    shown = ", ".join(str(tuple(s)) for s in shapes)
                    raise ShapeError(f"operand shapes {shown} do not broadcast")
                size = d
        out.append(size)
    return tuple(out)


def _need_float(name: str, t: TensorInfo) -> None:
    if t.dtype not in FLOAT_TYPES:
        raise ShapeError(f"{name} must have a float element type, got {t.dtype}")


def _same_dtype(ts: Sequence[TensorInfo]) -> str:
    dtypes = {t.dtype for t in ts}
    if len(dtypes) != 1:
        raise ShapeError(f"operands must share one element type, got {', '.join(t.dtype for t in ts)}")
    return ts[0].dtype


def _axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def _present(ops: Operands) -> list[TensorInfo]:
    return [t for t in ops if t is not None]


# ---- elementwise ---------------------------------------------------------------------------------

def unary(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    (x,) = _present(ops)
    _need_float("operand", x)
    return x


def binary(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    a, b = _present(ops)
    _need_float("operand", a)
    return TensorInfo(broadcast_shapes(a.shape, b.shape), _same_dtype([a, b]))


def _need_number(name: str, t: TensorInfo) -> None:
    if t.dtype == "i1":
        raise ShapeError(f"{name} must have a numeric element type (a float, i32 or i64), got i1")


def unary_numeric(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    """`unary` for the rows also defined on integers (neg, abs)."""
    (x,) = _present(ops)
    _need_number("operand", x)
    return x


def binary_numeric(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    """`binary` for the rows also defined on integers (add, sub, mul, max, min)."""
    a, b = _present(ops)
    dtype = _same_dtype([a, b])
    _need_number("operand", a)
    return TensorInfo(broadcast_shapes(a.shape, b.shape), dtype)


def compare(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    a, b = _present(ops)
    _same_dtype([a, b])
    return TensorInfo(broadcast_shapes(a.shape, b.shape), "i1")


def select(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    c, a, b = _present(ops)
    if c.dtype != "i1":
        raise ShapeError(f"condition must have element type i1, got {c.dtype}")
    return TensorInfo(broadcast_shapes(c.shape, a.shape, b.shape), _same_dtype([a, b]))


def cast(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    (x,) = _present(ops)
    return TensorInfo(x.shape, declared.dtype)


def dropout(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    x, seed = ops[0], ops[1] if len(ops) > 1 else None
    assert x is not None
    _need_float("operand", x)
    rate = attrs["rate"]
    if not 0.0 <= rate < 1.0:
        raise ShapeError(f"rate must be in [0, 1), got {rate}")
    has_attr = attrs.get("seed") is not None
    if seed is not None:
        if has_attr:
            raise ShapeError("seed is given both as an attribute and as an operand")
        if seed.shape != () or seed.dtype not in INT_TYPES or seed.dtype == "i1":
            raise ShapeError(f"seed operand must be a rank-0 i32 or i64 tensor, got {seed}")
    elif not has_attr:
        raise ShapeError("needs a seed: a 'seed' attribute or a seed operand")
    return x


# ---- constants -----------------------------------------------------------------------------------

def constant(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    value: TensorLiteral = attrs["value"]
    return TensorInfo(value.shape, value.dtype)


# ---- reductions and composites -------------------------------------------------------------------

def reduce(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    (x,) = _present(ops)
    _need_float("operand", x)
    axes = [_axis(a, x.rank, "reduction axis") for a in attrs["axes"]]
    if len(set(axes)) != len(axes):
        raise ShapeError(f"reduction axes {list(attrs['axes'])} repeat an axis")
    if not axes:
        raise ShapeError("needs at least one reduction axis")
    keep = attrs["keepdims"]
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
    return TensorInfo(shape, x.dtype)


def reduce_nonempty(what: str) -> Callable[[Operands, Attrs, TensorInfo], TensorInfo]:
    """`reduce` for a reduction that has no value over no elements: max has no identity and the
    mean of nothing is 0/0. Only the sum is defined there (as 0, NumPy's and MLIR's identity), so an
    empty reduced axis is refused here rather than failing inside NumPy when the program runs."""

    def rule(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
        result = reduce(ops, attrs, declared)
        (x,) = _present(ops)
        for a in attrs["axes"]:
            if x.shape[a % x.rank] == 0:
                raise ShapeError(f"reduction axis {a} has size 0: the {what} of no elements is "
                                 "undefined (only reduce_sum is defined there, as 0)")
        return result

    return rule


def normalization(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    x = ops[0]
    assert x is not None
    _need_float("operand", x)
    if x.rank == 0:
        raise ShapeError("operand must have rank >= 1")
    axis = _axis(attrs["axis"], x.rank)
    if not attrs["eps"] >= 0:  # also rejects NaN
        raise ShapeError(f"eps must be >= 0, got {attrs['eps']}")
    norm_shape = x.shape[axis:]
    for name, t in zip(("scale", "bias"), ops[1:], strict=False):
        if t is None:
            continue
        if t.dtype != x.dtype:
            raise ShapeError(f"{name} element type {t.dtype} differs from operand's {x.dtype}")
        if t.shape != norm_shape:
            raise ShapeError(f"{name} shape {t.shape} must equal the normalized shape {norm_shape}")
    return x


def softmax(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    (x,) = _present(ops)
    _need_float("operand", x)
    if x.rank == 0:
        raise ShapeError("operand must have rank >= 1")
    _axis(attrs["axis"], x.rank)
    return x


def scan(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    """A prefix combination along `axis` (cumsum): the operand's type, numeric (torch counts
    positions with an i64 cumsum of a mask), rank >= 1."""
    (x,) = _present(ops)
    _need_number("operand", x)
    if x.rank == 0:
        raise ShapeError("operand must have rank >= 1")
    _axis(attrs["axis"], x.rank)
    return x


# ---- linear algebra and layout -------------------------------------------------------------------

def matmul(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    a, b = _present(ops)
    _need_float("lhs", a)
    dtype = _same_dtype([a, b])
    if a.rank < 2 or b.rank < 2:
        raise ShapeError(f"operands must have rank >= 2, got ranks {a.rank} and {b.rank}")
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(
            f"contracting dimensions differ: lhs {a.shape} has {a.shape[-1]}, rhs {b.shape} has "
            f"{b.shape[-2]}"
        )
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return TensorInfo(batch + (a.shape[-2], b.shape[-1]), dtype)


def transpose(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    (x,) = _present(ops)
    perm = tuple(attrs["permutation"])
    if sorted(perm) != list(range(x.rank)):
        raise ShapeError(f"permutation {list(perm)} is not a permutation of 0..{x.rank - 1}")
    return TensorInfo(tuple(x.shape[p] for p in perm), x.dtype)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def reshape(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    (x,) = _present(ops)
    if _numel(x.shape) != _numel(declared.shape):
        raise ShapeError(
            f"cannot reshape {x} ({_numel(x.shape)} elements) to {declared} "
            f"({_numel(declared.shape)} elements)"
        )
    return TensorInfo(declared.shape, x.dtype)


def broadcast_in_dim(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    (x,) = _present(ops)
    dims = list(attrs["broadcast_dimensions"])
    if len(dims) != x.rank:
        raise ShapeError(
            f"broadcast_dimensions has {len(dims)} entries, operand has rank {x.rank}"
        )
    if len(set(dims)) != len(dims):
        raise ShapeError(f"broadcast_dimensions {dims} repeat a dimension")
    for i, d in enumerate(dims):
        if not 0 <= d < declared.rank:
            raise ShapeError(f"broadcast dimension {d} is out of range for result rank {declared.rank}")
        if x.shape[i] not in (1, declared.shape[d]):
            raise ShapeError(
                f"operand dimension {i} of size {x.shape[i]} cannot broadcast to result dimension "
                f"{d} of size {declared.shape[d]}"
            )
    return TensorInfo(declared.shape, x.dtype)


def slice_(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    (x,) = _present(ops)
    start, limit = list(attrs["start"]), list(attrs["limit"])
    strides = list(attrs["strides"]) if attrs.get("strides") is not None else [1] * x.rank
    for name, v in (("start", start), ("limit", limit), ("strides", strides)):
        if len(v) != x.rank:
            raise ShapeError(f"{name} has {len(v)} entries, operand has rank {x.rank}")
    shape = []
    for d, (s, e, st) in enumerate(zip(start, limit, strides, strict=True)):
        if st < 1:
            raise ShapeError(f"stride {st} in dimension {d} must be >= 1")
        if not 0 <= s <= e <= x.shape[d]:
            raise ShapeError(
                f"slice [{s}, {e}) of dimension {d} is out of bounds for size {x.shape[d]}"
            )
        shape.append((e - s + st - 1) // st)
    return TensorInfo(tuple(shape), x.dtype)


def pad(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    """`low[d]` and `high[d]` elements of `value` added before and after each dim: non-negative
    (a crop is a slice), and an integral value for an integer operand."""
    (x,) = _present(ops)
    _need_number("operand", x)
    low, high = list(attrs["low"]), list(attrs["high"])
    for name, v in (("low", low), ("high", high)):
        if len(v) != x.rank:
            raise ShapeError(f"{name} has {len(v)} entries, operand has rank {x.rank}")
        if any(p < 0 for p in v):
            raise ShapeError(f"{name} {v} has a negative entry (a crop is a lamina.slice)")
    value = float(attrs["value"])
    if x.dtype in ("i32", "i64") and not value.is_integer():
        raise ShapeError(f"value {value} is not an integer, the operand is {x.dtype}")
    return TensorInfo(tuple(n + lo + hi for n, lo, hi in zip(x.shape, low, high, strict=True)),
                      x.dtype)


def concat(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    xs = _present(ops)
    if not xs:
        raise ShapeError("needs at least one operand")
    dtype = _same_dtype(xs)
    rank = xs[0].rank
    if rank == 0:
        raise ShapeError("operands must have rank >= 1")
    if any(x.rank != rank for x in xs):
        raise ShapeError(f"operands must share one rank, got {[x.rank for x in xs]}")
    dim = _axis(attrs["dim"], rank, "dim")
    for x in xs[1:]:
        for d in range(rank):
            if d != dim and x.shape[d] != xs[0].shape[d]:
                raise ShapeError(
                    f"operand shapes {xs[0].shape} and {x.shape} differ outside dim {dim}"
                )
    shape = list(xs[0].shape)
    shape[dim] = sum(x.shape[dim] for x in xs)
    return TensorInfo(tuple(shape), dtype)


# ---- indexing and index sources -----------------------------------------------------------------

INDEX_TYPES = ("i32", "i64")


def gather(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    """input[..., indices, ...] along `axis`: the indices' dims replace dimension `axis`."""
    x, idx = _present(ops)
    if x.rank == 0:
        raise ShapeError("input must have rank >= 1")
    if idx.dtype not in INDEX_TYPES:
        raise ShapeError(f"indices must have element type i32 or i64, got {idx.dtype}")
    axis = _axis(attrs["axis"], x.rank)
    return TensorInfo(x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)


def iota(ops: Operands, attrs: Attrs, declared: TensorInfo) -> TensorInfo:
    """The declared type, which must be numeric and have the dimension `dim` counts along."""
    if declared.dtype == "i1":
        raise ShapeError("result must have a numeric element type, got i1")
    if declared.rank == 0:
        raise ShapeError("result must have rank >= 1")
    _axis(attrs["dim"], declared.rank, "dim")
    return declared
