"""accumulate-gradients: K micro-batch passes give the full-batch step (issue 27).

Random MLP-like losses (Hypothesis: depth, widths, activations, mean or sum loss, f32/f64, K in
{1, 2, 4}): the accumulated gradient function's loss and gradients equal the full-batch ones on
the NumPy interpreter; the placed version (place-batch on a data=2/4 mesh) run on every device by
the SPMD interpreter equals the single-device full batch and needs as many all_reduce /
reduce_scatter ops as the full-batch step; the text round-trips; the peak bytes of a checked run
fall with K; every refusal is one located diagnostic; lamina.Trainer's `accumulate` trains as the
full batch does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import lamina
import lamina.backends.numpy.memory  # noqa: F401  (registers lamina.move / lamina.free)
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.backends.interface import find_entry
from lamina.backends.numpy.memory import MemoryChecker
from lamina.backends.numpy.runner import run_function
from lamina.backends.numpy.spmd import run_spmd
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.mesh.collectives import AllReduceOp, PlacementOp, ReduceScatterOp
from lamina.ir.ops.opbase import tensor_info
from strategies import examples

ROOT = Path(__file__).resolve().parents[1]
MLP = (ROOT / "samples" / "mlp_train.mlir").read_text()
ACTS = ("tanh", "sigmoid", "gelu")
TOL = {"f32": 2e-5, "f64": 1e-10}


@dataclass(frozen=True)
class Mlp:
    """A random regression loss: layers of matmul + bias + activation, squared error."""

    batch: int
    widths: tuple[int, ...]
    acts: tuple[str, ...]
    loss: str
    dtype: str

    def text(self) -> str:
        b, w, dt = self.batch, self.widths, self.dtype
        t = lambda *s: f"tensor<{'x'.join(map(str, s))}{'x' if s else ''}{dt}>"  # noqa: E731
        params = "".join(f", %w{i}: {t(w[i], w[i + 1])}, %b{i}: {t(w[i + 1])}"
                         for i in range(len(w) - 1))
        lines = [f"func.func @f(%x: {t(b, w[0])}, %y: {t(b, w[-1])}{params}) -> {t()} {{"]
        h = "%x"
        for i in range(len(w) - 1):
            out = t(b, w[i + 1])
            lines += [f"  %m{i} = lamina.matmul {h}, %w{i} : ({t(b, w[i])}, {t(w[i], w[i + 1])})"
                      f" -> {out}",
                      f"  %a{i} = lamina.add %m{i}, %b{i} : ({out}, {t(w[i + 1])}) -> {out}",
                      f"  %h{i} = lamina.{self.acts[i]} %a{i} : {out}"]
            h = f"%h{i}"
        out = t(b, w[-1])
        lines += [f"  %d = lamina.sub {h}, %y : {out}", f"  %d2 = lamina.mul %d, %d : {out}",
                  f"  %l = lamina.reduce_{self.loss} %d2 {{axes = array<i64: 0, 1>}} : ({out})"
                  f" -> {t()}", f"  func.return %l : {t()}", "}"]
        return "\n".join(lines) + "\n"


@st.composite
def mlps(draw: st.DrawFn, dtypes: tuple[str, ...] = ("f32", "f64")) -> Mlp:
    depth = draw(st.integers(1, 3))
    widths = tuple(draw(st.lists(st.integers(1, 6), min_size=depth + 1, max_size=depth + 1)))
    acts = tuple(draw(st.lists(st.sampled_from(ACTS), min_size=depth, max_size=depth)))
    return Mlp(draw(st.sampled_from((8, 16))), widths, acts,
               draw(st.sampled_from(("mean", "sum"))), draw(st.sampled_from(dtypes)))


def _inputs(func, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tensor_info(t).shape).astype(tensor_info(t).dtype.replace("f", "float"))
            for t in func.function_type.inputs.data]


def _grad(text: str, pipeline: str, entry: str = "f_grad"):
    module = lamina.parse(text)
    lamina.apply(module, pipeline)
    return module, find_entry(module, entry)


def _assert_close(got, want, dtype: str) -> None:
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        scale = max(1.0, float(np.max(np.abs(w))))
        assert np.max(np.abs(g - w)) <= TOL[dtype] * scale, (k, g, w)


def _accumulate(mlp: Mlp, k: int) -> str:
    """The pass with loss=auto: whether to average is read off the loss's reduce_mean/sum."""
    del mlp
    return f"accumulate-gradients{{micro-batches={k}}}"


