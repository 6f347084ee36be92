"""fuse-attention: the pass (matches, refusals, explain, idempotence, round trip) and the
interpreter's flash-style kernel (fused == unfused within float tolerance, dropout masks the
global ones, one kernel's statistics and working set, key blocks a mask removes whole skipped
only where that changes no bit); the other backends run the fused body."""

from __future__ import annotations

from functools import partial

import lamina
import lamina.backends.numpy.tile_threads as tile_exec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.analysis.fusion import fused_least_tiles
from lamina.backends.compare import compare
from lamina.backends.inputs import random_inputs
from lamina.backends.interface import find_entry
from lamina.backends.numpy.attention import block_sizes, run_attention
from lamina.backends.numpy.options import NumpyOptions
from lamina.backends.numpy.runner import ExecutionObserver, run_function
from lamina.ir.ops.fused import FusedOp
from lamina.ir.text.source import make_context, parse_text, verify
from lamina.passes.explain import ExplainLog
from lamina.passes.fuse_attention import FuseAttention
from lamina.passes.pipeline import build_pipeline, run_pipeline
from strategies import examples
from xdsl.ir import Operation


def attention_text(lead: tuple[int, ...], tq: int, tk: int, dh: int, dv: int, causal: bool,
                   rate: float | None, post_scale: bool = False, axis: int = -1,
                   after: str = "", returned: str = "") -> str:
    """One attention program: scale, optional causal select, softmax over `axis`, optional
    dropout and scale after it, then @ v; `after` is one more op on the probabilities (a
    template over %IN and %OUT) and `returned` an intermediate to return as well."""
    pre = "x".join(map(str, lead)) + "x" if lead else ""
    s_t = f"tensor<{pre}{tq}x{tk}xf32>"
    lines = [f"  %s = lamina.matmul %q, %kt : (tensor<{pre}{tq}x{dh}xf32>, "
             f"tensor<{pre}{dh}x{tk}xf32>) -> {s_t}",
             "  %c = lamina.constant dense<0.125> : tensor<f32>",
             f"  %scaled = lamina.mul %s, %c : ({s_t}, tensor<f32>) -> {s_t}"]
    x = "%scaled"
    if causal:
        rows = ", ".join(f"[{i + tk - tq}]" for i in range(tq))
        cols = ", ".join(str(j) for j in range(tk))
        lines += [f"  %rows = lamina.constant dense<[{rows}]> : tensor<{tq}x1xi64>",
                  f"  %cols = lamina.constant dense<[{cols}]> : tensor<{tk}xi64>",
                  f"  %mask = lamina.ge %rows, %cols : (tensor<{tq}x1xi64>, tensor<{tk}xi64>) "
                  f"-> tensor<{tq}x{tk}xi1>",
                  "  %neg = lamina.constant dense<-1.0e+09> : tensor<f32>",
                  f"  %masked = lamina.select %mask, %scaled, %neg : (tensor<{tq}x{tk}xi1>, "
                  f"{s_t}, tensor<f32>) -> {s_t}"]
        x = "%masked"
    lines.append(f"  %p = lamina.softmax {x} {{axis = {axis} : i64}} : {s_t}")
    p = "%p"
    if rate is not None:
        lines.append(f"  %pd = lamina.dropout %p {{rate = {rate} : f64, seed = 7 : i64}} : {s_t}")
        p = "%pd"
    if post_scale:
        lines += ["  %c2 = lamina.constant dense<0.5> : tensor<f32>",
                  f"  %ps = lamina.mul {p}, %c2 : ({s_t}, tensor<f32>) -> {s_t}"]
        p = "%ps"
    if after:
        lines.append("  " + after.replace("%IN", p).replace("%OUT", "%pa").replace("T", s_t))
        p = "%pa"
    o_t = f"tensor<{pre}{tq}x{dv}xf32>"
    lines.append(f"  %o = lamina.matmul {p}, %v : ({s_t}, tensor<{pre}{tk}x{dv}xf32>) -> {o_t}")
    results, types = "%o", o_t
    if returned:
        results, types = f"%o, {returned}", f"{o_t}, {s_t}"
    lines.append(f"  func.return {results} : {types}")
    head = (f"func.func @attn(%q: tensor<{pre}{tq}x{dh}xf32>, %kt: tensor<{pre}{dh}x{tk}xf32>, "
            f"%v: tensor<{pre}{tk}x{dv}xf32>) -> ({types}) {{")
    return "\n".join([head, *lines, "}"]) + "\n"


