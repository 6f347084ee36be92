"""shard-optimizer (ZeRO 1-3): the sharded step equals the plain step on the SPMD interpreter.

Each stage on the AdamW step of samples/mlp_dp_forward.mlir and on random MLPs and meshes
(data = 2, 4, 8; a 2x4 data x model mesh with a weight split over `model`); the collectives
insert-collectives makes are counted per stage, and their ring bytes equal ZeRO's Psi-counts
and the pass's own model (--explain); refusals are one located diagnostic.
"""

from __future__ import annotations

import io
import json
import math
import re
from contextlib import redirect_stderr

import lamina
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.analysis.comm_cost import sent_bytes
from lamina.analysis.zero_bytes import step_bytes
from lamina.backends.compare import compare
from lamina.backends.interface import find_entry
from lamina.backends.numpy.memory import MemoryChecker
from lamina.backends.numpy.runner import run_function
from lamina.backends.numpy.spmd import run_spmd
from lamina.cli.run import main as run_main
from lamina.ir.buffers.updates import GRADIENT_ATTR
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.mesh.collectives import AllGatherOp, AllReduceOp, PlacementOp, ReduceScatterOp
from lamina.ir.mesh.placement import find_mesh, place_of, spec_of
from lamina.ir.ops.opbase import tensor_info
from strategies import examples
from test_training_spmd import SAMPLE, unplaced

STEP = "derive-backward{data=x},append-optimizer{weight-decay=0.01}"
PLACE = "propagate-sharding,insert-collectives{target=h100-cluster bucket=false}"


def _zero(stage: int, axis: str = "data") -> str:
    return f"shard-optimizer{{stage={stage} axis={axis}}}"


def _inputs(func, seed: int = 4) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for a in func.body.block.args:
        x = rng.standard_normal(tensor_info(a.type).shape).astype(np.float32)
        out.append(np.abs(x) if (a.name_hint or "").startswith("v_") else x)
    out[-1] = np.asarray(2.0, np.float32)  # the step count
    return out


def _run(text: str, stage: int, entry: str, step: str = STEP):
    """The sharded step after insert-collectives (module, function), checked on the SPMD
    interpreter against the plain step of the unplaced program."""
    module = lamina.parse(text)
    lamina.apply(module, f"{step},{_zero(stage)},{PLACE}")
    func = find_entry(module, entry)
    inputs = _inputs(func)
    got = run_spmd(func, inputs).outputs
    ref_module = lamina.parse(unplaced(text))
    lamina.apply(ref_module, step)
    ref = run_function(find_entry(ref_module, entry), inputs).outputs
    for k, (g, r) in enumerate(zip(got, ref, strict=True)):
        d = compare(f"out{k}", "f32", g, r)
        assert d.ok, d.line()
    return module, func


def _sent(func, params_only: bool = False) -> int:
    """Ring bytes each device sends per step, over the collectives in `func` (`params_only`:
    those of values shaped like a parameter, leaving out the loss's and the activations')."""
    total = 0.0
    shapes = {tuple(tensor_info(a.type).shape) for a in func.body.block.args
              if (a.name_hint or "")[:1] in ("w", "b")}
    for op in func.walk():
        if not isinstance(op, PlacementOp) or \
                params_only and tuple(tensor_info(op.inputs[0].type).shape) not in shapes:
            continue
        mesh = find_mesh(func, place_of(op.inputs[0].type).mesh_name).mesh  # type: ignore[union-attr]
        n = mesh.size(op.axis_names())
        for v in op.inputs:
            t = v.type
            full = math.prod(tensor_info(t if isinstance(op, ReduceScatterOp) else
                                         op.outputs[0].type).shape)
            local = full // _shards(mesh, spec_of(t), op)
            total += sent_bytes(op.COLLECTIVE.kind, None, n, 4 * local)
    return round(total)


def _shards(mesh, spec, op) -> int:
    """Devices a collective's full payload is divided over off its own axes (a `model` split)."""
    axes = {a for d in spec.splits for a in d} - set(op.axis_names())
    return mesh.size(sorted(axes))


def _counts(func) -> dict[str, int]:
    out: dict[str, int] = {}
    for op in func.walk():
        if isinstance(op, AllGatherOp | ReduceScatterOp | AllReduceOp):
            out[op.name] = out.get(op.name, 0) + 1
    return out


