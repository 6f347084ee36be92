"""`lamina.analysis.step_cost`: the roofline of compute ops, moves, collectives priced by comm_cost,
checked by hand on small programs and against the interpreters' own counts on random ones."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lamina.analysis.comm_cost import estimate, levels_of
from lamina.analysis.step_cost import (
    COLLECTIVE,
    COMPUTE,
    MOVE,
    op_seconds,
    step_costs,
)
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import run_function
from lamina.backends.numpy.spmd import run_spmd
from lamina.ir.buffers.memory import FreeOp
from lamina.ir.mesh.collectives import PlacementOp
from lamina.ir.mesh.placement import find_mesh
from lamina.ir.mesh.target import load_target
from lamina.ir.text.source import make_context, parse_text, verify
from lamina.passes.assign_memory_tiers import build_model
from lamina.passes.pipeline import build_pipeline, run_pipeline
from strategies import examples
from strategies.programs import programs
from xdsl.dialects.func import FuncOp

H100 = load_target("h100-node")


def _func(text: str, pipeline: str = "") -> FuncOp:
    ctx = make_context()
    m = parse_text(text, "t.mlir", ctx)
    verify(m)
    if pipeline:
        run_pipeline(ctx, m, build_pipeline(pipeline))
    return find_entry(m, None)


def _matmul(placed: str = "") -> str:
    x = f"tensor<64x128xf32{placed}>"
    y = f"tensor<64x32xf32{placed}>"
    mesh = "lamina.mesh @m [data = 4]\n" if placed else ""
    return (f"{mesh}func.func @f(%x: {x}, %w: tensor<128x32xf32>) -> {y} {{\n"
            f"  %y = lamina.matmul %x, %w : ({x}, tensor<128x32xf32>) -> {y}\n"
            f"  func.return %y : {y}\n}}\n")


def test_a_matmul_costs_its_roofline_by_hand() -> None:
    func = _func(_matmul())
    mm = next(iter(func.body.block.ops))
    flops = 2.0 * 64 * 32 * 128
    moved = 4.0 * (64 * 128 + 128 * 32 + 64 * 32)
    want = max(flops / H100.flops, moved / H100.tier("hbm").bandwidth)
    assert op_seconds(mm, H100, func) == want
    (k,) = step_costs(func, H100)
    assert (k.name, k.kind, k.devices, k.flops, k.bytes, k.sent) == \
        ("matmul", COMPUTE, (0,), flops, moved, 0.0)


def test_a_row_split_matmul_costs_a_quarter_of_the_flops_per_device() -> None:
    func = _func(_matmul(", #lamina.place<@m, [[data], []]>"))
    (k,) = step_costs(func, H100)
    assert k.devices == (0, 1, 2, 3)
    assert k.flops == 2.0 * 16 * 32 * 128
    assert k.bytes == 4.0 * (16 * 128 + 128 * 32 + 16 * 32)


def test_a_move_costs_its_transfer_and_the_planner_still_counts_it_as_no_compute() -> None:
    tiny = load_target("tiny")
    host = "tensor<64x64xf32, #lamina.place<tier = host>>"
    func = _func(f"func.func @f(%x: tensor<64x64xf32>) -> {host} {{\n"
                 f"  %h = lamina.move %x to host : tensor<64x64xf32> -> {host}\n"
                 f"  func.return %h : {host}\n}}\n")
    mv = next(iter(func.body.block.ops))
    assert op_seconds(mv, tiny, func) == 64 * 64 * 4 / tiny.transfer_bandwidth("hbm", "host") > 0
    (k,) = step_costs(func, tiny)
    assert k.kind == MOVE and k.seconds == op_seconds(mv, tiny, func)
    assert build_model(func, tiny).problem.compute == [0.0]


def test_fused_ops_are_named_by_their_body_and_views_constants_frees_get_no_entry() -> None:
    t = "tensor<4x8xf32>"
    text = (f"func.func @f(%x: {t}) -> tensor<32xf32> {{\n"
            f"  %c = lamina.constant dense<2.0> : {t}\n"
            f"  %a = lamina.add %x, %c : {t}\n"
            f"  %g = lamina.gelu %a : {t}\n"
            f"  %r = lamina.reshape %g : ({t}) -> tensor<32xf32>\n"
            f"  func.return %r : tensor<32xf32>\n}}\n")
    plain = _func(text, "annotate-lifetimes")
    costs = step_costs(plain, H100)
    assert [k.name for k in costs] == ["add", "gelu"]
    ops = list(plain.body.block.ops)
    assert any(isinstance(op, FreeOp) for op in ops)   # annotate-lifetimes put frees between
    assert all(ops[k.index] is k.op for k in costs)
    assert [k.name for k in step_costs(_func(text, "fuse-elementwise"), H100)] == \
        ["fused(add+gelu)"]


def test_an_all_reduce_costs_what_comm_cost_estimates_and_sends_what_the_interpreter_sends() -> None:
    xt = "tensor<8x16xf32, #lamina.place<@m, [[data], [model]]>>"
    wt = "tensor<16x8xf32, #lamina.place<@m, [[model], []]>>"
    yt = "tensor<8x8xf32, #lamina.place<@m, [[data], []]>>"
    text = (f"lamina.mesh @m [data = 2, model = 4]\nfunc.func @f(%x: {xt}, %w: {wt}) -> {yt} {{\n"
            f"  %y = lamina.matmul %x, %w : ({xt}, {wt}) -> tensor<8x8xf32>\n"
            f"  %z = lamina.gelu %y : (tensor<8x8xf32>) -> {yt}\n  func.return %z : {yt}\n}}\n")
    func = _func(text, "propagate-sharding,insert-collectives{target=h100-node}")
    colls = [k for k in step_costs(func, H100) if k.kind == COLLECTIVE]
    assert [k.name for k in colls] == ["all_reduce"]
    mesh_op = find_mesh(func, "m")
    assert mesh_op is not None
    est = estimate("all_reduce", 4 * 4 * 8, levels_of(H100, mesh_op.mesh, ("model",)), H100)
    assert colls[0].seconds == est.seconds > 0
    assert colls[0].devices == tuple(range(8))
    ins = [np.ones((8, 16), np.float32), np.ones((16, 8), np.float32)]
    ran = run_spmd(func, ins).stats["collectives"]
    assert [c["bytes_per_device"] for c in ran] == [int(colls[0].sent)]


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs(max_ops=8), fuse=st.booleans())
def test_flops_agree_with_the_interpreter_and_the_planner_uses_the_same_seconds(prog, fuse) -> None:
    """On random programs: the costs' flops are what the NumPy interpreter counts, and the tier
    planner's compute per step is `op_seconds`, i.e. the costs' seconds for the ops with one."""
    func = _func(prog.text, "fuse-elementwise" if fuse else "")
    costs = step_costs(func, H100)
    stats = run_function(func, prog.inputs).stats
    assert math.isclose(sum(k.flops for k in costs), stats["flops"], rel_tol=1e-9, abs_tol=1e-9)
    assert len([k for k in costs if k.kind == COMPUTE]) == stats["kernels"]
    model = build_model(func, H100)
    seconds = {k.op: k.seconds for k in costs}
    for op, c in zip(model.steps, model.problem.compute, strict=True):
        assert c == seconds.get(op, op_seconds(op, H100, func))


SPECS_8X16 = ("[[], []]", "[[data], []]", "[[model], []]", "[[], [model]]", "[[data], [model]]",
              "[[model], [data]]", "[[data, model], []]", "[[], [model, data]]")


@settings(max_examples=examples(20), deadline=None)
@given(src=st.sampled_from(SPECS_8X16), dst=st.sampled_from(SPECS_8X16),
       target=st.sampled_from(("h100-node", "h100-cluster")))
def test_bytes_sent_agree_with_the_spmd_interpreter(src: str, dst: str, target: str) -> None:
    """A placement change lowered by insert-collectives: each collective's modeled bytes sent
    per device are what the SPMD interpreter records for it, in program order."""
    def t(spec: str) -> str:
        return f"tensor<8x16xf32, #lamina.place<@m, {spec}>>"

    text = (f"lamina.mesh @m [data = 2, model = 4]\nfunc.func @f(%x: {t(src)}) -> {t(dst)} {{\n"
            f"  %y = lamina.gelu %x : ({t(src)}) -> tensor<8x16xf32>\n"
            f"  %z = lamina.exp %y : (tensor<8x16xf32>) -> {t(dst)}\n"
            f"  func.return %z : {t(dst)}\n}}\n")
    func = _func(text, f"propagate-sharding,insert-collectives{{target={target}}}")
    costs = [k for k in step_costs(func, load_target(target)) if k.kind == COLLECTIVE]
    sent = [int(k.sent) for k in costs if isinstance(k.op, PlacementOp)
            and k.op.COLLECTIVE.communicates]
    ran = run_spmd(func, [np.ones((8, 16), np.float32)]).stats.get("collectives", [])
    assert [c["bytes_per_device"] for c in ran] == sent
    assert all(k.seconds > 0 for k in costs if k.sent > 0)
