"""insert-collectives: the sequences it picks for each kind of reshard, and the fold/bucket rules."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import run_function
from lamina.backends.numpy.spmd import run_spmd
from lamina.ir.ops.opbase import tensor_info
from lamina.ir.text.source import make_context, parse_text, verify
from lamina.passes.pipeline import build_pipeline, run_pipeline
from strategies import examples
from xdsl.dialects.func import FuncOp

MESH = "lamina.mesh @m [data = 2, model = 4]\n"


def T(splits: str, extra: str = "", shape: str = "8x16") -> str:
    return f"tensor<{shape}xf32, #lamina.place<@m, {splits}{', ' + extra if extra else ''}>>"


# 8 MiB: large enough that bandwidth, not the per-message latency, decides on h100-node
BIG = "1024x2048"


def lower(tin: str, tout: str, pre: str = "") -> tuple[list[str], np.ndarray, np.ndarray]:
    text = (MESH + f"func.func @f(%x: {tin}) -> {tout} {{\n{pre}"
            f"  %r = lamina.reshard %{'a' if pre else 'x'} : {tin if not pre else pre_type(pre)} -> {tout}\n"
            f"  func.return %r : {tout}\n}}\n")
    ctx = make_context()
    m = parse_text(text, "p.mlir", ctx)
    verify(m)
    run_pipeline(ctx, m, build_pipeline("insert-collectives{target=h100-node}"))
    f = find_entry(m, None)
    names = [op.name for op in f.body.block.ops][:-1]
    shape = tuple(int(n) for n in tin.split("<")[1].split("x")[:-1])
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return names, run_spmd(f, [x]).outputs[0], x


def pre_type(pre: str) -> str:
    return pre.split("-> ")[-1].strip()


def test_partial_to_split_is_one_reduce_scatter() -> None:
    names, got, x = lower(T("[[], []]", "partial = sum[model]"), T("[[], [model]]"))
    assert names == ["lamina.reduce_scatter"]
    np.testing.assert_allclose(got, x, rtol=1e-6)


def test_moving_an_axis_is_an_all_to_all() -> None:
    names, got, x = lower(T("[[], [model]]"), T("[[model], []]"))
    assert names == ["lamina.all_to_all"]
    np.testing.assert_array_equal(got, x)


def test_moving_several_axes_is_one_all_to_all() -> None:
    # both axes leave dim 0 and split dim 1 in the same order: one all_to_all over [data, model]
    # (7/8 of the local shard sent) instead of all_gather + all_slice (7/8 of the whole tensor).
    # On 8 x 16 the all_to_all's 7 message latencies outweigh that, and the model gathers model
    # and moves only data; at 8 MiB the bytes decide.
    names, got, x = lower(T("[[data, model], []]", shape=BIG), T("[[], [data, model]]", shape=BIG))
    assert names == ["lamina.all_to_all"]
    np.testing.assert_array_equal(got, x)


def test_gathers_then_a_local_slice() -> None:
    # model leaves dim 1 (a gather), and data, leaving dim 0 for dim 1, moves there with an
    # all_to_all instead of being gathered and sliced again
    names, got, x = lower(T("[[data], [model]]"), T("[[], [data]]"))
    assert names == ["lamina.all_gather", "lamina.all_to_all"]
    np.testing.assert_array_equal(got, x)
    names, got, x = lower(T("[[data], [model]]"), T("[[data], []]"))
    assert names == ["lamina.all_gather"]
    names, got, x = lower(T("[[data], []]"), T("[[data], [model]]"))
    assert names == ["lamina.all_slice"]
    np.testing.assert_array_equal(got, x)


def test_reordering_a_dimension_gathers_only_what_cannot_move() -> None:
    # model is minor in dim 0 and wanted nowhere next: gathered; data then moves to dim 1 with an
    # all_to_all, and dim 0 takes model back by a local slice (not a gather of both axes)
    names, got, x = lower(T("[[data, model], []]"), T("[[model], [data]]"))
    assert names == ["lamina.all_gather", "lamina.all_to_all", "lamina.all_slice"]
    np.testing.assert_array_equal(got, x)


MESHES = {"2x4": (("data", 2), ("model", 4)), "2x2x2": (("a", 2), ("b", 2), ("c", 2))}


@st.composite
def reshards(draw: st.DrawFn) -> tuple[str, str, str]:
    """A mesh and two placements of f32[8x16] on it: every axis split in one dim, pending (only
    in the source) or unused, in a random order within each dim."""
    mesh = draw(st.sampled_from(sorted(MESHES)))
    axes = [a for a, _ in MESHES[mesh]]

    def spec(partial_ok: bool) -> str:
        where = {a: draw(st.sampled_from(["d0", "d1", "none"] + (["partial"] if partial_ok else [])))
                 for a in axes}
        dims = [draw(st.permutations([a for a in axes if where[a] == f"d{k}"])) for k in (0, 1)]
        text = "[" + ", ".join("[" + ", ".join(d) + "]" for d in dims) + "]"
        pend = [a for a in axes if where[a] == "partial"]
        return T(text, f"partial = sum[{', '.join(pend)}]" if pend else "")

    decl = "lamina.mesh @m [" + ", ".join(f"{a} = {n}" for a, n in MESHES[mesh]) + "]\n"
    return decl, spec(True), spec(False)


@settings(max_examples=examples(30), deadline=None)
@given(reshards())
def test_property_any_reshard_lowers_to_collectives_that_compute_it(case) -> None:
    """Random source/destination placements: the lowering verifies, leaves no reshard, and the
    SPMD run gives the input back (exact without pending sums, to rounding with them)."""
    decl, tin, tout = case
    text = decl + (f"func.func @f(%x: {tin}) -> {tout} {{\n"
                   f"  %r = lamina.reshard %x : {tin} -> {tout}\n  func.return %r : {tout}\n}}\n")
    ctx = make_context()
    m = parse_text(text, "p.mlir", ctx)
    verify(m)
    run_pipeline(ctx, m, build_pipeline("insert-collectives{target=h100-node}"))
    verify(m)
    f = find_entry(m, None)
    assert not any(op.name == "lamina.reshard" for op in f.walk())
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    got = run_spmd(f, [x]).outputs[0]
    if "partial" in tin:
        np.testing.assert_allclose(got, x, rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, x)


def test_all_reduce_followed_by_slice_folds_into_reduce_scatter() -> None:
    p = T("[[], []]", "partial = sum[model]")
    pre = f'  %a = lamina.all_reduce %x {{axes = ["model"]}} : {p} -> {T("[[], []]")}\n'
    names, got, x = lower(p, T("[[model], []]"), pre)
    assert names == ["lamina.reduce_scatter"]
    np.testing.assert_allclose(got, x, rtol=1e-6)


def small_sample(path: str) -> str:
    """A sample's text with its large dims (1024, 2048, 4096) shrunk to 32, 64, 128."""
    return open(path).read().replace("2048x", "64x").replace("x4096", "x128") \
        .replace("4096x", "128x").replace("<4096", "<128").replace("x1024", "x32") \
        .replace("1024x", "32x").replace("<1024", "<32")