@settings(max_examples=examples(25), deadline=None)
@given(mlps(), st.sampled_from((1, 2, 4)))
def test_accumulated_step_equals_full_batch(mlp: Mlp, k: int) -> None:
    text = mlp.text()
    _, full = _grad(text, "derive-backward{data=x,y}")
    module, acc = _grad(text, f"derive-backward{{data=x,y}},{_accumulate(mlp, k)}")
    inputs = _inputs(full)
    _assert_close(run_function(acc, inputs).outputs, run_function(full, inputs).outputs, mlp.dtype)
    again = lamina.parse(str(module))   # the text round-trips and verifies
    assert str(again) == str(module)


@settings(max_examples=examples(10), deadline=None)
@given(mlps(("f32",)), st.sampled_from((1, 2, 4)), st.sampled_from((2, 4)))
def test_placed_accumulation_reduces_once_per_step(mlp: Mlp, k: int, n: int) -> None:
    mlp16 = Mlp(16, mlp.widths, mlp.acts, mlp.loss, mlp.dtype)
    text = mlp16.text()
    place = f"place-batch{{data=x,y axis=data size={n}}},derive-backward{{data=x,y}}"
    tail = "propagate-sharding,insert-collectives"
    _, ref = _grad(text, "derive-backward{data=x,y}")
    _, full = _grad(text, f"{place},{tail}")
    _, acc = _grad(text, f"{place},{_accumulate(mlp16, k)},{tail}")
    inputs = _inputs(ref)
    _assert_close(run_spmd(acc, inputs).outputs, run_function(ref, inputs).outputs, "f32")

    def reductions(func) -> int:
        return sum(isinstance(op, AllReduceOp | ReduceScatterOp) for op in func.walk())

    assert reductions(acc) == reductions(full) >= 1


def test_local_micro_batches_need_no_communication() -> None:
    """The micro-batch selection of a split batch is local: only the loss's own collectives
    (its mean over the split rows) repeat per micro-batch; no collective touches %x or %y."""
    place = "place-batch{data=x,y axis=data size=2},derive-backward{data=x,y}"
    _, acc = _grad(MLP, f"{place},accumulate-gradients{{micro-batches=4}},propagate-sharding,"
                   "insert-collectives", "mlp_loss_grad")
    args = set(acc.body.block.args)
    assert not [op for op in acc.walk() if isinstance(op, PlacementOp)
                and any(v in args for v in op.operands)]


@pytest.mark.parametrize("k", [2, 4])
def test_reducing_per_micro_batch_needs_k_times_the_collectives(k: int) -> None:
    """sync=micro-batch (the contrast) reduces every micro-batch's gradients: K times the
    all_reduces of sync=step, which reduces once per step, as the full batch does (unbucketed,
    one per parameter); both runs equal the single-device full batch."""
    place = "place-batch{data=x,y axis=data size=2},derive-backward{data=x,y}"
    tail = "propagate-sharding,insert-collectives{bucket=false}"
    _, ref = _grad(MLP, "derive-backward{data=x,y}", "mlp_loss_grad")
    inputs = _inputs(ref)
    counts = {}
    for sync in ("step", "micro-batch"):
        _, func = _grad(MLP, f"{place},accumulate-gradients{{micro-batches={k} sync={sync}}},"
                        f"{tail}", "mlp_loss_grad")
        _assert_close(run_spmd(func, inputs).outputs, run_function(ref, inputs).outputs, "f32")
        counts[sync] = sum(isinstance(op, AllReduceOp) for op in func.walk())
    _, full = _grad(MLP, f"{place},{tail}", "mlp_loss_grad")
    assert counts["step"] == sum(isinstance(op, AllReduceOp) for op in full.walk()) == 4
    assert counts["micro-batch"] == k * counts["step"]


