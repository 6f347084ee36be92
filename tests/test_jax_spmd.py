"""Placed programs on the JAX backend: one shard_map, Lamina's collectives and no others.

Hypothesis over random programs and random input placements on 2 x 4 and 2 x 2 x 2 meshes (the
SPMD property test's generator, `test_spmd.place_args`) and over random reshards
(`test_insert_collectives.reshards`): after propagate-sharding,insert-collectives every output
equals the NumPy SPMD interpreter's, the HLO jax hands to XLA holds exactly the collectives Lamina
inserted (kinds, replica groups, count: `plan.expected_hlo`) and the compiled HLO adds none; it
removes none either on the reshards, samples and hand-written programs (random programs can let
XLA's simplifier prove a collective unneeded, e.g. one feeding only `select(c, x, x)`). Also the HLO reader on every
replica-group form XLA prints, and that the comparison notices a collective Lamina did not insert.
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
from lamina.backends.jax import hlo, plan  # noqa: E402
from lamina.backends.jax.backend import compare_collectives  # noqa: E402
from lamina.ir.core.dtypes import tensor_dtype  # noqa: E402
from lamina.ir.text.source import make_context, parse_text, verify  # noqa: E402
from strategies import examples  # noqa: E402
from strategies.programs import programs  # noqa: E402
from test_insert_collectives import reshards  # noqa: E402
from test_jax_backend import tolerance_dtype  # noqa: E402
from test_spmd import place_args, placed_or_scan_refused  # noqa: E402
from xdsl.dialects.builtin import ModuleOp  # noqa: E402

MESHES = ([("a", 2), ("b", 4)], [("a", 2), ("b", 2), ("c", 2)])


def check_on_jax(module: ModuleOp, inputs: list[np.ndarray], what: str,
                 exact: bool = False, strict: bool = True) -> dict:
    """jax == the NumPy SPMD run per output; the HLO jax hands XLA holds exactly Lamina's
    collectives, and the compiled HLO adds none. `strict`: it removes none either (random
    programs may let XLA's simplifier drop one whose result it proves unneeded)."""
    ref = lamina.run(module, inputs)
    got = lamina.run(module, inputs, backend="jax")
    func = find_entry(module, None)
    for (name, r), t in zip(ref.outputs.items(), func.function_type.outputs.data, strict=True):
        diff = compare(name, tolerance_dtype(tensor_dtype(t), module), got.outputs[name], r,
                       exact=exact)
        assert diff.ok, f"{what}: {diff.line()}"
    mesh_op = placed_mesh(func)
    assert mesh_op is not None
    found = [(c["kind"], sorted(map(tuple, c["replica_groups"])))
             for c in got.stats["hlo_collectives"]]
    want = [(k, sorted(g)) for k, g in plan.expected_hlo(func, mesh_op.mesh)]
    report = f"{what}\nHLO: {found}\nLamina: {want}"
    assert got.stats["lowered_matches_plan"], report
    assert got.stats["hlo_extra"] == [], report
    if strict:
        assert got.stats["hlo_matches_plan"] and sorted(found) == sorted(want), report
    return got.stats


@settings(max_examples=examples(8), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs(max_ops=10, dtypes=("f32", "f64")), mesh=st.sampled_from(MESHES),
       fuse=st.sampled_from(["", "before", "after"]), data=st.data())
def test_placed_random_programs_on_jax(prog, mesh, fuse: str, data) -> None:
    """Fused before placement (propagate-sharding re-forms the groups) or after it (kernels whose
    operands carry different placements, run per device inside the shard_map)."""
    ctx = make_context()
    module = parse_text(prog.text, "gen.mlir", ctx)
    place_args(module, mesh, data.draw)
    verify(module)
    spec = (("fuse-elementwise," if fuse == "before" else "")
            + "propagate-sharding,insert-collectives{target=h100-cluster}"
            + (",fuse-elementwise" if fuse == "after" else ""))
    if not placed_or_scan_refused(lambda: lamina.apply(module, spec), prog.text):
        return
    check_on_jax(module, prog.inputs, prog.text, strict=False)


@settings(max_examples=examples(6), deadline=None)
@given(case=reshards(), lowered=st.booleans())
def test_reshards_on_jax(case: tuple[str, str, str], lowered: bool) -> None:
    """A reshard as written (the backend's own assemble-and-slice lowering) and as insert-collectives
    lowers it (all_to_all, all_gather, all_slice, reduce_scatter): exact unless sums are pending."""
    decl, tin, tout = case
    text = decl + (f"func.func @f(%x: {tin}) -> {tout} {{\n"
                   f"  %r = lamina.reshard %x : {tin} -> {tout}\n  func.return %r : {tout}\n}}\n")
    module = lamina.parse(text, "r.mlir")
    if lowered:
        lamina.apply(module, "insert-collectives{target=h100-node}")
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    check_on_jax(module, [x], text, exact="partial" not in tin)


def test_megatron_sample_compiles_to_its_one_all_reduce() -> None:
    text = open("samples/mlp_megatron.mlir").read()
    module = lamina.apply(lamina.parse(text.replace("2048", "64").replace("1024", "32")
                                       .replace("4096", "128")), "propagate-sharding,insert-collectives")
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype(np.float32)
              for s in ((64, 32), (32, 128), (128,), (128, 32), (32,))]
    stats = check_on_jax(module, inputs, "megatron")
    (c,) = stats["hlo_collectives"]
    assert c["kind"] == "all_reduce" and c["replica_groups"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert c["payload_bytes"] == 32 * 32 * 4 == stats["collectives"][0]["payload_bytes"]
    assert stats["hlo_comm_bytes_per_device"] == stats["comm_bytes_per_device"] == 6144


def test_partial_arguments_and_results_leave_as_the_interpreter_gives_them() -> None:
    """A pending-sum argument enters as the NumPy runner distributes it and a pending-sum result is
    summed on the host exactly as its `assemble` does: bit for bit, with no collective."""
    p = "tensor<8x16xf32, #lamina.place<@m, [[a], []], partial = sum[b]>>"
    q = "tensor<8x16xf32, #lamina.place<@m, [[], [a]], partial = max[b]>>"
    text = ("lamina.mesh @m [a = 2, b = 4]\n"
            f"func.func @f(%x: {p}, %y: {q}) -> ({p}, {q}) {{\n"
            f"  %t = lamina.neg %x : {p}\n"
            f"  func.return %t, %y : {p}, {q}\n}}\n")
    module = lamina.parse(text)
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal((8, 16)).astype(np.float32) for _ in range(2)]
    stats = check_on_jax(module, inputs, text, exact=True)
    assert stats["hlo_collectives"] == []


