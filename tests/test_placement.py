"""Placement in the type: the mesh op, the #lamina.place encoding and the sharding rules."""

from __future__ import annotations

import pytest
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.core.shapes import TensorInfo
from lamina.ir.mesh.sharding import ShardingError, Spec, _reshape_groups, infer
from lamina.ir.ops.optable import OPS
from lamina.ir.text.source import parse_text, verify
from xdsl.printer import Printer

MESH = "lamina.mesh @m [data = 2, model = 4]\n"


def P(splits: str, extra: str = "") -> str:
    return f"#lamina.place<@m, {splits}{', ' + extra if extra else ''}>"


def T(shape: str, place: str | None = None) -> str:
    return f"tensor<{shape}xf32, {place}>" if place else f"tensor<{shape}xf32>"


def unary_program(op: str, in_t: str, out_t: str, attrs: str = "") -> str:
    return (MESH + f"func.func @f(%x: {in_t}) -> {out_t} {{\n"
            f"  %0 = lamina.{op} %x {attrs} : ({in_t}) -> {out_t}\n"
            f"  func.return %0 : {out_t}\n}}\n")


def check(text: str) -> None:
    verify(parse_text(text, "p.mlir"))


def printed(text: str) -> str:
    import io

    buf = io.StringIO()
    Printer(stream=buf).print_op(parse_text(text, "p.mlir"))
    return buf.getvalue()


def test_mesh_and_placement_round_trip() -> None:
    t = T("8x16", P("[[data], [model]]", "tier = hbm"))
    text = unary_program("neg", t, t)
    once = printed(text)
    assert "lamina.mesh @m [data = 2, model = 4]" in once
    assert "#lamina.place<@m, [[data], [model]], tier = hbm>" in once
    assert printed(once) == once
    tier_only = "tensor<8xf32, #lamina.place<tier = host>>"
    text2 = f"func.func @g(%x: {tier_only}) -> {tier_only} {{\n  func.return %x : {tier_only}\n}}\n"
    assert "#lamina.place<tier = host>" in printed(text2)
    partial = T("8x16", P("[[data], []]", "partial = sum[model]"))
    assert "partial = sum[model]" in printed(unary_program("neg", partial, partial))
    staged = T("8x16", P("[[data], []]", "stage = model[3], tier = hbm"))
    once = printed(unary_program("neg", staged, staged))
    assert "#lamina.place<@m, [[data], []], stage = model[3], tier = hbm>" in once
    assert printed(once) == once


@pytest.mark.parametrize("place, message", [
    (P("[[data]]"), "placement has 1 dimension entries for a rank-2 tensor"),
    (P("[[data], [expert]]"), "mesh @m has no axis 'expert'"),
    (P("[[data], [data]]"), "mesh axis 'data' is used more than once"),
    (P("[[data], []]", "partial = sum[data]"), "mesh axis 'data' is used more than once"),
    ("#lamina.place<@q, [[data], []]>", "placement refers to unknown mesh @q"),
    (P("[[data], []]", "stage = pp[0]"), "mesh @m has no stage axis 'pp'"),
    (P("[[data], []]", "stage = data[0]"), "stage axis 'data' also splits or reduces the value"),
    (P("[[data], []]", "partial = sum[model], stage = model[1]"), "stage axis 'model' also"),
    (P("[[data], []]", "stage = model[4]"), "stage 4 is outside mesh axis 'model' of size 4"),
])
def test_invalid_placements(place: str, message: str) -> None:
    t = T("8x16", place)
    with pytest.raises(LaminaError) as e:
        check(unary_program("neg", t, t))
    assert message in e.value.message
    assert e.value.loc is not None and e.value.loc.line == 2


def test_uneven_split_is_rejected() -> None:
    t = T("7x16", P("[[data], []]"))
    with pytest.raises(LaminaError, match="dimension 0 of size 7 does not split evenly over data"):
        check(unary_program("neg", t, t))


