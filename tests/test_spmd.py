"""SPMD execution after propagate-sharding + insert-collectives equals the single-device run.

Random programs from the shared strategy, random meshes (1-8 devices, 1-3 axes) and random input
placements. Programs are f64 so that the reordered sums of a sharded run stay within
`lamina.backends.compare`'s tolerances (f32 sums that cancel to ~0 differ by more than its
absolute tolerance, whichever order is "right").
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lamina.backends.compare import compare
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import run_function
from lamina.backends.numpy.spmd import run_spmd
from lamina.ir.collectives import PlacementOp, ReshardOp, with_spec
from lamina.ir.dtypes import tensor_dtype
from lamina.ir.placement import MeshOp, spec_of
from lamina.ir.sharding import Spec
from lamina.ir.source import make_context, parse_text, verify
from lamina.passes.pipeline import build_pipeline, run_pipeline
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


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs(max_ops=10, dtypes=("f64",)), mesh=meshes(), data=st.data())
def test_sharded_run_equals_single_device(prog, mesh, data) -> None:
    ctx = make_context()
    reference = parse_text(prog.text, "gen.mlir", ctx)
    module = parse_text(prog.text, "gen.mlir", ctx)
    place_args(module, mesh, data.draw)
    verify(module)
    target = "h100-cluster" if math.prod(n for _, n in mesh) > 1 else "h100-node"
    run_pipeline(ctx, module, build_pipeline(f"propagate-sharding,insert-collectives{{target={target}}}"))
    verify(module)
    func = find_entry(module, None)
    for op in func.walk():
        assert not isinstance(op, ReshardOp), "every reshard is lowered"
        for r in op.results:
            assert spec_of(r.type) is not None, f"{op.name} result left unplaced"
    got = run_spmd(func, prog.inputs)
    ref = run_function(find_entry(reference, None), prog.inputs)
    for k, (g, r, t) in enumerate(zip(got.outputs, ref.outputs,
                                      find_entry(reference, None).function_type.outputs.data,
                                      strict=True)):
        diff = compare(f"out{k}", tensor_dtype(t), g, r)
        assert diff.ok, diff.line() + "\n" + prog.text
    n_coll = sum(1 for op in func.walk() if isinstance(op, PlacementOp))
    assert len(got.stats["collectives"]) <= n_coll


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
    ins = [rng.standard_normal(tuple(t.get_shape())) .astype(np.float32)
           for t in func.function_type.inputs.data]
    got = run_spmd(func, ins)
    ref = run_function(find_entry(reference, None), ins)
    scale = float(np.abs(ref.outputs[0]).max())
    np.testing.assert_allclose(got.outputs[0], ref.outputs[0], rtol=1e-5, atol=1e-5 * scale)
    (c,) = got.stats["collectives"]
    # one all_reduce over model of the local f32[32, 32] output: 4 KiB, ring sends 2 * 3/4 of it
    assert c["kind"] == "all_reduce" and c["axes"] == ["model"]
    assert c["payload_bytes"] == 32 * 32 * 4 and c["bytes_per_device"] == 6144
    assert got.stats["comm_bytes_per_device"] == 6144
