"""The dropout mask: a pure function of (seed, global flat index), as `lamina.ir.ops.rng` documents.

`keep_ref` below is written from the docstring of `lamina.ir.ops.rng` alone, in plain Python integers,
and is the reference for `rng.keep_mask`, for `bits_for_indices` beyond 2**32, and for
`lamina.dropout` run through the interpreter (`test_ops` imports it too).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import run_function
from lamina.ir.core.dtypes import to_storage
from lamina.ir.ops import rng
from lamina.ir.text.source import parse_text, verify
from strategies import examples

M32 = 0xFFFFFFFF


# ---- the reference, straight from the docstring ------------------------------------------------

def mix_ref(x: int) -> int:
    """The docstring's `mix`, step by step: xor-shifts and multiplications modulo 2**32 (a
    different spelling from `rng.mix_scalar`'s in-place updates, so the two cannot share a slip)."""
    def xorshift(v: int, s: int) -> int:
        return v ^ (v >> s)

    def times(v: int, m: int) -> int:
        return (v * m) % (1 << 32)

    steps = [lambda v: xorshift(v, 16), lambda v: times(v, 0x7FEB352D), lambda v: xorshift(v, 15),
             lambda v: times(v, 0x846CA68B), lambda v: xorshift(v, 16)]
    x %= 1 << 32
    for step in steps:
        x = step(x)
    return x


def key_ref(seed: int, h: int) -> int:
    seed &= (1 << 64) - 1
    seed_lo, seed_hi = seed & M32, seed >> 32
    return mix_ref(mix_ref(seed_lo ^ 0x9E3779B9) ^ seed_hi ^ mix_ref(h ^ 0x85EBCA6B))


def bits_ref(seed: int, i: int) -> int:
    i &= (1 << 64) - 1
    return mix_ref((i & M32) ^ key_ref(seed, i >> 32))


def threshold_ref(rate: float) -> int:
    return min(int(rate * 2**32), 2**32 - 1)


def keep_ref(seed: int, rate: float, shape: tuple[int, ...]) -> np.ndarray:
    """keep(i) for every element of a tensor of `shape`, by flat row-major index."""
    n = 1
    for d in shape:
        n *= d
    t = threshold_ref(rate)
    flat = [bits_ref(seed, i) >= t for i in range(n)]
    return np.array(flat, dtype=bool).reshape(shape)


# ---- rng module vs reference -------------------------------------------------------------------

SEEDS = st.one_of(st.integers(0, 2**32 - 1), st.integers(-(2**63), 2**63 - 1),
                  st.sampled_from([0, 1, 42, 2**32, 2**32 + 1, 2**64 - 1, -1]))
RATES = st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9, 0.999])
SHAPES = st.lists(st.integers(1, 6), min_size=0, max_size=3).map(tuple)


def test_mix_matches_reference() -> None:
    xs = np.array([0, 1, 2, 0xDEADBEEF, M32, 12345678], dtype=np.uint32)
    assert [int(v) for v in rng.mix_inplace(xs.copy())] == [mix_ref(int(v)) for v in xs]
    for v in xs:
        assert rng.mix_scalar(int(v)) == mix_ref(int(v))


@settings(max_examples=examples(30))
@given(seed=SEEDS, rate=RATES, shape=SHAPES)
def test_keep_mask_matches_reference(seed: int, rate: float, shape: tuple[int, ...]) -> None:
    got = rng.keep_mask(seed, rate, shape)
    assert got.shape == shape and got.dtype == bool
    np.testing.assert_array_equal(got, keep_ref(seed, rate, shape))


@settings(max_examples=examples(30))
@given(seed=SEEDS, rate=RATES, data=st.data())
def test_mask_from_row_blocks_equals_whole(seed: int, rate: float, data) -> None:
    shape = tuple(data.draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)))
    whole = rng.keep_mask(seed, rate, shape)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, shape[0] - 1), max_size=3)))
                  ) if shape[0] > 1 else []
    bounds = [0, *cuts, shape[0]]
    parts = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        offsets = (lo,) + (0,) * (len(shape) - 1)
        parts.append(rng.keep_mask(seed, rate, shape, offsets, (hi - lo,) + shape[1:]))
    np.testing.assert_array_equal(np.concatenate(parts, axis=0), whole)


@settings(max_examples=examples(30))
@given(seed=SEEDS, rate=RATES, data=st.data())
def test_mask_from_2d_blocks_equals_whole(seed: int, rate: float, data) -> None:
    shape = (data.draw(st.integers(1, 12)), data.draw(st.integers(1, 12)))
    whole = rng.keep_mask(seed, rate, shape)
    r0 = data.draw(st.integers(0, shape[0] - 1))
    r1 = data.draw(st.integers(r0 + 1, shape[0]))
    c0 = data.draw(st.integers(0, shape[1] - 1))
    c1 = data.draw(st.integers(c0 + 1, shape[1]))
    block = rng.keep_mask(seed, rate, shape, (r0, c0), (r1 - r0, c1 - c0))
    np.testing.assert_array_equal(block, whole[r0:r1, c0:c1])
    # a full tiling by random row/column cuts reassembles the whole mask
    rc = sorted({0, shape[0], *data.draw(st.lists(st.integers(0, shape[0]), max_size=3))})
    cc = sorted({0, shape[1], *data.draw(st.lists(st.integers(0, shape[1]), max_size=3))})
    out = np.zeros(shape, dtype=bool)
    for a, b in zip(rc[:-1], rc[1:], strict=True):
        for c, d in zip(cc[:-1], cc[1:], strict=True):
            out[a:b, c:d] = rng.keep_mask(seed, rate, shape, (a, c), (b - a, d - c))
    np.testing.assert_array_equal(out, whole)