def test_hlo_reader_reads_every_replica_group_form() -> None:
    text = (
        "  %a = f32[8,16]{1,0} all-reduce(%p), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, "
        "use_global_device_ids=true, to_apply=%add\n"
        "  %b = f32[8,4]{0,1} reduce-scatter(%c), channel_id=2, replica_groups=[4,2]<=[2,4]T(1,0), "
        "dimensions={1}, to_apply=%add\n"
        "  ROOT %g = f32[8,16]{0,1} all-gather(%c), channel_id=3, replica_groups=[2,4]<=[8], "
        "dimensions={1}\n"
        "  %t = (f32[2,4]{1,0}, f32[2,4]{1,0}) all-to-all(%s, %s2), channel_id=4, replica_groups={}\n"
        "  %n = f32[8,16]{1,0} add(%a, %b)\n"
        "  %m = f32[4]{0} all-reduce(%n), channel_id=5, replica_groups=mesh['axis_0'=1,'axis_1'=4,"
        "'axis_2'=2], device_ids=([2,4]T(1,0)) {'axis_1'}, use_global_device_ids=true\n"
        "  %k = f32[4]{0} all-reduce(%n), replica_groups=mesh['x'=2,'y'=4] {'x'}\n")
    cs = hlo.collectives(text, 2)
    assert [(c.kind, c.groups) for c in cs] == [
        ("all_reduce", ((0, 1, 2, 3), (4, 5, 6, 7))),
        ("reduce_scatter", ((0, 4), (1, 5), (2, 6), (3, 7))),
        ("all_gather", ((0, 1, 2, 3), (4, 5, 6, 7))),
        ("all_to_all", ((0, 1),)),
        ("all_reduce", ((0, 1, 2, 3), (4, 5, 6, 7))),   # devices [[0,4],[1,5],..] as a 1x4x2 mesh
        ("all_reduce", ((0, 4), (1, 5), (2, 6), (3, 7)))]
    assert [c.payload for c in cs] == [512, 8 * 4 * 4 * 2, 512, 64, 16, 16]
    assert cs[0].sent == 2 * 3 / 4 * 512 and cs[1].sent == 1 / 2 * 256