def _peak(k: int) -> int:
    """HBM peak of a checked run (the accounting behind lamina-run's `peak_bytes` statistic)."""
    pipe = "derive-backward{data=x,y}" + \
        (f",accumulate-gradients{{micro-batches={k}}}" if k > 1 else "") + ",annotate-lifetimes"
    wide = MLP.replace("16x", "256x")
    _, func = _grad(wide, pipe, "mlp_loss_grad")
    checker = MemoryChecker(None)
    run_function(func, _inputs(func), observer=checker)
    return checker.peak["hbm"]


def test_peak_bytes_fall_with_micro_batches() -> None:
    peaks = {k: _peak(k) for k in (1, 2, 4)}
    assert peaks[4] < peaks[2] < peaks[1], peaks
    # the inputs, parameters and gradients stay; the activations shrink about K-fold
    assert peaks[4] < 0.5 * peaks[1], peaks


def _linear_stack(batch: int, width: int, depth: int) -> str:
    """A tanh MLP whose weights are stored as torch's Linear keeps them ([out, in], transposed
    in the forward, as the GPT-2 sample's import does), with a squared-error mean loss."""
    t = f"tensor<{width}x{width}xf32>"
    a = f"tensor<{batch}x{width}xf32>"
    params = "".join(f", %w{i}: {t}" for i in range(depth))
    lines = [f"func.func @f(%x: {a}, %y: {a}{params}) -> tensor<f32> {{"]
    h = "%x"
    for i in range(depth):
        lines += [f"  %t{i} = lamina.transpose %w{i} {{permutation = array<i64: 1, 0>}} : {t}",
                  f"  %m{i} = lamina.matmul {h}, %t{i} : ({a}, {t}) -> {a}",
                  f"  %h{i} = lamina.tanh %m{i} : {a}"]
        h = f"%h{i}"
    lines += [f"  %d = lamina.sub {h}, %y : {a}", f"  %d2 = lamina.mul %d, %d : {a}",
              f"  %l = lamina.reduce_mean %d2 {{axes = array<i64: 0, 1>}} : ({a}) -> tensor<f32>",
              "  func.return %l : tensor<f32>", "}"]
    return "\n".join(lines) + "\n"


def _step_memory(k: int) -> tuple[int, int]:
    """(HBM peak of a checked AdamW step, the most bytes of batch-shaped values live where a
    micro-batch's backward starts: its saved activations) on `_linear_stack(64, 128, 8)`."""
    from lamina.ir.buffers.memory import FreeOp
    from lamina.ir.core.dtypes import nbytes

    acc = f"accumulate-gradients{{micro-batches={k}}}," if k > 1 else ""
    _, func = _grad(_linear_stack(64, 128, 8), f"derive-backward{{data=x,y}},{acc}"
                    "append-optimizer{kind=adamw},annotate-lifetimes", "f_step")
    checker = MemoryChecker(None)
    run_function(func, _inputs(func), observer=checker)
    live: set = set()
    saved = 0
    for op in func.body.block.ops:
        if "lamina.loss_seed" in op.attributes:
            saved = max(saved, sum(nbytes(v.type) for v in live
                                   if tensor_info(v.type).shape != (128, 128)))
        if isinstance(op, FreeOp):
            live.discard(op.operands[0])
        else:
            live.update(op.results)
    return checker.peak["hbm"], saved


def test_accumulating_lowers_a_parameter_heavy_steps_peak() -> None:
    """Weights about as large as the activations (the GPT-2 sample at full size): each
    micro-batch's backward makes the weights' transposes again where it reads them (they do not
    live through its forward next to the running sums) and adds each gradient into its running
    sum where it is made, so the accumulated step's peak is below the full batch's and the
    activations a micro-batch saves for its backward are 1/K of the full batch's."""
    (full, saved1), (acc, saved4) = _step_memory(1), _step_memory(4)
    assert acc < full, (acc, full)
    # 1/4, and the micro-batch's slice of %x the backward reads (the full batch reads %x itself)
    assert saved4 <= saved1 / 4 + 16 * 128 * 4 + 16, (saved4, saved1)


