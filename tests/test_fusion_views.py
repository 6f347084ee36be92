"""Layout ops at a kernel's edges and matmul epilogues (rules 8 and 9 of fuse-elementwise): the
index maps of `lamina.ir.ops.view_rules`, the box tiles of the tile loop, and fused == unfused on
programs shaped like the GPT-2 block's QKV split, head merge and projections."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.backends.inputs import random_inputs
from lamina.backends.interface import find_entry
from lamina.backends.numpy.fused_views import box_tiling
from lamina.backends.numpy.options import NumpyOptions
from lamina.backends.numpy.runner import run_function
from lamina.ir.core.shapes import TensorInfo
from lamina.ir.ops.formulas import Call
from lamina.ir.ops.fused import FusedOp
from lamina.ir.ops.optable import lookup
from lamina.ir.ops.view_rules import reshape_dims
from lamina.ir.text.source import make_context, parse_text, verify
from lamina.passes.explain import ExplainLog
from lamina.passes.fuse_elementwise import FuseElementwise
from lamina.passes.pipeline import build_pipeline, run_pipeline
from strategies import examples
from test_fuse_elementwise import fused_ops
from xdsl.utils.exceptions import VerifyException

TILES = [None, NumpyOptions(tile_bytes=64), NumpyOptions(tile_bytes=700, threads=2)]


def _fuse(text: str, spec: str = "fuse-elementwise"):
    ctx = make_context()
    m = parse_text(text, "t.mlir", ctx)
    verify(m)
    log = ExplainLog("fuse-elementwise")
    if spec == "fuse-elementwise":
        FuseElementwise().run(ctx, m, log)
    else:
        run_pipeline(ctx, m, build_pipeline(spec))
    verify(m)
    return m, log.lines


def _same(text: str, exact: bool = True) -> tuple[list[FusedOp], list[str]]:
    """Fused == unfused on random inputs at three tilings; returns the fused module's kernels."""
    ctx = make_context()
    ref = parse_text(text, "t.mlir", ctx)
    m, lines = _fuse(text)
    inputs = random_inputs(find_entry(ref, None), 0)
    want = run_function(find_entry(ref, None), inputs)
    for opts in TILES:
        got = run_function(find_entry(m, None), inputs, options=opts)
        for w, g in zip(want.outputs, got.outputs, strict=True):
            if exact:
                assert np.array_equal(w, g), (opts, np.abs(w - g).max())
            else:
                np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)
        assert got.stats["kernels"] < want.stats["kernels"]
    return fused_ops(m), lines


QKV = """
func.func @f(%x: tensor<2x8x12xf32>, %b: tensor<12xf32>)
    -> (tensor<2x2x8x2xf32>, tensor<2x2x2x8xf32>, tensor<2x2x8x2xf32>) {
  %qkv = lamina.add %x, %b : (tensor<2x8x12xf32>, tensor<12xf32>) -> tensor<2x8x12xf32>
  %q = lamina.slice %qkv {start = array<i64: 0, 0, 0>, limit = array<i64: 2, 8, 4>} : (tensor<2x8x12xf32>) -> tensor<2x8x4xf32>
  %k = lamina.slice %qkv {start = array<i64: 0, 0, 4>, limit = array<i64: 2, 8, 8>} : (tensor<2x8x12xf32>) -> tensor<2x8x4xf32>
  %v = lamina.slice %qkv {start = array<i64: 0, 0, 8>, limit = array<i64: 2, 8, 12>} : (tensor<2x8x12xf32>) -> tensor<2x8x4xf32>
  %q4 = lamina.reshape %q : (tensor<2x8x4xf32>) -> tensor<2x8x2x2xf32>
  %k4 = lamina.reshape %k : (tensor<2x8x4xf32>) -> tensor<2x8x2x2xf32>
  %v4 = lamina.reshape %v : (tensor<2x8x4xf32>) -> tensor<2x8x2x2xf32>
  %qh = lamina.transpose %q4 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x2xf32>) -> tensor<2x2x8x2xf32>
  %kt = lamina.transpose %k4 {permutation = array<i64: 0, 2, 3, 1>} : (tensor<2x8x2x2xf32>) -> tensor<2x2x2x8xf32>
  %vh = lamina.transpose %v4 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x2xf32>) -> tensor<2x2x8x2xf32>
  func.return %qh, %kt, %vh : tensor<2x2x8x2xf32>, tensor<2x2x2x8xf32>, tensor<2x2x8x2xf32>
}
"""