def test_a_collective_lamina_did_not_insert_is_noticed() -> None:
    text = open("samples/mlp_dp_training_step.mlir").read()
    module = lamina.apply(lamina.parse(text), "insert-collectives{target=h100-node}")
    func = find_entry(module, None)
    mesh_op = placed_mesh(func)
    assert mesh_op is not None
    ok = ("  %all-reduce = (f32[32,128]{1,0}, f32[128]{0}, f32[128,32]{1,0}, f32[32]{0}) "
          "all-reduce(%a, %b, %c, %d), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, "
          "to_apply=%add\n")
    extra = "  %ag = f32[64,32]{1,0} all-gather(%x), replica_groups=[1,8]<=[8], dimensions={0}\n"
    assert compare_collectives(func, mesh_op.mesh, ok)["hlo_matches_plan"]
    more = compare_collectives(func, mesh_op.mesh, ok + extra)
    assert not more["hlo_matches_plan"] and more["hlo_missing"] == []
    assert more["hlo_extra"] == [{"kind": "all_gather", "replica_groups": [list(range(8))]}]
    fewer = compare_collectives(func, mesh_op.mesh, extra, lowered=ok)
    assert fewer["hlo_missing"][0]["kind"] == "all_reduce" and fewer["lowered_matches_plan"]


@pytest.mark.parametrize("mesh, splits", [
    ("[a = 2, b = 4]", "[[a], [b]]"), ("[a = 2, b = 4]", "[[b, a], []]"),
    ("[a = 2, b = 2, c = 2]", "[[c, a], [b]]"), ("[a = 2, b = 2, c = 2]", "[[], [a, b, c]]")])
def test_sharded_dropout_masks_are_bit_exact(mesh: str, splits: str) -> None:
    """Each device builds its block's global element indices from lax.axis_index: the masks are
    the single-device masks, bit for bit, and nothing is communicated."""
    t = f"tensor<16x24xf32, #lamina.place<@m, {splits}>>"
    text = (f"lamina.mesh @m {mesh}\nfunc.func @f(%x: {t}) -> {t} {{\n"
            f"  %y = lamina.dropout %x {{rate = 4.000000e-01 : f64, seed = 77 : i64}} : {t}\n"
            f"  func.return %y : {t}\n}}\n")
    module = lamina.parse(text)
    ones = np.ones((16, 24), np.float32)
    stats = check_on_jax(module, [ones], text, exact=True)
    assert stats["hlo_collectives"] == []
    single = lamina.run(lamina.parse(text.split("\n", 1)[1].replace(f", #lamina.place<@m, {splits}>",
                                                                     "")), [ones])
    np.testing.assert_array_equal(lamina.run(module, [ones], backend="jax").outputs["out0"],
                                  single.outputs["out0"])


def test_gather_on_a_vocabulary_split_table_is_a_pending_sum() -> None:
    """An embedding table split over its rows: each device looks up the ids its block holds (the
    block's offset from lax.axis_index) and gives 0 elsewhere, so the lookup is a pending sum
    that one all_reduce completes; exactly the interpreter's values."""
    table = "tensor<16x8xf32, #lamina.place<@m, [[b], []]>>"
    ids = "tensor<2x3xi32, #lamina.place<@m, [[a], []]>>"
    text = (f"lamina.mesh @m [a = 2, b = 4]\nfunc.func @f(%t: {table}, %i: {ids}) -> "
            "tensor<2x3x8xf32> {\n"
            f"  %e = lamina.gather %t, %i {{axis = 0 : i64}} : ({table}, {ids}) -> tensor<2x3x8xf32>\n"
            "  func.return %e : tensor<2x3x8xf32>\n}\n")
    module = lamina.parse(text)
    lamina.apply(module, "propagate-sharding,insert-collectives{target=h100-cluster}")
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((16, 8)).astype(np.float32),
              rng.integers(0, 16, (2, 3)).astype(np.int32)]
    stats = check_on_jax(module, inputs, text, exact=True)
    assert [c["kind"] for c in stats["hlo_collectives"]] != []