def test_unknown_tier_is_a_parse_error() -> None:
    t = "tensor<8xf32, #lamina.place<tier = disk>>"
    with pytest.raises(LaminaError, match="unknown memory tier 'disk'"):
        parse_text(f"func.func @g(%x: {t}) -> {t} {{\n  func.return %x : {t}\n}}\n", "p.mlir")


def test_bad_mesh() -> None:
    with pytest.raises(LaminaError, match="axis names repeat"):
        check("lamina.mesh @m [a = 2, a = 4]\n")
    with pytest.raises(LaminaError, match="has size 0"):
        check("lamina.mesh @m [a = 0]\n")


def test_megatron_mlp_verifies_and_broken_rules_are_named() -> None:
    xs, w1s, hs = P("[[data], []]"), P("[[], [model]]"), P("[[data], [model]]")
    w2s, ys = P("[[model], []]"), P("[[data], []]", "partial = sum[model]")
    prog = (MESH + f"func.func @mlp(%x: {T('16x32', xs)}, %w1: {T('32x64', w1s)}, "
            f"%w2: {T('64x32', w2s)}) -> {T('16x32', ys)} {{\n"
            f"  %h = lamina.matmul %x, %w1 : ({T('16x32', xs)}, {T('32x64', w1s)}) -> {T('16x64', hs)}\n"
            f"  %g = lamina.gelu %h : {T('16x64', hs)}\n"
            f"  %y = lamina.matmul %g, %w2 : ({T('16x64', hs)}, {T('64x32', w2s)}) -> {T('16x32', ys)}\n"
            f"  func.return %y : {T('16x32', ys)}\n}}\n")
    check(prog)
    wrong = prog.replace(f"-> {T('16x64', hs)}", f"-> {T('16x64', xs)}")
    wrong = wrong.replace(f"%g = lamina.gelu %h : {T('16x64', hs)}", "%g = lamina.gelu %h : "
                          f"({T('16x64', xs)}) -> {T('16x64', hs)}")
    with pytest.raises(LaminaError) as e:
        check(wrong)
    assert "does not follow the matmul rule" in e.value.message
    assert e.value.loc is not None and e.value.loc.line == 3


def test_nonlinear_op_rejects_partial() -> None:
    t = T("16x32", P("[[data], []]", "partial = sum[model]"))
    with pytest.raises(LaminaError, match="lamina.gelu is not linear: operand 0 is partial"):
        check(unary_program("gelu", t, t))
    check(unary_program("neg", t, t))  # negation is linear: the partial passes through


def test_row_reduction_needs_unsplit_rows() -> None:
    t = T("16x32", P("[[data], [model]]"))
    with pytest.raises(LaminaError, match="normalized dimension 1 must be unsplit"):
        check(unary_program("softmax", t, t))
    ok = T("16x32", P("[[data], []]"))
    check(unary_program("softmax", ok, ok))


# ---- the rules on specs, directly -------------------------------------------------------------

def ti(*shape: int) -> TensorInfo:
    return TensorInfo(tuple(shape), "f32")


def S(*dims: tuple[str, ...], partial: tuple[str, ...] = ()) -> Spec:
    return Spec(tuple(dims), partial)


def test_elementwise_broadcast_rules() -> None:
    add = OPS["add"]
    got = infer(add, [ti(4, 8), ti(8)], [S(("a",), ("b",)), S(("b",))], {}, ti(4, 8))
    assert got == S(("a",), ("b",))
    with pytest.raises(ShardingError, match="must split dimension 1 alike"):
        infer(add, [ti(4, 8), ti(8)], [S(("a",), ("b",)), S(())], {}, ti(4, 8))
    with pytest.raises(ShardingError, match="broadcast dimension"):
        infer(add, [ti(4, 8), ti(1, 8)], [S((), ()), S(("a",), ())], {}, ti(4, 8))


