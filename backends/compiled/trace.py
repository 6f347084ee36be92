"""Running the rows' scalar forms on symbolic values: one fused body as a graph of per-element ops.

`Tracer` is the scalar namespace of `lamina.ir.ops.scalar_forms`: every call on it records a `Sym`
(a node: what to compute for one element, its NumPy dtype, its logical shape) instead of
computing. Types follow NumPy exactly: a node's dtype is what the NumPy function gives for
operands of those dtypes (Python scalars weak), found by calling it on zeros, and operations on
constants are folded by NumPy itself, so the graph computes the interpreter's arithmetic.

Where a node sits in the fused loop comes from `dmap`: for each logical dim, the dim of the
group's iteration domain (lead dims, then tail dims) it runs along, or None where the node is
constant along it. Every operation checks that its operands agree on that (NumPy broadcasting by
position must line up with the domain's dims), so a shape manipulation that would move data
between elements (a transpose of a row, a reshape across dims) is refused, with the reason,
instead of being computed wrongly: `CannotCompile`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

CONST, KERNEL, ROW, ELEM = range(4)     # where a node is computed: see `Sym.level`


class CannotCompile(Exception):
    """The generator cannot compile this kernel; the message says which op and why."""


@dataclass(frozen=True)
class Domain:
    """A fused group's iteration space: rows (the lead dims, flattened) x tail."""

    lead: tuple[int, ...]
    tail: tuple[int, ...]

    @property
    def nl(self) -> int:
        return len(self.lead)

    @property
    def nd(self) -> int:
        return len(self.lead) + len(self.tail)

    @property
    def dims(self) -> tuple[int, ...]:
        return self.lead + self.tail


@dataclass(eq=False)
class Sym:
    """One node: `op` ("const", "load", "index", "index_hi", "reduce", "fn", "astype",
    "where") on `args`; `value` is the constant, the load's input number, the reduction's kind,
    or the function's name. Operators build nodes on the tracer, as NumPy arrays would compute."""

    tracer: Tracer
    op: str
    args: tuple[Sym, ...]
    dtype: np.dtype
    shape: tuple[int, ...]
    dmap: tuple[int | None, ...]
    value: Any = None
    level: int = CONST
    id: int = 0                 # creation order within its tracer: a topological order

    def __add__(self, o: Any) -> Sym: return self.tracer.add(self, o)
    def __radd__(self, o: Any) -> Sym: return self.tracer.add(o, self)
    def __sub__(self, o: Any) -> Sym: return self.tracer.subtract(self, o)
    def __rsub__(self, o: Any) -> Sym: return self.tracer.subtract(o, self)
    def __mul__(self, o: Any) -> Sym: return self.tracer.multiply(self, o)
    def __rmul__(self, o: Any) -> Sym: return self.tracer.multiply(o, self)
    def __truediv__(self, o: Any) -> Sym: return self.tracer.divide(self, o)
    def __rtruediv__(self, o: Any) -> Sym: return self.tracer.divide(o, self)
    def __pow__(self, o: Any) -> Sym: return self.tracer.pow(self, o)
    def __neg__(self) -> Sym: return self.tracer.negative(self)
    def __abs__(self) -> Sym: return self.tracer.abs(self)
    def __and__(self, o: Any) -> Sym: return self.tracer.bitwise_and(self, o)
    def __or__(self, o: Any) -> Sym: return self.tracer.bitwise_or(self, o)
    def __xor__(self, o: Any) -> Sym: return self.tracer.bitwise_xor(self, o)
    def __rshift__(self, o: Any) -> Sym: return self.tracer.bitwise_right_shift(self, o)
    def __invert__(self) -> Sym: return self.tracer.logical_not(self)
    def __lt__(self, o: Any) -> Sym: return self.tracer.less(self, o)
    def __le__(self, o: Any) -> Sym: return self.tracer.less_equal(self, o)
    def __gt__(self, o: Any) -> Sym: return self.tracer.greater(self, o)
    def __ge__(self, o: Any) -> Sym: return self.tracer.greater_equal(self, o)
    def __eq__(self, o: Any) -> Sym: return self.tracer.equal(self, o)  # type: ignore[override]
    def __ne__(self, o: Any) -> Sym: return self.tracer.not_equal(self, o)  # type: ignore[override]
    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise CannotCompile("a form branches on a value (it must use `where`)")

    @property
    def ndim(self) -> int:
        return len(self.shape)


