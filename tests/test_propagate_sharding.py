"""propagate-sharding: every value placed, the documented priorities, explanations."""

from __future__ import annotations

import io
from contextlib import redirect_stderr

from lamina.backends.interface import find_entry
from lamina.ir.placement import spec_of
from lamina.ir.source import make_context, parse_text, verify
from lamina.passes.pipeline import build_pipeline, run_pipeline

MESH = "lamina.mesh @m [data = 2, model = 4]\n"
XS = "tensor<8x16xf32, #lamina.place<@m, [[data], []]>>"


def propagate(text: str, explain: bool = False) -> tuple[object, str]:
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