def test_partial_linearity_rules() -> None:
    add, mul, div = OPS["add"], OPS["mul"], OPS["div"]
    p = S((), (), partial=("m",))
    r = S((), ())
    assert infer(add, [ti(2, 2), ti(2, 2)], [p, p], {}, ti(2, 2)).partial == ("m",)
    with pytest.raises(ShardingError, match="additive"):
        infer(add, [ti(2, 2), ti(2, 2)], [p, r], {}, ti(2, 2))
    assert infer(mul, [ti(2, 2), ti(2, 2)], [r, p], {}, ti(2, 2)).partial == ("m",)
    with pytest.raises(ShardingError, match="one operand at a time"):
        infer(mul, [ti(2, 2), ti(2, 2)], [p, p], {}, ti(2, 2))
    with pytest.raises(ShardingError, match="not linear in operand 1"):
        infer(div, [ti(2, 2), ti(2, 2)], [r, p], {}, ti(2, 2))
    maxp = Spec(((), ()), ("m",), "max")
    with pytest.raises(ShardingError, match="pending max"):
        infer(OPS["neg"], [ti(2, 2)], [maxp], {}, ti(2, 2))


def test_reduction_rules() -> None:
    x = S(("a",), ("b",))
    attrs = {"axes": (1,), "keepdims": False}
    assert infer(OPS["reduce_sum"], [ti(4, 8)], [x], attrs, ti(4)) == S(("a",), partial=("b",))
    got = infer(OPS["reduce_max"], [ti(4, 8)], [x], attrs, ti(4))
    assert got.partial == ("b",) and got.partial_kind == "max"
    with pytest.raises(ShardingError, match="reduce_mean over split dimension 1"):
        infer(OPS["reduce_mean"], [ti(4, 8)], [x], attrs, ti(4))
    keep = infer(OPS["reduce_sum"], [ti(4, 8)], [x], {"axes": (1,), "keepdims": True}, ti(4, 1))
    assert keep == S(("a",), (), partial=("b",))


def test_matmul_rules() -> None:
    mm = OPS["matmul"]
    got = infer(mm, [ti(3, 4, 8), ti(8, 6)], [S(("d",), (), ("k",)), S(("k",), ())], {}, ti(3, 4, 6))
    assert got == S(("d",), (), (), partial=("k",))
    with pytest.raises(ShardingError, match="contracting dimension"):
        infer(mm, [ti(4, 8), ti(8, 6)], [S((), ("k",)), S((), ())], {}, ti(4, 6))


def test_layout_rules() -> None:
    x = S(("a",), (), ("b",))
    assert infer(OPS["transpose"], [ti(2, 3, 4)], [x], {"permutation": (2, 0, 1)}, ti(4, 2, 3)) \
        == S(("b",), ("a",), ())
    # [8, 3, 4] -> [24, 4]: dims 0,1 merge; the split of dim 0 (major) moves to result dim 0
    got = infer(OPS["reshape"], [ti(8, 3, 4)], [S(("a",), (), ())], {}, ti(24, 4))
    assert got == S(("a",), ())
    with pytest.raises(ShardingError, match="major-most"):
        infer(OPS["reshape"], [ti(8, 3, 4)], [S((), ("a",), ())], {}, ti(24, 4))
    got = infer(OPS["broadcast_in_dim"], [ti(8)], [S(("a",))], {"broadcast_dimensions": (1,)},
                ti(4, 8))
    assert got == S((), ("a",))
    sl = {"start": (0, 1), "limit": (8, 3), "strides": None}
    assert infer(OPS["slice"], [ti(8, 4)], [S(("a",), ())], sl, ti(8, 2)) == S(("a",), ())
    with pytest.raises(ShardingError, match="sliced dimension 1"):
        infer(OPS["slice"], [ti(8, 4)], [S((), ("a",))], sl, ti(8, 2))
    with pytest.raises(ShardingError, match="concat dimension 0"):
        infer(OPS["concat"], [ti(4, 2), ti(4, 2)], [S(("a",), ()), S(("a",), ())], {"dim": 0},
              ti(8, 2))


def test_reshape_groups() -> None:
    assert _reshape_groups([8, 3, 4], [24, 4]) == [([0, 1], [0]), ([2], [1])]
    assert _reshape_groups([2, 12], [2, 3, 4]) == [([0], [0]), ([1], [1, 2])]
    assert _reshape_groups([4, 1, 6], [4, 6]) == [([0, 1], [0]), ([2], [1])]