# the namespace's elementwise functions: the NumPy ufuncs the formulas call by their array-API
# names (`sp.abs` is np.abs, `sp.pow` np.pow), which also type and fold them; a "fn" node holds
# its ufunc
_FUNCS: frozenset[np.ufunc] = frozenset((
    np.add, np.subtract, np.multiply, np.divide, np.pow, np.maximum, np.minimum, np.negative,
    np.abs, np.exp, np.log, np.tanh, np.sin, np.cos, np.sqrt, np.log2, np.floor, np.trunc,
    np.isfinite, np.equal,
    np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal, np.logical_and,
    np.logical_or, np.logical_not, np.bitwise_and, np.bitwise_or, np.bitwise_xor,
    np.bitwise_right_shift, np.bitwise_left_shift))


def _merge_dmaps(shape: tuple[int, ...], operands: Sequence[Sym]) -> tuple[int | None, ...]:
    """The dims of the domain a broadcast result runs along (operands aligned at the right)."""
    out: list[int | None] = [None] * len(shape)
    for s in operands:
        for k, d in enumerate(s.dmap):
            if d is None:
                continue
            i = len(shape) - len(s.dmap) + k
            if out[i] is not None and out[i] != d:
                raise CannotCompile("operands broadcast along different dims of the loop")
            out[i] = d
    return tuple(out)


