"""The per-device linalg export of placed programs, with IREE as the oracle.

- `iree-opt` parses and verifies the per-device export of the placed samples (after
  propagate-sharding,insert-collectives) and of random placed programs;
- numerically: the per-device module is compiled ONCE, run on IREE once per device (threads),
  its `lamina_collectives` imports bound in Python (`lamina.backends.iree.placed`), and the
  assembled global outputs match the NumPy interpreter's single-device run (`run_function`):
  the placed samples, random placed programs, and random reshards as insert-collectives lowers
  them (all_gather, all_to_all, all_slice, reduce_scatter);
- a pipeline-staged function exports one program per stage (its arguments, ops and results;
  a permute as a send on one stage and a receive on the other, every call in order through a
  token), two exports are the same bytes, and the two stage modules run on IREE equal the SPMD
  interpreter; the binder's meeting points are group-local (a group meets while another
  stage's devices never call), a receive gives up rather than hang, and a failed device wakes
  the receives waiting on it;
- a partly placed function, a module with two meshes, an unlowered reshard, a staged function
  exported as one SPMD module and a position-dependent op on a split dimension are one located
  diagnostic each.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lamina
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lamina.analysis.linalg import spmd
from lamina.analysis.linalg.export import export_function, export_module, wrap_module
from lamina.analysis.placed import placed_mesh
from lamina.backends.compare import compare
from lamina.backends.inputs import random_inputs
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import run_function
from lamina.backends.numpy.spmd import run_spmd
from lamina.cli.run import main as run_main
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.core.dtypes import tensor_dtype
from lamina.ir.mesh.collective_kinds import ALL_REDUCE, COLLECTIVE_PERMUTE, RESHARD, Collective
from lamina.ir.mesh.placement import MeshOp
from lamina.ir.text.source import make_context, parse_text, verify
from lamina.passes.pipeline import build_pipeline, run_pipeline
from strategies import examples
from strategies.programs import programs
from test_insert_collectives import reshards
from test_spmd import place_args, placed_or_scan_refused
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.dialects.func import FuncOp

ic = pytest.importorskip("iree.compiler")
rt = pytest.importorskip("iree.runtime")
placed = pytest.importorskip("lamina.backends.iree.placed")

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
PLACED_SAMPLES = ("mlp_megatron", "mlp_dp_forward", "mlp_dp_training_step", "gpt2_block_parallel")
IREE_OPT = Path(sys.executable).parent / "iree-opt"
IREE_FLAGS = ["--iree-llvmcpu-target-cpu=host", "--iree-input-demote-f64-to-f32=false"]
SPLIT = "propagate-sharding,insert-collectives{target=h100-cluster}"
# what the per-device export may refuse in a random placed program: what the single-device
# export refuses (a scan, a dtype)
REFUSALS = r"error: lamina\.\w+: no linalg lowering for "
MESHES = ([("a", 2), ("b", 4)], [("a", 2), ("b", 2), ("c", 2)])


def _split(text: str, name: str, pipeline: str = SPLIT) -> ModuleOp:
    ctx = make_context()
    m = parse_text(text, name, ctx)
    verify(m)
    run_pipeline(ctx, m, build_pipeline(pipeline))
    verify(m)
    return m


def _iree_opt(text: str) -> str:
    res = subprocess.run([str(IREE_OPT), "-"], input=text, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def _run_per_device(m: ModuleOp, cases: list[tuple[FuncOp, list[np.ndarray]]]
                    ) -> list[list[np.ndarray]]:
    """Every function of `m` (one compile of the module) on IREE, once per device."""
    mesh = placed_mesh(cases[0][0])
    assert mesh is not None
    device = spmd.PerDevice(mesh.mesh)
    parts = [export_function(f, device=device) for f, _ in cases]
    text = wrap_module(device.decl_lines + parts, spmd.header(mesh.mesh))
    vmfb = ic.compile_str(text, target_backends=["llvm-cpu"], extra_args=IREE_FLAGS)
    config = rt.Config("local-task")
    vm_module = rt.VmModule.copy_buffer(config.vm_instance, vmfb)
    decls = list(device.decls.values())
    return [placed.run_devices(f, mesh.mesh, config, vm_module, decls, xs) for f, xs in cases]


def _assert_matches(func: FuncOp, inputs: list[np.ndarray], got: list[np.ndarray],
                    what: str, exact: bool = False) -> None:
    want = run_function(func, inputs).outputs
    for i, (g, w, t) in enumerate(zip(got, want, func.function_type.outputs.data, strict=True)):
        assert g.shape == w.shape, (what, i, g.shape, w.shape)
        d = compare(f"out{i}", tensor_dtype(t), g.astype(w.dtype), w, exact=exact)
        assert d.ok, f"{what}: {d.line()}"


@pytest.mark.parametrize("name", PLACED_SAMPLES)
def test_placed_samples_export_per_device_and_iree_opt_verifies(name: str) -> None:
    m = _split((SAMPLES / f"{name}.mlir").read_text(encoding="utf-8"), f"{name}.mlir")
    out = _iree_opt(export_module(m))
    assert "func.func private @lamina_collectives." in out or "func.call" not in out


def test_megatron_local_shapes_and_its_one_all_reduce_call() -> None:
    m = _split((SAMPLES / "mlp_megatron.mlir").read_text(encoding="utf-8"), "mlp_megatron.mlir")
    text = export_module(m)
    # x: 2048x1024 split [data] on data = 2; w1: 1024x4096 split [model] on model = 4
    assert "func.func @mlp_megatron(%arg0: tensor<1024x1024xf32>, %arg1: tensor<1024x1024xf32>" \
        in text, text[:2000]
    assert "%lamina_device: tensor<2xi64>) -> (tensor<1024x1024xf32>)" in text
    assert text.count("func.call @lamina_collectives.all_reduce_0(") == 1
    assert re.search(r'lamina.collective = \{kind = "all_reduce", axes = \["model"\], '
                     r'reduce = "sum", mesh_axes = \["data", "model"\]', text)
    assert "// lamina: per-device program of mesh @m [data = 2, model = 4]" in text


@pytest.mark.parametrize("name", PLACED_SAMPLES)
def test_placed_samples_run_per_device_on_iree_as_on_the_interpreter(name: str) -> None:
    m = _split((SAMPLES / f"{name}.mlir").read_text(encoding="utf-8"), f"{name}.mlir")
    func = find_entry(m, None)
    inputs = random_inputs(func, 0)
    got = _run_per_device(m, [(func, inputs)])[0]
    _assert_matches(func, inputs, got, name)


def test_lamina_run_backend_iree_checks_a_placed_sample(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    assert run_main([str(SAMPLES / "mlp_dp_training_step.mlir"), "-p", SPLIT,
                     "--backend", "iree", "--check"]) == 0
    out, err = capsys.readouterr()
    assert out.count(": ok ") >= 4 and "error" not in err, (out, err)


def test_a_compiled_placed_program_makes_its_device_contexts_once(monkeypatch: pytest.MonkeyPatch
                                                                    ) -> None:
    """Compile once, run many: the per-device IREE contexts (and their bound collectives) are
    made by lamina.compile, so later calls make none and give the first call's outputs."""
    m = _split((SAMPLES / "mlp_dp_forward.mlir").read_text(encoding="utf-8"), "s.mlir")
    exe = lamina.compile(m, backend="iree")
    inputs = random_inputs(find_entry(m, None), 0)
    first = exe(inputs).outputs
    made: list[object] = []
    real = rt.SystemContext
    monkeypatch.setattr(rt, "SystemContext", lambda *a, **k: made.append(1) or real(*a, **k))
    for _ in range(2):
        again = exe(inputs).outputs
        assert all(np.array_equal(a, b) for a, b in zip(first.values(), again.values(), strict=True))
    assert made == []


