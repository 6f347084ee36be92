"""Collective ops: syntax round trip, every verifier rule, and their SPMD semantics."""

from __future__ import annotations

import importlib
import io

import numpy as np
import pytest
from lamina.backends.interface import Feature, find_entry
from lamina.backends.numpy.runner import run_function
from lamina.backends.numpy.spmd import run_spmd
from lamina.backends.registry import backend_names, get_backend
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.mesh.collective_kinds import COLLECTIVE_KINDS
from lamina.ir.mesh.collectives import COLLECTIVES, OP_CLASS, VERIFY_CHECKS, PlacementOp
from lamina.ir.text.source import parse_text, verify
from xdsl.printer import Printer

MESH = "lamina.mesh @m [data = 2, model = 4]\n"


def T(shape: str, splits: str, extra: str = "", dtype: str = "f32") -> str:
    return f"tensor<{shape}x{dtype}, #lamina.place<@m, {splits}{', ' + extra if extra else ''}>>"


def prog(op: str, attrs: str, tin: str, tout: str) -> str:
    return (MESH + f"func.func @f(%x: {tin}) -> {tout} {{\n"
            f"  %0 = lamina.{op} %x {attrs} : {tin} -> {tout}\n"
            f"  func.return %0 : {tout}\n}}\n")


def printed(text: str) -> str:
    buf = io.StringIO()
    Printer(stream=buf).print_op(parse_text(text, "p.mlir"))
    return buf.getvalue()


VALID = [
    ("all_reduce", '{axes = ["model"], kind = "sum", algorithm = "ring"}',
     T("8x16", "[[data], []]", "partial = sum[model]"), T("8x16", "[[data], []]")),
    ("all_reduce", '{axes = ["model"], kind = "max"}',
     T("8x16", "[[], []]", "partial = max[model, data]"), T("8x16", "[[], []]", "partial = max[data]")),
    ("all_gather", '{dim = 1 : i64, axes = ["model"]}',
     T("8x16", "[[data], [model]]"), T("8x16", "[[data], []]")),
    ("all_gather", '{dim = 0 : i64, axes = ["data", "model"]}',
     T("8x16", "[[data, model], []]"), T("8x16", "[[], []]")),
    ("reduce_scatter", '{dim = 1 : i64, axes = ["model"], algorithm = "hierarchical", inner = 2 : i64}',
     T("8x16", "[[data], []]", "partial = sum[model]"), T("8x16", "[[data], [model]]")),
    ("all_to_all", '{split_dim = 0 : i64, concat_dim = 1 : i64, axes = ["model"]}',
     T("8x16", "[[], [model]]"), T("8x16", "[[model], []]")),
    ("all_slice", '{dim = 0 : i64, axes = ["model"]}',
     T("8x16", "[[], []]"), T("8x16", "[[model], []]")),
    ("reshard", "", T("8x16", "[[data], [model]]"), T("8x16", "[[model], [data]]")),
    ("reshard", "", T("8x16", "[[], []]", "partial = sum[model]"), T("8x16", "[[model], []]")),
]


@pytest.mark.parametrize("op, attrs, tin, tout", VALID)
def test_round_trip_and_spmd_identity(op: str, attrs: str, tin: str, tout: str) -> None:
    text = prog(op, attrs, tin, tout)
    once = printed(text)
    assert f"lamina.{op}" in once and printed(once) == once
    module = parse_text(once, "p.mlir")
    verify(module)
    f = find_entry(module, None)
    x = np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32)
    got = run_spmd(f, [x])
    # a collective never changes the global value: distribute -> exchange -> assemble == x
    np.testing.assert_allclose(got.outputs[0], x, rtol=1e-6, atol=1e-6)
    assert run_function(f, [x]).outputs[0] is not None
    if op not in ("all_slice",):
        (c,) = got.stats["collectives"]
        assert c["kind"] == op