def test_qkv_bias_split_and_head_transposes_are_one_kernel() -> None:
    """GPT-2's QKV: the bias add writes q, k^T and v through slice + reshape + transpose, bit
    for bit the unfused values (only data moves), on whole, one-row and odd tiles."""
    (f,), lines = _same(QKV)
    assert f.fusion_kind == "loop" and len(f.outputs) == 3
    assert sum("as an output view" in ln for ln in lines) == 9, lines


CONCAT = """
func.func @f(%x: tensor<6x4xf32>, %y: tensor<6x4xf32>) -> tensor<6x8xf32> {
  %a = lamina.exp %x : tensor<6x4xf32>
  %b = lamina.mul %x, %y : tensor<6x4xf32>
  %c = lamina.concat %a, %b {dim = 1 : i64} : (tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<6x8xf32>
  func.return %c : tensor<6x8xf32>
}
"""


def test_concat_is_a_multi_input_write() -> None:
    (f,), _ = _same(CONCAT)
    assert [o.name for o in f.body.block.ops][-2:] == ["lamina.concat", "lamina.yield"]


INPUT_VIEW = """
func.func @f(%x: tensor<4x2x6xf32>, %y: tensor<2x4x6xf32>) -> tensor<2x4x6xf32> {
  %t = lamina.transpose %x {permutation = array<i64: 1, 0, 2>} : (tensor<4x2x6xf32>) -> tensor<2x4x6xf32>
  %s = lamina.add %t, %y : tensor<2x4x6xf32>
  %e = lamina.exp %s : tensor<2x4x6xf32>
  func.return %e : tensor<2x4x6xf32>
}
"""


def test_a_kernel_reads_its_input_through_a_transpose() -> None:
    (f,), lines = _same(INPUT_VIEW)
    assert [o.name for o in f.body.block.ops][0] == "lamina.transpose"
    assert any("fused %s = lamina.add with %t = lamina.transpose" in ln for ln in lines), lines


MERGE_ROWS = """
func.func @f(%x: tensor<4x6x8xf32>) -> tensor<8x24xf32> {
  %a = lamina.exp %x : tensor<4x6x8xf32>
  %r = lamina.reshape %a : (tensor<4x6x8xf32>) -> tensor<24x8xf32>
  %t = lamina.transpose %r {permutation = array<i64: 1, 0>} : (tensor<24x8xf32>) -> tensor<8x24xf32>
  func.return %t : tensor<8x24xf32>
}
"""


def test_a_reshape_merging_the_rows_still_fuses_with_coarser_tiles() -> None:
    """The reshape merges the two row dims, so a tile must cover them whole: the kernel runs as
    one tile (the box tiling never cuts dims the view does not keep), still bit for bit."""
    (f,), _ = _same(MERGE_ROWS)
    assert f.fusion_kind == "loop"


MATMUL = """
func.func @f(%x: tensor<2x8x16xf32>, %w: tensor<16x12xf32>, %b: tensor<12xf32>,
             %r: tensor<2x8x12xf32>, %g: tensor<12xf32>) -> (tensor<2x8x12xf32>, tensor<2x8x12xf32>) {
  %m = lamina.matmul %x, %w : (tensor<2x8x16xf32>, tensor<16x12xf32>) -> tensor<2x8x12xf32>
  %mb = lamina.add %m, %b : (tensor<2x8x12xf32>, tensor<12xf32>) -> tensor<2x8x12xf32>
  %act = lamina.gelu %mb {approximate = "tanh"} : tensor<2x8x12xf32>
  %d = lamina.dropout %act {rate = 5.000000e-01 : f64, seed = 3 : i64} : tensor<2x8x12xf32>
  %h = lamina.add %r, %d : tensor<2x8x12xf32>
  %n = lamina.layernorm %h scale %g {axis = -1 : i64, eps = 1.000000e-05 : f64} : (tensor<2x8x12xf32>, tensor<12xf32>) -> tensor<2x8x12xf32>
  func.return %h, %n : tensor<2x8x12xf32>, tensor<2x8x12xf32>
}
"""


