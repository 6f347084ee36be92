"""Tests of the value-range rules (`lamina.ir.ops.intervals`) against the ops' own formulas.

A rule is only worth having if it is sound: for operand intervals its domains admit, every result
the op's formula computes on points inside them must lie in the rule's image. The formula is the
one every backend runs (`info.formula(numpy, args, call)`, in float64 here so rounding stays far
below the tolerance), so a rule that drifts from its op's semantics fails here, whatever the row.
Rows are read by their facts (type rule, attribute specs), never by name.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.ir.core import shapes
from lamina.ir.core.shapes import TensorInfo
from lamina.ir.mesh.sharding import Reduction
from lamina.ir.ops import formulas as fm
from lamina.ir.ops import intervals as iv
from lamina.ir.ops.formulas import Call
from lamina.ir.ops.intervals import Domain, DomainKind, Interval
from lamina.ir.ops.optable import OPS, AttrKind, Fusion, OpInfo
from strategies import examples

ELEMENTWISE = [info for info in OPS.values() if info.fusion is Fusion.ELEMENTWISE]
SPAN = 8.0          # operand intervals are drawn inside [-SPAN, SPAN] (and the domain)
POINTS = 64         # points per operand interval, endpoints included


@st.composite
def intervals_in(draw: st.DrawFn, domain: Domain) -> Interval:
    """An interval inside `domain` and [-SPAN, SPAN] (a point interval now and then)."""
    lo, hi = -SPAN, SPAN
    match domain.kind:
        case DomainKind.POSITIVE:
            lo = 1e-3
        case DomainKind.NONZERO:
            lo, hi = (1e-3, SPAN) if draw(st.booleans()) else (-SPAN, -1e-3)
        case DomainKind.NON_NEGATIVE:
            lo = 0.0
        case DomainKind.BOUNDED_ABOVE:
            hi = min(hi, domain.limit)
        case DomainKind.BOUNDED:
            lo, hi = max(lo, -domain.limit), min(hi, domain.limit)
        case DomainKind.ANY:
            pass
    a = draw(st.floats(lo, hi))
    b = draw(st.floats(lo, hi)) if draw(st.integers(0, 9)) else a
    return min(a, b), max(a, b)


def _points(rng: np.random.Generator, interval: Interval) -> np.ndarray:
    lo, hi = interval
    return np.concatenate([[lo, hi], rng.uniform(lo, hi, POINTS - 2)])


@st.composite
def attrs_of(draw: st.DrawFn, info: OpInfo) -> dict[str, object]:
    """Every attribute: one of its choices, a float rate in [0, 0.9], any int, or its default."""
    out: dict[str, object] = {}
    for a in info.attrs:
        if a.choices:
            out[a.name] = draw(st.sampled_from(a.choices))
        elif a.kind is AttrKind.FLOAT:
            out[a.name] = draw(st.floats(0.0, 0.9))
        elif a.kind is AttrKind.INT:
            out[a.name] = draw(st.integers(0, 2**31))
        else:
            out[a.name] = a.default
    return out


def _case(data: st.DataObject, info: OpInfo) -> tuple[list[Interval | None], list[np.ndarray | None],
                                                  Call]:
    """Operand intervals, arrays of points inside them, and the call, for one elementwise row."""
    draw = data.draw
    rule = info.interval
    assert rule is not None
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    ivs: list[Interval | None] = []
    args: list[np.ndarray | None] = []
    infos: list[TensorInfo | None] = []
    for i, spec in enumerate(info.operands):
        if spec.optional:            # dropout's seed operand: the attribute gives the seed
            ivs.append(None)
            args.append(None)
            infos.append(None)
        elif info.shape is shapes.select and i == 0:
            ivs.append((0.0, 1.0))
            args.append(rng.integers(0, 2, POINTS).astype(bool))
            infos.append(TensorInfo((POINTS,), "i1"))
        else:
            interval = draw(intervals_in(rule.domain(i)))
            ivs.append(interval)
            args.append(_points(rng, interval))
            infos.append(TensorInfo((POINTS,), "f64"))
    if info.shape is shapes.compare:
        dtype = "i1"
    elif info.shape is shapes.cast:
        dtype = draw(st.sampled_from(("f64", "f32", "i64", "i32", "i1")))
    else:
        dtype = "f64"
    return ivs, args, Call(draw(attrs_of(info)), infos, TensorInfo((POINTS,), dtype))


@pytest.mark.parametrize("info", ELEMENTWISE, ids=[i.name for i in ELEMENTWISE])
@settings(max_examples=examples(20))
@given(data=st.data())
def test_elementwise_rule_contains_formula_values(info: OpInfo, data: st.DataObject) -> None:
    rule = info.interval
    assert rule is not None, f"{info.full_name} has no interval rule"
    ivs, args, call = _case(data, info)
    assert rule.admits(ivs)
    lo, hi = rule.image(ivs, call)
    assert lo <= hi
    with np.errstate(all="ignore"):
        y = np.asarray(info.formula(np, args, call), dtype=np.float64)
    assert np.isfinite(y).all(), (ivs, y)
    # images are of the real functions; a float32 result is rounded once
    tol = (1e-6 if call.result.dtype == "f32" else 1e-9) * max(1.0, abs(lo), abs(hi))
    outside = (y < lo - tol) | (y > hi + tol)
    assert not outside.any(), (info.name, ivs, (lo, hi), y[outside][:4])


def test_every_elementwise_row_has_an_interval_rule() -> None:
    """A new elementwise row must say its value range (ir/ops/intervals.py): the program generator
    only emits ops with one, and a range analysis would have to give up at the op."""
    missing = [i.name for i in ELEMENTWISE if i.interval is None]
    assert not missing, f"elementwise rows without an interval rule: {missing}"


def test_every_computing_row_has_an_interval_rule() -> None:
    """Every row but a source (whose range is its literal) has a rule, reductions and layout ops
    included: the generator tracks every value's range through them."""
    missing = [i.name for i in OPS.values() if i.interval is None and i.fusion is not Fusion.SOURCE]
    assert not missing


