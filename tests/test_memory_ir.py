# ruff: noqa: E501  (MLIR types in test programs)
"""lamina.move / lamina.free: syntax, round trips (custom and generic), and every verifier rule."""

from __future__ import annotations

import io

import pytest
from lamina.ir.buffers.memory import FreeOp, MoveOp, tier_problem, with_tier
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.mesh.placement import tier_of
from lamina.ir.text.source import make_context, parse_text
from memtools import parse
from xdsl.dialects.func import FuncOp
from xdsl.printer import Printer

H = "tensor<4x8xf32, #lamina.place<tier = host>>"
D = "tensor<4x8xf32, #lamina.place<tier = hbm>>"
U = "tensor<4x8xf32>"

GOOD = f"""
func.func @f(%x: {U}, %w: {H}) -> {U} {{
  %a = lamina.exp %x : {U}
  %h = lamina.move %a to host : {U} -> {H}
  lamina.free %a : {U}
  %b = lamina.move %h to hbm {{prefetch = 2 : i64}} : {H} -> {D}
  %w2 = lamina.move %w to hbm : {H} -> {D}
  %c = lamina.add %b, %w2 : ({D}, {D}) -> {U}
  lamina.free %h : {H}
  func.return %c : {U}
}}
"""


def printed(m, generic=False) -> str:
    out = io.StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(m)
    return out.getvalue()


def test_parse_and_facts():
    _, m = parse(GOOD)
    moves = [op for op in m.walk() if isinstance(op, MoveOp)]
    assert [mv.tier for mv in moves] == ["host", "hbm", "hbm"]
    assert [mv.prefetch_distance for mv in moves] == [None, 2, None]
    assert tier_of(moves[0].result.type) == "host"
    assert len([op for op in m.walk() if isinstance(op, FreeOp)]) == 2


@pytest.mark.parametrize("generic", [False, True])
def test_round_trip(generic):
    _, m = parse(GOOD)
    text = printed(m, generic)
    _, m2 = parse(text)
    assert printed(m2) == printed(m)
    assert "lamina.move %a to host" in printed(m)
    assert "{prefetch = 2 : i64}" in printed(m)


def test_with_tier_keeps_mesh():
    _, m = parse("""
lamina.mesh @m [data = 2]
func.func @f(%x: tensor<4x8xf32, #lamina.place<@m, [[data], []]>>) -> tensor<4x8xf32, #lamina.place<@m, [[data], []]>> {
  func.return %x : tensor<4x8xf32, #lamina.place<@m, [[data], []]>>
}""")
    func = [op for op in m.walk() if op.name == "func.func"][0]
    assert isinstance(func, FuncOp)
    t = with_tier(func.body.block.args[0].type, "host")
    assert str(t) == "tensor<4x8xf32, #lamina.place<@m, [[data], []], tier = host>>"
    assert with_tier(t, None) == func.body.block.args[0].type


BAD = {
    "use after free": (f"""
func.func @f(%x: {U}) -> {U} {{
  %a = lamina.exp %x : {U}
  lamina.free %a : {U}
  %b = lamina.neg %a : {U}
  func.return %b : {U}
}}""", "%a is used by lamina.neg after it is freed", 4),
    "double free": (f"""
func.func @f(%x: {U}) -> {U} {{
  %a = lamina.exp %x : {U}
  lamina.free %a : {U}
  lamina.free %a : {U}
  func.return %x : {U}
}}""", "%a is freed twice", 4),
    "freed result": (f"""
func.func @f(%x: {U}) -> {U} {{
  %a = lamina.exp %x : {U}
  lamina.free %a : {U}
  func.return %a : {U}
}}""", "%a is a function result and must not be freed", 4),
    "compute reads host": (f"""
func.func @f(%x: {H}) -> {U} {{
  %a = lamina.exp %x : ({H}) -> {U}
  func.return %a : {U}
}}""", "lamina.exp reads a value in tier 'host'", 3),
    "compute writes nvme": (f"""
func.func @f(%x: {U}) -> tensor<4x8xf32, #lamina.place<tier = nvme>> {{
  %a = lamina.exp %x : ({U}) -> tensor<4x8xf32, #lamina.place<tier = nvme>>
  func.return %a : tensor<4x8xf32, #lamina.place<tier = nvme>>
}}""", "lamina.exp writes a value in tier 'nvme'", 3),
    "move result tier": (f"""
func.func @f(%x: {U}) -> {D} {{
  %a = lamina.move %x to host : {U} -> {D}
  func.return %a : {D}
}}""", "the result type must have tier = host", 3),
    "move changes shape": (f"""
func.func @f(%x: {U}) -> tensor<8x4xf32, #lamina.place<tier = host>> {{
  %a = lamina.move %x to host : {U} -> tensor<8x4xf32, #lamina.place<tier = host>>
  func.return %a : tensor<8x4xf32, #lamina.place<tier = host>>
}}""", "must equal the operand type", 3),
    "move to same tier": (f"""
func.func @f(%x: {H}) -> {H} {{
  %a = lamina.move %x to host : {H} -> {H}
  func.return %a : {H}
}}""", "already in tier 'host'", 3),
    "negative prefetch": (f"""
func.func @f(%x: {H}) -> {D} {{
  %a = lamina.move %x to hbm {{prefetch = -1 : i64}} : {H} -> {D}
  func.return %a : {D}
}}""", "prefetch distance must be >= 0", 3),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_verifier_rejects(case):
    text, msg, line = BAD[case]
    with pytest.raises(LaminaError) as e:
        parse(text)
    assert msg in e.value.message
    assert e.value.loc is not None and e.value.loc.line == line


def test_unknown_tier_is_a_parse_error():
    with pytest.raises(LaminaError) as e:
        parse_text(f"""func.func @f(%x: {U}) -> {U} {{
  %a = lamina.move %x to disk : {U} -> {U}
  func.return %a : {U}
}}""", "t.mlir", make_context())
    assert "unknown memory tier 'disk'" in e.value.message
    assert e.value.loc is not None and e.value.loc.line == 2


def test_tier_problem_none_for_compute_tiers():
    _, m = parse(GOOD)
    assert all(tier_problem(op) is None for op in m.walk() if op.name.startswith("lamina.add"))