def spmd_matches_reference(path: str, text: str, spec: str, seed: int) -> dict:
    """Run `spec` on `text`, then the SPMD run against the single-device run of the original."""
    ctx = make_context()
    m = parse_text(text, path, ctx)
    verify(m)
    ref = m.clone()
    run_pipeline(ctx, m, build_pipeline(spec))   # verifies after each pass
    f = find_entry(m, None)
    rng = np.random.default_rng(seed)
    ins = [rng.standard_normal(tensor_info(t).shape).astype(np.float32)
           for t in f.function_type.inputs.data]
    got = run_spmd(f, ins)
    want = run_function(find_entry(ref, None), ins)
    for g, w in zip(got.outputs, want.outputs, strict=True):
        scale = float(np.abs(w).max())
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * scale, err_msg=path)
    return got.stats


def test_sharded_samples_match_single_device_on_small_shapes() -> None:
    for path in ("samples/mlp_contracting.mlir", "samples/attention_heads.mlir",
                 "samples/mlp_dp_training_step.mlir"):
        stats = spmd_matches_reference(path, small_sample(path),
                                       "propagate-sharding,insert-collectives", 1)
        assert stats["comm_bytes_per_device"] > 0


def test_gspmd_benchmark_reads_collectives_and_ring_bytes_from_hlo() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_gspmd", "benchmarks/bench_gspmd.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    hlo = (
        "  %tanh.3 = f32[1024,1024]{1,0} tanh(%mul.24)\n"
        "  %all-reduce = f32[1024,1024]{1,0} all-reduce(%f), channel_id=1, "
        "replica_groups=[2,4]<=[8], to_apply=%add\n"
        "  %ar2 = f32[2048,4096]{1,0} all-reduce(%g), replica_groups=mesh['axis_0'=1,"
        "'axis_1'=4,'axis_2'=2], device_ids=([2,4]T(1,0)) {'axis_1'}, to_apply=%add\n"
        "  %ag = f32[64,8]{1,0} all-gather(f32[8,8]{1,0} %h), replica_groups={{0,1,2,3,4,5,6,7}}, "
        "dimensions={0}\n")
    cs = bench.hlo_collectives(hlo)
    assert [(c["kind"], c["devices"], c["payload"]) for c in cs] == [
        ("all_reduce", 4, 4 << 20), ("all_reduce", 4, 32 << 20), ("all_gather", 8, 64 * 8 * 4)]
    assert cs[0]["sent"] == 6 << 20 and cs[1]["sent"] == 48 << 20
    assert cs[2]["sent"] == 7 / 8 * 64 * 8 * 4
    assert bench.hlo_gelu_elements(hlo) == 1 << 20


