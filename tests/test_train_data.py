"""Training data for language models, evaluation, tokens/s and the loss plot (`lamina-train`).

- `--tokens`: step i's windows are nanoGPT's (offsets from `default_rng([seed, 0, i])`), the
  input argument gets [s, s + seq) and the target [s + 1, s + seq + 1): checked against the
  formula and against a NumPy forward pass of samples/tiny_lm.mlir on those windows (which would
  differ with the two swapped); a resume ends bit-identical, also under another --seed (the
  checkpoint's seed draws the windows); a token outside the vocabulary, a stream of the wrong
  kind or a window that does not fit the program is one error, exit 1, no file written.
- `--eval-every K`: `eval_loss` on steps K, 2K, ... only, equal to the forward function run by
  `lamina.run` on the eval batches with the trained parameters.
- tokens/s: batch * seq over the step time, in the log and the record.
- `--plot`: the figure's lines hold the logged steps and losses, labelled, legend outside the
  axes, log y for a wide range; an image on success, no file when the run fails.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import lamina
import numpy as np
import pytest
from lamina.cli.outputs import save_npz_atomic
from lamina.cli.train import main as train_main
from lamina.training import LOG_SCALE_SPAN, StepRecord, loss_figure

ROOT = Path(__file__).resolve().parents[1]
LM = str(ROOT / "samples" / "tiny_lm.mlir")
TOKENS = str(ROOT / "samples" / "tiny_lm_tokens.npy")
MLP = str(ROOT / "samples" / "mlp_train.mlir")
BATCH, SEQ, VOCAB = 4, 16, 64


def _stream() -> np.ndarray:
    return np.load(TOKENS, mmap_mode="r")


def _lm_loss(params: dict[str, np.ndarray], idx: np.ndarray, targets: np.ndarray) -> float:
    """samples/tiny_lm.mlir's loss in NumPy (float64)."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    h = np.tanh(p["E"][idx] @ p["W1"] + p["b1"])
    logits = h @ p["W2"]
    shifted = logits - logits.max(-1, keepdims=True)
    lp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    return float(-np.take_along_axis(lp, targets[..., None], -1).mean())


def test_windows_are_nanogpts_and_feed_input_and_target() -> None:
    tokens = _stream()
    trainer = lamina.Trainer(lamina.load(LM), tokens=tokens, seed=7, lr=1e-2, steps=3)
    assert trainer.data_names == ["idx", "targets"] and trainer.vocab == VOCAB
    init = {n: a.copy() for n, a in trainer.parameters.items()}
    for i in range(3):
        starts = np.random.default_rng([7, 0, i]).integers(0, len(tokens) - SEQ, size=BATCH)
        batch = trainer.batch(i)
        want_x = np.stack([tokens[s:s + SEQ] for s in starts])
        want_y = np.stack([tokens[s + 1:s + SEQ + 1] for s in starts])
        np.testing.assert_array_equal(batch["idx"], want_x)
        np.testing.assert_array_equal(batch["targets"], want_y)
        assert batch["idx"].dtype == np.int32 and batch["idx"].shape == (BATCH, SEQ)
    first = trainer.step()
    b0 = trainer.batch(0)
    assert first.loss == pytest.approx(_lm_loss(init, b0["idx"], b0["targets"]), rel=1e-5)
    assert first.loss != pytest.approx(_lm_loss(init, b0["targets"], b0["idx"]), rel=1e-5)
    assert first.tokens_per_second == pytest.approx(BATCH * SEQ / first.step_seconds)
    other = lamina.Trainer(lamina.load(LM), tokens=tokens, seed=8, steps=1)
    assert not np.array_equal(other.batch(0)["idx"], trainer.batch(0)["idx"])


def test_a_token_model_learns() -> None:
    trainer = lamina.train(lamina.load(LM), tokens=_stream(), steps=120, lr=1e-2)
    losses = [r.loss for r in trainer.history]
    assert losses[0] == pytest.approx(np.log(VOCAB), rel=0.05)   # near uniform at the start
    assert np.mean(losses[-10:]) < 0.5 * losses[0]


def _cli(*argv: str) -> int:
    return train_main([LM, "--tokens", TOKENS, *argv])


