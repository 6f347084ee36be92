"""`lamina.compile`: compiled once, called many times, the same bits as `lamina.run`.

Random programs (before and after fusion) are compiled once per backend and called on fresh
inputs several times; every call equals a fresh `lamina.run` of the same inputs, and the
interpreter's full run of every op (the backend's own runners, no prepared step), bit for bit on
the NumPy backends. The executable owns its program (a module changed after compile does not change
it), donation updates the caller's arrays in place and is refused where it cannot, bad calls are
diagnostics that leave the executable usable, and results do not depend on `threads`.
"""

from __future__ import annotations

import os
from typing import Any

import lamina
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lamina.backends.interface import find_entry
from lamina.backends.numpy import program as numpy_program
from lamina.backends.numpy.runner import run_function
from lamina.backends.registry import get_backend
from lamina.ir.buffers.updates import updates_of
from lamina.ir.ops.fused import FusedOp
from sample_files import ROOT
from strategies import examples
from strategies.programs import GeneratedProgram, programs
from support import count_calls
from xdsl.dialects.builtin import ModuleOp

SETTINGS = settings(max_examples=examples(6), deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# the 7-op MLP block with a layernorm, shared with benchmarks/bench_overhead.py's `mlp7` row
with open(os.path.join(ROOT, "samples", "mlp_layernorm_block.mlir")) as _f:
    MLP = _f.read()

STEP = """
func.func @loss(%x: tensor<8x16xf32>, %w: tensor<16x4xf32>, %b: tensor<4xf32>) -> tensor<f32> {
  %h = lamina.matmul %x, %w : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  %hb = lamina.add %h, %b : (tensor<8x4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  %t = lamina.tanh %hb : tensor<8x4xf32>
  %s = lamina.mul %t, %t : tensor<8x4xf32>
  %l = lamina.reduce_mean %s {axes = array<i64: 0, 1>, keepdims = false} : (tensor<8x4xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
"""


def _fresh(prog: GeneratedProgram, seed: int) -> list[np.ndarray]:
    """New inputs of the program's argument types (the generator's range, [-3, 3])."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(-3, 3, a.shape).astype(a.dtype) if a.dtype.kind == "f" else a.copy()
            for a in prog.inputs]


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
        assert np.array_equal(a[k], b[k], equal_nan=True), k


@pytest.mark.parametrize("backend", ["numpy", "compiled"])
@SETTINGS
@given(prog=programs(min_ops=2, max_ops=10, dtypes=("f32", "f64")), fuse=st.booleans())
def test_executable_calls_equal_lamina_run(backend: str, prog: GeneratedProgram,
                                           fuse: bool) -> None:
    module = lamina.parse(prog.text)
    if fuse:
        lamina.apply(module, "fuse-elementwise")
    exe = lamina.compile(module, backend=backend)
    func = find_entry(module, None)
    runners = get_backend(backend).op_runners   # type: ignore[attr-defined]
    for seed in range(4):
        inputs = prog.inputs if seed == 0 else _fresh(prog, seed)
        got = exe(inputs).outputs
        _same(got, lamina.run(module, inputs, backend=backend).outputs)
        full = run_function(func, inputs, runners=runners).outputs   # every op the full way
        _same(got, dict(zip(exe.output_names, full, strict=True)))


def test_compiled_once_steps_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compilation builds the steps; 100 calls build nothing more."""
    built = []
    real = numpy_program._Builder.block

    def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        built.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(numpy_program._Builder, "block", counting)
    module = lamina.apply(lamina.parse(MLP), "fuse-elementwise")
    exe = lamina.compile(module)
    n = len(built)
    assert n >= 1
    x = lamina.inputs(module)
    for _ in range(100):
        exe(x)
    assert len(built) == n


def test_stats_are_the_checked_calls_and_times_are_per_call() -> None:
    module = lamina.apply(lamina.parse(MLP), "fuse-elementwise")
    exe = lamina.compile(module)
    x = lamina.inputs(module)
    first, second = exe(x), exe(x)
    assert first.stats["kernels"] == second.stats["kernels"] == lamina.run(module, x).stats["kernels"]
    for r in (first, second):
        assert r.stats["compile_seconds"] == exe.compile_seconds > 0 and r.stats["run_seconds"] > 0


@pytest.mark.parametrize("warmup", [True, False])
def test_the_checked_call_is_made_once_at_compile_unless_told_not(
        monkeypatch: pytest.MonkeyPatch, warmup: bool) -> None:
    """With `warmup` (the default) the checked call (checked execution, every statistic) happens
    inside `lamina.compile`, on zeros, and no call repeats it; with `warmup=False` the first call
    is the checked one, on its inputs (`lamina.run`'s single call)."""
    checked: list[int] = []
    real = numpy_program.NumpyProgram._checked_run

    def counting(self: numpy_program.NumpyProgram, arrays: list[np.ndarray]) -> Any:
        checked.append(int(any(a.any() for a in arrays)))
        return real(self, arrays)

    monkeypatch.setattr(numpy_program.NumpyProgram, "_checked_run", counting)
    module = lamina.apply(lamina.parse(MLP), "fuse-elementwise")
    exe = lamina.compile(module, warmup=warmup)
    assert checked == ([0] if warmup else [])
    x = lamina.inputs(module)
    runs = [exe(x) for _ in range(5)]
    assert checked == ([0] if warmup else [1])
    assert all(r.stats["kernels"] == 2 for r in runs)
    for r in runs[1:]:
        _same(r.outputs, runs[0].outputs)


def test_the_executable_owns_its_program() -> None:
    """`lamina.apply` rewrites a module in place; an executable compiled before keeps running the
    program it was compiled from."""
    module = lamina.parse(MLP)
    x = lamina.inputs(module)
    before = lamina.compile(module)
    lamina.apply(module, "fuse-elementwise")
    after = lamina.compile(module)
    assert before(x).stats["kernels"] == 7 and after(x).stats["kernels"] < 7
    _same(before(x).outputs, lamina.run(lamina.parse(MLP), x).outputs)


@pytest.mark.parametrize("backend", ["numpy", "compiled"])
def test_results_do_not_depend_on_threads(backend: str) -> None:
    module = lamina.apply(lamina.parse(MLP), "fuse-elementwise")
    x = lamina.inputs(module, seed=3)
    one = lamina.compile(module, backend=backend, threads=1, tile_bytes=512)
    two = lamina.compile(module, backend=backend, threads=2, tile_bytes=512)
    for _ in range(3):
        _same(one(x).outputs, two(x).outputs)


def test_inputs_by_name_by_position_and_as_arguments() -> None:
    module = lamina.parse(MLP)
    exe = lamina.compile(module)
    x = lamina.inputs(module)
    order = [x[n] for n in exe.arg_names]
    _same(exe(x).outputs, exe(order).outputs)
    _same(exe(x).outputs, exe(*order).outputs)
    assert exe.arg_names == ["x", "w1", "b1", "w2", "b2"] and exe.output_names == ["y"]


def test_bad_calls_are_diagnostics_and_the_executable_stays_usable() -> None:
    module = lamina.parse(MLP, "mlp.mlir")
    exe = lamina.compile(module)
    x = lamina.inputs(module)
    good = exe(x).outputs["out0"]
    missing = {k: v for k, v in x.items() if k != "b2"}
    with pytest.raises(lamina.LaminaError, match=r"missing: b2, unknown: none"):
        exe(missing)
    with pytest.raises(lamina.LaminaError, match=r"missing: none, unknown: bias"):
        exe({**x, "bias": x["b1"]})
    with pytest.raises(lamina.LaminaError, match=r"@mlp takes 5 inputs \(x, w1, b1, w2, b2\), got 2"):
        exe([x["x"], x["w1"]])
    with pytest.raises(lamina.LaminaError, match=r"input 'w1' has shape \(64, 32\)"):
        exe({**x, "w1": x["w1"][:, :32]})
    with pytest.raises(lamina.LaminaError, match=r"input 'x' has dtype complex128"):
        exe({**x, "x": x["x"].astype(np.complex128)})
    assert np.array_equal(exe(x).outputs["out0"], good)


def _state(module: ModuleOp, seed: int) -> dict[str, np.ndarray]:
    """Random inputs of the step, with second moments made non-negative (as Adam's are)."""
    x = lamina.inputs(module, "loss_step", seed=seed)
    return {k: (np.abs(v) if k.startswith("v_") else v) for k, v in x.items()}


def _step_module() -> ModuleOp:
    return lamina.apply(lamina.parse(STEP), "derive-backward{data=x},append-optimizer{kind=adamw}")


def test_donation_updates_the_callers_arrays_in_place() -> None:
    module = _step_module()
    x = _state(module, 1)
    want = lamina.run(module, {k: v.copy() for k, v in x.items()}, entry="loss_step")
    exe = lamina.compile(module, "loss_step", donate=True)
    assert set(exe.donated) >= {"w", "b"}
    given = {k: v.copy() for k, v in x.items()}
    run = exe(given)
    _same(run.outputs, want.outputs)
    func = find_entry(module, "loss_step")
    names = exe.arg_names
    for r, a in updates_of(func).items():
        assert run.outputs[f"out{r}"] is given[names[a]]   # the input array, updated
    assert not np.array_equal(given["w"], x["w"])


def test_donation_is_refused_where_it_cannot_be_in_place() -> None:
    module = _step_module()
    with pytest.raises(lamina.LaminaError, match=r"no result of @loss_step updates argument 'x'"):
        lamina.compile(module, "loss_step", donate=("x",))
    with pytest.raises(lamina.LaminaError, match=r"has no argument 'nope'"):
        lamina.compile(module, "loss_step", donate=("nope",))
    with pytest.raises(lamina.LaminaError, match=r"has no 'lamina.updates' attribute"):
        lamina.compile(lamina.parse(MLP), donate=True)
    exe = lamina.compile(module, "loss_step", donate=("w",))
    x = _state(module, 2)
    with pytest.raises(lamina.LaminaError, match=r"donated input 'w' .*not C-contiguous"):
        exe({**x, "w": np.asfortranarray(x["w"])})
    ro = x["w"].copy()
    ro.flags.writeable = False
    with pytest.raises(lamina.LaminaError, match=r"donated input 'w' .*read-only"):
        exe({**x, "w": ro})
    with pytest.raises(lamina.LaminaError, match=r"donated input 'w' .*its dtype is float64, the argument stores float32"):
        exe({**x, "w": x["w"].astype(np.float64)})
    shared = np.ascontiguousarray(x["w"])
    with pytest.raises(lamina.LaminaError, match=r"donated input 'w' .*shares memory with input"):
        exe({**x, "w": shared, "m_w": shared})
    exe({k: v.copy() for k, v in x.items()})   # still usable


# ---- the JAX backend: one XLA executable per Executable ------------------------------------------

def _jax():  # type: ignore[no-untyped-def]
    return pytest.importorskip("jax")


def test_jax_traces_and_compiles_once(monkeypatch: pytest.MonkeyPatch) -> None:
    _jax()
    from lamina.backends.jax import lower

    traces = []
    real = lower.Lowering.__call__

    def counting(self, *args):  # type: ignore[no-untyped-def]
        traces.append(1)
        return real(self, *args)

    monkeypatch.setattr(lower.Lowering, "__call__", counting)
    module = lamina.apply(lamina.parse(MLP), "fuse-elementwise")
    exe = lamina.compile(module, backend="jax")
    x = lamina.inputs(module)
    want = lamina.run(module, x).outputs["out0"]
    got = [exe(x).outputs["out0"] for _ in range(100)][-1]
    assert len(traces) == 1
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_jax_arrays_stay_on_their_devices_and_donation_deletes_them() -> None:
    jax = _jax()
    module = _step_module()
    x = _state(module, 1)
    want = lamina.run(module, x, entry="loss_step").outputs
    exe = lamina.compile(module, "loss_step", backend="jax", donate=True)
    with jax.enable_x64(True):
        on_device = {k: jax.device_put(v) for k, v in x.items()}
    run = exe(on_device)
    assert all(isinstance(v, jax.Array) for v in run.outputs.values())
    for k, v in run.outputs.items():
        np.testing.assert_allclose(np.asarray(v), want[k], rtol=2e-5, atol=1e-6)
    assert on_device["w"].is_deleted()
    with pytest.raises(RuntimeError):
        np.asarray(on_device["w"])
    with pytest.raises(lamina.LaminaError, match=r"input 'w' is a jax.Array that was donated"):
        exe(on_device)
    with pytest.raises(lamina.LaminaError, match=r"input 'x' is a jax.Array of shape \(8, 8\)"):
        exe({**{k: jax.device_put(v) for k, v in x.items()}, "x": jax.numpy.zeros((8, 8))})
    again = exe({k: jax.device_put(v) for k, v in x.items()})   # still usable
    np.testing.assert_allclose(np.asarray(again.outputs["out0"]), want["out0"], rtol=2e-5)


# ---- the static memory plan ----------------------------------------------------------------------

CHAIN = "\n".join(
    ["func.func @chain(%x: tensor<64x64xf32>, %y: tensor<64x64xf32>) -> tensor<64x64xf32> {",
     "  %v0 = lamina.add %x, %y : tensor<64x64xf32>"]
    + [f"  %v{i} = lamina.{op} %v{i - 1}, %{'x' if i % 2 else 'y'} : tensor<64x64xf32>"
       for i, op in zip(range(1, 30), ["mul", "add", "sub", "max"] * 8, strict=False)]
    + ["  func.return %v29 : tensor<64x64xf32>", "}"])


def _steady_bytes(exe: lamina.Executable, x: dict[str, np.ndarray]) -> int:
    import tracemalloc

    exe(x)
    exe(x)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        run = exe(x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del run
    return peak - before


@pytest.mark.parametrize("backend", ["numpy", "compiled"])
def test_a_steady_state_call_allocates_only_its_outputs(backend: str) -> None:
    """Every intermediate of the 30-op chain lives in the arena: a call allocates its one output
    (16 KiB) and Python's small objects, not 30 intermediates (480 KiB)."""
    module = lamina.parse(CHAIN)
    exe = lamina.compile(module, backend=backend)
    x = lamina.inputs(module)
    arena = exe(x).stats["arena"]
    assert arena["values"] == 29 and not arena["temporaries"] and not arena["kernel_results"]
    assert arena["arena_bytes"]["hbm"] <= 1.1 * arena["peak_live_bytes"]["hbm"]
    assert _steady_bytes(exe, x) < 64 * 64 * 4 + 8 * 1024


def test_kernels_without_an_out_form_are_the_only_temporaries() -> None:
    """The MLP's layernorm and gelu have no out= form: they are listed, and a call allocates at
    most their results besides its output."""
    module = lamina.parse(MLP)
    exe = lamina.compile(module)
    x = lamina.inputs(module)
    arena = exe(x).stats["arena"]
    assert sorted(t["op"] for t in arena["temporaries"]) == ["lamina.gelu", "lamina.layernorm"]
    temps = sum(t["bytes"] for t in arena["temporaries"])
    assert _steady_bytes(exe, x) < 16 * 64 * 4 + temps + 8 * 1024


@SETTINGS
@given(prog=programs(min_ops=2, max_ops=12, dtypes=("f32", "f64", "bf16"),
                     families=("elementwise", "layout", "broadcast", "select", "layout_between")))
def test_arena_steps_never_clobber_a_live_value(prog: GeneratedProgram) -> None:
    """Views, in-place writes and reused offsets: many calls on fresh inputs equal the checked
    call of each (which allocates every value) bit for bit."""
    module = lamina.parse(prog.text)
    exe = lamina.compile(module)
    for seed in range(3):
        inputs = _fresh(prog, seed + 10)
        _same(exe(inputs).outputs, lamina.run(module, inputs).outputs)


VIEW_OF_ARENA = """
func.func @f(%a: tensor<8x8xf32>, %b: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x4xf32>,
                                                          tensor<2x8x8xf32>, tensor<8x8xf32>) {
  %m = lamina.matmul %a, %b : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %t = lamina.transpose %m {permutation = array<i64: 1, 0>} : tensor<8x8xf32>
  %n = lamina.matmul %b, %a : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %s = lamina.slice %n {start = array<i64: 0, 2>, limit = array<i64: 8, 6>} : (tensor<8x8xf32>) -> tensor<8x4xf32>
  %e = lamina.exp %a : tensor<8x8xf32>
  %c = lamina.broadcast_in_dim %e {broadcast_dimensions = array<i64: 1, 2>} : (tensor<8x8xf32>) -> tensor<2x8x8xf32>
  %x = lamina.mul %b, %b : tensor<8x8xf32>
  %z = lamina.mul %x, %a : tensor<8x8xf32>
  func.return %t, %s, %c, %z : tensor<8x8xf32>, tensor<8x4xf32>, tensor<2x8x8xf32>, tensor<8x8xf32>
}
"""


@pytest.mark.parametrize("backend", ["numpy", "compiled"])
def test_a_returned_layout_result_keeps_its_operands_bytes(backend: str) -> None:
    """A transpose, slice or broadcast that is returned is a view of its operand (no arena slot
    to copy into), so the operand's buffer must stay out of the arena: else a later kernel of
    the same call writes over the caller's result (the GPT-2 step's fused AdamW read its
    transposed gradients that way), and the next call over the last call's results."""
    module = lamina.parse(VIEW_OF_ARENA)
    exe = lamina.compile(module, backend=backend)
    rng = np.random.default_rng(0)
    first = [rng.standard_normal((8, 8)).astype(np.float32) for _ in range(2)]
    got = exe(first).outputs
    _same(got, lamina.run(module, first).outputs)
    kept = {k: v.copy() for k, v in got.items()}
    exe([rng.standard_normal((8, 8)).astype(np.float32) for _ in range(2)])
    _same(got, kept)


# ---- kernel and tile plans made once -------------------------------------------------------------

def _sample(name: str, pipeline: str) -> ModuleOp:
    with open(os.path.join(ROOT, "samples", name)) as f:
        return lamina.apply(lamina.parse(f.read(), name), pipeline)



@pytest.mark.parametrize("backend", ["numpy", "compiled"])
def test_fused_and_attention_kernels_are_planned_once(backend: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPT-2 block with tiles so small that every fused kernel runs many tiles and the
    attention kernel many blocks: 20 calls on fresh inputs plan each kernel once (at the checked
    call: the first, or on the compiled backend at compile time), and each call's outputs are
    `lamina.run`'s bit for bit, also after later calls (no result shares memory with another
    call's, no plan reads an earlier call's arrays)."""
    from lamina.backends.numpy import attention as numpy_attention
    from lamina.backends.numpy import fused as numpy_fused

    module = _sample("gpt2_block.mlir", "fuse-attention,fuse-elementwise")
    fused = [o for o in module.walk() if isinstance(o, FusedOp)]
    assert sum(o.fusion_kind == "attention" for o in fused) == 1
    planners = [(numpy_fused, "plan_fused"), (numpy_attention, "attention_parts")]
    if backend == "compiled":
        from lamina.backends.compiled import attention as compiled_attention
        from lamina.backends.compiled import replay

        planners += [(compiled_attention, "_middle"), (compiled_attention, "plan_fused"),
                     (replay, "run_full")]   # every fused kernel the full way, one left to tiles
    counts = {name: count_calls(monkeypatch, mod, name) for mod, name in planners}
    exe = lamina.compile(module, backend=backend, tile_bytes=256)
    calls = [(x := lamina.inputs(module, seed=0), exe(x).outputs)]
    planned = {name: len(seen) for name, seen in counts.items()}
    calls += [(x := lamina.inputs(module, seed=seed), exe(x).outputs) for seed in range(1, 20)]
    calls.append((calls[3][0], exe(calls[3][0]).outputs))   # inputs seen before, after others
    assert {name: len(seen) for name, seen in counts.items()} == planned
    if backend == "numpy":
        assert planned == {"plan_fused": len(fused) - 1, "attention_parts": 1}
    else:
        assert planned["_middle"] == planned["plan_fused"] == 1
        assert planned["run_full"] == len(fused) - 1
    for x, got in calls[:2] + calls[-3:]:
        _same(got, lamina.run(module, x, backend=backend, tile_bytes=256).outputs)
    _same(calls[-1][1], calls[3][1])


def test_a_new_argument_layout_is_planned_once_more(monkeypatch: pytest.MonkeyPatch) -> None:
    """A multi-tile fused kernel's plan is kept per argument layout: a Fortran-ordered input is
    planned once more, then both layouts run from their plans, each call `lamina.run`'s bits."""
    from lamina.backends.numpy import fused as numpy_fused

    module = _sample("layernorm_gelu_dropout.mlir", "fuse-elementwise")
    entry = "ln_gelu_dropout_small"
    plans = count_calls(monkeypatch, numpy_fused, "plan_fused")
    exe = lamina.compile(module, entry, tile_bytes=512)
    assert len(plans) == 1   # the checked call at compile planned the C-ordered layout
    for seed, (fortran, planned) in enumerate([(False, 0), (False, 0), (True, 1), (False, 0),
                                               (True, 0)]):
        x = lamina.inputs(module, entry, seed=seed)
        if fortran:
            x["x"] = np.asfortranarray(x["x"])
        before = len(plans)
        got = exe(x).outputs
        assert len(plans) - before == planned, seed
        _same(got, lamina.run(module, x, entry=entry, tile_bytes=512).outputs)


@pytest.mark.parametrize(("backend", "tile_bytes"), [("numpy", 256), ("compiled", None)])
def test_per_kernel_constants_are_kept_and_give_the_same_bits(
        backend: str, tile_bytes: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A derived step's fused kernels compute constants once per kernel (`fused.Once`); a
    kept plan computes those that read no argument at its first run and reuses them: later
    calls on fresh inputs still give `lamina.run`'s bits, and do reuse kept values."""
    from lamina.backends.numpy import fused as numpy_fused

    reused: list[int] = []
    real = numpy_fused.Once.run

    def run(self: numpy_fused.Once, vals: list[Any]) -> None:
        if self.kept:
            reused.append(1)
        real(self, vals)

    monkeypatch.setattr(numpy_fused.Once, "run", run)
    module = lamina.apply(_step_module(), "fuse-elementwise")
    options: dict[str, Any] = {} if tile_bytes is None else {"tile_bytes": tile_bytes}
    exe = lamina.compile(module, "loss_step", backend=backend, **options)
    for seed in range(4):
        x = lamina.inputs(module, "loss_step", seed=seed)
        _same(exe(x).outputs,
              lamina.run(module, x, entry="loss_step", backend=backend, **options).outputs)
    assert reused
