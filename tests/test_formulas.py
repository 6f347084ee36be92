"""The op table's formulas against their NumPy specializations, bit for bit, and erf's accuracy.

Every row's semantics is its array-API formula (`lamina.ir.ops.formulas`); the NumPy interpreter
registers faster forms against some rows (`lamina.backends.numpy.specialized`: `numpy`, `ufunc`,
`tile`). Each of those must compute exactly the formula's bits, or the NumPy interpreter and any
other backend evaluating the formula would drift apart; this file checks every one of them, for
every row that has one (new registrations are covered without editing this file).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.backends.numpy.kernels import to_compute
from lamina.backends.numpy.specialized import Forms, forms, registered
from lamina.ir.core.dtypes import STORAGE
from lamina.ir.core.shapes import TensorInfo
from lamina.ir.ops.formulas import Block, Call, erf
from lamina.ir.ops.optable import OPS, AttrKind, OpInfo
from strategies import examples


class _Scratch:
    """The same contract as the fused executor's scratch: slot -> reusable buffer."""

    def __init__(self) -> None:
        self.bufs: dict[tuple[int, tuple[int, ...], Any], np.ndarray] = {}

    def get(self, slot: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        key = (slot, shape, np.dtype(dtype))
        if key not in self.bufs:
            self.bufs[key] = np.empty(shape, dtype=dtype)
        return self.bufs[key]


def _default_attrs(info: OpInfo) -> dict[str, Any]:
    return {a.name: a.default for a in info.attrs}


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any, positive: bool) -> np.ndarray:
    """Normal values (positive ones for ops with a positive domain), with 0, -0, inf and NaN in
    four places: the specialized forms must agree with the formula on them too."""
    x = rng.standard_normal(shape) * 3
    if positive:
        x = np.abs(x) + 0.1
    x = x.astype(dtype)
    flat = x.reshape(-1)
    flat[:4] = np.array([0.0, -0.0, np.inf, np.nan], dtype)
    return x


UFUNC_ROWS = [i for i, f in registered() if f.ufunc is not None]
TILE_ROWS = [i for i, f in registered() if f.tile is not None]
NUMPY_ROWS = [i for i, f in registered() if f.numpy is not None]


def test_specializations_exist() -> None:
    """The interpreter's fast paths hang off these rows; losing them would be a silent slowdown."""
    assert {"add", "tanh", "eq"} <= {i.name for i in UFUNC_ROWS}
    assert {"dropout", "gelu", "layernorm"} <= {i.name for i in TILE_ROWS}
    assert {"dropout"} <= {i.name for i in NUMPY_ROWS}
    assert forms(OPS["sigmoid"]) == Forms()     # a row with no registered form has none


def test_every_registered_form_is_checked_here() -> None:
    """Each registered tile form has a case below (the ufunc and whole-array forms are checked
    for every row that has one, by the parametrized tests and the per-row ones)."""
    covered = {n for n, _ in TILE_CASES} | {"matmul"}
    assert {i.name for i in TILE_ROWS} <= covered
    assert {i.name for i in NUMPY_ROWS} <= {"dropout", "layernorm"}


@pytest.mark.parametrize("info", UFUNC_ROWS, ids=lambda i: i.name)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ufunc_is_the_formula(info: OpInfo, dtype: Any) -> None:
    rng = np.random.default_rng(0)
    positive = info.name in ("log", "sqrt", "pow")
    xs = [_values(rng, (7, 9), dtype, positive) for _ in info.operands]
    call = Call(_default_attrs(info), [TensorInfo((7, 9), "f32")] * len(xs), TensorInfo((7, 9), "f32"))
    with np.errstate(all="ignore"):
        want = np.asarray(info.formula(np, xs, call))
        ufunc = forms(info).ufunc
        assert ufunc is not None
        got = ufunc(*xs)
    assert _same_bits(got, want), info.name


def _call_for(info: OpInfo, shape: tuple[int, ...], dtype: str, **attrs: Any) -> Call:
    operands: list[TensorInfo | None] = [TensorInfo(shape, dtype)]
    if info.name == "layernorm":
        operands += [TensorInfo(shape[-1:], dtype), TensorInfo(shape[-1:], dtype)]
    return Call({**_default_attrs(info), **attrs}, operands, TensorInfo(shape, dtype))


TILE_CASES = [
    ("gelu", {"approximate": "tanh"}),
    ("dropout", {"rate": 0.3, "seed": 7}),
    ("dropout", {"rate": 0.0, "seed": 7}),
    ("layernorm", {"axis": -1, "eps": 1e-5}),
]