def parse(text: str, name: str = "t.mlir"):
    ctx = make_context()
    m = parse_text(text, name, ctx)
    verify(m)
    return ctx, m


def fuse(text: str, spec: str = "fuse-attention", name: str = "t.mlir"):
    ctx, m = parse(text, name)
    run_pipeline(ctx, m, build_pipeline(spec))
    verify(m)
    return m


def explain(text: str) -> list[str]:
    ctx, m = parse(text)
    log = ExplainLog("fuse-attention")
    FuseAttention().run(ctx, m, log)
    return log.lines


def attention_ops(m) -> list[FusedOp]:
    return [op for op in m.walk() if isinstance(op, FusedOp) and op.fusion_kind == "attention"]


def run(m, inputs, options: NumpyOptions | None = None, **kw):
    return run_function(find_entry(m, None), inputs, options=options, **kw)


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ---- matches -------------------------------------------------------------------------------------

@pytest.mark.parametrize("path, entry, body", [
    ("samples/attention.mlir", "causal_attention", 10),      # 4 constants, mask, 5 chain ops
    ("samples/gpt2_block.mlir", None, 11),                   # ... and the attention dropout
])
def test_samples_fuse_one_attention_and_match(path: str, entry: str | None, body: int) -> None:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    _, ref = parse(text, path)
    m = fuse(text, name=path)
    (a,) = attention_ops(m)
    assert len([o for o in a.body.block.ops if o is not a.yield_op]) == body
    assert len(a.inputs) == 3 and len(a.outputs) == 1
    func = find_entry(ref, entry)
    inputs = random_inputs(func, 0)
    for tiles in (None, 64):
        want = run_function(func, inputs).outputs
        got = run_function(find_entry(m, entry), inputs,
                           options=NumpyOptions(tile_bytes=tiles)).outputs
        for g, w in zip(got, want, strict=True):   # after more matmuls: --check's tolerance
            d = compare("out", "f32", g, w)
            assert d.ok, d.line()


def test_placed_sample_fuses_after_propagation_and_runs_on_its_mesh() -> None:
    """The SPMD interpreter runs the fused body op by op on each device's heads."""
    with open("samples/attention_heads.mlir", encoding="utf-8") as f:
        text = f.read()
    _, ref = parse(text)
    plain = fuse(text, "propagate-sharding,insert-collectives{target=h100-node}")
    m = fuse(text, "propagate-sharding,fuse-attention,insert-collectives{target=h100-node}")
    assert len(attention_ops(m)) == 1
    inputs = random_inputs(find_entry(ref, None), 1)
    want = lamina.run(plain, inputs)
    got = lamina.run(m, inputs)
    assert got.stats["devices"] == 4
    for name, w in want.outputs.items():
        assert_close(got.outputs[name], w)


def test_one_kernel_its_bytes_and_a_small_working_set() -> None:
    text = attention_text((2, 3), 32, 48, 8, 8, causal=True, rate=0.1)
    _, ref = parse(text)
    m = fuse(text)
    (a,) = attention_ops(m)
    inputs = random_inputs(find_entry(ref, None), 0)

    class Seen(ExecutionObserver):
        sets: list[int] = []

        def on_working_set(self, op: Operation, nbytes: int) -> None:
            self.sets.append(nbytes)

    obs = Seen()
    got = run(m, inputs, NumpyOptions(tile_bytes=256), observer=obs)
    assert got.stats["kernels"] == 1 and got.stats["ops_executed"] == 1
    io = sum(x.nbytes for x in inputs) + got.outputs[0].nbytes
    assert got.stats["bytes_moved"] == io == got.stats["bytes_accessed"]
    scores = 2 * 3 * 32 * 48 * 4
    (ws,) = obs.sets
    assert 0 < ws < scores / 4, ws        # block buffers and the mask, not the scores
    assert fused_least_tiles(a) == 2 * 3 * 32 * 48


