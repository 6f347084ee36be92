"""Pipeline-staged programs on the JAX backend: each stage's ops under one `lax.cond`, moves between
stages as collective-permutes, in one shard_map.

Hypothesis over random programs cut into 2-4 stages at random points (`staging.stage_program`, a
fixture independent of the pipeline-stages pass), on a stage-only mesh, on a data x stage mesh and,
after propagate-sharding + insert-collectives on a data x model mesh, on a 2 x 2 x 2 data x model x
stage mesh: every output equals the unstaged program's on the NumPy interpreter, the compiled HLO
holds exactly Lamina's collectives plus one collective-permute per move between stages (with the
stage pairs as its source-target pairs), and each stage's ops run in a conditional; the moves as
unlowered reshards and as insert-collectives' `lamina.collective_permute`.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import lamina  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from lamina.analysis.placed import placed_mesh  # noqa: E402
from lamina.backends.compare import compare  # noqa: E402
from lamina.backends.interface import find_entry  # noqa: E402
from lamina.backends.jax import plan  # noqa: E402
from lamina.ir.core.dtypes import tensor_dtype  # noqa: E402
from lamina.ir.text.source import make_context, parse_text, verify  # noqa: E402
from lamina.passes.pipeline import build_pipeline, run_pipeline  # noqa: E402
from staging import stage_program  # noqa: E402
from strategies import examples  # noqa: E402
from strategies.programs import programs  # noqa: E402
from test_accumulate_gradients import Mlp, _inputs, mlps  # noqa: E402
from test_jax_backend import tolerance_dtype  # noqa: E402
from test_spmd import place_args, placed_or_scan_refused  # noqa: E402
from xdsl.dialects.builtin import ModuleOp  # noqa: E402

STAGED_TWO = """\
lamina.mesh @m [data = 2, pp = 2]
func.func @f(%x: tensor<4x8xf32, #lamina.place<@m, [[data], []], stage = pp[0]>>,
             %w: tensor<8x8xf32, #lamina.place<@m, [[], []], stage = pp[1]>>)
    -> tensor<4x8xf32, #lamina.place<@m, [[data], []], stage = pp[1]>> {
  %y = lamina.exp %x : tensor<4x8xf32, #lamina.place<@m, [[data], []], stage = pp[0]>>
  %t = lamina.reshard %y : tensor<4x8xf32, #lamina.place<@m, [[data], []], stage = pp[0]>> -> tensor<4x8xf32, #lamina.place<@m, [[data], []], stage = pp[1]>>
  %u = lamina.matmul %t, %w : (tensor<4x8xf32, #lamina.place<@m, [[data], []], stage = pp[1]>>, tensor<8x8xf32, #lamina.place<@m, [[], []], stage = pp[1]>>) -> tensor<4x8xf32, #lamina.place<@m, [[data], []], stage = pp[1]>>
  func.return %u : tensor<4x8xf32, #lamina.place<@m, [[data], []], stage = pp[1]>>
}
"""


def _check(module: ModuleOp, reference: ModuleOp, inputs: list[np.ndarray], what: str) -> dict:
    """jax on the staged program == the NumPy interpreter on the unstaged one; its HLO holds
    exactly the planned collectives (stage moves included)."""
    ref = lamina.run(reference, inputs)
    got = lamina.run(module, inputs, backend="jax")
    func = find_entry(module, None)
    for (name, r), t in zip(ref.outputs.items(), func.function_type.outputs.data, strict=True):
        diff = compare(name, tolerance_dtype(tensor_dtype(t), module),
                       list(got.outputs.values())[list(ref.outputs).index(name)], r)
        assert diff.ok, f"{what}: {diff.line()}"
    mesh_op = placed_mesh(func)
    assert mesh_op is not None
    want = sorted((k, sorted(g)) for k, g in plan.expected_hlo(func, mesh_op.mesh))
    found = sorted((c["kind"], sorted(map(tuple, c["replica_groups"])))
                   for c in got.stats["hlo_collectives"])
    assert got.stats["lowered_matches_plan"], f"{what}\nHLO {found}\nplan {want}"
    assert got.stats["hlo_extra"] == [], f"{what}\nHLO {found}\nplan {want}"
    return got.stats


def test_two_stages_move_by_one_collective_permute() -> None:
    module = parse_text(STAGED_TWO, "two.mlir")
    verify(module)
    inputs = [np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8),
              np.linspace(0, 2, 64, dtype=np.float32).reshape(8, 8)]
    stats = _check(module, module, inputs, "two stages")
    permutes = [c for c in stats["hlo_collectives"] if c["kind"] == "collective_permute"]
    # devices are numbered data-major: stage 0 holds devices 0 and 2, stage 1 devices 1 and 3
    assert [sorted(map(tuple, c["replica_groups"])) for c in permutes] == [[(0, 1), (2, 3)]]
    assert "conditional" in _compiled_hlo(module)


def _compiled_hlo(module: ModuleOp) -> str:
    from lamina.backends.jax.backend import JaxProgram
    from lamina.backends.jax.options import JaxOptions

    return JaxProgram(find_entry(module, None), JaxOptions(), frozenset()).compiled.as_text()


@st.composite
def _cuts(draw: st.DrawFn, n_ops: int, most: int) -> list[int]:
    """Cut points for 2 .. `most` stages (at most 4; fewer where the program has fewer ops)."""
    stages = draw(st.integers(2, min(most, max(2, n_ops))))
    points = draw(st.lists(st.integers(1, max(1, n_ops - 1)), min_size=stages - 1,
                           max_size=stages - 1, unique=True)) if n_ops > 1 else [1]
    return sorted(points)


def _n_ops(module: ModuleOp) -> int:
    return len(list(find_entry(module, None).body.block.ops)) - 1


@settings(max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs(max_ops=8, dtypes=("f32",)), data=st.data(),
       mesh=st.sampled_from(["stage", "data", "data-model"]), lower=st.booleans())
def test_random_staged_programs_equal_unstaged(prog, data, mesh: str, lower: bool) -> None:
    ctx = make_context()
    reference = parse_text(prog.text, "gen.mlir", ctx)
    module = parse_text(prog.text, "gen.mlir", ctx)
    if mesh != "stage":
        axes = [("data", 2)] if mesh == "data" else [("data", 2), ("model", 2)]
        place_args(module, axes, data.draw)
        verify(module)
        pipeline = build_pipeline("propagate-sharding,insert-collectives{target=h100-node}")
        if not placed_or_scan_refused(lambda: run_pipeline(ctx, module, pipeline), prog.text):
            return
    # the mesh times the stages fits the 8 host devices jax starts with in the test process
    cuts = data.draw(_cuts(_n_ops(module), {"stage": 4, "data": 4, "data-model": 2}[mesh]))
    stage_program(module, cuts)
    verify(module)
    if lower:   # the moves as insert-collectives lowers them: collective_permute
        run_pipeline(ctx, module, build_pipeline("insert-collectives{target=h100-cluster}"))
        verify(module)
        assert "lamina.reshard" not in str(module)
    text = str(module)
    assert str(parse_text(text, "staged.mlir", ctx)) == text
    _check(module, reference, prog.inputs, f"cuts {cuts} on {mesh}\n{text}")


@settings(max_examples=examples(4), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mlp=mlps(("f32",)), stages=st.integers(2, 4), micro=st.sampled_from((1, 2, 4)),
       sched=st.sampled_from(("gpipe", "1f1b", "interleaved")))
def test_pipeline_stages_output_runs_on_jax(mlp: Mlp, stages: int, micro: int,
                                            sched: str) -> None:
    """pipeline-stages' own output (random MLP losses, P, M, schedule; interleaved with M = P
    and two chunks per stage where the forward has the ops) on jax equals the unstaged
    gradient step on the NumPy interpreter."""
    options = f"schedule={sched}"
    if sched == "interleaved":   # M = P must divide the batch (8 or 16 rows)
        stages = 2 if stages == 3 else stages
        micro, virtual = stages, 2 if 3 * len(mlp.widths) >= 2 * stages else 1
        options += f" virtual={virtual}"
    module = lamina.parse(mlp.text())
    lamina.apply(module, f"derive-backward{{data=x,y}},pipeline-stages{{stages={stages} "
                         f"micro-batches={micro} {options}}}")
    reference = lamina.parse(mlp.text())
    lamina.apply(reference, "derive-backward{data=x,y}")
    inputs = _inputs(find_entry(reference, "f_grad"))
    _check(_only(module, "f_grad"), _only(reference, "f_grad"), inputs, f"P={stages} M={micro} {sched}")


def _only(module: ModuleOp, entry: str) -> ModuleOp:
    """`module` with only function `entry` (so lamina.run needs no entry name)."""
    for op in list(module.body.block.ops):
        if op.name == "func.func" and op.sym_name.data != entry:  # type: ignore[attr-defined]
            op.detach()
    return module


def test_interleaved_stages_run_on_jax() -> None:
    """pipeline-stages{schedule=interleaved virtual=2} on a placed step (data = 2 x P = 2 stages,
    M = 2, 4 host devices): the activations of chunk 1 (stage 1) wrap round to chunk 2 (stage 0)
    by a ppermute from stage 1's devices to stage 0's, and the step equals the unstaged one."""
    text = Mlp(16, (3, 4, 4, 2), ("tanh", "gelu", "tanh"), "mean", "f32").text()
    head = ("place-batch{data=x,y axis=data size=2},derive-backward{data=x,y},"
            "accumulate-gradients{micro-batches=2},propagate-sharding,insert-collectives")
    module = lamina.parse(text)
    lamina.apply(module, f"{head},pipeline-stages{{stages=2 schedule=interleaved virtual=2}}")
    reference = lamina.parse(text)
    lamina.apply(reference, "derive-backward{data=x,y}")
    inputs = _inputs(find_entry(reference, "f_grad"))
    stats = _check(_only(module, "f_grad"), _only(reference, "f_grad"), inputs, "P=2 V=2 M=2")
    pairs = {tuple(sorted(map(tuple, c["replica_groups"]))) for c in stats["hlo_collectives"]
             if c["kind"] == "collective_permute"}
    # devices data-major: stage 0 holds devices 0 and 2, stage 1 devices 1 and 3
    assert {((0, 1), (2, 3)), ((1, 0), (3, 2))} <= pairs
