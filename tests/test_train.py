"""Training for real: `lamina.Trainer` / `lamina.train` and `lamina-train`.

- The anchor: samples/mlp_train.mlir trained 50 steps with AdamW, and with SGD + momentum (and
  weight decay, a warmup + cosine schedule and gradient clipping), from the same initial weights
  and batches as torch.optim: every step's loss within 1e-4 relative, final weights within 1e-4.
- Resume: 10 steps, then a resume to 20, ends bit-identical to 20 steps (numpy and compiled
  backends), and so does its log; a checkpoint whose write is interrupted leaves the previous one
  whole and loadable.
- The step is compiled once and the loop feeds results back through `lamina.updates`; the
  schedule's rates reach the step through its `learning_rate` argument.
- Bad input (a data array of the wrong shape, a missing or misshapen parameter in --init, a
  corrupt checkpoint, a non-finite loss): one diagnostic, exit 1, and no file written (a
  non-finite loss keeps the last checkpoint).
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import lamina
import numpy as np
import pytest
from lamina.cli.outputs import save_npz_atomic
from lamina.cli.train import main as train_main
from lamina.training import Hyper, lr_at

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = str(ROOT / "samples" / "mlp_train.mlir")
BATCHES = 5


def _data(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((BATCHES, 16, 8), dtype=np.float32),
            "y": rng.standard_normal((BATCHES, 16, 4), dtype=np.float32)}


def _torch_losses(init: dict[str, np.ndarray], data: dict[str, np.ndarray], steps: int,
                  optimizer: str, hyper: dict[str, Any], schedule: list[float],
                  clip: float | None) -> tuple[list[float], dict[str, np.ndarray]]:
    torch = pytest.importorskip("torch")
    ws = {n: torch.tensor(a, requires_grad=True) for n, a in init.items()}
    params = [ws["w1"], ws["b1"], ws["w2"], ws["b2"]]
    opt = torch.optim.AdamW(params, lr=schedule[0], **hyper) if optimizer == "adamw" else \
        torch.optim.SGD(params, lr=schedule[0], **hyper)
    losses = []
    for i in range(steps):
        x, y = (torch.tensor(data[k][i % BATCHES]) for k in ("x", "y"))
        opt.zero_grad()
        out = torch.tanh(x @ ws["w1"] + ws["b1"]) @ ws["w2"] + ws["b2"]
        loss = ((out - y) ** 2).mean()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(params, clip)
        for group in opt.param_groups:
            group["lr"] = schedule[i]
        opt.step()
        losses.append(float(loss.detach()))
    return losses, {n: w.detach().numpy() for n, w in ws.items()}


@pytest.mark.parametrize("optimizer, options, hyper, clip", [
    ("adamw", {"lr": 1e-2, "weight_decay": 0.01}, {"weight_decay": 0.01}, None),
    ("sgd", {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-3, "lr_schedule": "cosine",
             "warmup": 5, "grad_clip": 1.0}, {"momentum": 0.9, "weight_decay": 1e-3}, 1.0),
])
def test_fifty_steps_follow_torch(optimizer: str, options: dict[str, Any], hyper: dict[str, Any],
                                  clip: float | None) -> None:
    pytest.importorskip("torch")
    steps = 50
    data = _data()
    trainer = lamina.Trainer(lamina.load(SAMPLE), data, optimizer=optimizer, seed=3, steps=steps,
                             **options)
    init = {n: a.copy() for n, a in trainer.parameters.items()}   # the step updates in place
    records = list(trainer.run())
    h = Hyper(optimizer=optimizer, **options)
    schedule = [lr_at(h, i, steps) for i in range(steps)]
    want, final = _torch_losses(init, data, steps, optimizer, hyper, schedule, clip)
    got = [r.loss for r in records]
    assert [r.step for r in records] == list(range(1, steps + 1))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert got[-1] < 0.97 * got[0]   # it learns (y is noise: the loss cannot go far down)
    for name, w in final.items():
        np.testing.assert_allclose(trainer.parameters[name], w, rtol=1e-4, atol=1e-5,
                                   err_msg=name)
    assert [r.lr for r in records] == [float(np.float32(r)) for r in schedule]


def test_schedules() -> None:
    cos = Hyper(lr=1.0, lr_schedule="cosine", warmup=4)
    assert [lr_at(cos, i, 14) for i in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_at(cos, 4, 14) == 1.0 and math.isclose(lr_at(cos, 9, 14), 0.5)
    assert lr_at(cos, 13, 14) > 0 and lr_at(cos, 14, 14) < 1e-12
    assert [lr_at(Hyper(lr=0.5), i, 3) for i in range(3)] == [0.5] * 3


def test_one_compile_and_results_fed_back_by_the_updates_attribute() -> None:
    """The step is compiled once with its state donated: the arrays it returns are the ones it
    was given, updated in place, and the learning rate argument takes each step's rate."""
    trainer = lamina.Trainer(lamina.load(SAMPLE), _data(), optimizer="adamw", steps=6,
                             lr_schedule="cosine", lr=0.1)
    exe = trainer.executable
    assert set(exe.donated) == set(trainer.state_roles)
    before = {n: id(a) for n, a in trainer.state.items()}
    list(trainer.run())
    assert trainer.executable is exe
    assert {n: id(a) for n, a in trainer.state.items()} == before
    assert float(trainer.state["step"]) == 6.0
    assert trainer.step_func.body.block.args[-1].name_hint == "lr"


