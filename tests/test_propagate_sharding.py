"""propagate-sharding: every value placed, the documented priorities, explanations."""

from __future__ import annotations

import io
from contextlib import redirect_stderr

from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.backends.interface import find_entry
from lamina.ir.mesh.placement import spec_of
from lamina.ir.mesh.sharding import Spec
from lamina.ir.text.source import make_context, parse_text, verify
from lamina.passes.pipeline import build_pipeline, run_pipeline
from strategies import examples
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
    from lamina.ir.mesh.collectives import AllReduceOp, PlacementOp
    from lamina.ir.ops.fused import FusedOp

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


# -- conflicting operands: the cheapest placement by the target's model (rules 4 and 5) --

def _run_placed(text: str) -> tuple[ModuleOp, str, dict]:
    """propagate-sharding,insert-collectives on h100-node; the SPMD run must equal the
    single-device run exactly (integer-valued inputs: every sum is exact)."""
    import numpy as np
    from lamina.backends.numpy.runner import run_function
    from lamina.backends.numpy.spmd import run_spmd

    ctx = make_context()
    ref = parse_text(text, "p.mlir", ctx)
    err = io.StringIO()
    m = parse_text(text, "p.mlir", ctx)
    with redirect_stderr(err):
        run_pipeline(ctx, m, build_pipeline("propagate-sharding,insert-collectives{target=h100-node}",
                                            explain=True))
    verify(m)
    f = find_entry(m, None)
    rng = np.random.default_rng(0)
    ins = [rng.integers(-3, 4, tuple(t.get_shape())).astype(np.float32)  # type: ignore[union-attr]
           for t in f.function_type.inputs.data]
    got = run_spmd(f, ins)
    want = run_function(find_entry(ref, None), ins)
    for g, w in zip(got.outputs, want.outputs, strict=True):
        np.testing.assert_array_equal(g, w)
    return m, err.getvalue(), got.stats


def _matmul_text(b: int, m: int, k: int, n: int) -> str:
    P = f"tensor<{b}x{m}x{k}xf32, #lamina.place<@m, [[data], [model], []]>>"
    V = f"tensor<{b}x{k}x{n}xf32, #lamina.place<@m, [[data], [], [model]]>>"
    R = f"tensor<{b}x{m}x{n}xf32>"
    return (MESH + f"func.func @f(%p: {P}, %v: {V}) -> {R} {{\n"
            f"  %o = lamina.matmul %p, %v : ({P}, {V}) -> {R}\n  func.return %o : {R}\n}}\n")


def test_matmul_keeps_the_batch_split_its_operands_agree_on() -> None:
    # issue 13: M on model in %p and N on model in %v cannot both stay; main replicated both
    # operands (4 all_gathers, 458,752 B sent per device); now only %p's model split goes
    # (one all_gather, 98,304 B) and the result keeps data on the batch and model on N
    m, log, stats = _run_placed(_matmul_text(8, 128, 64, 128))
    f = find_entry(m, None)
    assert str(spec_of(f.function_type.outputs.data[0])) == "[[data], [], [model]]"
    assert [(c["kind"], c["axes"]) for c in stats["collectives"]] == [("all_gather", ["model"])]
    assert stats["comm_bytes_per_device"] == 98_304
    assert stats["flops"] == 2 * 8 * 128 * 64 * 128 / 8       # an eighth of the work per device
    assert "drop [model] of operand 0 dimension 1" in log
    assert "alternatives: drop [model] of operand 1 dimension 2" in log
    assert "matmul rule: operands made [[], [], []], [[], [], []]" in log
    line = next(s for s in log.splitlines() if "disagree under the matmul rule" in s)
    assert "(communication " in line and " + compute " in line


def test_concat_along_one_dimension_keeps_the_other_split() -> None:
    # both operands split [[data], [model]], concatenated along dim 1: only model must go
    # (2 all_gathers, 24,576 B per device; main gathered data too: 4, 57,344 B)
    T = "tensor<64x128xf32, #lamina.place<@m, [[data], [model]]>>"
    text = (MESH + f"func.func @c(%a: {T}, %b: {T}) -> tensor<64x256xf32> {{\n"
            f"  %o = lamina.concat %a, %b {{dim = 1 : i64}} : ({T}, {T}) -> tensor<64x256xf32>\n"
            "  func.return %o : tensor<64x256xf32>\n}\n")
    m, log, stats = _run_placed(text)
    f = find_entry(m, None)
    assert str(spec_of(f.function_type.outputs.data[0])) == "[[data], []]"
    assert [c["axes"] for c in stats["collectives"]] == [["model"], ["model"]]
    assert stats["comm_bytes_per_device"] == 24_576



PROPERTY_MESHES = {"2x2": {"data": 2, "model": 2}, "2x4": {"data": 2, "model": 4}}


