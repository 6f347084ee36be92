"""`lamina.fused "attention"` on the compiled backend (`lamina.backends.compiled.attention`).

BLAS runs the two matmuls per block of query rows, one compiled kernel the score ops, softmax and
prob ops. These tests check that the kernel compiles (no fallback line), agrees with the NumPy
interpreter's attention kernel and with the unfused program within float tolerance, draws the
interpreter's dropout bits, gives the same bits on any thread count, drops only keys whose
products are exactly 0, and falls back (one explain line, the interpreter's outputs) where it says.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.backends.inputs import random_inputs
from lamina.backends.interface import find_entry
from lamina.backends.numpy.options import NumpyOptions
from strategies import examples, signature_parts
from test_fuse_attention import (
    NEG_INF,
    attention_text,
    fuse,
    masked_text,
    parse,
    run,
    safe,
    whole_row_masked,
)
from xdsl.ir import BlockArgument

pytest.importorskip("numba")
from lamina.backends.compiled import attention as ca  # noqa: E402
from lamina.backends.compiled.backend import CompiledBackend  # noqa: E402

COMPILED = CompiledBackend.op_runners


def close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def compiled(m, inputs, threads: int | None = None):
    return run(m, inputs, NumpyOptions(threads=threads), runners=COMPILED)


def unfused(text: str, inputs):
    _, m = parse(text)
    return run(m, inputs)


def test_a_causal_attention_with_dropout_compiles_and_matches() -> None:
    text = attention_text((2, 3), 40, 40, 8, 8, causal=True, rate=0.3)
    m = fuse(text)
    inputs = random_inputs(find_entry(m, None), 0)
    want, got = run(m, inputs), compiled(m, inputs)
    assert got.explain == [] and got.stats["compiled"]["fallbacks"] == [], got.explain
    close(got.outputs[0], want.outputs[0])
    close(got.outputs[0], unfused(text, inputs).outputs[0])
    assert got.stats["kernels"] == want.stats["kernels"] == 1
    assert got.stats["bytes_moved"] == want.stats["bytes_moved"]


def test_dropout_masks_are_the_interpreters_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """With v the identity the output is the dropped probabilities themselves: zero exactly
    where the interpreter's are, at any block size."""
    t = 24
    text = attention_text((2,), t, t, 4, t, causal=False, rate=0.5)
    m = fuse(text)
    g = np.random.default_rng(1)
    q = g.standard_normal((2, t, 4)).astype(np.float32)
    kt = g.standard_normal((2, 4, t)).astype(np.float32)
    v = np.broadcast_to(np.eye(t, dtype=np.float32), (2, t, t)).copy()
    want = run(m, [q, kt, v]).outputs[0]
    for block in (t * t, 5 * t, t):   # one block per head, partial blocks, one row per block
        monkeypatch.setattr(ca, "BLOCK_ELEMENTS", block)
        got = compiled(m, [q, kt, v])
        assert got.stats["compiled"]["fallbacks"] == []
        assert np.array_equal(got.outputs[0] == 0, want == 0)
        assert 0 < np.count_nonzero(want == 0) < want.size
        close(got.outputs[0], want)


# (lead, tq, tk, dh, dv): numba compiles a kernel per shape, so `make test` draws from these
# (a single row and column; tq > tk, where the causal mask masks rows whole; tq < tk; a square
# 20 x 20); the long run draws any shape too
ATTENTION_SHAPES = signature_parts(
    [((), 1, 1, 1, 1), ((2,), 7, 3, 4, 2), ((2, 2), 5, 12, 3, 5), ((), 20, 20, 5, 1)],
    st.tuples(st.sampled_from([(), (2,), (2, 2)]), st.integers(1, 20), st.integers(1, 20),
              st.integers(1, 5), st.integers(1, 5)), key="compiled-attention-shape")


@settings(max_examples=examples(8), deadline=None)
@given(lead=ATTENTION_SHAPES[0], tq=ATTENTION_SHAPES[1], tk=ATTENTION_SHAPES[2],
       dh=ATTENTION_SHAPES[3], dv=ATTENTION_SHAPES[4], rate=st.sampled_from([None, 0.25]),
       fill=st.sampled_from(["-1.0e+09", NEG_INF]), flip=st.booleans(),
       block=st.sampled_from([1, 7, 64, 1 << 16]), seed=st.integers(0, 2**16))
