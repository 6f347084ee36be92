"""Opt-in motifs of the random-program generator: the shapes of a transformer block that fusion must
handle across layout ops and matmuls (issue 13).

Two families, not in `ALL_FAMILIES` (ask for them with `families=`; see `strategies.programs`):

    layout_between  elementwise ops with a layout op between them, one of
                    - x -> unary -> transpose or reshape -> binary with y
                    - the QKV split: a -> add bias -> slice into 1..3 parts along the last dim ->
                      reshape each part into heads -> transpose (one permutation for all parts,
                      as q and v in GPT-2), then an elementwise op on the parts
                    - concat of two elementwise results along a random dim, then maybe a unary
    epilogue        a matmul by a rank-2 weight followed by 1..4 of: a bias add (a vector over
                    the output columns), gelu, a multiply by a 0/1 mask (a compare of exact values
                    cast to the float type), a residual add (of the matmul's input when the shapes
                    allow, as in GPT-2)

Every op comes from the op table through its typed class (`TransposeOp.INFO`, ...) or the
generator's fact-selected rows (`UNARY`, `BINARY`, `COMPARES`, `CAST`), and goes through the
generator's `emit`, so intervals, domains and the op budget are checked as for any family. A motif
cut short (an op that would leave CAP, or the budget) keeps the ops it emitted: each is valid.
Shapes: the QKV split's input has a last dim of up to 3 * max_dim.
"""

from __future__ import annotations

from collections.abc import Callable

from lamina.ir.ops.lamina import (
    AddOp,
    ConcatOp,
    GeluOp,
    MatmulOp,
    MulOp,
    ReshapeOp,
    SliceOp,
    TransposeOp,
)

# programs imports this module only when a motif is drawn, so these names exist by then
from strategies.programs import BINARY, CAST, COMPARES, UNARY, _bcast, _Gen, _Reject, _Val

MATMUL_OPERAND_BOUND = 50.0   # |a| of a matmul operand: k * 50 * 4 stays well inside CAP


def _unary(g: _Gen, x: _Val) -> _Val:
    """A random unary row on x (guarded into its domain)."""
    info = g.ch.choice(UNARY)
    x = g.fit(info, 0, x)
    g.need(1)
    return g.emit(info, [x], x.shape, x.dtype, g.choose_attrs(info))


def _binary(g: _Gen, a: _Val, b: _Val) -> _Val:
    """A random binary row on a and b (broadcastable), each guarded into its domain."""
    info = g.ch.choice(BINARY)
    a, b = g.fit(info, 0, a), g.fit(info, 1, b)
    g.need(1)
    shape = _bcast(a.shape, b.shape)
    assert shape is not None
    return g.emit(info, [a, b], shape, a.dtype, g.choose_attrs(info))


def _perm(g: _Gen, rank: int) -> list[int]:
    """A random permutation of range(rank), not the identity when rank > 1."""
    perm = list(range(rank))
    for i in range(rank - 1, 0, -1):
        j = g.ch.randint(0, i)
        perm[i], perm[j] = perm[j], perm[i]
    if rank > 1 and perm == sorted(perm):
        perm[0], perm[1] = perm[1], perm[0]
    return perm


def _transpose(g: _Gen, x: _Val, perm: list[int]) -> _Val:
    return g.emit(TransposeOp.INFO, [x], tuple(x.shape[p] for p in perm), x.dtype,
                  {"permutation": perm})


def _ranked(g: _Gen, min_rank: int, pred: Callable[[_Val], bool] = lambda v: True) -> _Val:
    """An existing float value of rank >= min_rank (and pred), else a new argument."""
    v = g.find(g.floats, lambda v: len(v.shape) >= min_rank and pred(v))
    if v is not None:
        return v
    shape = g.rand_shape(min_rank)
    if len(shape) < min_rank:
        raise _Reject
    return g.new_arg(shape, g.ch.choice(g.fdtypes))


# ---- layout_between -----------------------------------------------------------------------------

def layout_between(g: _Gen) -> None:
    match g.ch.randint(0, 2):
        case 0:
            _through_view(g)
        case 1:
            _qkv_split(g)
        case _:
            _concat_of_elementwise(g)


def _through_view(g: _Gen) -> None:
    """x -> unary -> transpose (or reshape) -> binary with y."""
    g.need(3)
    u = _unary(g, _ranked(g, min(2, g.max_rank)))
    if g.ch.coin(0.6):
        v = _transpose(g, u, _perm(g, len(u.shape)))
    else:
        v = g.emit(ReshapeOp.INFO, [u], g.reshape_target(u.shape), u.dtype)
    y = g.compatible(v, g.ch.coin(0.7))
    _binary(g, *((v, y) if g.ch.coin(0.7) else (y, v)))