@st.composite
def conflicting_ops(draw: st.DrawFn) -> tuple[str, Spec, Spec, Spec | None]:
    """An op on two f32[8, 8, 8] arguments with random placements (each mesh axis splits one
    dimension of an operand, or none, in a random order): matmul, add or concat along 1 or 2."""
    mesh = draw(st.sampled_from(sorted(PROPERTY_MESHES)))
    sizes = PROPERTY_MESHES[mesh]

    def placement() -> Spec:
        where = {a: draw(st.sampled_from([0, 1, 2, None])) for a in sizes}
        return Spec(tuple(tuple(draw(st.permutations([a for a in sizes if where[a] == d])))
                          for d in range(3)))

    kind = draw(st.sampled_from(["matmul", "add", "concat1", "concat2"]))
    a, b = placement(), placement()
    T = "tensor<8x8x8xf32, #lamina.place<@m, {}>>"
    R = "tensor<8x16x8xf32>" if kind == "concat1" else "tensor<8x8x16xf32>" \
        if kind == "concat2" else "tensor<8x8x8xf32>"
    op = {"matmul": "lamina.matmul %a, %b", "add": "lamina.add %a, %b",
          "concat1": "lamina.concat %a, %b {dim = 1 : i64}",
          "concat2": "lamina.concat %a, %b {dim = 2 : i64}"}[kind]
    decl = "lamina.mesh @m [" + ", ".join(f"{k} = {n}" for k, n in sizes.items()) + "]\n"
    ta, tb = T.format(_dims(a)), T.format(_dims(b))
    text = (decl + f"func.func @f(%a: {ta}, %b: {tb}) -> {R} {{\n"
            f"  %o = {op} : ({ta}, {tb}) -> {R}\n  %e = lamina.neg %o : {R}\n"
            f"  func.return %e : {R}\n}}\n")
    agreed = a.splits[0] if a.splits[0] == b.splits[0] and a.splits[0] else None
    return text, a, b, None if agreed is None else Spec((agreed,))


def _dims(s: Spec) -> str:
    return "[" + ", ".join("[" + ", ".join(d) + "]" for d in s.splits) + "]"


@settings(max_examples=examples(40), deadline=None)
@given(conflicting_ops())
def test_property_conflicting_placements_keep_agreed_splits_and_compute_the_same(case) -> None:
    """Random placements of both operands, often breaking the op's rule: the placed program's
    SPMD run equals the single-device run exactly (integer inputs), and a batch split both
    operands agree on survives the choice."""
    text, _, _, agreed = case
    m, _, _ = _run_placed(text)
    f = find_entry(m, None)
    out = spec_of(f.function_type.outputs.data[0])
    assert out is not None
    if agreed is not None:
        # kept, perhaps split further (a pending sum reduced onto it by reduce_scatter)
        assert out.splits[0][: len(agreed.splits[0])] == agreed.splits[0], (text, str(out))


def _scan_program(axis: int) -> str:
    return (MESH + f"func.func @f(%x: {XS}) -> tensor<8x16xf32> {{\n"
            f"  %c = lamina.cumsum %x {{axis = {axis} : i64}} : ({XS}) -> tensor<8x16xf32>\n"
            "  %e = lamina.exp %c : tensor<8x16xf32>\n"
            "  func.return %e : tensor<8x16xf32>\n}\n")


def test_a_scan_along_an_unsplit_dimension_keeps_the_other_splits() -> None:
    """cumsum along dim 1 of a row-split value runs on each device's rows: no communication,
    and the SPMD run is the unplaced one's."""
    import lamina
    import numpy as np

    m, _ = propagate(_scan_program(1))
    f = find_entry(m, None)
    assert [op.name for op in f.body.block.ops] == ["lamina.cumsum", "lamina.exp", "func.return"]
    assert str(spec_of(f.function_type.outputs.data[0])) == "[[data], []]"
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    got = lamina.run(m, {"x": x}).outputs["out0"]
    np.testing.assert_allclose(got, np.exp(np.cumsum(x, axis=1)), rtol=1e-5)


def test_a_scan_along_a_split_dimension_is_refused() -> None:
    """No prefix-sum collective exists, and gathering the scanned dim silently would hide it:
    propagate-sharding stops with one located diagnostic."""
    import pytest
    from lamina.ir.core.diagnostics import LaminaError

    with pytest.raises(LaminaError) as e:
        propagate(_scan_program(0))
    msg = str(e.value)
    assert msg.startswith("p.mlir:3:3: error: propagate-sharding: lamina.cumsum scans dimension "
                          "0, which is split over [data]"), msg
    assert "prefix-sum collective" in msg


def test_a_pending_sum_flows_through_a_scan() -> None:
    """cumsum is linear: a partial matmul result passes through it and is reduced after."""
    w = "tensor<16x4xf32, #lamina.place<@m, [[model], []]>>"
    xs = "tensor<8x16xf32, #lamina.place<@m, [[], [model]]>>"
    text = (MESH + f"func.func @f(%x: {xs}, %w: {w}) -> tensor<8x4xf32> {{\n"
            f"  %y = lamina.matmul %x, %w : ({xs}, {w}) -> tensor<8x4xf32>\n"
            "  %c = lamina.cumsum %y {axis = 1 : i64} : tensor<8x4xf32>\n"
            "  %e = lamina.exp %c : tensor<8x4xf32>\n"
            "  func.return %e : tensor<8x4xf32>\n}\n")
    m, _ = propagate(text)
    ops = list(find_entry(m, None).body.block.ops)
    names = [op.name for op in ops]
    assert names.index("lamina.cumsum") < names.index("lamina.reshard") < names.index("lamina.exp")
    scanned = spec_of(ops[names.index("lamina.cumsum")].results[0].type)
    assert scanned is not None and scanned.partial == ("model",)