def test_matmul_epilogue_with_dropout_and_a_row_reduction() -> None:
    """Bias, GeLU, dropout (masks by the global index: the dropped places match), residual and a
    LayerNorm over the result's rows run on each block of the matmul's result rows."""
    (f,), _ = _same(MATMUL, exact=False)
    assert f.fusion_kind == "matmul"
    assert [o.name for o in f.body.block.ops][0] == "lamina.matmul"


HEAD_MERGE = """
func.func @f(%ctx: tensor<2x2x8x4xf32>, %w: tensor<8x8xf32>) -> tensor<2x8x8xf32> {
  %t = lamina.transpose %ctx {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x8x4xf32>) -> tensor<2x8x2x4xf32>
  %mg = lamina.reshape %t : (tensor<2x8x2x4xf32>) -> tensor<2x8x8xf32>
  %p = lamina.matmul %mg, %w : (tensor<2x8x8xf32>, tensor<8x8xf32>) -> tensor<2x8x8xf32>
  %e = lamina.tanh %p : tensor<2x8x8xf32>
  func.return %e : tensor<2x8x8xf32>
}
"""


def test_head_merge_is_the_projections_input_view() -> None:
    (f,), _ = _same(HEAD_MERGE, exact=False)
    assert [o.name for o in f.body.block.ops][:3] == ["lamina.transpose", "lamina.reshape",
                                                      "lamina.matmul"]


def test_refusals_say_why() -> None:
    prologue = MATMUL.replace("%m = lamina.matmul %x, %w", "%xe = lamina.exp %x : tensor<2x8x16xf32>\n"
                              "  %m = lamina.matmul %xe, %w")
    _, lines = _fuse(prologue)
    assert any("a matmul reads its operands whole" in ln for ln in lines), lines
    reads_view = QKV.replace("func.return %qh, %kt, %vh", "%n = lamina.neg %qh : tensor<2x2x8x2xf32>\n"
                             "  func.return %n, %kt, %vh").replace(
        "-> (tensor<2x2x8x2xf32>, tensor<2x2x2x8xf32>", "-> (tensor<2x2x8x2xf32>, tensor<2x2x2x8xf32>")
    _, lines = _fuse(reads_view)
    assert any("%n reads %qh, which the kernel writes through a layout op" in ln
               for ln in lines), lines


def _text(m) -> str:
    import io

    from xdsl.printer import Printer
    out = io.StringIO()
    Printer(stream=out).print_op(m)
    return out.getvalue()


def test_fusing_twice_changes_nothing_and_round_trips() -> None:
    print_module = _text
    for text in (QKV, MATMUL, HEAD_MERGE, CONCAT):
        m, _ = _fuse(text)
        once = print_module(m)
        ctx = make_context()
        again = parse_text(once, "t.mlir", ctx)
        FuseElementwise().run(ctx, again, None)
        verify(again)
        assert print_module(again) == once


# ---- the index maps --------------------------------------------------------------------------

def test_reshape_dims() -> None:
    assert reshape_dims([2, 8, 12], [2, 8, 3, 4]) == [0, 1, None]
    assert reshape_dims([2, 8, 2, 4], [2, 8, 8]) == [0, 1, None, None]
    assert reshape_dims([4, 6, 8], [24, 8]) == [None, None, 1]
    assert reshape_dims([2, 3], [3, 2]) == [None, None]
    assert reshape_dims([1, 5, 1], [5]) == [None, 0, None]


def _rule_call(name: str, attrs: dict, shapes: list[tuple[int, ...]], out: tuple[int, ...]):
    info = lookup(f"lamina.{name}")
    assert info is not None and info.view is not None
    return info, Call(attrs, [TensorInfo(s, "f32") for s in shapes], TensorInfo(out, "f32"))