def test_the_backward_remakes_the_weights_transposes(capsys: pytest.CaptureFixture[str]) -> None:
    module, func = _grad(_linear_stack(8, 4, 2), "derive-backward{data=x,y},"
                         "accumulate-gradients{micro-batches=2}")
    transposes = [op for op in func.walk() if op.name == "lamina.transpose"
                  and op.operands[0] in func.body.block.args[2:]]
    # per micro-batch: each weight's in the forward, and %w1's again where the backward reads it
    # (%x's gradient is not asked for, so the backward does not read %w0's)
    assert len(transposes) == 2 * 3
    lamina.apply(lamina.parse(_linear_stack(8, 4, 2)), "derive-backward{data=x,y},"
                 "accumulate-gradients{micro-batches=2}", explain=True)
    assert "1 batch-free layout value(s) of the forward (64 bytes" in capsys.readouterr().err
    _, full = _grad(_linear_stack(8, 4, 2), "derive-backward{data=x,y}")
    inputs = _inputs(full)
    _assert_close(run_function(func, inputs).outputs, run_function(full, inputs).outputs, "f32")
    assert str(lamina.parse(str(module))) == str(module)


def test_explain_names_the_micro_batches(capsys: pytest.CaptureFixture[str]) -> None:
    lamina.apply(lamina.parse(MLP), "derive-backward{data=x,y},"
                 "accumulate-gradients{micro-batches=4}", explain=True)
    err = capsys.readouterr().err
    assert "%x tensor<16x8xf32>: 4 micro-batches of 4 along dimension 0, each a slice" in err
    assert "the mean (sum / 4) (loss=auto: the loss is a mean over the batch) over the " \
        "micro-batches, accumulated in f32" in err


def test_low_precision_gradients_are_summed_in_f32() -> None:
    text = MLP.replace("f32", "bf16")
    module, _ = _grad(text, "derive-backward{data=x,y},accumulate-gradients{micro-batches=2}",
                      "mlp_loss_grad")
    printed = str(module)
    assert "lamina.cast" in printed and "x32xf32>" in printed


@pytest.mark.parametrize(("pipeline", "message"), [
    ("accumulate-gradients{micro-batches=2}", "no gradient function (lamina.gradients)"),
    ("derive-backward{data=x,y},append-optimizer{kind=sgd},"
     "accumulate-gradients{micro-batches=2 func=mlp_loss_step}",
     "is a training step (it has lamina.updates): run accumulate-gradients on the gradient "
     "function, after derive-backward and before append-optimizer"),
    ("derive-backward{data=x,y},accumulate-gradients{micro-batches=3}",
     "micro-batches=3 does not divide the batch of %x (dimension 0 of tensor<16x8xf32>: 16 rows)"),
    ("place-batch{data=x,y axis=data size=4},derive-backward{data=x,y},"
     "accumulate-gradients{micro-batches=8}", "4 rows on each of 4 devices)"),
    ("derive-backward{data=x,y},accumulate-gradients{micro-batches=2 axis=2}",
     "no data argument with a dimension 2"),
    ("derive-backward{data=x,y},accumulate-gradients{micro-batches=2 axis=2 data=x}",
     "axis=2, but data argument %x is tensor<16x8xf32>, of rank 2"),
    ("derive-backward{data=x,y},accumulate-gradients{micro-batches=0}",
     "option 'micro-batches' for accumulate-gradients must be at least 1, got 0"),
    ("derive-backward{data=x,y},accumulate-gradients{micro-batches=2 loss=max}",
     "option 'loss' for accumulate-gradients must be auto, mean or sum"),
])
def test_refusals_are_one_diagnostic(pipeline: str, message: str) -> None:
    with pytest.raises(LaminaError) as info:
        lamina.apply(lamina.parse(MLP), pipeline)
    assert message in str(info.value)


def test_a_shape_that_does_not_follow_the_batch_is_refused() -> None:
    text = """\
func.func @f(%x: tensor<8x4xf32>, %w: tensor<4x4xf32>) -> tensor<f32> {
  %m = lamina.matmul %x, %w : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
  %t = lamina.transpose %m {permutation = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %r = lamina.reshape %t : (tensor<4x8xf32>) -> tensor<32xf32>
  %l = lamina.reduce_mean %r {axes = array<i64: 0>} : (tensor<32xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
"""
    with pytest.raises(LaminaError) as info:
        lamina.apply(lamina.parse(text), "derive-backward{data=x},"
                     "accumulate-gradients{micro-batches=2}")
    assert str(info.value).endswith(
        "accumulate-gradients: this reshape tensor<4x8xf32> -> tensor<32xf32> mixes the batch "
        "dimension with the dimensions before it; it cannot be run on a micro-batch")