def test_a_mask_used_outside_stays_outside_as_an_input() -> None:
    text = attention_text((2,), 4, 4, 3, 4, causal=True, rate=None)
    text = text.replace("-> (tensor<2x4x4xf32>) {", "-> (tensor<2x4x4xf32>, tensor<4x4xi1>) {") \
        .replace("func.return %o : tensor<2x4x4xf32>",
                 "func.return %o, %mask : tensor<2x4x4xf32>, tensor<4x4xi1>")
    _, ref = parse(text)
    m = fuse(text)
    (a,) = attention_ops(m)
    assert len(a.inputs) == 4 and "lamina.ge" not in str(a)
    inputs = random_inputs(find_entry(ref, None), 0)
    got, want = run(m, inputs, NumpyOptions(tile_bytes=16)).outputs, run(ref, inputs).outputs
    assert_close(got[0], want[0])
    assert np.array_equal(got[1], want[1])


def test_block_sizes_follow_tile_bytes() -> None:
    assert block_sizes(1024, 1024, 4, None) == (512, 512)
    assert block_sizes(1024, 1024, 4, 512 * 1024) == (512, 256)
    assert block_sizes(16, 16, 4, 64) == (4, 4)
    assert block_sizes(3, 5, 4, 1) == (1, 1)
    assert block_sizes(8, 2, 4, 4096) == (8, 2)


# ---- the property: fused == unfused over shapes, blocks, masks and dropout -----------------------

@settings(max_examples=examples(10), deadline=None)
@given(lead=st.sampled_from([(), (1,), (2,), (2, 3)]), tq=st.integers(1, 9),
       tk=st.integers(1, 11), dh=st.integers(1, 5), causal=st.booleans(),
       rate=st.sampled_from([None, 0.5]), post=st.booleans(),
       tiles=st.sampled_from([4, 16, 64, 256, None]), seed=st.integers(0, 3))
def test_fused_equals_unfused(lead, tq, tk, dh, causal, rate, post, tiles, seed) -> None:
    """v is the identity (Dv = Tk), so the output is the dropped-out probabilities themselves:
    the positions dropout zeroes must be the unfused program's, element for element."""
    text = attention_text(lead, tq, tk, dh, tk, causal, rate, post_scale=post)
    _, ref = parse(text)
    m = fuse(text)
    assert len(attention_ops(m)) == 1
    q, kt, _ = random_inputs(find_entry(ref, None), seed)
    v = np.broadcast_to(np.eye(tk, dtype=np.float32), (*lead, tk, tk)).copy()
    want = run(ref, [q * 3, kt, v]).outputs[0]
    got = run(m, [q * 3, kt, v], NumpyOptions(tile_bytes=tiles)).outputs[0]
    assert_close(got, want)
    assert np.array_equal(got == 0, want == 0)
    if rate is not None and want.size >= 64:
        assert (want == 0).any()


@settings(max_examples=examples(8), deadline=None)
@given(lead=st.sampled_from([(), (3,), (2, 2)]), tq=st.integers(1, 12), tk=st.integers(1, 12),
       dh=st.integers(1, 6), dv=st.integers(1, 6), causal=st.booleans(),
       rate=st.sampled_from([None, 0.25]), tiles=st.sampled_from([8, 32, 128, None]))
def test_fused_equals_unfused_with_random_values(lead, tq, tk, dh, dv, causal, rate, tiles
                                                 ) -> None:
    text = attention_text(lead, tq, tk, dh, dv, causal, rate)
    _, ref = parse(text)
    m = fuse(text)
    inputs = random_inputs(find_entry(ref, None), tq * 31 + tk)
    want = run(ref, inputs).outputs[0]
    got = run(m, inputs, NumpyOptions(tile_bytes=tiles)).outputs[0]
    assert_close(got, want)


def test_rows_masked_whole_are_uniform_as_unfused() -> None:
    """Tq > Tk with the causal offset negative: the first rows mask every key, which the
    unfused softmax makes uniform; the kernel must not skip those key blocks."""
    text = attention_text((2,), 8, 4, 3, 4, causal=True, rate=None).replace(
        "[-4]", "[-9]").replace("[-3]", "[-9]")
    _, ref = parse(text)
    m = fuse(text)
    inputs = random_inputs(find_entry(ref, None), 0)
    want = run(ref, inputs).outputs[0]
    got = run(m, inputs, NumpyOptions(tile_bytes=8)).outputs[0]
    assert_close(got, want)