def _npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("backend", ["numpy", "compiled"])
def test_token_resume_is_bit_identical(tmp_path: Path, backend: str) -> None:
    """10 steps, then a resume to 20 (under another --seed: the checkpoint's draws the windows),
    end where 20 straight steps do; the checkpoint records the data position and the stream."""
    if backend == "compiled":
        pytest.importorskip("numba")
    common = ["--backend", backend, "--lr", "1e-2", "--eval-every", "5", "--eval-tokens", TOKENS,
              "--eval-batches", "2"]
    assert _cli(*common, "--steps", "20", "--seed", "3", "--save", str(tmp_path / "full.npz"),
                "--log", str(tmp_path / "full.jsonl")) == 0
    ck = tmp_path / "ck"
    assert _cli(*common, "--steps", "10", "--seed", "3", "--checkpoint", str(ck), "--log",
                str(tmp_path / "part.jsonl")) == 0
    meta = json.loads((ck / "checkpoint.json").read_text())
    assert meta["data_position"] == 10 and meta["seed"] == 3
    assert meta["data"] == {"kind": "tokens", "tokens": len(_stream()), "batch": BATCH,
                            "seq": SEQ, "input": "idx", "target": "targets"}
    assert _cli(*common, "--steps", "20", "--seed", "99", "--resume", str(ck), "--save",
                str(tmp_path / "resumed.npz"), "--log", str(tmp_path / "part.jsonl")) == 0
    full, resumed = _npz(tmp_path / "full.npz"), _npz(tmp_path / "resumed.npz")
    assert sorted(full) == ["E", "W1", "W2", "b1"]
    for name in full:
        np.testing.assert_array_equal(resumed[name], full[name])
    keys = ("step", "loss", "lr", "eval_loss")
    got = [json.loads(s) for s in (tmp_path / "part.jsonl").read_text().splitlines()]
    want = [json.loads(s) for s in (tmp_path / "full.jsonl").read_text().splitlines()]
    assert [[r.get(k) for k in keys] for r in got] == [[r.get(k) for k in keys] for r in want]


def test_resume_refuses_other_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ck = tmp_path / "ck"
    assert _cli("--steps", "2", "--checkpoint", str(ck)) == 0
    short = tmp_path / "short.npy"
    np.save(short, np.asarray(_stream()[:1000]), allow_pickle=False)
    capsys.readouterr()
    assert train_main([LM, "--tokens", str(short), "--steps", "4", "--resume", str(ck)]) == 1
    assert capsys.readouterr().err == (
        f"error: cannot resume from '{ck}': it was trained on a stream of 4096 tokens in windows "
        "[4, 16] for 'idx' and 'targets', this run reads a stream of 1000 tokens in windows "
        "[4, 16] for 'idx' and 'targets'\n")


def _assert_one_error(capsys: pytest.CaptureFixture[str], message: str) -> None:
    err = capsys.readouterr().err
    assert err.splitlines() == [message], err


def _write_tokens(tmp: Path, a: np.ndarray) -> str:
    path = str(tmp / "toks.npy")
    np.save(path, a, allow_pickle=False)
    return path


@pytest.mark.parametrize("tokens, message", [
    (np.r_[np.zeros(100, np.uint16), [64], np.zeros(50, np.uint16)].astype(np.uint16),
     "token 64 at position 100 is outside the vocabulary of @tiny_lm: 'idx' indexes a table of "
     "64 rows"),
    (np.r_[np.zeros(30, np.int32), [-1]].astype(np.int32),
     "token -1 at position 30 is outside the vocabulary of @tiny_lm: 'idx' indexes a table of "
     "64 rows"),
    (np.zeros(100, np.float32), "tokens of dtype float32; a token stream is integers (uint16 or "
     "int32)"),
    (np.zeros((10, 10), np.int32), "tokens of shape (10, 10); a token stream is 1-D"),
    (np.zeros(16, np.uint16), "16 tokens; a window of seq 16 needs at least 17"),
])
def test_bad_token_streams(tmp_path: Path, capsys: pytest.CaptureFixture[str], tokens: np.ndarray,
                           message: str) -> None:
    path = _write_tokens(tmp_path, tokens)
    rc = train_main([LM, "--tokens", path, "--steps", "2", "--log", str(tmp_path / "log.jsonl"),
                     "--plot", str(tmp_path / "p.png"), "--checkpoint", str(tmp_path / "ck")])
    assert rc == 1
    _assert_one_error(capsys, f"error: {path}: {message}")
    assert os.listdir(tmp_path) == ["toks.npy"]