@pytest.mark.parametrize("name,attrs", TILE_CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(TILE_CASES)])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_tile_forms_are_the_formula(name: str, attrs: dict[str, Any], dtype: str) -> None:
    """A tile of rows r0..r0+tr of a [rows, 96] tensor, in place, against the formula on the
    same tile with the tile's position (dropout's mask is a function of the global index)."""
    info = OPS[name]
    tile_form = forms(info).tile
    assert tile_form is not None
    npdt = STORAGE[dtype]
    rows, cols, r0, tr = 64, 96, 16, 8
    rng = np.random.default_rng(1)
    x = rng.standard_normal((rows, cols)).astype(npdt)
    tile = x[r0:r0 + tr]
    args: list[np.ndarray | None] = [tile]
    if name == "layernorm":
        args += [rng.standard_normal(cols).astype(npdt), rng.standard_normal(cols).astype(npdt)]
    call = _call_for(info, (tr, cols), dtype, **attrs)
    call.block = Block((rows, cols), (r0, 0))
    run = tile_form(call, np.dtype(npdt), _Scratch())
    assert run is not None
    out = np.empty_like(tile)
    run(list(args), out, r0, tr)
    want = np.asarray(info.formula(np, args, call))
    assert _same_bits(out, want)


def test_tile_form_declines_what_it_does_not_cover() -> None:
    gelu = OPS["gelu"]
    tile_form = forms(gelu).tile
    assert tile_form is not None
    call = _call_for(gelu, (4, 8), "f32", approximate="none")
    assert tile_form(call, np.dtype(np.float32), _Scratch()) is None


@settings(max_examples=examples(20))
@given(shape=st.sampled_from([(5,), (3, 7), (2, 3, 4), ()]), seed=st.integers(0, 2**63 - 1),
       rate=st.sampled_from([0.0, 0.1, 0.5, 0.9]), dtype=st.sampled_from(["f32", "f64"]),
       offset=st.sampled_from([0, 5, (1 << 32) - 3]), seed_operand=st.booleans())
def test_dropout_numpy_kernel_is_the_formula(shape, seed, rate, dtype, offset, seed_operand) -> None:
    """The whole-array kernel (contiguous ranges, one key per 2**32 block) against the formula's
    per-element key, including blocks that straddle a 2**32 boundary of the global index and a
    seed given as an operand (two's complement read as the unsigned 64-bit seed)."""
    info = OPS["dropout"]
    whole = forms(info).numpy
    assert whole is not None
    npdt = STORAGE[dtype]
    x = np.random.default_rng(2).standard_normal(shape).astype(npdt)
    glob = (offset + (shape[0] if shape else 1),) + shape[1:] if shape else ()
    offs = (offset,) + (0,) * (len(shape) - 1) if shape else ()
    signed = seed - (1 << 63)
    args: list[np.ndarray | None] = [x]
    attrs: dict[str, Any] = {"rate": rate, "seed": None if seed_operand else signed}
    operands: list[TensorInfo | None] = [TensorInfo(shape, dtype), None]
    if seed_operand:
        args.append(np.asarray(signed, dtype=np.int64))
        operands[1] = TensorInfo((), "i64")
    call = Call(attrs, operands, TensorInfo(shape, dtype), Block(glob, offs))
    got = whole(args, call)
    want = np.asarray(info.formula(np, args, call))
    assert _same_bits(np.asarray(got), want)


# ---- erf -----------------------------------------------------------------------------------------