def test_threads_do_not_change_a_bit(monkeypatch) -> None:
    monkeypatch.setattr(tile_exec, "PARALLEL_MIN_ELEMENTS", 1)
    text = attention_text((2, 2), 16, 16, 4, 4, causal=True, rate=0.2)
    _, ref = parse(text)
    m = fuse(text)
    inputs = random_inputs(find_entry(ref, None), 0)
    one = run(m, inputs, NumpyOptions(tile_bytes=64, threads=1)).outputs[0]
    two = run(m, inputs, NumpyOptions(tile_bytes=64, threads=2)).outputs[0]
    assert np.array_equal(one, two)


@pytest.mark.parametrize("dtype", ["f64", "f16", "bf16"])
def test_other_float_types_match_within_their_tolerance(dtype: str) -> None:
    """The online softmax computes in f32 (f64 for f64) and rounds the result once."""
    text = attention_text((2,), 8, 12, 4, 4, causal=True, rate=0.2).replace("f32", dtype) \
        .replace("-1.0e+09", "-3.0e+04")
    _, ref = parse(text)
    m = fuse(text)
    assert len(attention_ops(m)) == 1
    inputs = random_inputs(find_entry(ref, None), 0)
    want = run(ref, inputs).outputs[0]
    got = run(m, inputs, NumpyOptions(tile_bytes=32)).outputs[0]
    d = compare("out", dtype, got, want)
    assert d.ok, d.line()
    if dtype == "bf16":   # stored in f32, rounded to bf16: the low 16 bits are zero
        assert not (got.view(np.uint32) & 0xFFFF).any()
    if dtype == "f64":
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_later_passes_keep_the_kernel() -> None:
    """propagate-sharding dissolves and rebuilds fused groups (the kind must survive), and
    annotate-lifetimes frees the intermediates inside the body (a free is not a second use)."""
    with open("samples/attention_heads.mlir", encoding="utf-8") as f:
        m = fuse(f.read(), "propagate-sharding,fuse-attention,propagate-sharding")
    assert len(attention_ops(m)) == 1
    text = attention_text((2,), 8, 8, 4, 4, causal=True, rate=0.1)
    _, ref = parse(text)
    m = fuse(text, "fuse-attention,annotate-lifetimes")
    (a,) = attention_ops(m)
    assert "lamina.free %s" in str(a)
    inputs = random_inputs(find_entry(ref, None), 0)
    assert_close(run(m, inputs).outputs[0], run(ref, inputs).outputs[0])


# ---- skipping key blocks a mask removes whole -----------------------------------------------------

NEG_INF = "0xFF800000"


def masked_text(lead: tuple[int, ...], tq: int, tk: int, dh: int, dv: int, rate: float | None,
                fill: str = "-1.0e+09", flip: bool = False) -> str:
    """`attention_text`'s causal program with fill `fill`; `flip` writes the same mask as
    `select(rows < cols, fill, scores)`, the scores the false branch."""
    text = attention_text(lead, tq, tk, dh, dv, causal=True, rate=rate).replace("-1.0e+09", fill)
    if flip:
        pre = "x".join(map(str, lead)) + "x" if lead else ""
        s_t = f"tensor<{pre}{tq}x{tk}xf32>"
        old = (f"select %mask, %scaled, %neg : (tensor<{tq}x{tk}xi1>, {s_t}, tensor<f32>)")
        assert old in text
        text = text.replace("lamina.ge %rows", "lamina.lt %rows").replace(
            old, f"select %mask, %neg, %scaled : (tensor<{tq}x{tk}xi1>, tensor<f32>, {s_t})")
    return text


def run_unskipped(m, inputs, tiles: int | None):
    """The fused program with every key block run: the reference skipping must equal."""
    return run(m, inputs, NumpyOptions(tile_bytes=tiles),
               runners={FusedOp: partial(run_attention, skip=False)})