def test_bucketed_all_reduce_round_trip_and_runs() -> None:
    p = T("8x16", "[[data], []]", "partial = sum[model]")
    r = T("8x16", "[[data], []]")
    q = T("4xf32".replace("xf32", ""), "[[]]", "partial = sum[model]")
    s = T("4", "[[]]")
    text = (MESH + f"func.func @f(%a: {p}, %b: {q}) -> ({r}, {s}) {{\n"
            f'  %0, %1 = lamina.all_reduce %a, %b {{axes = ["model"]}} : ({p}, {q}) -> ({r}, {s})\n'
            f"  func.return %0, %1 : {r}, {s}\n}}\n")
    once = printed(text)
    assert printed(once) == once
    module = parse_text(once, "p.mlir")
    verify(module)
    a = np.arange(128, dtype=np.float32).reshape(8, 16)
    b = np.arange(4, dtype=np.float32)
    out = run_spmd(find_entry(module, None), [a, b])
    np.testing.assert_array_equal(out.outputs[0], a)
    np.testing.assert_array_equal(out.outputs[1], b)
    (c,) = out.stats["collectives"]
    # payload: local a (4x16) + b (4) f32 = 272 B; ring over 4: 2 * 3/4 * 272
    assert c["payload_bytes"] == 272 and c["bytes_per_device"] == 408
    assert out.stats["comm_bytes_per_device"] == 408


INVALID = [
    ("all_reduce", '{axes = ["model"]}', T("8x16", "[[data], []]"), T("8x16", "[[data], []]"),
     "the operand is not pending over [model]"),
    ("all_reduce", '{axes = ["model"], kind = "max"}', T("8x16", "[[], []]", "partial = sum[model]"),
     T("8x16", "[[], []]"), "kind is max but the operand is a pending sum"),
    ("all_reduce", '{axes = ["model"]}', T("8x16", "[[], []]", "partial = sum[model]"),
     T("8x16", "[[model], []]"), "all_reduce over [model] of an operand placed"),
    ("all_reduce", "", T("8x16", "[[], []]", "partial = sum[model]"), T("8x16", "[[], []]"),
     "missing required attribute 'axes', which must be a non-empty list"),
    ("all_reduce", '{axes = ["expert"]}', T("8x16", "[[], []]", "partial = sum[model]"),
     T("8x16", "[[], []]"), "mesh @m has no axis 'expert'"),
    ("all_reduce", '{axes = ["model", "model"]}', T("8x16", "[[], []]", "partial = sum[model]"),
     T("8x16", "[[], []]"), "axes repeat"),
    ("all_reduce", '{axes = ["model"], algorithm = "magic"}',
     T("8x16", "[[], []]", "partial = sum[model]"), T("8x16", "[[], []]"), "'algorithm' must be"),
    ("all_reduce", '{axes = ["model"], kind = "prod"}', T("8x16", "[[], []]", "partial = sum[model]"),
     T("8x16", "[[], []]"), "'kind' must be"),
    ("all_gather", '{dim = 0 : i64, axes = ["model"]}', T("8x16", "[[data], [model]]"),
     T("8x16", "[[data], []]"), "must be the minor-most split axes of dimension 0"),
    ("all_gather", '{dim = 1 : i64, axes = ["model"]}', T("8x16", "[[data], [model]]"),
     T("8x16", "[[], []]"), "all_gather over [model] of an operand placed"),
    ("all_gather", '{axes = ["model"]}', T("8x16", "[[data], [model]]"),
     T("8x16", "[[data], []]"), "missing required attribute 'dim', which must be an integer"),
    ("all_gather", '{dim = 5 : i64, axes = ["model"]}', T("8x16", "[[data], [model]]"),
     T("8x16", "[[data], []]"), "out of range"),
    ("all_gather", '{dim = 1 : i64, axes = ["model"]}', T("8x16", "[[data], [model]]"),
     T("8x16", "[[data], []]", dtype="f16"), "must have the operand's shape and element type"),
    ("all_gather", '{dim = 1 : i64, axes = ["model"]}', T("8x16", "[[data], [model]]"),
     "tensor<8x16xf32>", "must be placed on a mesh"),
    ("all_gather", '{dim = 1 : i64, axes = ["model"]}', T("8x16", "[[data], [model]]", "tier = hbm"),
     T("8x16", "[[data], []]", "tier = host"), "does not move between memory tiers"),
    ("all_gather", '{dim = 1 : i64, axes = ["model"], color = 1 : i64}', T("8x16", "[[data], [model]]"),
     T("8x16", "[[data], []]"), "lamina.all_gather has no attribute 'color'"),
    ("reduce_scatter", '{dim = 1 : i64, axes = ["model"]}', T("8x16", "[[data], []]"),
     T("8x16", "[[data], [model]]"), "not pending over [model]"),
    ("reduce_scatter", '{dim = 0 : i64, axes = ["model"]}',
     T("8x16", "[[data], []]", "partial = sum[model]"), T("8x16", "[[data], [model]]"),
     "reduce_scatter over [model] of an operand placed"),
    ("all_to_all", '{split_dim = 1 : i64, concat_dim = 1 : i64, axes = ["model"]}',
     T("8x16", "[[], [model]]"), T("8x16", "[[], [model]]"), "must be a dimension other than"),
    ("all_to_all", '{split_dim = 0 : i64, concat_dim = 1 : i64, axes = ["data"]}',
     T("8x16", "[[], [model]]"), T("8x16", "[[data], []]"), "minor-most split axes of dimension 1"),
    ("all_to_all", '{split_dim = 0 : i64, concat_dim = 1 : i64, axes = ["model"]}',
     T("8x16", "[[], [model]]"), T("8x16", "[[], [model]]"), "all_to_all over [model]"),
    ("reshard", "", T("8x16", "[[], []]"), T("8x16", "[[], []]", "partial = sum[model]"),
     "cannot introduce a pending reduction"),
]


