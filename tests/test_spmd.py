"""SPMD execution after propagate-sharding + insert-collectives equals the single-device run.

Random programs from the shared strategy, random meshes (1-8 devices, 1-3 axes) and random input
placements; f32 and f64 (`lamina.backends.compare` is relative to each output's largest
magnitude, so the reordered sums of a sharded f32 run pass). Example counts follow the Hypothesis
profile (`examples`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lamina.backends.compare import compare
from lamina.backends.inputs import random_inputs
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import run_function
from lamina.backends.numpy.spmd import run_spmd
from lamina.ir.core.diagnostics import LaminaError, SourceLoc, source_excerpt
from lamina.ir.core.dtypes import tensor_dtype
from lamina.ir.mesh.collectives import PlacementOp, ReshardOp, with_spec
from lamina.ir.mesh.placement import MeshOp, spec_of
from lamina.ir.mesh.sharding import Spec
from lamina.ir.ops.fused import FusedOp
from lamina.ir.text.source import load, make_context, parse_text, verify
from lamina.passes.pipeline import build_pipeline, run_pipeline
from strategies import examples
from strategies.programs import programs
from xdsl.dialects.builtin import FunctionType, TensorType

AXIS_NAMES = ("a", "b", "c")


@st.composite
def meshes(draw) -> list[tuple[str, int]]:
    n_axes = draw(st.integers(1, 3))
    sizes: list[int] = []
    for _ in range(n_axes):
        room = 8 // max(1, math.prod(sizes))
        sizes.append(draw(st.sampled_from([s for s in (1, 2, 4, 8) if s <= room])))
    return list(zip(AXIS_NAMES, sizes, strict=False))


def place_args(module, mesh: list[tuple[str, int]], draw) -> None:
    func = find_entry(module, None)
    sizes = dict(mesh)
    block = func.body.block
    for i, arg in enumerate(block.args):
        t = arg.type
        assert isinstance(t, TensorType)
        shape = tuple(t.get_shape())
        free = [a for a, _ in mesh]
        splits = []
        for size in shape:
            axes: list[str] = []
            n = 1
            for a in list(free):
                if draw(st.booleans()) and size % (n * sizes[a]) == 0:
                    axes.append(a)
                    n *= sizes[a]
                    free.remove(a)
            splits.append(tuple(axes))
        if i == 0 or draw(st.booleans()):
            arg._type = with_spec(t, "m", Spec(tuple(splits)))  # noqa: SLF001
    func.properties["function_type"] = FunctionType.from_lists(
        [a.type for a in block.args], list(func.function_type.outputs.data))
    module.body.block.insert_op_before(MeshOp("m", mesh), func)


def placed_or_scan_refused(apply: Callable[[], object], text: str) -> bool:
    """Run `apply` (a pipeline holding propagate-sharding): True when it placed the program;
    False when it gave the one documented refusal a random placement can cause, a cumsum
    along a split dimension (no prefix-sum collective exists). Any other error propagates."""
    try:
        apply()
    except LaminaError as e:
        if "prefix-sum collective" not in str(e) or "lamina.cumsum" not in text:
            raise
        return False
    return True


def _sharded_equals_single_device(prog, mesh, draw, fuse: bool) -> None:
    ctx = make_context()
    reference = parse_text(prog.text, "gen.mlir", ctx)
    module = parse_text(prog.text, "gen.mlir", ctx)
    place_args(module, mesh, draw)
    verify(module)
    if fuse:
        run_pipeline(ctx, module, build_pipeline("fuse-elementwise"))
        verify(module)
    target = "h100-cluster" if math.prod(n for _, n in mesh) > 1 else "h100-node"
    pipeline = build_pipeline(f"propagate-sharding,insert-collectives{{target={target}}}")
    if not placed_or_scan_refused(lambda: run_pipeline(ctx, module, pipeline), prog.text):
        return
    verify(module)
    func = find_entry(module, None)
    for op in func.walk():
        assert not isinstance(op, ReshardOp), "every reshard is lowered"
        for r in op.results:
            assert spec_of(r.type) is not None, f"{op.name} result left unplaced"
        if isinstance(op, FusedOp):
            for inner in op.body.block.ops:
                assert not isinstance(inner, PlacementOp), "a collective inside a fused op"
    got = run_spmd(func, prog.inputs)
    ref = run_function(find_entry(reference, None), prog.inputs)
    for k, (g, r, t) in enumerate(zip(got.outputs, ref.outputs,
                                      find_entry(reference, None).function_type.outputs.data,
                                      strict=True)):
        diff = compare(f"out{k}", tensor_dtype(t), g, r)
        assert diff.ok, diff.line() + "\n" + prog.text
    n_coll = sum(1 for op in func.walk() if isinstance(op, PlacementOp))
    assert len(got.stats["collectives"]) <= n_coll


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs(max_ops=10, dtypes=("f32", "f64")), mesh=meshes(), data=st.data())
def test_sharded_run_equals_single_device(prog, mesh, data) -> None:
    _sharded_equals_single_device(prog, mesh, data.draw, fuse=False)


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs(max_ops=10, dtypes=("f32", "f64")), mesh=meshes(), data=st.data())
def test_fused_sharded_run_equals_unfused_single_device(prog, mesh, data) -> None:
    """fuse-elementwise first, then propagate-sharding,insert-collectives: the SPMD run of the
    fused, placed program equals the unfused single-device run."""
    _sharded_equals_single_device(prog, mesh, data.draw, fuse=True)


def test_megatron_sample_stats_and_result() -> None:
    ctx = make_context()
    text = open("samples/mlp_megatron.mlir").read()
    small = text.replace("2048", "64").replace("1024", "32").replace("4096", "128")
    module = parse_text(small, "mlp.mlir", ctx)
    verify(module)
    reference = module.clone()
    run_pipeline(ctx, module, build_pipeline("propagate-sharding,insert-collectives"))
    func = find_entry(module, None)
    rng = np.random.default_rng(0)
    ins = []
    for t in func.function_type.inputs.data:
        assert isinstance(t, TensorType)
        ins.append(rng.standard_normal(tuple(t.get_shape())).astype(np.float32))
    got = run_spmd(func, ins)
    ref = run_function(find_entry(reference, None), ins)
    scale = float(np.abs(ref.outputs[0]).max())
    np.testing.assert_allclose(got.outputs[0], ref.outputs[0], rtol=1e-5, atol=1e-5 * scale)
    (c,) = got.stats["collectives"]
    # one all_reduce over model of the local f32[32, 32] output: 4 KiB, ring sends 2 * 3/4 of it
    assert c["kind"] == "all_reduce" and c["axes"] == ["model"]
    assert c["payload_bytes"] == 32 * 32 * 4 and c["bytes_per_device"] == 6144
    assert got.stats["comm_bytes_per_device"] == 6144


# -- partially placed programs are rejected up front (not a wrong shape or a false mismatch) --

def _run_cli(*argv: str) -> tuple[int, str, str]:
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from lamina.cli.run import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def test_partially_placed_sample_runs_on_one_device_naming_the_first_unplaced_value(
        tmp_path) -> None:
    """samples/mlp_megatron.mlir places only x, W1 and the result: as written it runs on one
    device with its placements ignored, and one note names the first unplaced value; the SPMD
    runner itself still refuses it (it cannot say where the unplaced values live)."""
    text = open("samples/mlp_megatron.mlir").read()
    small = text.replace("2048", "64").replace("1024", "32").replace("4096", "128")
    path = tmp_path / "mlp.mlir"
    path.write_text(small)
    rc, out, err = _run_cli(str(path), "--check")
    assert rc == 0, err
    assert err == (f"note: @mlp_megatron is only partly placed (%h = lamina.matmul is not placed "
                   f"while its operands are, at {path}:12:3): it ran on one device with its "
                   "placements ignored; run -p propagate-sharding to run it on its mesh\n")
    assert out.splitlines()[1].startswith("check yb: ok")
    func = find_entry(load(str(path)), None)
    with pytest.raises(LaminaError) as e:
        run_spmd(func, random_inputs(func, 0))
    assert e.value.render() == (f"{path}:12:3: error: %h = lamina.matmul is not placed while its "
                                "operands are; run -p propagate-sharding first")
    assert source_excerpt(SourceLoc(str(path), 12, 3))[1] == "  ^"
    rc, out, err = _run_cli(str(path), "--check", "-p",
                            "propagate-sharding,insert-collectives")
    assert rc == 0 and err == "" and out.splitlines()[1].startswith("check yb: ok"), err


MESH4 = "lamina.mesh @m [data = 4]\n"
XS = "tensor<64x64xf32, #lamina.place<@m, [[data], []]>>"


def test_unplaced_operand_read_as_replicated_is_accepted_when_the_rule_holds() -> None:
    text = (MESH4 + f"func.func @f(%x: {XS}, %b: tensor<64xf32>) -> {XS} {{\n"
            f"  %y = lamina.add %x, %b : ({XS}, tensor<64xf32>) -> {XS}\n"
            f"  func.return %y : {XS}\n}}\n")
    module = parse_text(text, "p.mlir", make_context())
    verify(module)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    got = run_spmd(find_entry(module, None), [x, b])
    np.testing.assert_array_equal(got.outputs[0], x + b)


def test_unplaced_operand_that_breaks_the_rule_is_rejected() -> None:
    ws = "tensor<64x64xf32, #lamina.place<@m, [[], [data]]>>"
    text = (MESH4 + f"func.func @f(%x: {XS}, %w: tensor<64x64xf32>) -> {ws} {{\n"
            f"  %y = lamina.matmul %x, %w : ({XS}, tensor<64x64xf32>) -> {ws}\n"
            f"  func.return %y : {ws}\n}}\n")
    module = parse_text(text, "p.mlir", make_context())
    verify(module)
    with pytest.raises(LaminaError) as e:
        run_spmd(find_entry(module, None), [np.ones((64, 64))] * 2)
    assert e.value.message == ("operand %w of %y = lamina.matmul is not placed while the result "
                               "is (read as replicated it breaks the matmul rule); run -p "
                               "propagate-sharding first")
    assert e.value.loc is not None and e.value.loc.line == 3


# -- the SPMD runner drives ExecutionObserver hooks: MemoryChecker per device, per tier --

def _checked_spmd(hbm: float):
    from lamina.backends.numpy.memory import MemoryChecker
    from memtools import target_with

    text = (MESH4 + f"func.func @f(%x: {XS}) -> {XS} {{\n"
            f"  %a = lamina.exp %x : {XS}\n"
            f"  %b = lamina.add %a, %x : ({XS}, {XS}) -> {XS}\n"
            f"  func.return %b : {XS}\n}}\n")
    module = parse_text(text, "p.mlir", make_context())
    verify(module)
    checker = MemoryChecker(target_with(hbm=hbm))
    x = np.random.default_rng(2).standard_normal((64, 64)).astype(np.float32)
    got = run_spmd(find_entry(module, None), [x], observer=checker)
    np.testing.assert_allclose(got.outputs[0], np.exp(x) + x, rtol=1e-6)
    return checker


def test_memory_checker_counts_local_shards_under_spmd() -> None:
    # each device holds a 16x64 f32 shard (4 KiB) of %x, %a and %b: 12 KiB at the peak
    checker = _checked_spmd(hbm=16384)
    assert checker.peak["hbm"] == 3 * 4096
    with pytest.raises(LaminaError) as e:
        _checked_spmd(hbm=10000)
    assert "capacity overflow in tier 'hbm' at %b = lamina.add: 12288 bytes per device live, " \
        "capacity 10000 (target 'tiny')" in e.value.message