def skipped(res) -> int:
    return res.stats.get("attention_blocks_skipped", 0)


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal element for element: -0.0 == 0.0, nan where the other has nan."""
    assert np.array_equal(got, want, equal_nan=True)


@settings(max_examples=examples(10), deadline=None)
@given(lead=st.sampled_from([(), (2,), (2, 2)]), tq=st.integers(1, 24), tk=st.integers(1, 24),
       dh=st.integers(1, 5), dv=st.integers(1, 5), rate=st.sampled_from([None, 0.25]),
       fill=st.sampled_from(["-1.0e+09", NEG_INF]), flip=st.booleans(),
       tiles=st.sampled_from([16, 64, 256, None]), seed=st.integers(0, 3))
def test_skipping_changes_no_bit(lead, tq, tk, dh, dv, rate, fill, flip, tiles, seed) -> None:
    """Causal programs (Tq != Tk shifts the diagonal: rows masked whole when Tq > Tk) give the
    result of running every key block exactly, and the unfused one within tolerance. (Not
    compared with unfused: -inf rows masked whole under dropout, nan in the unfused softmax
    that dropout zeroes in places, nan throughout in the kernel, skipping or not.)"""
    text = masked_text(lead, tq, tk, dh, dv, rate, fill, flip)
    _, ref = parse(text)
    m = fuse(text)
    inputs = random_inputs(find_entry(ref, None), seed)
    got = run(m, inputs, NumpyOptions(tile_bytes=tiles))
    assert_same(got.outputs[0], run_unskipped(m, inputs, tiles).outputs[0])
    if not (fill == NEG_INF and rate is not None and tq > tk):
        assert_close(got.outputs[0], run(ref, inputs).outputs[0])


@pytest.mark.parametrize("flip", [False, True])
def test_skipping_happens_on_a_causal_program(flip: bool) -> None:
    """8 x 8 blocks of 8 x 8 scores: the 28 above the diagonal are skipped, per leading index."""
    assert block_sizes(64, 64, 4, 256) == (8, 8)
    text = masked_text((2,), 64, 64, 8, 8, 0.1, flip=flip)
    m = fuse(text)
    inputs = random_inputs(find_entry(m, None), 0)
    got = run(m, inputs, NumpyOptions(tile_bytes=256))
    assert skipped(got) == 2 * 28
    assert skipped(run_unskipped(m, inputs, 256)) == 0
    assert_same(got.outputs[0], run_unskipped(m, inputs, 256).outputs[0])


def whole_row_masked(fill: str) -> str:
    """16 x 16 causal scores whose row 0 masks every key (its diagonal moved to -1)."""
    return masked_text((2,), 16, 16, 4, 4, None, fill).replace("dense<[[0], [1],",
                                                               "dense<[[-1], [1],")


@pytest.mark.parametrize("fill", ["-1.0e+09", NEG_INF])
def test_a_row_masked_whole_falls_back_and_matches_unfused(fill: str) -> None:
    """-1e9: the unfused row is uniform over all keys, so its blocks must run; -inf: nan. The
    other query blocks still skip."""
    text = whole_row_masked(fill)
    _, ref = parse(text)
    m = fuse(text)
    inputs = random_inputs(find_entry(ref, None), 0)
    got, want = run(m, inputs, NumpyOptions(tile_bytes=64)), run(ref, inputs).outputs[0]
    assert skipped(got) > 0
    out = got.outputs[0]
    assert_same(out, run_unskipped(m, inputs, 64).outputs[0])
    assert_close(out, want)
    if fill == NEG_INF:
        assert np.isnan(out[:, 0]).all() and not np.isnan(out[:, 1:]).any()
    else:
        assert_close(out[:, 0], np.broadcast_to(inputs[2].mean(axis=-2), out[:, 0].shape))


def test_non_finite_v_in_a_masked_block_is_nan_as_unfused() -> None:
    """0 * inf and 0 * nan are nan in the unfused p @ v: a masked-away key with such a value
    makes every row nan, so its block must run; blocks of finite keys still skip."""
    text = masked_text((2,), 16, 16, 4, 4, None)
    _, ref = parse(text)
    m = fuse(text)
    q, kt, v = random_inputs(find_entry(ref, None), 0)
    v[0, 13, 1], v[1, 14, 2] = np.inf, np.nan
    got, want = run(m, [q, kt, v], NumpyOptions(tile_bytes=64)), run(ref, [q, kt, v]).outputs[0]
    assert skipped(got) > 0 and np.isnan(want[0, :13, 1]).all()
    assert_same(got.outputs[0], run_unskipped(m, [q, kt, v], 64).outputs[0])
    assert_same(np.isnan(got.outputs[0]), np.isnan(want))
    assert_close(got.outputs[0], want)


def test_scores_near_the_fill_are_not_skipped_over() -> None:
    """Scores within ~100 of -1e9: exp(F - m) is not 0, so blocks the mask removes still count
    in the unfused softmax and must run (in f32, 1e9 is exact and its ulp is 64)."""
    text = masked_text((2,), 16, 16, 2, 4, None)
    _, ref = parse(text)
    m = fuse(text)
    q, kt, v = random_inputs(find_entry(ref, None), 0)
    q[..., 0], kt[..., 0, :] = 1.0, -8.0e9                 # 0.125 * -8e9 = -1e9
    q[..., 1], kt[..., 1, :] = 1.0, np.linspace(-800, 800, 16, dtype=np.float32)
    got = run(m, [q, kt, v], NumpyOptions(tile_bytes=64))
    want = run(ref, [q, kt, v]).outputs[0]
    assert_same(got.outputs[0], run_unskipped(m, [q, kt, v], 64).outputs[0])
    np.testing.assert_allclose(got.outputs[0], want, rtol=1e-4, atol=1e-5)
    assert not np.isclose(want[0, 0], v[0, 0]).all()      # row 0 is not its one key alone


def test_a_prob_op_that_makes_zeros_nan_turns_skipping_off() -> None:
    """p * inf: the unfused program's masked zeros become nan (0 * inf), so nothing is skipped."""
    text = attention_text((2,), 16, 16, 4, 4, causal=True, rate=None, post_scale=True) \
        .replace("dense<0.5>", "dense<0x7F800000>")
    _, ref = parse(text)
    m = fuse(text)
    inputs = random_inputs(find_entry(ref, None), 0)
    got = run(m, inputs, NumpyOptions(tile_bytes=64))
    assert "attention_blocks_skipped" not in got.stats
    assert_same(got.outputs[0], run(ref, inputs).outputs[0])


