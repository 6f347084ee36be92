"""A checkpoint write killed by SIGKILL at any moment leaves the last good checkpoint loadable.

A child process writes checkpoints of a few MB of state into one folder in a loop (steps 1, 2,
..., each written twice with other bytes: the case where a state file named by its step alone
would be replaced under the checkpoint that names it). The parent kills it at moments spread
over the writes, then reads the folder the way `--resume` does: it must load (SHA-256 verified)
and hold the arrays of the step it names. The next write cleans up what the killed writer left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from lamina.checkpoint import read_checkpoint, write_checkpoint

WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from lamina.checkpoint import write_checkpoint
    folder = sys.argv[1]
    step = 0
    print("ready", flush=True)
    while True:
        step += 1
        for version in (0, 1):
            value = np.float32(step * 2 + version)
            write_checkpoint(folder, step, {"w": np.full((512, 1024), value, np.float32)},
                             {"variant": version})
""")


def _check_loads(folder: Path) -> int:
    meta, arrays = read_checkpoint(str(folder))
    step, version = meta["step"], meta["variant"]
    np.testing.assert_array_equal(arrays["w"], np.float32(step * 2 + version))
    return step


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_during_checkpoint_writes_keeps_the_last_good_one(tmp_path: Path) -> None:
    folder = tmp_path / "ck"
    write_checkpoint(str(folder), 0, {"w": np.zeros((512, 1024), np.float32)}, {"variant": 0})
    steps = []
    for delay in (0.05, 0.13, 0.21, 0.34, 0.55):
        child = subprocess.Popen([sys.executable, "-c", WRITER, str(folder)],
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.wait()
        steps.append(_check_loads(folder))
        names = os.listdir(folder)
        assert [n for n in names if n.startswith("state-")], names
    assert max(steps) > 0, f"no write finished before a kill: {steps}"
    # the next writer removes every temporary and every state file but its own
    write_checkpoint(str(folder), 99, {"w": np.full((4,), 199, np.float32)}, {"variant": 1})
    meta, _ = read_checkpoint(str(folder))
    assert sorted(os.listdir(folder)) == sorted(["checkpoint.json", meta["state"]])
    assert _check_loads(folder) == 99