ONEHOT = """\
func.func @f(%x: tensor<8x4xf32>, %t: tensor<8x1xi32>, %w: tensor<4x4xf32>) -> tensor<f32> {
  %z = lamina.matmul %x, %w : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
  %vocab = lamina.iota {dim = 1 : i64} : () -> tensor<8x4xi32>
  %hit = lamina.eq %vocab, %t : (tensor<8x4xi32>, tensor<8x1xi32>) -> tensor<8x4xi1>
  %onehot = lamina.cast %hit : (tensor<8x4xi1>) -> tensor<8x4xf32>
  %half = lamina.constant dense<0.5> : tensor<f32>
  %c = lamina.broadcast_in_dim %half {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<8x4xf32>
  %ones = lamina.constant dense<1.0> : tensor<8x4xf32>
  %p = lamina.mul %onehot, %z : tensor<8x4xf32>
  %q = lamina.mul %p, %c : tensor<8x4xf32>
  %u = lamina.add %q, %ones : tensor<8x4xf32>
  %l = lamina.reduce_sum %u {axes = array<i64: 0, 1>} : (tensor<8x4xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
"""


@pytest.mark.parametrize("k", [2, 4])
def test_a_one_hot_grid_follows_the_micro_batch(k: int) -> None:
    """An iota, a broadcast scalar and a splat constant of the batch's shape are made again at
    the micro-batch's; the loss is a sum (loss=auto reads it off reduce_sum), so not averaged."""
    _, ref = _grad(ONEHOT, "derive-backward{data=x,t}")
    _, acc = _grad(ONEHOT, f"derive-backward{{data=x,t}},accumulate-gradients{{micro-batches={k}}}")
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((8, 4)).astype(np.float32),
              rng.integers(0, 4, (8, 1)).astype(np.int32),
              rng.standard_normal((4, 4)).astype(np.float32)]
    _assert_close(run_function(acc, inputs).outputs, run_function(ref, inputs).outputs, "f32")


def _train_data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((3, 16, 8), dtype=np.float32),
            "y": rng.standard_normal((3, 16, 4), dtype=np.float32)}


def _losses(accumulate: int = 1, mesh: str | None = None
            ) -> tuple[list[float], dict[str, np.ndarray]]:
    trainer = lamina.Trainer(lamina.parse(MLP), _train_data(), lr=1e-2, accumulate=accumulate,
                             mesh=mesh)
    return [r.loss for r in trainer.run(steps=8)], trainer.parameters


@pytest.mark.parametrize("mesh", [None, "data=2"])
def test_trainer_accumulate_follows_the_full_batch(mesh: str | None) -> None:
    full, want = _losses(mesh=mesh)
    got, params = _losses(accumulate=4, mesh=mesh)
    np.testing.assert_allclose(got, full, rtol=1e-5)
    for name, w in want.items():
        np.testing.assert_allclose(params[name], w, rtol=1e-4, atol=1e-6)


def test_lamina_train_accumulate_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lamina.cli.outputs import save_npz_atomic
    from lamina.cli.train import main as train_main

    data = str(tmp_path / "data.npz")
    save_npz_atomic(data, _train_data())
    logs = {}
    for k in (1, 2):
        log = tmp_path / f"log{k}.jsonl"
        assert train_main([str(ROOT / "samples" / "mlp_train.mlir"), "--data", data, "--steps",
                           "4", "--accumulate", str(k), "--log", str(log)]) == 0
        logs[k] = [json.loads(line)["loss"] for line in log.read_text().splitlines()]
    np.testing.assert_allclose(logs[2], logs[1], rtol=1e-5)
    capsys.readouterr()
    assert train_main([str(ROOT / "samples" / "mlp_train.mlir"), "--data", data, "--steps", "2",
                       "--accumulate", "3"]) == 1
    err = capsys.readouterr().err
    assert "micro-batches=3 does not divide the batch of %x" in err and "Traceback" not in err