# ---- a safe softmax: 0 for a query with every key masked ------------------------------------------

def safe(text: str) -> str:
    """The program with its softmax `safe` (PyTorch's sdpa: 0 on a row of only -inf)."""
    out = text.replace("{axis = -1 : i64}", "{axis = -1 : i64, safe = true}")
    assert out.count("safe = true") == 1
    return out


@settings(max_examples=examples(10), deadline=None)
@given(lead=st.sampled_from([(), (2,), (2, 2)]), tq=st.integers(1, 24), tk=st.integers(1, 24),
       dh=st.integers(1, 5), dv=st.integers(1, 5), rate=st.sampled_from([None, 0.25]),
       flip=st.booleans(), tiles=st.sampled_from([16, 64, 256, None]), seed=st.integers(0, 3))
def test_safe_rows_masked_whole_are_zero_as_unfused(lead, tq, tk, dh, dv, rate, flip, tiles,
                                                    seed) -> None:
    """Causal -inf masks (Tq > Tk masks the first Tq - Tk rows whole): with a safe softmax the
    kernel's rows masked whole are 0, as the unfused program's are (dropout or not, where the
    plain softmax's nan made them incomparable), skipping or not, and no element is nan."""
    text = safe(masked_text(lead, tq, tk, dh, dv, rate, NEG_INF, flip))
    _, ref = parse(text)
    m = fuse(text)
    assert len(attention_ops(m)) == 1
    inputs = random_inputs(find_entry(ref, None), seed)
    got = run(m, inputs, NumpyOptions(tile_bytes=tiles)).outputs[0]
    want = run(ref, inputs).outputs[0]
    assert_same(got, run_unskipped(m, inputs, tiles).outputs[0])
    assert not np.isnan(got).any() and not np.isnan(want).any()
    assert_close(got, want)
    whole = max(0, tq - tk)            # row i keeps the keys j <= i + tk - tq
    assert (got[..., :whole, :] == 0).all() and (want[..., :whole, :] == 0).all()