def test_an_eval_token_outside_the_vocabulary(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = _write_tokens(tmp_path, np.full(40, 70, np.uint16))
    assert _cli("--steps", "2", "--eval-every", "1", "--eval-tokens", path) == 1
    _assert_one_error(capsys, f"error: {path}: token 70 at position 0 is outside the vocabulary "
                      "of @tiny_lm: 'idx' indexes a table of 64 rows")


@pytest.mark.parametrize("argv, message", [
    (["--batch", "8"], f"error: {TOKENS}: batch 8, seq 16 do not fit the input 'idx' of "
     "@tiny_lm: tensor<4x16xi32> takes [batch, seq] = [4, 16]"),
    (["--input-arg", "E"], f"error: {TOKENS}: the input argument 'E' is tensor<64x32xf32>; token "
     "windows feed i32 or i64 arguments"),
    (["--target-arg", "nope"], f"error: {TOKENS}: the target argument 'nope' is no argument of "
     "@tiny_lm (arguments: idx, targets, E, W1, b1, W2)"),
    (["--data", TOKENS], "lamina-train: error: --data and --tokens: give one of them"),
    (["--eval-data", TOKENS], "lamina-train: error: --eval-data and --eval-tokens need "
     "--eval-every K"),
    (["--eval-every", "2"], "lamina-train: error: --eval-every needs --eval-data EVAL.npz or "
     "--eval-tokens TOKENS.npy"),
    (["--tokens", str(ROOT / "samples" / "mlp_train_data.npz")],
     f"error: --tokens '{ROOT / 'samples' / 'mlp_train_data.npz'}': an .npz archive; the tokens "
     "are one .npy array"),
    (["--plot", "loss.xyz"], "error: --plot: cannot write 'loss.xyz': unknown image format 'xyz' "
     "(formats: "),
])
def test_bad_token_flags(capsys: pytest.CaptureFixture[str], argv: list[str], message: str
                         ) -> None:
    assert _cli("--steps", "1", *argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(message) and len(err.splitlines()) == 1, err


def test_data_flags_need_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    assert train_main([MLP, "--data", str(ROOT / "samples" / "mlp_train_data.npz"), "--steps",
                       "1", "--seq", "4"]) == 1
    _assert_one_error(capsys, "lamina-train: error: --seq applies to --tokens TOKENS.npy")
    assert train_main([MLP, "--steps", "1"]) == 1
    _assert_one_error(capsys, "lamina-train: error: give the training data: --data DATA.npz or "
                      "--tokens TOKENS.npy")


def _mlp_data(batches: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batches, 16, 8), dtype=np.float32),
            "y": rng.standard_normal((batches, 16, 4), dtype=np.float32)}


def test_eval_every_k_is_the_forward_loss_on_the_eval_batches() -> None:
    module = lamina.load(MLP)
    evals = _mlp_data(3, 1)
    trainer = lamina.Trainer(module, _mlp_data(5, 0), eval_data=evals, eval_every=4, lr=1e-2,
                             steps=9)
    records = list(trainer.run())
    assert [r.step for r in records if r.eval_loss is not None] == [4, 8]
    assert all(r.tokens_per_second is None for r in records)   # no token ids: not known
    params = trainer.parameters
    want = np.mean([float(lamina.run(module, {**params, "x": evals["x"][j], "y": evals["y"][j]})
                          .outputs["loss"]) for j in range(3)])
    assert trainer.evaluate() == pytest.approx(want, rel=1e-6)
    assert trainer.forward_executable is not None
    with pytest.raises(lamina.LaminaError, match="eval_every=2 needs eval_data or eval_tokens"):
        lamina.Trainer(module, _mlp_data(2, 0), eval_every=2)
    with pytest.raises(lamina.LaminaError, match=r"it has arrays for x; the data arguments are "
                       r"x, y"):
        lamina.Trainer(module, _mlp_data(2, 0), eval_data={"x": evals["x"]}, eval_every=2)