class Tracer:
    """The scalar namespace (see the module docstring); one per fused body."""

    float32, float64 = np.float32, np.float64
    int32, int64, uint32, uint64 = np.int32, np.int64, np.uint32, np.uint64
    bool = np.bool_

    def __init__(self, domain: Domain) -> None:
        self.domain = domain
        self._ids = itertools.count()
        self.requires: list[Sym] = []
        self.index_form: str | None = None    # set while tracing a position-dependent op
        self.splits_index = False             # the index's high word is taken per row

    def __getattr__(self, name: str) -> Callable[..., Sym]:
        fn = getattr(np, name, None)
        if not (isinstance(fn, np.ufunc) and fn in _FUNCS):
            raise CannotCompile(f"the compiled backend has no scalar '{name}'")
        return lambda *xs: self._fn(fn, xs)

    # ---- nodes ----------------------------------------------------------------------------------

    def node(self, op: str, args: Sequence[Sym], dtype: Any, shape: tuple[int, ...],
             dmap: tuple[int | None, ...], value: Any = None, level: int | None = None) -> Sym:
        lv = max((a.level for a in args), default=CONST) if level is None else level
        return Sym(self, op, tuple(args), np.dtype(dtype), shape, dmap, value, lv,
                   next(self._ids))

    def const(self, value: Any, dtype: Any = None) -> Sym:
        a = np.asarray(value, dtype=dtype)
        if a.size != 1:
            raise CannotCompile("a constant with more than one element inside a row")
        return self.node("const", (), a.dtype, a.shape, (None,) * a.ndim, a.reshape(()))

    def load(self, slot: int, shape: tuple[int, ...], dtype: Any,
             dmap: tuple[int | None, ...]) -> Sym:
        """Input `slot` as seen by an op: `dmap` says which domain dims it runs along."""
        nl = self.domain.nl
        level = ELEM if any(d is not None and d >= nl for d in dmap) else \
            ROW if any(d is not None for d in dmap) else KERNEL
        return self.node("load", (), dtype, shape, dmap, slot, level)

    def _fn(self, fn: np.ufunc, xs: Sequence[Any]) -> Sym:
        syms = [x for x in xs if isinstance(x, Sym)]
        shape = np.broadcast_shapes(*(x.shape for x in syms))
        if all(s.op == "const" for s in syms):
            with np.errstate(all="ignore"):
                value = fn(*(x.value if isinstance(x, Sym) else x for x in xs))
            return self._view(self.const(value), shape, (None,) * len(shape))
        if any(s.op == "index" for s in syms):
            return self._index_op(fn, xs)
        with np.errstate(all="ignore"):
            dtype = np.asarray(fn(*(np.zeros((), x.dtype) if isinstance(x, Sym) else x
                                    for x in xs))).dtype
        kinds = {s.dtype.kind for s in syms}
        if fn in (np.divide, np.pow) and kinds & {"i", "u"}:
            raise CannotCompile(f"integer '{fn.__name__}'")
        # Python scalars are weak: they take the type NumPy gives them in this operation
        args = [x if isinstance(x, Sym) else self.const(x, self._weak_type(x, syms, dtype))
                for x in xs]
        return self.node("fn", args, dtype, shape, _merge_dmaps(shape, args), fn)

    @staticmethod
    def _weak_type(x: Any, syms: Sequence[Sym], result: np.dtype) -> np.dtype:
        kinds = {s.dtype.kind for s in syms}
        if isinstance(x, bool):
            return np.dtype(np.bool_)
        if isinstance(x, float) and not kinds & {"f"}:
            return np.dtype(np.float64)
        return syms[0].dtype if result.kind == "b" else result

    # ---- the element index (dropout) --------------------------------------------------------------

    def element_index(self) -> Sym:
        """The element's flat index in the op's result (`lamina.ir.ops.scalar_forms`)."""
        form = self.index_form
        if form is None:
            raise CannotCompile("element_index outside a position-dependent op")
        d = self.domain
        level = ELEM if form == "full" and any(t > 1 for t in d.tail) else ROW
        return self.node("index", (), np.uint64, (), (), form, level)

    def _index_op(self, fn: np.ufunc, xs: Sequence[Any]) -> Sym:
        """The index is split in two 32-bit words and nothing else: its low word per element,
        its high word per row (a row that crosses a 2**32 boundary goes to the interpreter)."""
        ix, c = xs
        shift = int(c.value) if isinstance(c, Sym) and c.op == "const" else None
        if fn is np.bitwise_right_shift and shift == 32:
            self.splits_index = ix.value == "full"
            return self.node("index_hi", (ix,), np.uint64, (), (), None, ROW)
        if fn is np.bitwise_and and isinstance(c, Sym) and c.op == "const":
            return self.node("fn", (ix, c), np.uint64, (), (), fn)
        raise CannotCompile(f"the element index used in '{fn.__name__}'")

    # ---- array-API functions with keywords ------------------------------------------------------

    def asarray(self, value: Any, dtype: Any = None) -> Sym:
        return value if isinstance(value, Sym) and dtype is None else self.const(value, dtype)

    def astype(self, x: Sym, dtype: Any) -> Sym:
        dt = np.dtype(dtype)
        if x.op == "const":
            return self._view(self.const(x.value.astype(dt)), x.shape, x.dmap)
        if x.dtype == dt:
            return x
        if x.op == "index":
            raise CannotCompile("the element index converted")
        return self.node("astype", (x,), dt, x.shape, x.dmap)

    def where(self, c: Any, a: Any, b: Any) -> Sym:
        syms = [s for s in (c, a, b) if isinstance(s, Sym)]
        if all(s.op == "const" for s in syms):
            value = np.where(*(s.value if isinstance(s, Sym) else s for s in (c, a, b)))
            shape = np.broadcast_shapes(*(s.shape for s in syms))
            return self._view(self.const(value), shape, (None,) * len(shape))
        dtype = np.result_type(*(s.dtype if isinstance(s, Sym) else s for s in (a, b)))
        cs = c if isinstance(c, Sym) else self.const(c, np.bool_)
        args = [cs] + [s if isinstance(s, Sym) else self.const(s, dtype) for s in (a, b)]
        shape = np.broadcast_shapes(*(s.shape for s in args))
        return self.node("where", args, dtype, shape, _merge_dmaps(shape, args))

    # ---- row reductions ---------------------------------------------------------------------------

    @staticmethod
    def _axes(x: Sym, axis: Any) -> set[int]:
        if axis is None:
            return set(range(x.ndim))
        return {a % x.ndim for a in (axis if isinstance(axis, tuple | list) else (axis,))}

    def _row_axes(self, x: Sym, axes: set[int]) -> None:
        """The reduced dims must hold exactly a row's elements: every tail dim longer than 1 and
        no lead dim longer than 1 (size-1 dims reduce to themselves either way)."""
        d = self.domain
        if x.ndim != d.nd or x.shape[d.nl:] != d.tail \
                or any(x.shape[k] > 1 for k in range(d.nl, d.nd) if k not in axes) \
                or any(x.shape[k] > 1 for k in axes if k < d.nl):
            raise CannotCompile(f"a reduction over dims {sorted(axes)} of {list(x.shape)}, not "
                                f"over the row's dims {list(range(d.nl, d.nd))}")
        if any(m is not None and m < d.nl for m in x.dmap[d.nl:]):
            raise CannotCompile("a reduction over dims that run along the rows")

    def _reduce(self, kind: str, x: Sym, axes: set[int], keepdims: bool) -> Sym:
        if x.dtype.kind != "f":
            raise CannotCompile(f"a reduction of {x.dtype} values")
        if keepdims:
            shape = tuple(1 if k in axes else n for k, n in enumerate(x.shape))
            dmap = tuple(None if k in axes else m for k, m in enumerate(x.dmap))
        else:
            shape = tuple(n for k, n in enumerate(x.shape) if k not in axes)
            dmap = tuple(m for k, m in enumerate(x.dmap) if k not in axes)
        if all(x.shape[k] == 1 for k in axes):
            # a sum or max of one element is that element (NumPy's reductions start from their
            # first element), whichever dims of the row the others run along
            return self._view(x, shape, dmap)
        self._row_axes(x, axes)
        return self.node("reduce", (x,), x.dtype, shape, dmap, kind, ROW)

    def sum(self, x: Sym, axis: Any = None, keepdims: bool = False) -> Sym:
        return self._reduce("sum", x, self._axes(x, axis), keepdims)

    def max(self, x: Sym, axis: Any = None, keepdims: bool = False) -> Sym:
        return self._reduce("max", x, self._axes(x, axis), keepdims)

    def mean(self, x: Sym, axis: Any = None, keepdims: bool = False) -> Sym:
        """np.mean: the sum divided by the count as NumPy does it (an intp count promotes the
        division to float64, rounded back once)."""
        axes = self._axes(x, axis)
        s = self._reduce("sum", x, axes, keepdims)
        count = math.prod(x.shape[k] for k in axes)
        return self.astype(self.astype(s, np.float64) / self.const(count, np.float64), x.dtype)

    def require(self, cond: Sym) -> None:
        if cond.level == ELEM:
            raise CannotCompile("a per-element requirement")
        self.requires.append(cond)

    # ---- shape functions (broadcast_in_dim's formula) -----------------------------------------------

    def reshape(self, x: Sym, shape: Sequence[int]) -> Sym:
        shape = tuple(int(s) for s in shape)
        old = [(n, m) for n, m in zip(x.shape, x.dmap, strict=True) if n != 1]
        if [n for n, _ in old] != [n for n in shape if n != 1]:
            raise CannotCompile(f"a reshape {list(x.shape)} -> {list(shape)} that moves elements")
        it = iter(m for _, m in old)
        return self._view(x, shape, tuple(next(it) if n != 1 else None for n in shape))

    def permute_dims(self, x: Sym, axes: Sequence[int]) -> Sym:
        return self._view(x, tuple(x.shape[a] for a in axes), tuple(x.dmap[a] for a in axes))

    def broadcast_to(self, x: Sym, shape: Sequence[int]) -> Sym:
        """x repeated along new or size-1 dims: constant along them (their dmap stays None)."""
        shape = tuple(int(s) for s in shape)
        d = self.domain
        if len(shape) not in (d.nd, d.nl):
            raise CannotCompile(f"a broadcast to {list(shape)}, which is not a row shape")
        pad = len(shape) - x.ndim
        dmap = tuple(x.dmap[i - pad] if i >= pad else None for i in range(len(shape)))
        if any(m is not None and m != i for i, m in enumerate(dmap)):
            raise CannotCompile("a broadcast that moves a dim of the loop")
        return self._view(x, shape, dmap)

    def _view(self, x: Sym, shape: tuple[int, ...], dmap: tuple[int | None, ...]) -> Sym:
        """`x` under another logical shape: the same per-element value."""
        if x.op == "const":
            return self.node("const", (), x.dtype, shape, (None,) * len(shape), x.value)
        return self.node("fn", (x,), x.dtype, shape, dmap, "identity")