@st.composite
def _layout_case(draw):
    """A layout op on a random operand and a random box of operand 0 whose partly covered dims
    the op keeps one to one (as the tile loop guarantees)."""
    kind = draw(st.sampled_from(["transpose", "slice", "reshape", "concat"]))
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(rank))
    if kind == "transpose":
        perm = draw(st.permutations(range(rank)))
        out = tuple(shape[p] for p in perm)
        info, call = _rule_call(kind, {"permutation": tuple(perm)}, [shape], out)
        shapes = [shape]
    elif kind == "slice":
        start = tuple(draw(st.integers(0, d - 1)) for d in shape)
        limit = tuple(draw(st.integers(s + 1, d)) for s, d in zip(start, shape, strict=True))
        strides = tuple(draw(st.integers(1, 2)) for _ in shape)
        out = tuple(-(-(e - s) // k) for s, e, k in zip(start, limit, strides, strict=True))
        info, call = _rule_call(kind, {"start": start, "limit": limit, "strides": strides},
                                [shape], out)
        shapes = [shape]
    elif kind == "reshape":
        out = (math.prod(shape),) if draw(st.booleans()) else shape[:-1] + (1, shape[-1])
        info, call = _rule_call(kind, {}, [shape], out)
        shapes = [shape]
    else:
        dim = draw(st.integers(0, rank - 1))
        other = tuple(draw(st.integers(1, 3)) if d == dim else n for d, n in enumerate(shape))
        out = tuple(a + b if d == dim else a for d, (a, b) in enumerate(zip(shape, other, strict=True)))
        info, call = _rule_call(kind, {"dim": dim}, [shape, other], out)
        shapes = [shape, other]
    j = draw(st.integers(0, len(shapes) - 1))
    assert info.view is not None
    m = info.view.dims(call, j)
    box = []
    for d, n in enumerate(shapes[j]):
        if m[d] is None:
            box.append((0, n))
        else:
            lo = draw(st.integers(0, n - 1))
            box.append((lo, draw(st.integers(lo + 1, n))))
    return info, call, shapes, j, box


@settings(max_examples=examples(50), deadline=None)
@given(_layout_case())
def test_box_carries_exactly_the_elements_the_op_moves(case) -> None:
    """Carrying a block of operand j through the op's index map puts exactly its elements where
    the op puts them: the result of the op on operands that are zero but for the block equals
    the carried block written into zeros (checked with distinct values, so any misplaced or
    missing element shows)."""
    info, call, shapes, j, box = case
    assert info.view is not None
    arrays = [np.zeros(s, np.float32) for s in shapes]
    index = tuple(slice(a, b) for a, b in box)
    block = np.arange(1, 1 + math.prod(b - a for a, b in box), dtype=np.float32).reshape(
        tuple(b - a for a, b in box))
    arrays[j][index] = block
    want = np.asarray(info.formula(np, arrays, call))
    got = np.zeros(call.result.shape, np.float32)
    r = info.view.box(call, j, block, tuple(a for a, _ in box))
    if r is not None:
        arr, offs = r
        got[tuple(slice(o, o + e) for o, e in zip(offs, arr.shape, strict=True))] = arr
    assert np.array_equal(got, want)


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.integers(0, 4),
       st.integers(1, 40))
def test_box_tiles_cover_every_row_once(lead: list[int], kept: int, want: int) -> None:
    t = box_tiling(tuple(lead), kept, want)
    rows = math.prod(lead)
    seen = np.zeros(lead, np.int32)
    assert rows % t.rows == 0
    for r0 in range(0, rows, t.rows):
        corner, ext = t.box(r0)
        idx = np.unravel_index(np.arange(r0, r0 + t.rows), lead)
        flat = np.zeros(lead, bool)
        flat[idx] = True
        boxed = np.zeros(lead, bool)
        boxed[tuple(slice(c, c + e) for c, e in zip(corner, ext, strict=True))] = True
        assert np.array_equal(flat, boxed)           # the tile's rows are exactly the box
        assert all(e == n for e, n in zip(ext[min(kept, len(lead)):], lead[min(kept, len(lead)):],
                                          strict=True))   # dims from `kept` on are whole
        seen[boxed] += 1
    assert (seen == 1).all()


def test_verifier_rejects_a_matmul_kernel_without_one_root() -> None:
    text = """
func.func @f(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %y = lamina.fused "matmul" (%a = %x) : (tensor<4x4xf32>) -> tensor<4x4xf32> {
    %e = lamina.exp %a : tensor<4x4xf32>
    lamina.yield %e : tensor<4x4xf32>
  }
  func.return %y : tensor<4x4xf32>
}
"""
    ctx = make_context()
    with pytest.raises((VerifyException, Exception), match="exactly one row-tiled"):
        verify(parse_text(text, "t.mlir", ctx))