def test_mask_block_of_3d_tensor() -> None:
    shape = (3, 5, 7)
    whole = rng.keep_mask(9, 0.3, shape)
    np.testing.assert_array_equal(rng.keep_mask(9, 0.3, shape, (1, 2, 3), (2, 3, 4)),
                                  whole[1:3, 2:5, 3:7])


@pytest.mark.parametrize("rate", [0.0, 0.1, 0.5, 0.9])
def test_kept_fraction_close_to_one_minus_rate(rate: float) -> None:
    n = 1 << 20
    mask = rng.keep_mask(1234, rate, (1024, 1024))
    frac = mask.mean()
    # binomial standard deviation is <= 0.0005 for n = 2**20; allow 5 sigma
    assert abs(frac - (1 - rate)) < 5 * np.sqrt(rate * (1 - rate) / n) + 1e-12
    # different seeds give different masks
    if 0 < rate:
        assert not np.array_equal(mask, rng.keep_mask(1235, rate, (1024, 1024)))


@settings(max_examples=examples(20))
@given(seed=SEEDS, starts=st.lists(st.integers(0, 2**64 - 64), min_size=1, max_size=4))
def test_indices_beyond_2_pow_32(seed: int, starts: list[int]) -> None:
    idx = sorted({s + k for s in starts for k in (0, 1, 7)} |
                 {2**32 - 1, 2**32, 2**32 + 1, 3 * 2**32 + 5})
    got = rng.bits_for_indices(seed, np.array(idx, dtype=np.uint64))
    assert [int(v) for v in got] == [bits_ref(seed, i) for i in idx]
    # a contiguous range crossing the 2**32 boundary
    start = 2**32 - 3
    rng_bits = rng.bits_for_range(seed, start, 6)
    assert [int(v) for v in rng_bits] == [bits_ref(seed, start + k) for k in range(6)]


# ---- lamina.dropout through the interpreter --------------------------------------------------

def _run(text: str, inputs: list[np.ndarray]) -> np.ndarray:
    module = parse_text(text)
    verify(module)
    return run_function(find_entry(module, None), inputs).outputs[0]


def _ty(shape: tuple[int, ...], dtype: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + dtype + ">"


@settings(max_examples=examples(20))
@given(seed=st.integers(-(2**63), 2**63 - 1), rate=RATES, shape=SHAPES,
       dtype=st.sampled_from(["f16", "bf16", "f32", "f64"]), vseed=st.integers(0, 2**32 - 1))
def test_dropout_op_matches_formula(seed: int, rate: float, shape: tuple[int, ...], dtype: str,
                                    vseed: int) -> None:
    t = _ty(shape, dtype)
    x = to_storage(np.random.default_rng(vseed).uniform(-3, 3, shape), dtype)
    text = (f"func.func @main(%x: {t}) -> {t} {{\n"
            f"  %0 = lamina.dropout %x {{rate = {rate!r} : f64, seed = {seed} : i64}} : {t}\n"
            f"  func.return %0 : {t}\n}}\n")
    got = _run(text, [x])
    keep = keep_ref(seed, rate, shape)
    x64 = x.astype(np.float64)
    ref = np.where(keep, x64 * (1.0 / (1.0 - rate)), 0.0)
    tol = {"f16": 1e-3, "bf16": 8e-3, "f32": 1e-6, "f64": 1e-14}[dtype]
    assert got.shape == shape
    np.testing.assert_array_equal(got == 0, ~keep | (x == 0))
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=tol, atol=0)


@settings(max_examples=examples(20))
@given(seed=st.integers(-(2**63), 2**63 - 1), rate=RATES, shape=SHAPES,
       seed_type=st.sampled_from(["i64", "i32"]), as_arg=st.booleans())
def test_seed_operand_equals_seed_attribute(seed: int, rate: float, shape: tuple[int, ...],
                                            seed_type: str, as_arg: bool) -> None:
    if seed_type == "i32":
        seed = seed % 2**31
    t = _ty(shape, "f32")
    x = np.random.default_rng(0).uniform(-3, 3, shape).astype(np.float32)
    attr_text = (f"func.func @main(%x: {t}) -> {t} {{\n"
                 f"  %0 = lamina.dropout %x {{rate = {rate!r} : f64, seed = {seed} : i64}} : {t}\n"
                 f"  func.return %0 : {t}\n}}\n")
    st_ = _ty((), seed_type)
    if as_arg:
        op_text = (f"func.func @main(%x: {t}, %s: {st_}) -> {t} {{\n"
                   f"  %0 = lamina.dropout %x seed %s {{rate = {rate!r} : f64}} : ({t}, {st_}) -> {t}\n"
                   f"  func.return %0 : {t}\n}}\n")
        inputs = [x, np.array(seed, dtype=np.int64 if seed_type == "i64" else np.int32)]
    else:
        op_text = (f"func.func @main(%x: {t}) -> {t} {{\n"
                   f"  %s = lamina.constant dense<{seed}> : {st_}\n"
                   f"  %0 = lamina.dropout %x seed %s {{rate = {rate!r} : f64}} : ({t}, {st_}) -> {t}\n"
                   f"  func.return %0 : {t}\n}}\n")
        inputs = [x]
    np.testing.assert_array_equal(_run(attr_text, [x]), _run(op_text, inputs))