@pytest.mark.parametrize("op, attrs, tin, tout, message", INVALID)
def test_verifier_rules(op: str, attrs: str, tin: str, tout: str, message: str) -> None:
    with pytest.raises(LaminaError) as e:
        verify(parse_text(prog(op, attrs, tin, tout), "p.mlir"))
    assert message in e.value.message
    assert e.value.loc is not None and e.value.loc.line == 3


def test_uneven_scatter_is_rejected_at_the_op() -> None:
    p = T("8x6", "[[data], []]", "partial = sum[model]")
    mid = T("8x6", "[[data], [model]]")
    r = T("8x6", "[[data], []]")
    text = (MESH + f"func.func @f(%a: {p}) -> {r} {{\n"
            f'  %0 = lamina.reduce_scatter %a {{dim = 1 : i64, axes = ["model"]}} : {p} -> {mid}\n'
            f'  %1 = lamina.all_gather %0 {{dim = 1 : i64, axes = ["model"]}} : {mid} -> {r}\n'
            f"  func.return %1 : {r}\n}}\n")
    with pytest.raises(LaminaError) as e:
        verify(parse_text(text, "p.mlir"))
    assert "dimension 1 of size 6 does not split evenly over model" in e.value.message
    assert e.value.loc is not None and e.value.loc.line == 3


def test_two_operand_only_for_all_reduce() -> None:
    a = T("8x16", "[[data], [model]]")
    r = T("8x16", "[[data], []]")
    text = (MESH + f"func.func @f(%a: {a}, %b: {a}) -> {r} {{\n"
            f'  %0, %1 = lamina.all_gather %a, %b {{dim = 1 : i64, axes = ["model"]}} : ({a}, {a}) -> ({r}, {r})\n'
            f"  func.return %0 : {r}\n}}\n")
    with pytest.raises(LaminaError, match="takes exactly one operand"):
        verify(parse_text(text, "p.mlir"))