# ---- the command line -----------------------------------------------------------------------


def _cli(tmp: Path, *argv: str) -> int:
    return train_main([SAMPLE, "--data", str(tmp / "data.npz"), *argv])


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    save_npz_atomic(str(tmp_path / "data.npz"), _data())
    return tmp_path


def _npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("backend", ["numpy", "compiled"])
def test_resume_is_bit_identical(tmp: Path, backend: str, capsys: pytest.CaptureFixture[str]
                                 ) -> None:
    if backend == "compiled":
        pytest.importorskip("numba")
    common = ["--backend", backend, "--optimizer", "adamw", "--lr", "0.01", "--warmup", "3",
              "--weight-decay", "0.01", "-p", "fuse-elementwise"]
    assert _cli(tmp, *common, "--steps", "20", "--save", str(tmp / "full.npz"), "--log",
                str(tmp / "full.jsonl")) == 0
    assert _cli(tmp, *common, "--steps", "10", "--checkpoint", str(tmp / "ck"), "--log",
                str(tmp / "part.jsonl")) == 0
    assert _cli(tmp, *common, "--steps", "20", "--resume", str(tmp / "ck"), "--save",
                str(tmp / "resumed.npz"), "--log", str(tmp / "part.jsonl")) == 0
    full, resumed = _npz(tmp / "full.npz"), _npz(tmp / "resumed.npz")
    assert sorted(full) == ["b1", "b2", "w1", "w2"]
    for name in full:
        np.testing.assert_array_equal(resumed[name], full[name])
    lines = [json.loads(s) for s in (tmp / "part.jsonl").read_text().splitlines()]
    want = [json.loads(s) for s in (tmp / "full.jsonl").read_text().splitlines()]
    assert [(r["step"], r["loss"], r["lr"]) for r in lines] == \
        [(r["step"], r["loss"], r["lr"]) for r in want]
    assert set(want[0]) == {"step", "loss", "lr", "step_seconds"}
    out, err = capsys.readouterr()
    assert err == ""   # no progress bar when stderr is not a terminal
    assert "step 20/20 loss" in out


def test_checkpoint_every_k_and_its_contents(tmp: Path) -> None:
    ck = tmp / "ck"
    assert _cli(tmp, "--optimizer", "sgd", "--momentum", "0.9", "--lr", "0.01", "--steps", "7",
                "--checkpoint", str(ck), "--checkpoint-every", "3", "--seed", "5") == 0
    meta = json.loads((ck / "checkpoint.json").read_text())
    assert (meta["step"], meta["data_position"], meta["data_batches"], meta["seed"]) == \
        (7, 7 % BATCHES, BATCHES, 5)
    assert sorted(os.listdir(ck)) == ["checkpoint.json", meta["state"]]
    assert re.fullmatch(r"state-00000007-[0-9a-f]{8}\.npz", meta["state"]), meta["state"]
    state = _npz(ck / meta["state"])
    assert sorted(state) == ["b1", "b2", "buf_b1", "buf_b2", "buf_w1", "buf_w2", "w1", "w2"]
    assert meta["roles"]["buf_w1"] == "momentum_buffer"