SEQUENCE = """\
func.func @f(%x: tensor<8x3x4xf32>, %y: tensor<8x3xf32>, %w: tensor<4x4xf32>, %v: tensor<4xf32>) -> tensor<f32> {
  %r = lamina.reshape %x : (tensor<8x3x4xf32>) -> tensor<24x4xf32>
  %m = lamina.matmul %r, %w : (tensor<24x4xf32>, tensor<4x4xf32>) -> tensor<24x4xf32>
  %b = lamina.reshape %m : (tensor<24x4xf32>) -> tensor<8x3x4xf32>
  %s = lamina.softmax %b {axis = -1 : i64} : tensor<8x3x4xf32>
  %t = lamina.broadcast_in_dim %y {broadcast_dimensions = array<i64: 0, 1>} : (tensor<8x3xf32>) -> tensor<8x3x4xf32>
  %p = lamina.mul %s, %t : tensor<8x3x4xf32>
  %q = lamina.mul %p, %v : (tensor<8x3x4xf32>, tensor<4xf32>) -> tensor<8x3x4xf32>
  %c = lamina.cast %q : (tensor<8x3x4xf32>) -> tensor<8x3x4xf64>
  %l64 = lamina.reduce_mean %c {axes = array<i64: 0, 1, 2>} : (tensor<8x3x4xf64>) -> tensor<f64>
  %l = lamina.cast %l64 : (tensor<f64>) -> tensor<f32>
  func.return %l : tensor<f32>
}
"""


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("devices", [0, 2])
def test_reshapes_broadcasts_and_casts_follow_the_micro_batch(k: int, devices: int) -> None:
    """The batch dim merged and split by reshapes, broadcast from a label, cast: each follows
    the micro-batch, on one device and on a data=2 mesh."""
    place = f"place-batch{{data=x,y axis=data size={devices}}}," if devices else ""
    tail = ",propagate-sharding,insert-collectives" if devices else ""
    _, ref = _grad(SEQUENCE, "derive-backward{data=x,y}")
    _, acc = _grad(SEQUENCE, f"{place}derive-backward{{data=x,y}},"
                   f"accumulate-gradients{{micro-batches={k}}}{tail}")
    inputs = _inputs(ref)
    run = run_spmd if devices else run_function
    _assert_close(run(acc, inputs).outputs, run_function(ref, inputs).outputs, "f32")


RATIO = """\
func.func @f(%x: tensor<8x4xf32>, %m: tensor<8xf32>, %w: tensor<4xf32>) -> tensor<f32> {
  %p = lamina.mul %x, %w : (tensor<8x4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  %t = lamina.tanh %p : tensor<8x4xf32>
  %row = lamina.reduce_sum %t {axes = array<i64: 1>} : (tensor<8x4xf32>) -> tensor<8xf32>
  %kept = lamina.mul %row, %m : tensor<8xf32>
  %num = lamina.reduce_sum %kept {axes = array<i64: 0>} : (tensor<8xf32>) -> tensor<f32>
  %den = lamina.reduce_sum %m {axes = array<i64: 0>} : (tensor<8xf32>) -> tensor<f32>
  %l = lamina.div %num, %den : tensor<f32>
  func.return %l : tensor<f32>
}
"""


def test_a_sum_over_a_count_is_a_mean() -> None:
    """Cross-entropy's form (torch's, as imported): the rows' losses summed over the rows' count;
    with every micro-batch counting the same rows, accumulating it as a mean is exact."""
    _, ref = _grad(RATIO, "derive-backward{data=x,m}")
    _, acc = _grad(RATIO, "derive-backward{data=x,m},accumulate-gradients{micro-batches=2}")
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal((8, 4)).astype(np.float32),
              np.array([1, 0, 1, 1, 0, 1, 1, 1], np.float32),   # 3 rows of each half count
              rng.standard_normal(4).astype(np.float32)]
    _assert_close(run_function(acc, inputs).outputs, run_function(ref, inputs).outputs, "f32")