def test_domains_admit() -> None:
    assert iv.POSITIVE.admits((0.1, 2.0)) and not iv.POSITIVE.admits((0.0, 2.0))
    assert not iv.POSITIVE.admits((0.01, 2.0), margin=0.05)
    assert iv.NONZERO.admits((-3.0, -0.1)) and not iv.NONZERO.admits((-0.1, 0.1))
    assert iv.NON_NEGATIVE.admits((0.0, 1.0)) and not iv.NON_NEGATIVE.admits((-1e-9, 1.0))
    assert iv.bounded_above(6.0).admits((-100.0, 6.0)) and not iv.bounded_above(6.0).admits((0, 7))
    assert iv.bounded(3.0).admits((-3.0, 3.0)) and not iv.bounded(3.0).admits((-3.5, 0.0))
    assert iv.ANY.admits((-math.inf, math.inf))


@settings(max_examples=examples(30))
@given(st.floats(-SPAN, SPAN), st.floats(-SPAN, SPAN), st.integers(1, 4), st.integers(1, 4))
def test_reduction_rules_contain_formula_values(a: float, b: float, rows: int, cols: int) -> None:
    """The rules of the reduction-class rows on a [rows, cols] operand (reductions over axis 1,
    row normalizations and softmax over the last axis), each against its formula."""
    lo, hi = min(a, b), max(a, b)
    x = np.random.default_rng(rows * 7 + cols).uniform(lo, hi, (rows, cols))
    t = TensorInfo((rows, cols), "f64")
    for info in OPS.values():
        if info.fusion is not Fusion.REDUCTION:
            continue
        assert info.interval is not None
        attrs = {a.name: a.default for a in info.attrs}
        if isinstance(info.sharding, Reduction):
            attrs |= {"axes": [1], "keepdims": True}
        absent: list[None] = [None] * (len(info.operands) - 1)
        declared = TensorInfo((rows, 1), "f64") if isinstance(info.sharding, Reduction) else t
        call = Call(attrs, [t, *absent], declared)
        out_lo, out_hi = info.interval.image([(lo, hi), *absent], call)
        y = info.formula(np, [x, *absent], call)
        tol = 1e-9 * max(1.0, abs(out_lo), abs(out_hi))
        assert (y >= out_lo - tol).all() and (y <= out_hi + tol).all(), (info.name, lo, hi, y)


