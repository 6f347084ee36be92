"""fuse-elementwise on placed programs: operands with different placements fuse (issue 13).

A placed kernel is one body every device runs on its own shards, op by op exactly as the unfused
program would, so fusing after `propagate-sharding` (and after `insert-collectives`) must give
bit-identical SPMD outputs. What still keeps ops apart: memory tiers that differ, placed and
unplaced values in one op, and the explicit reshards / collectives, which are boundaries.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lamina.backends.interface import find_entry
from lamina.backends.numpy.spmd import run_spmd
from lamina.ir.mesh.collectives import PlacementOp, ReshardOp
from lamina.ir.ops.fused import FusedOp
from lamina.ir.text.source import make_context, parse_text, verify
from lamina.passes.explain import ExplainLog
from lamina.passes.fuse_elementwise import FuseElementwise
from lamina.passes.pipeline import build_pipeline, run_pipeline
from strategies import examples
from strategies.programs import programs
from test_spmd import meshes, place_args, placed_or_scan_refused

ROWS = "#lamina.place<@m, [[data], [model]]>"
BIAS = "#lamina.place<@m, [[model]]>"

BIAS_GELU_SCALE = f"""
lamina.mesh @m [data = 2, model = 4]
func.func @f(%h: tensor<8x16xf32, {ROWS}>, %b: tensor<16xf32, {BIAS}>,
             %k: tensor<f32, #lamina.place<@m, []>>) -> tensor<8x16xf32, {ROWS}> {{
  %hb = lamina.add %h, %b : (tensor<8x16xf32, {ROWS}>, tensor<16xf32, {BIAS}>) -> tensor<8x16xf32, {ROWS}>
  %g = lamina.gelu %hb : tensor<8x16xf32, {ROWS}>
  %y = lamina.mul %g, %k : (tensor<8x16xf32, {ROWS}>, tensor<f32, #lamina.place<@m, []>>) -> tensor<8x16xf32, {ROWS}>
  func.return %y : tensor<8x16xf32, {ROWS}>
}}
"""


def _apply(text: str, spec: str, log: ExplainLog | None = None):
    """Parse and verify `text`, run pipeline `spec`, then fuse-elementwise (explaining to `log`)."""
    ctx = make_context()
    module = parse_text(text, "t.mlir", ctx)
    verify(module)
    if spec:
        run_pipeline(ctx, module, build_pipeline(spec))
    FuseElementwise().run(ctx, module, log)
    verify(module)
    return module


def _fused(module) -> list[FusedOp]:
    return [op for op in module.walk() if isinstance(op, FusedOp)]


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_bias_gelu_scale_on_a_placed_program_is_one_kernel() -> None:
    """gelu(h + b) * k with a bias and a scalar placed unlike h: 3 kernels before, 1 now."""
    module = _apply(BIAS_GELU_SCALE, "")
    (fused,) = _fused(module)
    assert [op.name for op in fused.body.block.ops] == [
        "lamina.add", "lamina.gelu", "lamina.mul", "lamina.yield"]
    assert str(fused.results[0].type) == f"tensor<8x16xf32, {ROWS}>"
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (16,), ())]
    ref = run_spmd(find_entry(parse_text(BIAS_GELU_SCALE, "t.mlir", make_context()), None),
                   inputs)
    got = run_spmd(find_entry(module, None), inputs)
    assert all(_same_bits(g, r) for g, r in zip(got.outputs, ref.outputs, strict=True))
    assert got.stats["kernels"] == 1 and ref.stats["kernels"] == 3


def test_megatron_sample_fuses_after_propagate_sharding() -> None:
    """The sample's bias add and GeLU, placed [[data], [model]] with the bias [[model]], are one
    kernel after propagate-sharding, the epilogue of the first matmul (each device's block of
    the weight is a matrix), and the pending sum's reshard stays outside any kernel."""
    with open("samples/mlp_megatron.mlir") as f:
        text = f.read()
    log = ExplainLog("fuse-elementwise")
    module = _apply(text, "propagate-sharding", log)
    (fused,) = _fused(module)
    assert [op.name for op in fused.body.block.ops] == ["lamina.matmul", "lamina.add",
                                                        "lamina.gelu", "lamina.yield"]
    assert fused.fusion_kind == "matmul"
    assert not any(isinstance(op, (ReshardOp, PlacementOp)) for op in fused.body.block.walk())
    assert any("fused %g = lamina.gelu with %hb = lamina.add" in line for line in log.lines), log.lines


def test_tiers_and_half_placed_ops_stay_apart_and_say_why() -> None:
    text = """
lamina.mesh @m [d = 2]
func.func @f(%x: tensor<8x4xf32, #lamina.place<@m, [[d], []], tier = hbm>>, %u: tensor<4xf32>)
    -> tensor<8x4xf32> {
  %a = lamina.exp %x : tensor<8x4xf32, #lamina.place<@m, [[d], []], tier = hbm>>
  %b = lamina.cast %a : (tensor<8x4xf32, #lamina.place<@m, [[d], []], tier = hbm>>) -> tensor<8x4xf32, #lamina.place<@m, [[d], []]>>
  %c = lamina.neg %b : tensor<8x4xf32, #lamina.place<@m, [[d], []]>>
  %e = lamina.add %c, %u : (tensor<8x4xf32, #lamina.place<@m, [[d], []]>>, tensor<4xf32>) -> tensor<8x4xf32>
  func.return %e : tensor<8x4xf32>
}
"""
    log = ExplainLog("fuse-elementwise")
    module = _apply(text, "", log)
    assert _fused(module) == []
    lines = "\n".join(log.lines)
    assert "lamina.cast mixes memory tiers in its types (hbm, none)" in lines
    assert "lamina.add mixes placed and unplaced values (m, none); run propagate-sharding" in lines


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs(max_ops=10, dtypes=("f32", "f64")), mesh=meshes(), data=st.data(),
       before_collectives=st.booleans())
def test_fusing_a_placed_program_keeps_every_device_bit_exact(prog, mesh, data,
                                                              before_collectives: bool) -> None:
    """Random programs, meshes and input placements: fusing after propagate-sharding (before or
    after insert-collectives) changes no output bit of the SPMD run, every fused op verifies and
    holds no communication, and the run never has more kernels than the unfused one."""
    target = "h100-cluster" if math.prod(n for _, n in mesh) > 1 else "h100-node"
    collect = f"insert-collectives{{target={target}}}"
    fused_spec = (f"propagate-sharding,fuse-elementwise,{collect}" if before_collectives
                  else f"propagate-sharding,{collect},fuse-elementwise")
    ctx = make_context()
    placed = parse_text(prog.text, "gen.mlir", ctx)
    place_args(placed, mesh, data.draw)
    verify(placed)
    modules = []
    for spec in (f"propagate-sharding,{collect}", fused_spec):
        module = placed.clone()
        pipeline = build_pipeline(spec)
        if not placed_or_scan_refused(lambda m=module, p=pipeline: run_pipeline(ctx, m, p),
                                      prog.text):
            return
        verify(module)
        modules.append(module)
    for op in _fused(modules[1]):
        assert not any(isinstance(i, (ReshardOp, PlacementOp)) for i in op.body.block.walk())
    ref = run_spmd(find_entry(modules[0], None), prog.inputs)
    got = run_spmd(find_entry(modules[1], None), prog.inputs)
    for g, r in zip(got.outputs, ref.outputs, strict=True):
        assert _same_bits(g, r), prog.text
    assert got.stats["kernels"] <= ref.stats["kernels"]
