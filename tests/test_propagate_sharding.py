"""propagate-sharding: every value placed, the documented priorities, explanations."""

from __future__ import annotations

import io
from contextlib import redirect_stderr

from lamina.backends.interface import find_entry
from lamina.ir.placement import spec_of
from lamina.ir.source import make_context, parse_text, verify
from lamina.passes.pipeline import build_pipeline, run_pipeline
from xdsl.dialects.builtin import ModuleOp

MESH = "lamina.mesh @m [data = 2, model = 4]\n"
XS = "tensor<8x16xf32, #lamina.place<@m, [[data], []]>>"


def propagate(text: str, explain: bool = False) -> tuple[ModuleOp, str]:
    ctx = make_context()
    m = parse_text(text, "p.mlir", ctx)
    verify(m)
    err = io.StringIO()
    with redirect_stderr(err):
        run_pipeline(ctx, m, build_pipeline("propagate-sharding", explain=explain))
    verify(m)
    return m, err.getvalue()


def test_unplaced_argument_follows_its_consumer_and_results_keep_splits() -> None:
    text = (MESH + f"func.func @f(%x: {XS}, %b: tensor<16xf32>) -> tensor<8x16xf32> {{\n"
            f"  %y = lamina.add %x, %b : ({XS}, tensor<16xf32>) -> tensor<8x16xf32>\n"
            "  %z = lamina.exp %y : tensor<8x16xf32>\n"
            "  func.return %z : tensor<8x16xf32>\n}\n")
    m, log = propagate(text, explain=True)
    f = find_entry(m, None)
    b = f.body.block.args[1]
    assert str(spec_of(b.type)) == "[[]]"
    assert str(spec_of(f.function_type.outputs.data[0])) == "[[data], []]"
    for op in f.body.block.ops:
        for r in op.results:
            assert spec_of(r.type) is not None
    assert "argument %b placed [[]]" in log and "%z placed [[data], []]" in log


def test_unused_argument_defaults_to_replicated_with_a_reason() -> None:
    text = (MESH + f"func.func @f(%x: {XS}, %u: tensor<4xf32>) -> {XS} {{\n"
            f"  %y = lamina.neg %x : {XS}\n  func.return %y : {XS}\n}}\n")
    m, log = propagate(text, explain=True)
    u = find_entry(m, None).body.block.args[1]
    assert str(spec_of(u.type)) == "[[]]"
    assert "argument %u is unused: placed [[]]" in log


def test_written_result_placement_wins_with_a_reshard() -> None:
    want = "tensor<8x16xf32, #lamina.place<@m, [[], [model]]>>"
    text = (MESH + f"func.func @f(%x: {XS}) -> {want} {{\n"
            f"  %y = lamina.neg %x : ({XS}) -> tensor<8x16xf32>\n"
            f"  %z = lamina.exp %y : (tensor<8x16xf32>) -> {want}\n  func.return %z : {want}\n}}\n")
    m, log = propagate(text, explain=True)
    names = [op.name for op in find_entry(m, None).body.block.ops]
    assert names == ["lamina.neg", "lamina.exp", "lamina.reshard", "func.return"]
    assert "the program states this placement" in log


def test_nothing_placed_is_left_alone() -> None:
    text = ("func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
            "  %y = lamina.neg %x : tensor<4xf32>\n  func.return %y : tensor<4xf32>\n}\n")
    m, log = propagate(text, explain=True)
    assert spec_of(find_entry(m, None).body.block.args[0].type) is None
    assert "nothing is placed on a mesh" in log


def test_fused_group_is_placed_through_its_body_and_split_at_a_needed_reduction() -> None:
    # the fused row_reduction group neg/reduce_sum/sub/exp gets its input's column split; the
    # pending sum of reduce_sum must be all-reduced before sub, which cannot happen inside a
    # fused kernel: the group splits there, the all_reduce sits between the two fused ops
    import numpy as np
    from lamina.backends.numpy.runner import run_function
    from lamina.backends.numpy.spmd import run_spmd
    from lamina.ir.collectives import AllReduceOp, PlacementOp
    from lamina.ir.fused import FusedOp

    xs = "tensor<16x8xf32, #lamina.place<@m, [[data], []]>>"
    text = (MESH + f"func.func @f(%x: {xs}) -> tensor<8x16xf32> {{\n"
            f"  %t = lamina.transpose %x {{permutation = array<i64: 1, 0>}} : ({xs}) -> "
            "tensor<8x16xf32>\n"
            "  %n = lamina.neg %t : tensor<8x16xf32>\n"
            "  %s = lamina.reduce_sum %n {axes = array<i64: 1>, keepdims = true} : "
            "(tensor<8x16xf32>) -> tensor<8x1xf32>\n"
            "  %d = lamina.sub %n, %s : (tensor<8x16xf32>, tensor<8x1xf32>) -> tensor<8x16xf32>\n"
            "  %e = lamina.exp %d : tensor<8x16xf32>\n"
            "  func.return %e : tensor<8x16xf32>\n}\n")
    ctx = make_context()
    ref = parse_text(text, "p.mlir", ctx)
    m = parse_text(text, "p.mlir", ctx)
    run_pipeline(ctx, m, build_pipeline("fuse-elementwise"))
    f = find_entry(m, None)
    assert sum(isinstance(op, FusedOp) for op in f.body.block.ops) == 1
    run_pipeline(ctx, m, build_pipeline("propagate-sharding,insert-collectives"))
    verify(m)
    top = list(f.body.block.ops)
    kinds = [op.name for op in top]
    assert kinds == ["lamina.transpose", "lamina.fused", "lamina.all_reduce", "lamina.fused",
                     "func.return"], kinds
    first, second = top[1], top[3]
    assert isinstance(first, FusedOp) and isinstance(second, FusedOp)
    assert [o.name for o in first.body.block.ops] == ["lamina.neg", "lamina.reduce_sum",
                                                      "lamina.yield"]
    assert [o.name for o in second.body.block.ops] == ["lamina.sub", "lamina.exp", "lamina.yield"]
    assert isinstance(top[2], AllReduceOp)
    for op in f.walk():
        if isinstance(op, FusedOp):
            assert not any(isinstance(o, PlacementOp) for o in op.body.block.ops)
        for r in op.results:
            assert spec_of(r.type) is not None
    x = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
    got = run_spmd(f, [x]).outputs[0]
    want = run_function(find_entry(ref, None), [x]).outputs[0]
    np.testing.assert_allclose(got, want, rtol=1e-5)