@settings(max_examples=examples(3), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(progs=st.lists(programs(min_ops=2, max_ops=8, dtypes=("bf16", "f32", "f64")), min_size=4,
                      max_size=4),
       mesh=st.sampled_from(MESHES), data=st.data())
def test_random_placed_programs_run_per_device_on_iree(progs, mesh, data) -> None:
    """Four random programs a draw, placed at random on one mesh and split, exported into one
    module (iree-opt verifies it, one compile) and run per device; a program whose export is
    refused is left out after the refusal is checked."""
    ctx = make_context()
    module = ModuleOp([])
    cases = []
    for k, prog in enumerate(progs):
        m = parse_text(prog.text, "gen.mlir", ctx)
        place_args(m, mesh, data.draw)
        verify(m)
        if not placed_or_scan_refused(lambda m=m: lamina.apply(m, SPLIT), prog.text):
            continue
        try:
            export_module(m)
        except LaminaError as e:
            assert re.search(REFUSALS, str(e)), str(e)
            continue
        func = find_entry(m, None)
        func.sym_name = StringAttr(f"p{k}")
        cases.append((func, list(prog.inputs), prog.text))
        if not module.ops:
            mesh_op = placed_mesh(find_entry(m, None))
            assert mesh_op is not None
            mesh_op.detach()
            module.body.block.add_op(mesh_op)
        func.detach()
        module.body.block.add_op(func)
    if not cases:
        return
    _iree_opt(export_module(module))
    got = _run_per_device(module, [(f, xs) for f, xs, _ in cases])
    for (f, xs, text), g in zip(cases, got, strict=True):
        _assert_matches(f, xs, g, text)


@settings(max_examples=examples(4), deadline=None)
@given(st.lists(reshards(), min_size=6, max_size=6))
def test_random_reshards_as_collectives_on_iree(cases) -> None:
    """Reshards lowered by insert-collectives (every kind but reshard itself), the cases on one
    mesh in one module: the per-device run gives the input back."""
    by_mesh: dict[str, list[tuple[str, str]]] = {}
    for decl, tin, tout in cases:
        by_mesh.setdefault(decl, []).append((tin, tout))
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    for decl, pairs in by_mesh.items():
        text = decl + "".join(
            f"func.func @f{k}(%x: {tin}) -> {tout} {{\n  %r = lamina.reshard %x : {tin} -> "
            f"{tout}\n  func.return %r : {tout}\n}}\n" for k, (tin, tout) in enumerate(pairs))
        m = _split(text, "r.mlir", "insert-collectives{target=h100-node}")
        funcs = [op for op in m.ops if isinstance(op, FuncOp)]
        got = _run_per_device(m, [(f, [x]) for f in funcs])
        for (tin, tout), g in zip(pairs, got, strict=True):
            if "partial" in tin:
                np.testing.assert_allclose(g[0], x, rtol=1e-6, atol=1e-6, err_msg=tin + tout)
            else:
                np.testing.assert_array_equal(g[0], x, err_msg=tin + tout)


POSITIONAL = {   # position-dependent ops on a split dimension: offsets from %lamina_device
    "dropout, rows split over both axes": """lamina.mesh @m [a = 2, b = 2]
func.func @f(%x: tensor<8x16xf32, #lamina.place<@m, [[b, a], []]>>) -> tensor<8x16xf32, #lamina.place<@m, [[b, a], []]>> {
  %r = lamina.dropout %x {rate = 0.5 : f64, seed = 7 : i64} : tensor<8x16xf32, #lamina.place<@m, [[b, a], []]>>
  func.return %r : tensor<8x16xf32, #lamina.place<@m, [[b, a], []]>>
}
""",
    "gather on a vocabulary-split table": """lamina.mesh @m [a = 4]
func.func @f(%t: tensor<16x8xf32, #lamina.place<@m, [[a], []]>>, %i: tensor<6xi64>) -> tensor<6x8xf32> {
  %r = lamina.gather %t, %i {axis = 0 : i64} : (tensor<16x8xf32, #lamina.place<@m, [[a], []]>>, tensor<6xi64>) -> tensor<6x8xf32>
  func.return %r : tensor<6x8xf32>
}
""",
}


@pytest.mark.parametrize("case", sorted(POSITIONAL))
def test_position_dependent_ops_on_split_dimensions_are_the_interpreters(case: str) -> None:
    """Dropout's mask is a function of the GLOBAL element index and a split table's gather looks
    up only its block's rows: exact (the same bits, the same rows) device by device."""
    m = _split(POSITIONAL[case], "p.mlir")
    func = find_entry(m, None)
    inputs = random_inputs(func, 0)
    if len(inputs) > 1:
        inputs[1] = np.array([0, 15, 4, 9, 3, 12], dtype=np.int64)
    got = _run_per_device(m, [(func, inputs)])[0]
    _assert_matches(func, inputs, got, case, exact=True)


def test_every_collective_kind_but_reshard_has_a_binding() -> None:
    """reshard is refused by the export (insert-collectives lowers it first)."""
    assert placed.LOWERINGS.missing() == [RESHARD.kind]


X0, X1, W1 = ("tensor<4x8xf32, #lamina.place<@m, [[data], []], stage = pp[0]>>",
              "tensor<4x8xf32, #lamina.place<@m, [[data], []], stage = pp[1]>>",
              "tensor<8x8xf32, #lamina.place<@m, [[], []], stage = pp[1]>>")
STAGED = f"""lamina.mesh @m [data = 2, pp = 2]
func.func @f(%x: {X0}, %w: {W1}) -> ({X1}, {X0}) {{
  %y = lamina.exp %x : {X0}
  %t = lamina.collective_permute %y {{axes = ["pp"]}} : {X0} -> {X1}
  %u = lamina.matmul %t, %w : ({X1}, {W1}) -> {X1}
  %v = lamina.collective_permute %u {{axes = ["pp"]}} : {X1} -> {X0}
  %z = lamina.add %v, %y : {X0}
  func.return %u, %z : {X1}, {X0}
}}
"""


def _stage_texts(m: ModuleOp) -> list[str]:
    func = find_entry(m, None)
    mesh = placed_mesh(func)
    assert mesh is not None
    texts = []
    for stage in spmd.function_stages(func, mesh.mesh):
        device = spmd.PerDevice(mesh.mesh, stage)
        body = export_function(func, device=device)
        texts.append(wrap_module(device.decl_lines + [body], spmd.header(mesh.mesh, stage)))
    return texts


def test_a_staged_function_exports_one_program_per_stage() -> None:
    """Stage 0 takes %x, sends exp(x), receives the product back and returns the sum; stage 1
    takes %w, receives, multiplies, sends and returns the product; each stage's calls chain
    their order token from %lamina_device."""
    zero, one = _stage_texts(lamina.parse(STAGED, "s"))
    assert _stage_texts(lamina.parse(STAGED, "s")) == [zero, one]   # the same bytes
    assert "every device of stage pp[0] runs" in zero and "stage pp[1]" in one
    assert "func.func @f(%arg0: tensor<2x8xf32>, %lamina_device: tensor<2xi64>) -> " \
        "(tensor<2x8xf32>)" in zero
    assert "func.func @f(%arg1: tensor<8x8xf32>, %lamina_device: tensor<2xi64>) -> " \
        "(tensor<2x8xf32>)" in one
    send = re.search(r"(%v\d+) = func.call @lamina_collectives.collective_permute_0\(%v\d+, "
                     r"%lamina_device\) : \(tensor<2x8xf32>, tensor<2xi64>\) -> tensor<1xi64>",
                     zero)
    assert send, zero
    assert re.search(rf"= func.call @lamina_collectives.collective_permute_1\({send.group(1)}\) "
                     r": \(tensor<1xi64>\) -> tensor<2x8xf32>", zero), zero
    assert 'role = "send", source = 0 : i64, target = 1 : i64' in zero
    assert 'role = "recv", source = 1 : i64, target = 0 : i64' in zero
    assert "lamina.matmul" not in zero and "linalg.matmul" in one and "math.exp" not in one
    assert zero.count("func.call") == one.count("func.call") == 2


def test_staged_modules_run_per_stage_on_iree_as_on_the_spmd_interpreter() -> None:
    m = lamina.parse(STAGED, "s")
    func = find_entry(m, None)
    mesh = placed_mesh(func)
    assert mesh is not None
    config = rt.Config("local-task")
    programs = []
    for stage, text in zip(spmd.function_stages(func, mesh.mesh), _stage_texts(m), strict=True):
        vmfb = ic.compile_str(text, target_backends=["llvm-cpu"], extra_args=IREE_FLAGS)
        device = spmd.PerDevice(mesh.mesh, stage)
        export_function(func, device=device)
        programs.append(placed.StageModule(
            stage, rt.VmModule.copy_buffer(config.vm_instance, vmfb),
            tuple(device.decls.values())))
    group = placed.DeviceGroup(mesh.mesh, config, programs)
    inputs = random_inputs(func, 0)
    for _ in range(2):   # the meeting points and mailboxes are fresh for each run
        got = group.run(func, inputs)
        for g, w in zip(got, run_spmd(func, inputs).outputs, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _decl(kind: Collective, axes: tuple[str, ...], role: str = "", **ints: int) -> spmd.Declaration:
    return spmd.Declaration(f"lamina_collectives.{kind.kind}_0", kind, axes, "sum", ints, role)


def _threads(fns: dict[int, Callable[[], Any]]) -> dict[int, Any]:
    """Run each device's function in its own thread; each one's result or exception."""
    out: dict[int, Any] = {}

    def main(dev: int, fn: Callable[[], Any]) -> None:
        try:
            out[dev] = fn()
        except Exception as e:  # noqa: BLE001 - the test reads it
            out[dev] = e

    ts = [threading.Thread(target=main, args=(d, f)) for d, f in fns.items()]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=30)
    return out


def test_exchange_meets_by_group_and_pairs_permutes() -> None:
    """On data x pp 2 x 2, stage 0's devices (0, 2) all-reduce over data while stage 1's never
    call (the old barrier of all devices would wait forever); a send from device 0 is device
    1's receive (its pp peer), whichever comes first."""
    ex = placed.Exchange(MeshOp("m", [("data", 2), ("pp", 2)]).mesh)
    ar = _decl(ALL_REDUCE, ("data",))
    got = _threads({0: lambda: ex.run(ar, 0, np.ones(3)), 2: lambda: ex.run(ar, 2, np.ones(3))})
    assert all(np.array_equal(got[d], np.full(3, 2.0)) for d in (0, 2)), got
    recv = _decl(COLLECTIVE_PERMUTE, ("pp",), spmd.RECV, source=0, target=1)
    send = _decl(COLLECTIVE_PERMUTE, ("pp",), spmd.SEND, source=0, target=1)
    got = _threads({1: lambda: ex.recv(recv, 1), 0: lambda: ex.send(send, 0, np.arange(4.0))})
    assert np.array_equal(got[1], np.arange(4.0)), got


def test_a_receive_gives_up_and_a_failure_wakes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    ex = placed.Exchange(MeshOp("m", [("pp", 2)]).mesh)
    recv = _decl(COLLECTIVE_PERMUTE, ("pp",), spmd.RECV, source=0, target=1)
    monkeypatch.setattr(placed, "BARRIER_SECONDS", 0.2)
    with pytest.raises(LaminaError, match="device 1 received nothing from device 0 in 0.2 s"):
        ex.recv(recv, 1)
    monkeypatch.setattr(placed, "BARRIER_SECONDS", 60.0)
    waiting = threading.Thread(target=lambda: ex.abort(0))
    timer = threading.Timer(0.2, waiting.start)
    timer.start()
    with pytest.raises(placed.Broken, match="device 0 failed"):
        ex.recv(recv, 1)
    timer.join()
    waiting.join()


T = "tensor<8x16xf32, #lamina.place<@m, [[a], []]>>"
R = "tensor<8x16xf32, #lamina.place<@m, [[], []]>>"
BAD = {
    "partly placed": (f"""lamina.mesh @m [a = 2]
func.func @f(%x: {T}, %t: tensor<16x8xf32>) -> tensor<8x8xf32> {{
  %z = lamina.matmul %x, %t : ({T}, tensor<16x8xf32>) -> tensor<8x8xf32>
  func.return %z : tensor<8x8xf32>
}}
""", "r:3:3: error: %z = lamina.matmul is not placed", "run -p propagate-sharding first"),
    "two meshes": (f"""lamina.mesh @m [a = 2]
lamina.mesh @n [a = 4]
func.func @f(%x: {T}) -> {T} {{
  func.return %x : {T}
}}
""", "r:2:1: error: lamina.mesh: the per-device export takes one mesh per module", ""),
    "reshard": (f"""lamina.mesh @m [a = 2]
func.func @f(%x: {T}) -> {R} {{
  %r = lamina.reshard %x : {T} -> {R}
  func.return %r : {R}
}}
""", "r:3:3: error: lamina.reshard: not lowered to collectives", "insert-collectives"),
    "staged as one module": (STAGED, "r:4:3: error: lamina.collective_permute: a pipeline-staged "
                             "function exports one program per stage", "--backend iree"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_what_the_per_device_export_refuses_is_one_located_diagnostic(case: str) -> None:
    text, where, hint = BAD[case]
    m = lamina.parse(text, "r")
    with pytest.raises(LaminaError) as e:
        export_module(m)
    msg = str(e.value)
    assert msg.count("error:") == 1 and where in msg and hint in msg, msg