def _records() -> list[StepRecord]:
    return [StepRecord(i, 4.0 * 0.9 ** i, 1e-3, 0.01, eval_loss=4.0 * 0.9 ** i + 0.1
                       if i % 10 == 0 else None) for i in range(1, 61)]


def test_loss_figure_data_and_labels() -> None:
    import matplotlib.pyplot as plt

    records = _records()
    fig = loss_figure(records, "@m")
    try:
        [ax] = fig.axes
        train_line, eval_line = ax.get_lines()
        assert train_line.get_label() == "loss" and eval_line.get_label() == "eval loss"
        assert list(train_line.get_xdata()) == [r.step for r in records]
        assert list(train_line.get_ydata()) == [r.loss for r in records]
        assert list(eval_line.get_xdata()) == [10, 20, 30, 40, 50, 60]
        assert eval_line.get_marker() == "o"
        assert ax.get_xlabel() == "step" and ax.get_title() == "@m"
        # 4 * 0.9 ** 60 = 0.007: a span of ~500, drawn on a log axis
        assert ax.get_yscale() == "log" and ax.get_ylabel() == "loss (log scale)"
        legend = ax.get_legend()
        assert [t.get_text() for t in legend.get_texts()] == ["loss", "eval loss"]
        fig.canvas.draw()
        box = legend.get_window_extent()
        assert box.x0 >= ax.get_window_extent().x1   # beside the axes, never over the curve
    finally:
        plt.close(fig)
    narrow = [StepRecord(i, 2.0 + 0.01 * i, 1e-3, 0.01) for i in range(1, 11)]
    fig = loss_figure(narrow)
    try:
        assert fig.axes[0].get_yscale() == "linear" and len(fig.axes[0].get_lines()) == 1
        assert max(r.loss for r in narrow) / min(r.loss for r in narrow) < LOG_SCALE_SPAN
    finally:
        plt.close(fig)


def test_cli_plot_is_written_on_success_only(tmp_path: Path) -> None:
    png = tmp_path / "loss.png"
    assert _cli("--steps", "6", "--plot", str(png), "--eval-every", "3", "--eval-tokens",
                TOKENS, "--eval-batches", "1") == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    nan = tmp_path / "nan.npz"
    data = _mlp_data(3, 0)
    data["y"][1, 0, 0] = np.nan
    save_npz_atomic(str(nan), data)
    bad = tmp_path / "bad.png"
    assert train_main([MLP, "--data", str(nan), "--steps", "4", "--plot", str(bad)]) == 1
    assert not bad.exists() and not [n for n in os.listdir(tmp_path) if n.startswith(".lamina")]


def test_tokens_per_second_in_the_log(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    assert _cli("--steps", "3", "--log", str(log)) == 0
    lines: list[dict[str, Any]] = [json.loads(s) for s in log.read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2, 3]
    for r in lines:
        assert r["tokens_per_second"] == pytest.approx(BATCH * SEQ / r["step_seconds"])
        assert "eval_loss" not in r


def test_a_resumed_plot_holds_the_logged_steps_too(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """With --log, a resumed run's plot starts at step 1 (the kept lines), not at the resume."""
    import lamina.cli.train as cli

    plotted: list[list[int]] = []
    monkeypatch.setattr(cli, "save_loss_plot", lambda records, path, title: plotted.append(
        [r.step for r in records]))
    log, ck = str(tmp_path / "log.jsonl"), str(tmp_path / "ck")
    assert _cli("--steps", "4", "--log", log, "--checkpoint", ck) == 0
    assert _cli("--steps", "7", "--log", log, "--resume", ck, "--plot",
                str(tmp_path / "p.png")) == 0
    assert plotted == [list(range(1, 8))]


def test_train_writes_the_plot(tmp_path: Path) -> None:
    png = tmp_path / "curve.svg"
    done = lamina.train(lamina.load(LM), tokens=_stream(), steps=3, plot=str(png))
    assert [r.step for r in done.history] == [1, 2, 3]
    assert png.read_text().lstrip().startswith("<?xml") and "<svg" in png.read_text()