def _qkv_split(g: _Gen) -> None:
    """a -> add bias -> slice into parts -> reshape into heads -> transpose -> elementwise."""
    if g.max_rank < 2:
        raise _Reject
    heads = g.ch.randint(1, min(3, g.max_dim))
    dh = g.ch.randint(1, max(1, g.max_dim // heads))
    k = heads * dh
    parts = g.ch.randint(1, 3)
    g.need(2 + 3 * parts)
    lead_rank = min(2, g.max_rank - 1) - 1
    dtype = g.ch.choice(g.fdtypes)
    a = g.find(g.floats, lambda v: v.dtype == dtype and len(v.shape) == lead_rank + 1
               and v.shape[-1] == 3 * k)
    if a is None:
        a = g.new_arg(tuple(g.ch.randint(1, g.max_dim) for _ in range(lead_rank)) + (3 * k,),
                      dtype)
    lead = a.shape[:-1]
    qkv = g.emit(AddOp.INFO, [a, g.operand_of_shape((3 * k,), dtype)], a.shape, dtype)
    perm = _perm(g, lead_rank + 2)
    outs = []
    for i in range(parts):
        s = g.emit(SliceOp.INFO, [qkv], (*lead, k), dtype,
                   {"start": [0] * lead_rank + [i * k], "limit": [*lead, (i + 1) * k]})
        r = g.emit(ReshapeOp.INFO, [s], (*lead, heads, dh), dtype)
        outs.append(_transpose(g, r, perm))
    if len(outs) >= 2:
        _binary(g, outs[0], outs[1])
    else:
        _unary(g, outs[0])


def _concat_of_elementwise(g: _Gen) -> None:
    """concat(unary(x), elementwise(y)) along a random dim, then maybe a unary."""
    g.need(3)
    x = _ranked(g, 1, lambda v: all(d <= g.max_dim for d in v.shape))
    rank = len(x.shape)
    dim = g.ch.randint(0, rank - 1)
    shape = x.shape[:dim] + (g.ch.randint(1, g.max_dim),) + x.shape[dim + 1:]
    y = g.operand_of_shape(shape, x.dtype)
    u1 = _unary(g, x)
    u2 = _unary(g, y) if g.ch.coin(0.5) else _binary(g, y, g.compatible(y, True))
    out = shape[:dim] + (u1.shape[dim] + u2.shape[dim],) + shape[dim + 1:]
    g.need(1)
    c = g.emit(ConcatOp.INFO, [u1, u2], out, x.dtype,
               {"dim": dim - rank if g.ch.coin(0.25) else dim})
    if g.left() >= 1 and g.ch.coin(0.7):
        _unary(g, c)


# ---- epilogue -----------------------------------------------------------------------------------

def epilogue(g: _Gen) -> None:
    """matmul(a, w) with w [k, n], then 1..4 of bias add, gelu, mask multiply, residual add."""
    if g.max_rank < 2:
        raise _Reject
    g.need(2)
    a = _ranked(g, 2, lambda v: v.bound <= MATMUL_OPERAND_BOUND)
    k = a.shape[-1]
    w = g.find(g.floats, lambda v: len(v.shape) == 2 and v.shape[0] == k and v.dtype == a.dtype
               and v.bound <= MATMUL_OPERAND_BOUND)
    if w is None:
        w = g.new_arg((k, g.ch.randint(1, g.max_dim)), a.dtype)
    y = g.emit(MatmulOp.INFO, [a, w], a.shape[:-1] + w.shape[-1:], a.dtype)
    steps = [s for s in (_bias, _gelu, _mask, _residual) if g.ch.coin(0.6)] or [_bias]
    for step in steps:
        y = step(g, y, a)


def _bias(g: _Gen, y: _Val, a: _Val) -> _Val:
    g.need(1)
    b = g.operand_of_shape(y.shape[-1:], y.dtype)
    g.need(1)
    return g.emit(AddOp.INFO, [y, b], y.shape, y.dtype)


def _gelu(g: _Gen, y: _Val, a: _Val) -> _Val:
    g.need(1)
    return g.emit(GeluOp.INFO, [y], y.shape, y.dtype, g.choose_attrs(GeluOp.INFO))


def _mask(g: _Gen, y: _Val, a: _Val) -> _Val:
    """y * cast(compare(m, n)): a 0/1 mask from exact values, so fusing cannot flip it."""
    g.need(3)
    m = g.operand_of_shape(y.shape, y.dtype, exact=True)
    n = g.operand_of_shape(y.shape, y.dtype, exact=True)
    g.need(3)
    cond = g.emit(g.ch.choice(COMPARES), [m, n], y.shape, "i1")
    mask = g.emit(CAST, [cond], y.shape, y.dtype)
    return g.emit(MulOp.INFO, [y, mask], y.shape, y.dtype)


def _residual(g: _Gen, y: _Val, a: _Val) -> _Val:
    """x + f(x) when the matmul keeps a's shape, else y + another value of y's shape."""
    g.need(1)
    r = a if a.shape == y.shape and a.dtype == y.dtype else \
        g.find(g.floats, lambda v: v.shape == y.shape and v.dtype == y.dtype and v is not y) or \
        g.new_arg(y.shape, y.dtype)
    return g.emit(AddOp.INFO, [r, y], y.shape, y.dtype)