@pytest.mark.parametrize("n", [1, 2, 5, 100])
def test_normalization_worst_case_is_inside(n: int) -> None:
    """One element far from all others is the worst case: |z| -> sqrt(n - 1) (layernorm), sqrt(n)
    (rmsnorm, less eps), inside the rule's sqrt(n)."""
    x = np.zeros((1, n))
    x[0, 0] = 1e6
    for info in OPS.values():
        if info.interval is not iv.NORMALIZATION:
            continue
        absent: list[None] = [None] * (len(info.operands) - 1)
        t = TensorInfo((1, n), "f64")
        call = Call({"axis": -1, "eps": 1e-5}, [t, *absent], t)
        y = info.formula(np, [x, *absent], call)
        lo, hi = iv.NORMALIZATION.image([(-1e6, 1e6), *absent], call)
        assert lo <= y.min() and y.max() <= hi
        assert y.max() >= 0.99 * math.sqrt(n - 1)


def test_constants_are_what_they_say() -> None:
    """exp stays finite in f16 up to EXP_MAX; gelu (both forms) never goes below GELU_MIN."""
    assert np.isfinite(np.float16(math.exp(iv.EXP_MAX) * (1 - 1e-6)))
    with np.errstate(over="ignore"):
        assert not np.isfinite(np.float16(math.exp(iv.EXP_MAX + 0.01)))
    x = np.linspace(-3.0, 0.0, 300001)
    for approximate in ("none", "tanh"):
        assert fm.gelu(np, x, approximate).min() >= iv.GELU_MIN


def test_hand_checked_images() -> None:
    call = Call({}, [TensorInfo((), "f64")] * 2, TensorInfo((), "f64"))
    assert iv.DIV.image([(1.0, 2.0), (-4.0, -2.0)], call) == (-1.0, -0.25)
    assert iv.POW.image([(0.5, 2.0), (-1.0, 2.0)], call) == (0.25, 4.0)
    assert iv.ABS.image([(-3.0, 1.0)], call) == (0.0, 3.0)
    assert iv.ABS.image([(-3.0, -1.0)], call) == (1.0, 3.0)
    assert iv.GELU.image([(-5.0, 2.0)], call) == (iv.GELU_MIN, 2.0)
    assert iv.SUB.image([(0.0, 1.0), (-2.0, 3.0)], call) == (-3.0, 3.0)


def test_cast_rule_follows_the_result_type() -> None:
    op: list[TensorInfo | None] = [TensorInfo((), "f32")]
    assert iv.CAST.image([(-2.7, 3.9)], Call({}, op, TensorInfo((), "i32"))) == (-2.0, 3.0)
    assert iv.CAST.image([(-2.7, 3.9)], Call({}, op, TensorInfo((), "i1"))) == (0.0, 1.0)
    assert iv.CAST.image([(-2.7, 3.9)], Call({}, op, TensorInfo((), "f64"))) == (-2.7, 3.9)


def test_reduce_sum_scales_by_the_reduced_count() -> None:
    call = Call({"axes": [0, -1], "keepdims": False}, [TensorInfo((2, 3, 4), "f32")],
                TensorInfo((3,), "f32"))
    assert iv.REDUCE_SUM.image([(-1.0, 0.5)], call) == (-8.0, 4.0)


def test_images_overflow_to_inf_instead_of_raising() -> None:
    """Python's math.exp and ** raise OverflowError; the rules say +inf, so a caller can compare
    the image with its cap instead of catching."""
    call = Call({}, [TensorInfo((), "f64")] * 2, TensorInfo((), "f64"))
    assert iv.EXP.image([(0.0, 1000.0)], call) == (1.0, math.inf)
    assert iv.POW.image([(2.0, 1e200), (1.0, 3.0)], call)[1] == math.inf