# ---- with lifetimes already annotated (annotate-lifetimes before the sharding passes) ----------

def _lowered_with_frees(text: str, spec: str) -> tuple[list[str], FuncOp]:
    ctx = make_context()
    m = parse_text(text, "p.mlir", ctx)
    verify(m)
    run_pipeline(ctx, m, build_pipeline(spec))   # verifies after each pass (use after free too)
    f = find_entry(m, None)
    return [op.name for op in f.body.block.ops], f


def test_fold_moves_the_operand_free_after_the_reduce_scatter() -> None:
    p = T("[[], []]", "partial = sum[model]")
    text = (MESH + f"func.func @f(%x: {p}) -> {T('[[model], []]')} {{\n"
            f'  %a = lamina.all_reduce %x {{axes = ["model"]}} : {p} -> {T("[[], []]")}\n'
            f"  %r = lamina.reshard %a : {T('[[], []]')} -> {T('[[model], []]')}\n"
            f"  func.return %r : {T('[[model], []]')}\n}}\n")
    names, f = _lowered_with_frees(text, "annotate-lifetimes,insert-collectives")
    assert names == ["lamina.reduce_scatter", "lamina.free", "func.return"]
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    np.testing.assert_allclose(run_spmd(f, [x]).outputs[0], x, rtol=1e-6)


def test_bucket_defers_the_frees_of_its_members_inputs() -> None:
    text = open("samples/mlp_dp_training_step.mlir").read()
    names, f = _lowered_with_frees(text, "annotate-lifetimes,insert-collectives")
    k = names.index("lamina.all_reduce")
    assert names.count("lamina.all_reduce") == 1
    assert names[k + 1: k + 5] == ["lamina.free"] * 4      # %dw1p .. %db2p, after the bucket


def test_annotate_lifetimes_may_run_before_propagate_sharding() -> None:
    for path in ("samples/mlp_megatron.mlir", "samples/mlp_dp_training_step.mlir"):
        spmd_matches_reference(path, small_sample(path),
                               "annotate-lifetimes,propagate-sharding,insert-collectives", 2)