def test_spmd_exchanges_follow_the_op() -> None:
    # all_to_all on real data: each device's local block is checked against the global layout
    from lamina.backends.arrays import block, distribute
    from lamina.ir.mesh.placement import Mesh
    from lamina.ir.mesh.sharding import Spec

    mesh = Mesh("m", ("data", "model"), (2, 4))
    x = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    src = Spec(((), ("model",)))
    shards = distribute(mesh, src, x)
    for dev in range(8):
        offs, local = block(mesh, src, x.shape, dev)
        np.testing.assert_array_equal(shards[dev], x[:, offs[1]:offs[1] + local[1]])
    text = prog("all_to_all", '{split_dim = 0 : i64, concat_dim = 1 : i64, axes = ["model"]}',
                T("8x16", "[[], [model]]"), T("8x16", "[[model], []]"))
    module = parse_text(text, "p.mlir")
    from lamina.backends.numpy.runner import RunContext, RunStats
    from lamina.backends.numpy.spmd import SpmdRun

    run = SpmdRun(mesh, RunContext(RunStats()))
    op = next(o for o in find_entry(module, None).body.block.ops if o.name == "lamina.all_to_all")
    assert isinstance(op, PlacementOp)
    (out,) = run.run_collective(op, [shards])
    dst = Spec((("model",), ()))
    for dev in range(8):
        offs, local = block(mesh, dst, x.shape, dev)
        np.testing.assert_array_equal(out[dev], x[offs[0]:offs[0] + local[0], :])


def test_replicated_type_with_differing_shards_is_reported() -> None:
    # a verified program whose reduce_sum result has no placement (= replicated) although its
    # operand is split over data: each device sums a different block, so the shards differ
    a = T("8x16", "[[data], []]")
    text = (MESH + f"func.func @f(%a: {a}) -> tensor<f32> {{\n"
            f"  %0 = lamina.reduce_sum %a {{axes = array<i64: 0, 1>}} : ({a}) -> tensor<f32>\n"
            f"  func.return %0 : tensor<f32>\n}}\n")
    module = parse_text(text, "p.mlir")
    verify(module)
    x = np.arange(128, dtype=np.float32).reshape(8, 16)
    func = find_entry(module, None)
    # run_spmd rejects the program up front (its reduce_sum is not placed while its operand is) ...
    with pytest.raises(LaminaError) as e:
        run_spmd(func, [x])
    assert e.value.message == ("the result of lamina.reduce_sum is not placed while its operands "
                               "are; run -p propagate-sharding first")
    # ... and the runner itself still checks the data against the claim, op by op
    from lamina.analysis.placed import placed_mesh
    from lamina.backends.numpy.runner import RunContext, RunStats
    from lamina.backends.numpy.spmd import SpmdRun

    with pytest.raises(LaminaError) as e:
        mesh_op = placed_mesh(func)
        assert mesh_op is not None
        SpmdRun(mesh_op.mesh, RunContext(RunStats())).run(func, [x])
    assert "holds different data" in e.value.message
    assert e.value.loc is not None and e.value.loc.line == 3


def test_unknown_attribute_on_a_collective_is_one_line_naming_it() -> None:
    a = T("8x16", "[[], []]", "partial = sum[model]")
    r = T("8x16", "[[], []]")
    text = (MESH + f"func.func @f(%a: {a}) -> {r} {{\n"
            f'  %0 = lamina.all_reduce %a {{axes = ["model"], algoritm = "ring"}} : {a} -> {r}\n'
            f"  func.return %0 : {r}\n}}\n")
    with pytest.raises(LaminaError) as e:
        parse_text(text, "p.mlir")
    assert e.value.message == ("lamina.all_reduce has no attribute 'algoritm' (it takes axes, "
                               "algorithm, inner, kind)")
    assert e.value.loc is not None and e.value.loc.line == 3


