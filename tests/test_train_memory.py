"""Memory tiers in training: `lamina-train --target T` with and without a tier plan.

- A step that does not fit the target's HBM without a plan stops before anything is written
  with one tier-overflow error naming the tier and the step (exit 1, no partial files).
- With `-p 'annotate-lifetimes,assign-memory-tiers{target=T}'` the same step trains: every loss
  equals the unconstrained run's bit for bit (moves are copies), and every log line's
  `peak_bytes` is within the target's capacities, with bytes really offloaded to host.
- A non-finite eval loss stops the run at its step like a non-finite training loss.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from lamina.cli.outputs import save_npz_atomic
from lamina.cli.train import main as train_main

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = str(ROOT / "samples" / "mlp_train.mlir")
DATA = str(ROOT / "samples" / "mlp_train_data.npz")
HBM = 8192   # samples/mlp_train.mlir's AdamW step needs 12492 bytes of HBM with lifetimes alone

TARGET = f"""
name = "small"
description = "one made-up device with {HBM} bytes of HBM"
devices = 1
flops = 1e12
[[links]]
name = "link"
group = 1
alpha = 1e-6
beta = 100e9
[[tiers]]
name = "sram"
capacity = 65536
bandwidth = 10e12
[[tiers]]
name = "hbm"
capacity = {HBM}
bandwidth = 1e12
[[tiers]]
name = "host"
capacity = 16777216
bandwidth = 20e9
[[transfers]]
between = ["sram", "hbm"]
bandwidth = 1e12
[[transfers]]
between = ["hbm", "host"]
bandwidth = 20e9
"""


def _log(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_step_that_overflows_hbm_trains_with_a_tier_plan(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "small.toml"
    target.write_text(TARGET)
    base = [SAMPLE, "--data", DATA, "--steps", "4"]
    before = sorted(p.name for p in tmp_path.iterdir())
    rc = train_main([*base, "--target", str(target), "-p", "annotate-lifetimes",
                     "--log", str(tmp_path / "bad.jsonl"), "--save", str(tmp_path / "bad.npz"),
                     "--checkpoint", str(tmp_path / "ck")])
    err = capsys.readouterr().err
    assert rc == 1
    head = err.splitlines()[0]
    assert "mlp_train.mlir:" in head and ": error: step 1: the training step @mlp_loss_step " \
        "does not fit tier 'hbm' of target 'small': checked execution: capacity overflow in " \
        "tier 'hbm'" in head and f"capacity {HBM} (target 'small')" in head
    assert err.count("error:") == 1 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before   # nothing written

    assert train_main([*base, "--log", str(tmp_path / "free.jsonl")]) == 0
    plan = f"annotate-lifetimes,assign-memory-tiers{{target={target}}}"
    assert train_main([*base, "--target", str(target), "-p", plan,
                       "--log", str(tmp_path / "plan.jsonl")]) == 0
    err = capsys.readouterr().err
    free, planned = _log(tmp_path / "free.jsonl"), _log(tmp_path / "plan.jsonl")
    assert [r["loss"] for r in planned] == [r["loss"] for r in free]
    assert all("peak_bytes" not in r for r in free)
    for r in planned:
        peaks = r["peak_bytes"]
        assert isinstance(peaks, dict) and sorted(peaks) == ["hbm", "host", "sram"]
        assert 0 < peaks["hbm"] <= HBM and 0 < peaks["host"] <= 16777216
    peaks = planned[-1]["peak_bytes"]
    assert isinstance(peaks, dict)
    assert f"lamina-train: peak bytes per device on target 'small': sram 0 of 65536, hbm " \
        f"{peaks['hbm']} of {HBM}, host {peaks['host']} of 16777216" in err


def test_a_non_finite_eval_loss_stops_at_its_step(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with np.load(DATA) as z:
        data = {k: z[k] for k in z.files}
    data["y"][0, 0, 0] = np.inf
    save_npz_atomic(str(tmp_path / "eval.npz"), data)
    ck = tmp_path / "ck"
    rc = train_main([SAMPLE, "--data", DATA, "--steps", "6", "--eval-every", "2",
                     "--eval-data", str(tmp_path / "eval.npz"), "--checkpoint", str(ck),
                     "--checkpoint-every", "1", "--save", str(tmp_path / "f.npz")])
    assert rc == 1
    err = capsys.readouterr().err
    assert err.strip() == "error: step 2: the eval loss is inf; training stopped (a checkpoint " \
        "written before this step is kept)"
    assert json.loads((ck / "checkpoint.json").read_text())["step"] == 1
    assert not (tmp_path / "f.npz").exists()