@pytest.mark.parametrize("tiles", [8, 64, None])
def test_a_safe_row_masked_whole_is_zero_and_the_rest_still_skip(tiles: int | None) -> None:
    """Row 0 masks every key: 0 in the kernel at any block size, the others the unfused
    values, and key blocks of the other query blocks are still skipped."""
    text = safe(whole_row_masked(NEG_INF))
    _, ref = parse(text)
    m = fuse(text)
    inputs = random_inputs(find_entry(ref, None), 0)
    got, want = run(m, inputs, NumpyOptions(tile_bytes=tiles)), run(ref, inputs).outputs[0]
    out = got.outputs[0]
    assert (out[:, 0] == 0).all() and (want[:, 0] == 0).all()
    assert not np.isnan(out).any() and (out[:, 1:] != 0).any()
    assert_close(out, want)
    if tiles == 64:
        assert skipped(got) > 0


def test_jax_runs_a_safe_body_inline_with_zero_rows() -> None:
    pytest.importorskip("jax")
    text = safe(whole_row_masked(NEG_INF))
    m = fuse(text)
    assert len(attention_ops(m)) == 1
    inputs = random_inputs(find_entry(m, None), 0)
    want = run(m, inputs).outputs[0]
    got = np.asarray(lamina.run(m, inputs, backend="jax").outputs["out0"])
    assert (got[:, 0] == 0).all() and not np.isnan(got).any()
    assert_close(got, want)


# ---- refusals, idempotence, round trip -----------------------------------------------------------

@pytest.mark.parametrize("kw, reason", [
    ({"axis": 1}, "normalizes over axis 1, not the last axis"),
    ({"returned": "%scaled"}, "%scaled is used 2 times"),
    ({"after": "%OUT = lamina.exp %IN : T"}, "%pa = lamina.exp, which is not linear"),
    ({"after": "%OUT = lamina.mul %IN, %IN : T"}, "%p is used 2 times"),
    ({"after": "%OUT = lamina.sub %IN, %v : T"}, "%pa = lamina.sub, which is not homogeneous"),
])
def test_refusals_leave_the_program_unchanged(kw, reason) -> None:
    lead = (2,) if "axis" not in kw else (4,)
    text = attention_text(lead, 4, 4, 3, 4, causal=False, rate=None, **kw)
    _, ref = parse(text)
    m = fuse(text)
    assert str(m) == str(ref)
    lines = explain(text)
    assert any("not fused as attention" in ln and reason in ln for ln in lines), lines


def test_every_matmul_gets_one_explain_line_at_its_location() -> None:
    lines = explain(attention_text((2,), 4, 4, 3, 4, causal=True, rate=0.1))
    assert lines == [
        "[fuse-attention] t.mlir:2:3: attention: %s = lamina.matmul ... %o = lamina.matmul "
        "-> lamina.fused \"attention\" (7 ops, 1 of them building side operands; the 2x4x4 "
        "scores are never stored)"]


def test_twice_changes_nothing_and_round_trips() -> None:
    text = attention_text((2,), 4, 6, 3, 5, causal=True, rate=0.1, post_scale=True)
    once = fuse(text)
    twice = fuse(str(once), "fuse-attention")
    assert str(twice) == str(once)
    for generic in (False, True):
        _, back = parse(lamina.to_text(once, generic=generic))
        assert str(back) == str(once)
        assert len(attention_ops(back)) == 1


def test_verifier_refuses_a_body_that_is_not_attention() -> None:
    text = str(fuse(attention_text((2,), 4, 4, 3, 4, causal=False, rate=None)))
    bad = text.replace("lamina.softmax %scaled {axis = -1 : i64}",
                       "lamina.softmax %scaled {axis = 1 : i64}")
    assert bad != text
    with pytest.raises(Exception, match="lamina.fused \"attention\": the softmax"):
        parse(bad)


# ---- the other backends run the fused body -------------------------------------------------------

def test_jax_runs_the_body_inline() -> None:
    pytest.importorskip("jax")
    text = attention_text((2,), 8, 8, 4, 4, causal=True, rate=0.3)
    m = fuse(text)
    inputs = random_inputs(find_entry(m, None), 0)
    want = lamina.run(m, inputs).outputs
    got = lamina.run(m, inputs, backend="jax").outputs
    for name, w in want.items():
        assert_close(np.asarray(got[name]), w)