def test_hierarchical_needs_its_inner_group_and_stats_use_it() -> None:
    a = T("8x16", "[[], []]", "partial = sum[model, data]")
    r = T("8x16", "[[], []]")

    def prog(attrs: str) -> str:
        return (MESH + f"func.func @f(%a: {a}) -> {r} {{\n"
                f'  %0 = lamina.all_reduce %a {{axes = ["model", "data"], {attrs}}} : {a} -> {r}\n'
                f"  func.return %0 : {r}\n}}\n")

    for attrs, message in [('algorithm = "hierarchical"', "needs 'inner'"),
                           ('algorithm = "ring", inner = 4 : i64', "'inner' goes only with"),
                           ('algorithm = "hierarchical", inner = 1 : i64', "integer >= 2")]:
        with pytest.raises(LaminaError, match=message):
            verify(parse_text(prog(attrs), "p.mlir"))
    # 8 devices as 2 groups of 4: reduce-scatter in the group (3/4 B), all-reduce across the
    # groups on a quarter (2 * 1/2 * B/4), all-gather in the group (3/4 B) = 1.75 B, the same total
    # as a ring (2 * 7/8 B): hierarchical moves the bytes onto the fast links, it does not send
    # fewer. The stats come from the recorded group size through the cost model's formula.
    from lamina.analysis.comm_cost import sent_bytes
    from lamina.analysis.placed import placed_mesh
    from lamina.backends.numpy.runner import RunContext, RunStats
    from lamina.backends.numpy.spmd import SpmdRun
    from xdsl.dialects.func import FuncOp

    m = parse_text(prog('algorithm = "hierarchical", inner = 4 : i64'), "p.mlir")
    verify(m)
    func = next(op for op in m.walk() if isinstance(op, FuncOp))
    x = np.ones((8, 16), np.float32)
    mesh_op = placed_mesh(func)
    assert mesh_op is not None
    run = SpmdRun(mesh_op.mesh, RunContext(RunStats()))
    run.run(func, [x])
    (c,) = run.collectives
    assert c["algorithm"] == "hierarchical"
    assert c["bytes_per_device"] == int(sent_bytes("all_reduce", "hierarchical", 8, c["payload_bytes"], 4))


# where each backend that runs placed programs registers its collective lowerings (the compiled
# backend runs every device of a placed program in the NumPy interpreter)
LOWERING_MODULES = {"numpy": "lamina.backends.numpy.spmd", "jax": "lamina.backends.jax.collectives",
                    "compiled": "lamina.backends.numpy.spmd", "iree": "lamina.backends.iree.placed"}


@pytest.mark.parametrize("backend", backend_names())
def test_every_collective_kind_has_a_lowering_on_every_placed_backend(backend: str) -> None:
    """A backend that runs placed programs lowers every kind of the collectives table (a new
    record there fails here until each such backend registers it); one that does not run them
    registers none. A backend whose dependencies are missing is skipped."""
    try:
        features = get_backend(backend).features
    except LaminaError as e:
        pytest.skip(str(e))
    if Feature.PLACED not in features:
        assert backend not in LOWERING_MODULES
        return
    lowerings = importlib.import_module(LOWERING_MODULES[backend]).LOWERINGS
    # the linalg export refuses an unlowered reshard with one diagnostic (insert-collectives
    # lowers every reshard first), so IREE's binder needs none: tests/test_linalg_export_spmd.py
    refused = {"iree": ["reshard"]}.get(backend, [])
    assert lowerings.missing() == refused, f"{backend} has no lowering for {lowerings.missing()}"
    assert set(COLLECTIVE_KINDS) == {c.COLLECTIVE.kind for c in COLLECTIVES} == set(OP_CLASS)


def test_placement_op_verifier_is_its_named_checks() -> None:
    """`PlacementOp.verify_` runs `VERIFY_CHECKS` in order, each a small documented function:
    an op breaking two rules reports the one checked first."""
    assert all(c.__doc__ and c.__name__.startswith("check_") for c in VERIFY_CHECKS)
    names = [c.__name__ for c in VERIFY_CHECKS]
    assert names.index("check_algorithm") < names.index("check_axes_on_mesh")
    text = prog("all_reduce", '{axes = ["expert"], algorithm = "magic"}',
                T("8x16", "[[], []]", "partial = sum[model]"), T("8x16", "[[], []]"))
    with pytest.raises(LaminaError) as e:
        verify(parse_text(text, "p.mlir"))
    assert "'algorithm' must be" in e.value.message