def _explained(text: str, stage: int, step: str = STEP) -> tuple[dict[str, int], list[str]]:
    """The pass's --explain figures for the step (per device: parameter, gradient and state
    bytes; bytes sent per step, ZeRO's formula and Psi) and its lines saying why they differ."""
    module = lamina.parse(text)
    err = io.StringIO()
    with redirect_stderr(err):
        lamina.apply(module, f"{step},shard-optimizer{{stage={stage} explain=true}}")
    lines = err.getvalue().splitlines()
    (line,) = [x for x in lines if "per device:" in x]
    keys = ("parameters", "gradients", "state", "step", "formula", "psi")
    return dict(zip(keys, map(int, re.findall(r"(\d+) B", line)), strict=True)), \
        [x for x in lines if ", not " in x and "because" in x]


def _step_bytes(func) -> dict[str, int]:
    got = step_bytes(func)
    assert got is not None
    return got.as_stats()


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_sample_step_equals_plain_step_and_zero_formulas(stage: int) -> None:
    _, func = _run(SAMPLE, stage, "dp_forward_step")
    psi = 4 * (32 * 128 + 128 + 128 * 32 + 32)  # parameter bytes, f32
    n = 8
    counts = _counts(func)
    assert counts.get("lamina.all_reduce", 0) == 0
    assert counts["lamina.reduce_scatter"] == 4
    # stages 1, 2: one all_gather per parameter; stage 3: one per use outside the update (w2 is
    # read by the forward and by the backward, the others once: x is not differentiated)
    assert counts["lamina.all_gather"] == (4 if stage < 3 else 5)
    gathered = psi if stage < 3 else psi + 4 * 128 * 32
    assert _sent(func) == round((psi + gathered) * (n - 1) / n)
    model, why = _explained(SAMPLE, stage)
    stats = run_spmd(func, _inputs(func)).stats  # what lamina-run --stats-json reports
    assert model["step"] == _sent(func) == stats["comm_bytes_per_device"]
    if stage < 3:  # the plain data-parallel step's all_reduces send as much
        plain = lamina.parse(SAMPLE)
        lamina.apply(plain, f"{STEP},{PLACE}")
        base = find_entry(plain, "dp_forward_step")
        assert run_spmd(base, _inputs(base)).stats["comm_bytes_per_device"] == model["step"]
        assert model["formula"] == model["step"] == 58464 and not why
    else:  # ZeRO's 3 Psi (N-1)/N gathers every parameter for the backward too; here only w2
        # is read by the backward (db = sum of dy reads no b; dW1 = x^T dh reads no W1, and dx,
        # which would read W1, is not computed: x is data), so w1, b1, b2 are gathered once
        assert (model["formula"], model["step"]) == (87696, 72800)
        assert 87696 - 72800 == 4 * (32 * 128 + 128 + 32) * (n - 1) // n
        assert why == [why[0]] and "%w1, %b1, %b2: gradient reduced once, parameter gathered " \
            "once (read by one op outside the update: the backward does not read it)" in why[0]
    assert model["psi"] == psi
    assert model["parameters"] == (psi if stage < 3 else psi // n)
    assert model["gradients"] == (psi if stage == 1 else psi // n)
    assert model["state"] == 2 * psi // n  # AdamW: K = 2 moments, f32
    # the same accounting, read off the step after insert-collectives (lamina-run --stats-json)
    assert _step_bytes(func) == {"param_bytes": model["parameters"],
                                 "grad_bytes": model["gradients"],
                                 "optimizer_state_bytes": model["state"]}


def test_stage_1_2_send_what_the_all_reduce_sends_stage_3_at_most_one_and_a_half_times() -> None:
    """ZeRO's claim: stages 1, 2 send the all-reduce's 2 Psi, stage 3 3 Psi when every parameter
    is gathered for the backward too; here a parameter the backward does not read (the biases,
    the first weight) is not gathered again, so stage 3 sends less than 1.5x."""
    text = _mlp([8, 16, 16, 8], ["tanh", "tanh", "tanh"], 4, first_dx=True)
    plain = lamina.parse(text)
    lamina.apply(plain, f"{STEP},{PLACE}")
    base = _sent(find_entry(plain, "f_step"))
    sent = [_sent(_run(text, s, "f_step")[1]) for s in (1, 2, 3)]
    assert sent[0] == sent[1] == base
    assert base < sent[2] < 1.5 * base


def _mlp(widths: list[int], acts: list[str], n: int, *, model: bool = False,
         first_dx: bool = False) -> str:
    """An MLP y = act(... act(x W1 + b1) ...) reduced to a mean, data parallel over `n`."""
    mesh = f"lamina.mesh @m [data = {n}, model = 4]" if model else f"lamina.mesh @m [data = {n}]"
    batch = 2 * n

    def t(shape: list[int], spec: str) -> str:
        return f"tensor<{'x'.join(map(str, shape))}xf32, #lamina.place<@m, {spec}>>"

    def u(shape: list[int]) -> str:
        return f"tensor<{'x'.join(map(str, shape))}xf32>"

    args = [f"%x: {t([batch, widths[0]], '[[data], []]')}"]
    body, h, hshape = [], "%x", [batch, widths[0]]
    if first_dx:  # the input goes through a parameter-free op, so W1 is read by the backward
        body.append(f"  %x0 = lamina.tanh %x : {t([batch, widths[0]], '[[data], []]')}")
        h = "%x0"
    for i, (a, b) in enumerate(zip(widths, widths[1:], strict=False)):
        wspec = "[[], [model]]" if model and i == 0 else "[[], []]"
        args += [f"%w{i}: {t([a, b], wspec)}", f"%b{i}: {t([b], '[[]]')}"]
        ht = t(hshape, "[[data], []]") if h in ("%x", "%x0") else u(hshape)
        body.append(f"  %m{i} = lamina.matmul {h}, %w{i} : ({ht}, {t([a, b], wspec)}) -> "
                    f"{u([batch, b])}")
        body.append(f"  %a{i} = lamina.add %m{i}, %b{i} : ({u([batch, b])}, {t([b], '[[]]')}) -> "
                    f"{u([batch, b])}")
        body.append(f"  %h{i} = lamina.{acts[i]} %a{i} : {u([batch, b])}")
        h, hshape = f"%h{i}", [batch, b]
    body.append(f"  %l = lamina.reduce_mean {h} {{axes = array<i64: 0, 1>}} : ({u(hshape)}) -> "
                "tensor<f32>")
    body.append("  func.return %l : tensor<f32>")
    return "\n".join([mesh, f"func.func @f({', '.join(args)}) -> tensor<f32> {{", *body, "}", ""])


@settings(max_examples=examples(6), deadline=None)
@given(n=st.sampled_from([2, 4, 8]), stage=st.sampled_from([1, 2, 3]),
       widths=st.lists(st.sampled_from([3, 4, 8, 12, 16]), min_size=2, max_size=4),
       act=st.sampled_from(["tanh", "gelu", "relu"]))
def test_random_mlps_equal_the_plain_step(n: int, stage: int, widths: list[int], act: str) -> None:
    _run(_mlp(widths, [act] * (len(widths) - 1), n), stage, "f_step")


@pytest.mark.parametrize("stage", [1, 3])
def test_data_by_model_mesh_shards_over_data_beside_model(stage: int) -> None:
    text = _mlp([8, 16, 8], ["tanh", "tanh"], 2, model=True)
    module, func = _run(text, stage, "f_step")
    w0 = next(a for a in func.body.block.args if a.name_hint == "m_w0")
    splits = spec_of(w0.type).splits  # type: ignore[union-attr]
    assert "data" in {a for d in splits for a in d} and splits[1] == ("model",)


def _data_reduction(g) -> str | None:
    """The collective over `data` that first reduces gradient `g` (through other placements)."""
    todo = [g]
    while todo:
        v = todo.pop(0)
        for use in v.uses:
            op = use.operation
            if isinstance(op, AllReduceOp | ReduceScatterOp) and list(op.axis_names()) == ["data"]:
                return op.name
            if isinstance(op, PlacementOp):
                todo.extend(op.outputs)
    return None


@pytest.mark.parametrize("stage", [1, 2])
def test_explain_says_which_gradients_a_data_by_model_mesh_all_reduces(stage: int) -> None:
    """On a 2x2 data x model mesh the backward makes %w1's gradient split over `model` on the
    dimension ZeRO splits over `data`: insert-collectives all_reduces it over `data` and slices
    it (no reduce_scatter reaches the shard), and --explain says so for exactly that parameter;
    the others are reduce_scattered, as it says of them. Its gradient bytes are what lamina-run's
    stats read off the final IR, and its traffic what the step's `data` collectives send."""
    text = _mlp([8, 16, 8], ["tanh", "tanh"], 2, model=True).replace("model = 4", "model = 2")
    module, func = _run(text, stage, "f_step")
    reductions = {(op.results[0].name_hint or "")[2:]: _data_reduction(op.results[0]) or ""
                  for op in func.walk() if GRADIENT_ATTR in op.attributes}
    assert reductions == {"w0": "lamina.reduce_scatter", "b0": "lamina.reduce_scatter",
                          "w1": "lamina.all_reduce", "b1": "lamina.reduce_scatter"}
    err = io.StringIO()
    with redirect_stderr(err):
        lamina.apply(lamina.parse(text), f"{STEP},shard-optimizer{{stage={stage} explain=true}}")
    said = {m.group(1): "all_reduce" if "all_reduces it over 'data'" in m.group(0) else
            "reduce_scatter" if "a reduce_scatter over 'data'" in m.group(0) else None
            for m in re.finditer(r"%(\w+): state .*", err.getvalue())}
    assert said == {p: kind.removeprefix("lamina.") for p, kind in reductions.items()}
    model, _ = _explained(text, stage)
    assert model["gradients"] == _step_bytes(func)["grad_bytes"]
    shapes = {tuple(tensor_info(a.type).shape) for a in func.body.block.args
              if (a.name_hint or "")[:1] in ("w", "b")}
    data_sent = sum(sent_bytes(op.COLLECTIVE.kind, None, 2, _local_bytes(op))
                    for op in func.walk() if isinstance(op, AllReduceOp | ReduceScatterOp |
                                                        AllGatherOp)
                    and list(op.axis_names()) == ["data"]
                    and tuple(tensor_info(op.inputs[0].type).shape) in shapes)
    assert model["step"] == data_sent   # the parameters' and gradients' traffic over `data`


def _local_bytes(op) -> int:
    """Per-device bytes of a collective's payload (a reduce_scatter's input, else its output)."""
    from lamina.analysis.sizes import local_bytes

    return local_bytes(op.inputs[0] if isinstance(op, ReduceScatterOp) else op.outputs[0], op)


@pytest.mark.parametrize("stage", [1, 3])
def test_offloaded_moments_keep_their_tier_and_are_sharded(stage: int) -> None:
    step = "derive-backward{data=x},append-optimizer{state-tier=host}"
    _, func = _run(SAMPLE, stage, "dp_forward_step", step)
    m = next(a for a in func.body.block.args if a.name_hint == "m_w1")
    assert "tier = host" in str(m.type) and spec_of(m.type).splits[0] == ("data",)  # type: ignore[union-attr]


def test_a_dimension_the_axis_divides_nowhere_stays_replicated() -> None:
    text = _mlp([8, 3, 8], ["tanh", "tanh"], 4)  # b0: 3 elements, not divisible by 4
    err = io.StringIO()
    with redirect_stderr(err):
        lamina.apply(lamina.parse(text), f"{STEP},shard-optimizer{{stage=1 explain=true}}")
    assert "%b0: stays as placed" in err.getvalue()
    _run(text, 1, "f_step")


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_sharded_step_verifies_and_round_trips(stage: int) -> None:
    module = lamina.parse(SAMPLE)
    lamina.apply(module, f"{STEP},{_zero(stage)}")
    text = str(module)
    again = lamina.parse(text)
    assert str(again) == text
    lamina.apply(again, PLACE)


@pytest.mark.parametrize("text, pipeline, message", [
    (SAMPLE, "derive-backward{data=x},shard-optimizer", "no training step"),
    (SAMPLE, "derive-backward{data=x},shard-optimizer{func=dp_forward_grad}", "is not a training step"),
    (SAMPLE, f"{STEP},shard-optimizer{{axis=batch}}", "has no axis 'batch'"),
    (SAMPLE, f"{STEP},{PLACE},shard-optimizer", "already has collectives|propagate-sharding ran"),
    (SAMPLE, f"{STEP},propagate-sharding,shard-optimizer", "propagate-sharding ran already"),
    (unplaced(SAMPLE), STEP + ",shard-optimizer", "is not on a mesh"),
    (SAMPLE, f"{STEP},shard-optimizer{{stage=4}}", "must be 1, 2 or 3"),
])
def test_refusals_are_one_diagnostic(text: str, pipeline: str, message: str) -> None:
    with pytest.raises(LaminaError, match=message):
        lamina.apply(lamina.parse(text), pipeline)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_jax_on_8_devices_equals_the_spmd_interpreter(stage: int) -> None:
    """One short check: the sharded step on --backend jax (8 devices) gives the SPMD outputs."""
    pytest.importorskip("jax")
    module, func = _run(SAMPLE, stage, "dp_forward_step")
    inputs = _inputs(func)
    ref = lamina.run(module, inputs, entry="dp_forward_step")
    got = lamina.run(module, inputs, entry="dp_forward_step", backend="jax")
    for name, r in ref.outputs.items():
        d = compare(name, "f32", got.outputs[name], r)
        assert d.ok, d.line()


def test_peak_live_bytes_fall_with_the_stage() -> None:
    """The SPMD run's per-device peak: sharded moments (stage 1) below the plain step, gradients
    reduce_scattered as they are made (stage 2) below that, sharded parameters (stage 3) below
    that."""
    plain = lamina.parse(SAMPLE)
    lamina.apply(plain, f"{STEP},{PLACE}")
    base = find_entry(plain, "dp_forward_step")
    peaks = [run_spmd(base, _inputs(base)).stats["peak_live_bytes"]]
    for stage in (1, 2, 3):
        func = _run(SAMPLE, stage, "dp_forward_step")[1]
        peaks.append(run_spmd(func, _inputs(func)).stats["peak_live_bytes"])
    assert peaks[0] > peaks[1] > peaks[2] > peaks[3], peaks


def _modeled_peak(text: str, stage: int, entry: str, step: str = STEP) -> int:
    """Per-device HBM peak with annotate-lifetimes' frees (the tier model lamina-run's
    `peak_bytes` reports), after the step equals the plain one on the SPMD interpreter."""
    module = lamina.parse(text)
    lamina.apply(module, f"{step},{_zero(stage)},{PLACE},annotate-lifetimes")
    func = find_entry(module, entry)
    checker = MemoryChecker(None)
    run_spmd(func, _inputs(func), observer=checker)
    return checker.peak["hbm"]


def test_stage_2_peak_is_below_stage_1_on_the_sample() -> None:
    """Stage 1 keeps each full gradient (a pending sum) live from the op that makes it to the
    update; stage 2 keeps only its shard: the peak falls by about the gradients' (N-1)/N."""
    one, two = (_modeled_peak(SAMPLE, s, "dp_forward_step") for s in (1, 2))
    assert two < one, (one, two)


@settings(max_examples=examples(2), deadline=None)
@given(n=st.sampled_from([2, 4]), widths=st.lists(st.sampled_from([8, 12, 16]), min_size=3, max_size=4),
       act=st.sampled_from(["tanh", "gelu"]))
def test_stage_2_peak_is_below_stage_1_on_random_mlps(n: int, widths: list[int], act: str) -> None:
    """Two layers or more: an earlier layer's gradient is held whole by stage 1 while a later
    one is made. (One layer can tie: the peak is where its weight's gradient, the last made,
    is live beside its own shard, in both stages.)"""
    text = _mlp(widths, [act] * (len(widths) - 1), n)  # test_random_mlps_... checks the outputs
    assert _modeled_peak(text, 2, "f_step") < _modeled_peak(text, 1, "f_step")


def test_stage_1_and_2_differ_in_the_ir() -> None:
    """Stage 2's reduce_scatter follows the gradient's own op; stage 1's waits for the update."""
    after = {}
    for stage in (1, 2):
        module = lamina.parse(SAMPLE)
        lamina.apply(module, f"{STEP},{_zero(stage)},{PLACE}")
        ops = list(find_entry(module, "dp_forward_step").body.block.ops)
        after[stage] = [isinstance(ops[k + 1], ReduceScatterOp) for k, op in enumerate(ops)
                        if GRADIENT_ATTR in op.attributes]
    assert after == {1: [False] * 4, 2: [True] * 4}


ACCUM = "derive-backward{data=x},accumulate-gradients{micro-batches=2},append-optimizer{weight-decay=0.01}"


@pytest.mark.parametrize("stage", [1, 2])
def test_accumulated_gradients_one_full_accumulator_or_sharded_ones(stage: int) -> None:
    """K = 2 micro-batches: stage 1 keeps one full f32 accumulator per parameter and reduces it
    once a step (4 reduce_scatters, 2 Psi (N-1)/N sent); stage 2 reduce_scatters each
    micro-batch's gradient as it is made into a sharded accumulator (K x 4 reduce_scatters,
    (K + 1) Psi (N-1)/N sent: K reductions of the whole gradient and one gather), holding
    1/N of the gradient bytes. Both equal the full-batch step on one device."""
    text = _mlp([8, 16, 8], ["tanh", "tanh"], 4)
    _, func = _run(text, stage, "f_step", ACCUM)
    k, n, psi = 2, 4, 4 * (8 * 16 + 16 + 16 * 8 + 8)
    assert _counts(func)["lamina.reduce_scatter"] == 4 * (1 if stage == 1 else k)
    model, why = _explained(text, stage, ACCUM)
    assert model["step"] == _sent(func, params_only=True) == \
        (2 if stage == 1 else k + 1) * psi * (n - 1) // n
    assert model["gradients"] == _step_bytes(func)["grad_bytes"] == (psi if stage == 1 else psi // n)
    assert bool(why) == (stage == 2) and all("once per micro-batch" in line for line in why)
    if stage == 2:
        assert _modeled_peak(text, 2, "f_step", ACCUM) < _modeled_peak(text, 1, "f_step", ACCUM)


def test_grad_clip_norm_is_summed_from_the_shards() -> None:
    """With grad-clip, stage 2 still reduce_scatters each gradient as it is made: the global
    norm is each shard's sum of squares and one scalar all_reduce (no full gradient reduced)."""
    step = "derive-backward{data=x},append-optimizer{grad-clip=0.01}"
    _, func = _run(SAMPLE, 2, "dp_forward_step", step)
    counts = _counts(func)
    assert (counts["lamina.reduce_scatter"], counts["lamina.all_reduce"]) == (4, 1)
    reduced = next(op for op in func.walk() if isinstance(op, AllReduceOp))
    assert tensor_info(reduced.inputs[0].type).shape == ()


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_grad_clip_norm_all_reduce_is_in_the_explained_traffic(stage: int) -> None:
    """The norm's scalar all_reduce (4 B, 2 x 4 (N-1)/N sent) is counted in the traffic the
    explain reports beside ZeRO's formula, and named in the line saying why they differ."""
    step = "derive-backward{data=x},append-optimizer{grad-clip=0.01}"
    _, func = _run(SAMPLE, stage, "dp_forward_step", step)
    model, why = _explained(SAMPLE, stage, step)
    norm = 2 * 4 * 7 // 8
    assert model["step"] == _sent(func) == _sent(func, params_only=True) + norm
    assert any("grad-clip's global norm" in line and f"({4} B: {norm} B sent)" in line
               for line in why)
    plain, _ = _explained(SAMPLE, stage)
    assert model["step"] == plain["step"] + norm


def test_lamina_run_stats_report_the_step_bytes(tmp_path) -> None:
    """`lamina-run --stats-json` has the step's per-device param/grad/state bytes."""
    src = tmp_path / "step.mlir"
    src.write_text(SAMPLE)
    out = tmp_path / "stats.json"
    assert run_main([str(src), "--entry", "dp_forward_step", "-p", f"{STEP},{_zero(2)},{PLACE}",
                     "--stats-json", str(out)]) == 0
    stats = json.loads(out.read_text())
    psi = 4 * (32 * 128 + 128 + 128 * 32 + 32)
    assert (stats["param_bytes"], stats["grad_bytes"], stats["optimizer_state_bytes"]) == \
        (psi, psi // 8, 2 * psi // 8)


def test_python_api_run_stats_report_the_step_bytes(tmp_path) -> None:
    """`lamina.run(...).stats` has the same ZeRO keys as `lamina-run --stats-json` (both read
    `lamina.analysis.zero_bytes.step_stats`), and a function that is no training step has none."""
    src = tmp_path / "step.mlir"
    src.write_text(SAMPLE)
    out = tmp_path / "stats.json"
    pipeline = f"{STEP},{_zero(3)},{PLACE}"
    assert run_main([str(src), "--entry", "dp_forward_step", "-p", pipeline,
                     "--stats-json", str(out)]) == 0
    cli = json.loads(out.read_text())
    module = lamina.parse(SAMPLE)
    lamina.apply(module, pipeline)
    api = lamina.run(module, entry="dp_forward_step").stats
    keys = ("param_bytes", "grad_bytes", "optimizer_state_bytes")
    psi = 4 * (32 * 128 + 128 + 128 * 32 + 32)
    assert {k: api[k] for k in keys} == {k: cli[k] for k in keys} == \
        {"param_bytes": psi // 8, "grad_bytes": psi // 8, "optimizer_state_bytes": 2 * psi // 8}
    forward = lamina.run(lamina.parse(SAMPLE), entry="dp_forward").stats
    assert not set(keys) & set(forward)


TIED = """lamina.mesh @m [data = 8]
func.func @tied(%x: tensor<64x32xf32, #lamina.place<@m, [[data], []]>>, %w: tensor<32x32xf32, #lamina.place<@m, [[], []]>>) -> tensor<64x32xf32, #lamina.place<@m, [[data], []]>> {
  %h = lamina.matmul %x, %w : (tensor<64x32xf32, #lamina.place<@m, [[data], []]>>, tensor<32x32xf32, #lamina.place<@m, [[], []]>>) -> tensor<64x32xf32, #lamina.place<@m, [[data], []]>>
  %t = lamina.tanh %h : tensor<64x32xf32, #lamina.place<@m, [[data], []]>>
  %y = lamina.matmul %t, %w : (tensor<64x32xf32, #lamina.place<@m, [[data], []]>>, tensor<32x32xf32, #lamina.place<@m, [[], []]>>) -> tensor<64x32xf32, #lamina.place<@m, [[data], []]>>
  func.return %y : tensor<64x32xf32, #lamina.place<@m, [[data], []]>>
}
"""


@pytest.mark.parametrize("stage", [1, 3])
def test_a_tied_weight_gradient_enters_the_update_where_derive_backward_placed_it(stage: int) -> None:
    """A weight read twice (a tied embedding and LM head) has a gradient that is the sum of two
    contributions, an elementwise add of W's shape that derive-backward placed like W: it is the
    gradient, not part of the optimizer's update (the walk once split its operands under a
    replicated result, which the verifier refused on the imported GPT-2)."""
    _run(TIED, stage, "tied_step")


def _ring_bytes(func) -> int:
    """Ring bytes each device sends per step over `func`'s collectives of values shaped like a
    parameter (its gathers and its gradient's reductions), each payload at its own element type
    (a bf16 gather carries 2 bytes an element)."""
    from lamina.analysis.sizes import local_bytes

    shapes = {tuple(tensor_info(a.type).shape) for a in func.body.block.args
              if (a.name_hint or "")[:1] in ("w", "b")}
    total = 0.0
    for op in func.walk():
        if not isinstance(op, PlacementOp) or not op.COLLECTIVE.communicates or \
                tuple(tensor_info(op.outputs[0].type).shape) not in shapes:
            continue
        mesh = find_mesh(func, place_of(op.inputs[0].type).mesh_name).mesh  # type: ignore[union-attr]
        n = mesh.size(op.axis_names())
        side = op.outputs if op.COLLECTIVE.payload_is_result else op.inputs
        total += sent_bytes(op.COLLECTIVE.kind, None, n, float(sum(local_bytes(v, func)
                                                                   for v in side)))
    return round(total)


def test_stage_3_under_mixed_precision_gathers_each_shards_bf16_cast() -> None:
    """After mixed-precision, every use of a parameter outside its update only casts it to
    bf16 (or moves it and casts): stage 3 casts the shard and gathers the bf16 copy, half the
    bytes of the f32 master weight. The step's bits are stage 2's (same reductions; the
    parameters replicated there, cast whole), and the explained traffic is the IR's."""
    text = _mlp([8, 16, 16, 8], ["tanh", "tanh", "tanh"], 4, first_dx=True)
    step = f"{STEP},mixed-precision{{compute=bf16}}"
    out = {}
    for stage in (2, 3):
        module = lamina.parse(text)
        lamina.apply(module, f"{step},{_zero(stage)},{PLACE}")
        func = find_entry(module, "f_step")
        out[stage] = (func, run_spmd(func, _inputs(func)).outputs)
    gathers = [op for op in out[3][0].walk() if isinstance(op, AllGatherOp)]
    params = [g for g in gathers if tensor_info(g.outputs[0].type).shape in
              {tensor_info(a.type).shape for a in out[3][0].body.block.args
               if (a.name_hint or "").startswith("w")}]
    assert params and all(tensor_info(g.inputs[0].type).dtype == "bf16" for g in params)
    for a, b in zip(out[2][1], out[3][1], strict=True):
        np.testing.assert_array_equal(a, b)
    model, why = _explained(text, 3, step)
    assert model["step"] == _ring_bytes(out[3][0]) < _explained(text, 3)[0]["step"]
    assert any("carry the narrow cast" in line for line in why)
    assert any("reduced as the backward makes them, in a narrower type" in line for line in why)


def _transposed_mlp(n: int) -> str:
    """y = tanh(tanh(x W0^T) W1^T) as torch.export writes linear layers (a transpose of each
    weight, then a matmul), reduced to a mean; data parallel over `n`."""
    def t(shape: str, spec: str = "") -> str:
        return f"tensor<{shape}xf32{', #lamina.place<@m, ' + spec + '>' if spec else ''}>"

    rep, x = "[[], []]", t("8x8", "[[data], []]")
    return "\n".join([
        f"lamina.mesh @m [data = {n}]",
        f"func.func @f(%x: {x}, %w0: {t('16x8', rep)}, %w1: {t('8x16', rep)}) -> tensor<f32> {{",
        f"  %t0 = lamina.transpose %w0 {{permutation = array<i64: 1, 0>}} : ({t('16x8', rep)}) -> "
        f"{t('8x16')}",
        f"  %m0 = lamina.matmul %x, %t0 : ({x}, {t('8x16')}) -> {t('8x16')}",
        f"  %h0 = lamina.tanh %m0 : {t('8x16')}",
        f"  %t1 = lamina.transpose %w1 {{permutation = array<i64: 1, 0>}} : ({t('8x16', rep)}) -> "
        f"{t('16x8')}",
        f"  %m1 = lamina.matmul %h0, %t1 : ({t('8x16')}, {t('16x8')}) -> {t('8x8')}",
        f"  %h1 = lamina.tanh %m1 : {t('8x8')}",
        f"  %l = lamina.reduce_mean %h1 {{axes = array<i64: 0, 1>}} : ({t('8x8')}) -> tensor<f32>",
        "  func.return %l : tensor<f32>", "}", ""])


def test_stage_3_gathers_again_for_a_transpose_the_backward_reads() -> None:
    """The backward reads W1's transpose (d h0 = d m1 W1); stage 3 makes it again there from a
    second gather instead of holding the forward's full-sized one through the backward: W1 is
    gathered twice, W0 (whose transpose only the forward reads) once, as ZeRO-3 does, and the
    step equals the plain one; the explained traffic is the IR's."""
    text = _transposed_mlp(4)
    module, func = _run(text, 3, "f_step")
    gathered = [shape for op in func.walk() if isinstance(op, AllGatherOp) and
                (shape := tensor_info(op.outputs[0].type).shape) in ((8, 16), (16, 8))]
    assert sorted(gathered) == [(8, 16), (8, 16), (16, 8)], gathered
    ops = list(func.body.block.ops)
    seed = next(i for i, op in enumerate(ops) if "lamina.loss_seed" in op.attributes)
    for op in ops[:seed]:   # no forward transpose of a weight is read after the seed
        if op.name == "lamina.transpose":
            assert all(ops.index(u.operation) < seed for u in op.results[0].uses)
    model, _ = _explained(text, 3)
    assert model["step"] == _ring_bytes(func)