def _ulp_distance(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|got - ref| in float32 units in the last place (ordered integer view; +0 == -0)."""
    def ordered(a: np.ndarray) -> np.ndarray:
        i = a.astype(np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(ordered(got) - ordered(ref))


def test_erf_within_two_ulp_of_float32_everywhere() -> None:
    """A sweep over every 1021st float32 bit pattern of both signs (subnormals, tiny, the
    0.46875 switch, the tails, up to the largest float) plus +-0 and the values that were wrong:
    every result within 2 ulp of the correctly rounded math.erf."""
    pats = np.arange(0, 0x7F800000, 1021, dtype=np.int64).astype(np.uint32).view(np.float32)
    extra = np.array([0.0, 1e-45, 1e-38, 1e-7, 1e-3, 0.46875, np.nextafter(0.46875, 1), 1.0, 4.0,
                      6.0, 9.5, 3e38], dtype=np.float32)
    x = np.concatenate([pats, extra, -pats, -extra])
    ref = np.array([math.erf(float(v)) for v in x]).astype(np.float32)
    got = erf(np, x)
    assert got.dtype == np.float32
    dist = _ulp_distance(got, ref)
    assert int(dist.max()) < 2, f"max {int(dist.max())} ulp at x = {x[int(dist.argmax())]!r}"
    assert np.signbit(erf(np, np.array([-0.0], np.float32)))[0]
    assert erf(np, np.array([0.0], np.float32))[0] == 0.0
    assert erf(np, np.array([1e-7], np.float32))[0] == np.float32(math.erf(1e-7))


def test_erf_float64_and_specials() -> None:
    xs = np.linspace(-7.0, 7.0, 200_001)
    ref = np.array([math.erf(v) for v in xs])
    rel = np.abs(erf(np, xs) - ref) / np.maximum(np.abs(ref), 1e-300)
    assert float(rel.max()) < 4 * np.finfo(np.float64).eps
    special = erf(np, np.array([np.inf, -np.inf, np.nan, 1e-310, -1e-310]))
    assert special[0] == 1.0 and special[1] == -1.0 and np.isnan(special[2])
    assert special[3] == math.erf(1e-310) and special[4] == -special[3]


def test_erf_in_bf16_and_f16_rounds_once() -> None:
    """Narrow types compute in float32 and round once: erf of every f16 value within 1 ulp."""
    x16 = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16)
    got = erf(np, to_compute(x16, "f16")).astype(np.float16)
    ref = np.array([math.erf(float(v)) for v in x16]).astype(np.float16)
    dist = np.abs(got.view(np.int16).astype(np.int32) - ref.view(np.int16).astype(np.int32))
    assert int(dist.max()) <= 1


def test_every_row_has_a_formula_and_kind() -> None:
    for info in OPS.values():
        assert callable(info.formula), info.name
        if info.ew is not None:
            assert info.fusion.value == "elementwise", info.name
        for a in info.attrs:
            assert isinstance(a.kind, AttrKind)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_layernorm_forms_on_rows_that_overflow(dtype: str) -> None:
    """The rescaling path (rows whose squares overflow) is the formula's in every form."""
    info = OPS["layernorm"]
    whole, tile_form = forms(info).numpy, forms(info).tile
    assert whole is not None and tile_form is not None
    npdt = STORAGE[dtype]
    big = np.finfo(npdt).max / 4
    x = np.array([[big, -big, big, 0.0], [1.0, 2.0, 3.0, 4.0], [np.inf, 1.0, 2.0, 3.0],
                  [big / 3, big / 5, -big, 7.0]], npdt)
    call = _call_for(info, x.shape, dtype)
    call.operands = call.operands[:1]
    with np.errstate(all="ignore"):
        want = np.asarray(info.formula(np, [x], call))
        assert np.all(np.isfinite(want[[0, 1, 3]]))
        assert _same_bits(whole([x], call), want)
        run = tile_form(call, np.dtype(npdt), _Scratch())
        assert run is not None
        out = np.empty_like(x)
        run([x], out, 0, x.shape[0])
    assert _same_bits(out, want)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_matmul_tile_is_the_formula(dtype: str) -> None:
    """A block of result rows of a matmul by a matrix, written in place by the row's tile form,
    has the formula's bits on that block; a right operand with batch dims is declined (a block
    of rows would need more than one matrix)."""
    info = OPS["matmul"]
    tile_form = forms(info).tile
    assert tile_form is not None
    npdt = STORAGE[dtype]
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 48)).astype(npdt)
    w = rng.standard_normal((48, 40)).astype(npdt)
    r0, tr = 16, 24
    call = Call({}, [TensorInfo((tr, 48), dtype), TensorInfo((48, 40), dtype)],
                TensorInfo((tr, 40), dtype))
    run = tile_form(call, np.dtype(npdt), _Scratch())
    assert run is not None
    out = np.full((tr, 40), np.nan, dtype=npdt)
    run([a[r0:r0 + tr], w], out, r0, tr)
    want = np.asarray(info.formula(np, [a[r0:r0 + tr], w], call))
    assert _same_bits(out, want)
    batched = Call({}, [TensorInfo((2, tr, 48), dtype), TensorInfo((2, 48, 40), dtype)],
                   TensorInfo((2, tr, 40), dtype))
    assert tile_form(batched, np.dtype(npdt), _Scratch()) is None