def test_an_interrupted_checkpoint_write_leaves_the_previous_one(tmp: Path,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """The write of step 8's checkpoint dies at its last rename (as a signal would stop it):
    step 4's checkpoint is still whole, and resuming from it gives the uninterrupted result."""
    ck = tmp / "ck"
    common = ["--optimizer", "adamw", "--lr", "0.01"]
    assert _cli(tmp, *common, "--steps", "4", "--checkpoint", str(ck)) == 0
    real = os.replace

    def dying(src: str, dst: str) -> None:
        if str(dst).endswith("checkpoint.json"):
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(os, "replace", dying)
    assert _cli(tmp, *common, "--steps", "8", "--resume", str(ck), "--checkpoint", str(ck)) == 130
    monkeypatch.setattr(os, "replace", real)
    assert json.loads((ck / "checkpoint.json").read_text())["step"] == 4
    assert not [n for n in os.listdir(ck) if n.startswith(".lamina-")]
    assert _cli(tmp, *common, "--steps", "8", "--resume", str(ck), "--save",
                str(tmp / "a.npz")) == 0
    assert _cli(tmp, *common, "--steps", "8", "--save", str(tmp / "b.npz")) == 0
    a, b = _npz(tmp / "a.npz"), _npz(tmp / "b.npz")
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


def _assert_one_error(capsys: pytest.CaptureFixture[str], message: str) -> None:
    err = capsys.readouterr().err
    assert err.splitlines()[0] == message, err
    assert "Traceback" not in err


def test_wrong_data_shape(tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _data()
    data["x"] = data["x"][:, :, :7]
    save_npz_atomic(str(tmp / "bad.npz"), data)
    rc = train_main([SAMPLE, "--data", str(tmp / "bad.npz"), "--steps", "3", "--log",
                     str(tmp / "log.jsonl"), "--save", str(tmp / "f.npz"), "--checkpoint",
                     str(tmp / "ck")])
    assert rc == 1
    _assert_one_error(capsys, f"error: {tmp / 'bad.npz'}: 'x' has shape (5, 16, 7); argument 'x' "
                      "is tensor<16x8xf32>, so its batches need shape (N, 16, 8) with N >= 1 (the "
                      "leading dim indexes batches)")
    assert sorted(os.listdir(tmp)) == ["bad.npz", "data.npz"]


def test_data_arrays_must_agree_on_the_batch_count(tmp: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    data = _data()
    data["y"] = data["y"][:3]
    save_npz_atomic(str(tmp / "bad.npz"), data)
    assert train_main([SAMPLE, "--data", str(tmp / "bad.npz"), "--steps", "3"]) == 1
    _assert_one_error(capsys, f"error: {tmp / 'bad.npz'}: the data arrays disagree on the number "
                      "of batches (leading dim): 'x' 5, 'y' 3")


@pytest.mark.parametrize("drop, reshape, message", [
    (["b1", "w2"], None, "no array for trained arguments b1, w2 (it has: b2, w1)"),
    ([], "w1", "'w1' has shape (8, 31), argument 'w1' is tensor<8x32xf32>"),
])
def test_bad_init(tmp: Path, capsys: pytest.CaptureFixture[str], drop: list[str],
                  reshape: str | None, message: str) -> None:
    rng = np.random.default_rng(0)
    init = {"w1": rng.standard_normal((8, 32)), "b1": np.zeros(32), "w2": rng.standard_normal(
        (32, 4)), "b2": np.zeros(4)}
    for n in drop:
        del init[n]
    if reshape:
        init[reshape] = init[reshape][:, :-1]
    save_npz_atomic(str(tmp / "init.npz"), init)
    assert _cli(tmp, "--init", str(tmp / "init.npz"), "--steps", "2", "--save",
                str(tmp / "f.npz")) == 1
    _assert_one_error(capsys, f"error: {tmp / 'init.npz'}: {message}")
    assert not (tmp / "f.npz").exists()


def test_init_sets_the_starting_point(tmp: Path) -> None:
    """Zero steps with --init write the initial parameters back as given (as f32)."""
    rng = np.random.default_rng(0)
    init = {"w1": rng.standard_normal((8, 32)), "b1": np.ones(32), "w2": rng.standard_normal(
        (32, 4)), "b2": np.zeros(4)}
    save_npz_atomic(str(tmp / "init.npz"), init)
    assert _cli(tmp, "--init", str(tmp / "init.npz"), "--steps", "0", "--save",
                str(tmp / "f.npz")) == 0
    got = _npz(tmp / "f.npz")
    for n, a in init.items():
        np.testing.assert_array_equal(got[n], a.astype(np.float32))


@pytest.mark.parametrize("damage, message", [
    ("state", r"corrupt checkpoint: state-00000003-[0-9a-f]{8}\.npz does not match the SHA-256 "
     "in checkpoint.json"),
    ("json", r"corrupt checkpoint: checkpoint\.json does not parse"),
    ("missing", r"no checkpoint\.json \(not a checkpoint folder\)"),
])
def test_corrupt_checkpoint(tmp: Path, capsys: pytest.CaptureFixture[str], damage: str,
                            message: str) -> None:
    ck = tmp / "ck"
    assert _cli(tmp, "--steps", "3", "--checkpoint", str(ck)) == 0
    if damage == "state":
        p = ck / json.loads((ck / "checkpoint.json").read_text())["state"]
        raw = bytearray(p.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        p.write_bytes(bytes(raw))
    elif damage == "json":
        (ck / "checkpoint.json").write_text("{ not json")
    else:
        (ck / "checkpoint.json").unlink()
    capsys.readouterr()
    before = sorted(os.listdir(tmp))
    assert _cli(tmp, "--steps", "6", "--resume", str(ck), "--save", str(tmp / "f.npz"), "--log",
                str(tmp / "log.jsonl")) == 1
    err = capsys.readouterr().err
    assert re.match(re.escape(f"error: cannot resume from '{ck}': ") + message, err), err
    assert len(err.splitlines()) == 1
    assert sorted(os.listdir(tmp)) == before


def test_a_non_finite_loss_stops_at_its_step(tmp: Path, capsys: pytest.CaptureFixture[str]
                                             ) -> None:
    data = _data()
    data["y"][2, 0, 0] = np.nan       # batch 2: step 3
    save_npz_atomic(str(tmp / "nan.npz"), data)
    ck = tmp / "ck"
    rc = train_main([SAMPLE, "--data", str(tmp / "nan.npz"), "--steps", "6", "--checkpoint",
                     str(ck), "--checkpoint-every", "2", "--save", str(tmp / "f.npz")])
    assert rc == 1
    _assert_one_error(capsys, "error: step 3: the loss is nan; training stopped (a checkpoint "
                      "written before this step is kept)")
    assert json.loads((ck / "checkpoint.json").read_text())["step"] == 2
    assert not (tmp / "f.npz").exists()


@pytest.mark.parametrize("argv, message", [
    (["--steps", "-1"], "lamina-train: error: argument --steps: must be at least 0, got -1"),
    (["--steps", "2", "--checkpoint-every", "2"],
     "lamina-train: error: --checkpoint-every needs --checkpoint DIR"),
    (["--steps", "2", "--optimizer", "adam"], "lamina-train: error: argument --optimizer: invalid "
     "choice: 'adam' (choose from 'adamw', 'sgd')"),
    (["--steps", "2", "--momentum", "0.9"], "error: momentum applies to the sgd optimizer, got "
     "momentum=0.9 with adamw"),
])
def test_bad_flags(tmp: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                   message: str) -> None:
    assert _cli(tmp, *argv) == 1
    _assert_one_error(capsys, message)


@pytest.mark.parametrize("data, wanted", [
    ([], ["loss="]),
    (["--tokens", str(ROOT / "samples" / "tiny_lm_tokens.npy"), "--eval-every", "2",
      "--eval-tokens", str(ROOT / "samples" / "tiny_lm_eval.npy")], ["loss=", "tok_s=", "eval="]),
], ids=["batches", "tokens"])
def test_a_progress_bar_on_a_terminal(tmp: Path, data: list[str], wanted: list[str]) -> None:
    """With stderr on a terminal (a pseudo-terminal here), tqdm draws the bar: steps and loss,
    and with a token stream tokens/s and the last eval loss."""
    pytest.importorskip("tqdm")
    import fcntl
    import pty
    import struct
    import subprocess
    import sys
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
    try:
        argv = [str(ROOT / "samples" / "tiny_lm.mlir"), *data] if data else \
            [SAMPLE, "--data", str(tmp / "data.npz")]
        res = subprocess.run([sys.executable, "-m", "lamina.cli.train", *argv, "--steps", "5"],
                             stdout=subprocess.PIPE,
                             stderr=slave, timeout=300, check=False)
    finally:
        os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:   # EIO: the terminal has no writer left
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    assert res.returncode == 0, shown
    text = shown.decode(errors="replace")
    assert "5/5" in text and all(w in text for w in wanted), text


def test_train_checkpoints_every_k_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`lamina.train` writes a checkpoint after steps K, 2K, ... and at the end (each write
    seen through `write_checkpoint`), calls `on_step` once per step, and a run resumed from the
    final checkpoint with more steps goes on from there."""
    import lamina.checkpoint as ck

    written: list[int] = []
    real = ck.write_checkpoint

    def spy(folder: str, step: int, arrays: Any, meta: Any) -> None:
        written.append(step)
        real(folder, step, arrays, meta)

    monkeypatch.setattr(ck, "write_checkpoint", spy)
    seen: list[int] = []
    module = lamina.load(SAMPLE)
    done = lamina.train(module, _data(), steps=7, checkpoint=str(tmp_path / "ck"),
                        checkpoint_every=3, on_step=lambda r: seen.append(r.step), lr=0.01)
    assert written == [3, 6, 7] and seen == list(range(1, 8)) and done.done == 7
    more = lamina.train(module, _data(), steps=9, resume=str(tmp_path / "ck"), lr=0.01)
    straight = lamina.train(module, _data(), steps=9, lr=0.01)
    for name, a in straight.parameters.items():
        np.testing.assert_array_equal(more.parameters[name], a)