def test_random_masked_attention_matches_on_any_thread_count(
        lead, tq, tk, dh, dv, rate, fill, flip, block, seed) -> None:
    """Causal masks written either way round, -1e9 or -inf fills (rows masked whole among
    them when tq > tk), block sizes down to one row: the compiled kernel agrees with the
    interpreter's and with the unfused program (nan where they have nan), and 1 and 2 threads
    give the same bits."""
    text = masked_text(lead, tq, tk, dh, dv, rate, fill, flip)
    m = fuse(text)
    inputs = random_inputs(find_entry(m, None), seed)
    old = ca.BLOCK_ELEMENTS
    ca.BLOCK_ELEMENTS = block
    try:
        one, two = compiled(m, inputs, threads=1), compiled(m, inputs, threads=2)
    finally:
        ca.BLOCK_ELEMENTS = old
    assert one.stats["compiled"]["fallbacks"] == [], one.explain
    got, want = one.outputs[0], run(m, inputs).outputs[0]
    base = unfused(text, inputs).outputs[0]
    # nan where the unfused program has nan: this form computes its probabilities row by row
    # (the interpreter's online softmax has nan also where dropout zeroes a row masked whole
    # by -inf, since it applies the prob ops before dividing by the row's sum)
    assert np.array_equal(np.isnan(got), np.isnan(base))
    ok = ~np.isnan(base)
    close(got[ok], base[ok])
    ok &= ~np.isnan(want)
    close(got[ok], want[ok])
    assert np.array_equal(one.outputs[0], two.outputs[0], equal_nan=True)


@pytest.mark.parametrize("block", [1, 64, 1 << 17])
def test_a_safe_row_masked_whole_compiles_to_zero(block: int, monkeypatch: pytest.MonkeyPatch
                                                  ) -> None:
    """A safe softmax in the compiled middle: row 0, every key masked by -inf, is 0 (the plain
    softmax's nan), the other rows the interpreter's and the unfused program's values."""
    text = safe(whole_row_masked(NEG_INF))
    m = fuse(text)
    inputs = random_inputs(find_entry(m, None), 5)
    monkeypatch.setattr(ca, "BLOCK_ELEMENTS", block)
    got = compiled(m, inputs, threads=1)
    assert got.stats["compiled"]["fallbacks"] == [], got.explain
    out = got.outputs[0]
    assert (out[:, 0] == 0).all() and not np.isnan(out).any()
    close(out, run(m, inputs).outputs[0])
    close(out, unfused(text, inputs).outputs[0])


def _pv_keys(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Spy on the second matmul's tile form: how many keys each block's product runs over."""
    seen: list[int] = []
    real = ca._tile_form   # pyright: ignore[reportPrivateUsage]

    def spy(op, dtype):
        run_ = real(op, dtype)
        if isinstance(op.operands[0], BlockArgument):   # q k^T: q is the kernel's argument
            return run_

        def wrapped(xs, out, r0, tr):
            seen.append(xs[0].shape[-1])
            run_(xs, out, r0, tr)
        return wrapped

    monkeypatch.setattr(ca, "_tile_form", spy)
    return seen


def test_masked_keys_are_dropped_from_the_products(monkeypatch: pytest.MonkeyPatch) -> None:
    """A causal mask: blocks of early query rows multiply only the keys they see."""
    m = fuse(masked_text((2,), 32, 32, 4, 4, None))
    inputs = random_inputs(find_entry(m, None), 3)
    monkeypatch.setattr(ca, "BLOCK_ELEMENTS", 8 * 32)
    seen = _pv_keys(monkeypatch)
    got = compiled(m, inputs, threads=1)
    close(got.outputs[0], run(m, inputs).outputs[0])
    assert sorted(set(seen)) == [8, 16, 24, 32], seen


def test_non_finite_v_behind_the_mask_keeps_every_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """inf in v at a masked key: 0 * inf is nan in the unfused program, so no key is dropped and
    the rows are nan as there."""
    text = masked_text((), 16, 16, 4, 4, None)
    m = fuse(text)
    q, kt, v = random_inputs(find_entry(m, None), 4)
    v = v.copy()
    v[15, 0] = np.inf
    seen = _pv_keys(monkeypatch)
    monkeypatch.setattr(ca, "BLOCK_ELEMENTS", 4 * 16)
    got = compiled(m, [q, kt, v], threads=1).outputs[0]
    want = unfused(text, [q, kt, v]).outputs[0]
    assert set(seen) == {16}
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got).any()


@pytest.mark.parametrize("what", ["long rows", "f16"])
def test_fallbacks_say_why_and_run_the_interpreters_kernel(
        what: str, monkeypatch: pytest.MonkeyPatch) -> None:
    text = attention_text((2,), 8, 8, 4, 4, causal=True, rate=0.3)
    if what == "f16":
        text = text.replace("f32", "f16").replace("-1.0e+09", "-6.0e+04")
    else:
        monkeypatch.setattr(ca, "MAX_KEYS", 4)
    m = fuse(text)
    inputs = random_inputs(find_entry(m, None), 0)
    want, got = run(m, inputs), compiled(m, inputs)
    assert np.array_equal(got.outputs[0], want.outputs[0])     # the same kernel
    (line,) = got.explain
    assert line.startswith("[backend compiled] t.mlir:") and "lamina.fused not compiled" in line
    assert ("8 keys" if what == "long rows" else "f16") in line
    assert "the NumPy interpreter's attention kernel" in line
    assert len(got.stats["compiled"]["fallbacks"]) == 1 and want.explain == []
