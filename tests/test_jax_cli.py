"""`lamina-run --backend jax` end to end: statistics, devices, memory moves, several processes, and
every refusal as one diagnostic line with exit code 1.

Subprocesses inherit tests/conftest.py's XLA_FLAGS (8 host CPU devices) unless a test sets its
own. The multi-process test starts 2 processes x 4 CPU devices that meet at a coordinator on a
free localhost port, each with a timeout.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import lamina  # noqa: E402
from lamina.backends.inputs import random_inputs  # noqa: E402
from lamina.backends.interface import find_entry  # noqa: E402
from lamina.cli.run import main as run_main  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RUN = str(Path(sys.executable).with_name("lamina-run"))
PLACE = "propagate-sharding,insert-collectives{target=h100-node}"
NO_JAX = """
import sys
class NoJax:
    def find_spec(self, name, path=None, target=None):
        if name == "jax" or name.startswith("jax."):
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)
sys.meta_path.insert(0, NoJax())
from lamina.cli.run import main
sys.exit(main(sys.argv[1:]))
"""
JAX_FIRST = """
import sys, jax
jax.devices()   # jax starts its backends before Lamina can set the device count
from lamina.cli.run import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def megatron(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """samples/mlp_megatron.mlir with small dims (2 x 4 mesh, one all_reduce)."""
    text = (ROOT / "samples" / "mlp_megatron.mlir").read_text()
    path = tmp_path_factory.mktemp("jax") / "megatron.mlir"
    path.write_text(text.replace("2048", "64").replace("1024", "32").replace("4096", "128"))
    return path


def cli(*argv: str | Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = run_main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def sub(*argv: str | Path, code: str | None = None, env: dict[str, str] | None = None,
        timeout: float = 180) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", code, *map(str, argv)] if code else [RUN, *map(str, argv)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, **(env or {})})


def test_stats_report_compile_and_run_time_and_the_hlo_collectives(
        megatron: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stats_path = tmp_path / "stats.json"
    rc, out, err = cli(megatron, "--backend", "jax", "-p", PLACE, "--repeats", "3", "--check",
                       "--stats-json", stats_path, capsys=capsys)
    assert rc == 0, err
    assert out.splitlines()[0].startswith("yb: f32[64, 32] mean ")
    assert out.splitlines()[1].startswith("check yb: ok")
    stats = json.loads(stats_path.read_text())
    assert stats["backend"] == "jax" and stats["platform"] == "cpu" and stats["devices"] == 8
    assert stats["compile_seconds"] > 0 and stats["repeats"] == 3
    assert stats["run_seconds"] == sorted(stats["run_seconds_all"])[1]
    (h,) = stats["hlo_collectives"]
    assert (h["kind"], h["replica_groups"]) == ("all_reduce", [[0, 1, 2, 3], [4, 5, 6, 7]])
    assert h["payload_bytes"] == 32 * 32 * 4 and h["bytes_per_device"] == 6144
    (c,) = stats["collectives"]
    assert (c["kind"], c["axes"], c["replica_groups"]) == ("all_reduce", ["model"],
                                                           h["replica_groups"])
    assert stats["hlo_matches_plan"] is True


def test_numpy_stats_keep_their_keys(megatron: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The NumPy backend's keys stay; the timing keys are every backend's now (issue 21)."""
    rc, out, err = cli(megatron, "-p", PLACE, "--stats-json", "-", "--repeats", "2",
                       capsys=capsys)
    assert rc == 0, err
    stats = json.loads(out)
    assert "backend" not in stats and stats["compile_seconds"] > 0 and stats["repeats"] == 2
    assert stats["run_seconds"] == sorted(stats["run_seconds_all"])[0] or len(
        stats["run_seconds_all"]) == 2
    assert stats["collectives"][0]["kind"] == "all_reduce"


def test_host_device_count_follows_the_mesh(megatron: Path, tmp_path: Path) -> None:
    """Without --devices, XLA is started with the mesh's size even when XLA_FLAGS asks for fewer."""
    stats_path = tmp_path / "s.json"
    r = sub(megatron, "--backend", "jax", "-p", PLACE, "--stats-json", stats_path,
            env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    assert r.returncode == 0, r.stderr
    assert json.loads(stats_path.read_text())["devices"] == 8


def test_too_few_devices_is_one_diagnostic(megatron: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = cli(megatron, "--backend", "jax", "-p", PLACE, "--devices", "4",
                       capsys=capsys)
    assert rc == 1 and out == ""
    assert err.strip() == "error: backend 'jax': mesh @m has 8 devices, but --devices gives 4"
    r = sub(megatron, "--backend", "jax", "-p", PLACE, code=JAX_FIRST,
            env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "error: backend 'jax': mesh @m has 8 devices, but jax has only 2 cpu devices (jax was "
        "started before Lamina could set XLA's host device count: set "
        "XLA_FLAGS=--xla_force_host_platform_device_count=8 before it starts)"]


def test_missing_jax_is_one_diagnostic_saying_how_to_install(megatron: Path) -> None:
    r = sub(megatron, "--backend", "jax", code=NO_JAX)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "error: backend 'jax' needs the Python package 'jax', which is not installed: "
        "pip install 'lamina[jax]'"]
    ok = sub(megatron, "-p", PLACE, code=NO_JAX)   # the NumPy backend needs no jax
    assert ok.returncode == 0, ok.stderr


def test_unsupported_op_and_option_are_one_diagnostic_each(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prog = tmp_path / "arith.mlir"
    prog.write_text("func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
                    "  %y = arith.addf %x, %x : tensor<4xf32>\n"
                    "  func.return %y : tensor<4xf32>\n}\n")
    rc, out, err = cli(prog, "--backend", "jax", capsys=capsys)
    assert (rc, out) == (1, "")
    assert err.strip().splitlines() == [f"{prog}:2:3: error: backend 'jax' cannot run 'arith.addf'",
                                        "  %y = arith.addf %x, %x : tensor<4xf32>", "  ^"]
    sample = ROOT / "samples" / "long_chain_frees.mlir"
    rc, out, err = cli(sample, "--backend", "jax", "--target", "tiny", capsys=capsys)
    assert (rc, out) == (1, "")
    assert err.strip() == ("error: backend 'jax' does not check memory-tier capacities "
                           "(target 'tiny'): XLA owns the buffers; use backend 'numpy' for "
                           "checked execution")
    rc, out, err = cli(sample, "--backend", "jax", "--coordinator", "localhost:1",
                       capsys=capsys)
    assert rc == 1
    assert err.strip() == ("lamina-run: error: --coordinator, --num-processes and --process-id "
                           "go together")


def test_memory_moves_run_and_say_how_once(capsys: pytest.CaptureFixture[str]) -> None:
    sample = ROOT / "samples" / "zero_offload_step.mlir"
    rc, out, err = cli(sample, "--backend", "jax", "--check", capsys=capsys)
    assert rc == 0, err
    assert err.splitlines() == [
        "note: lamina.move to host is device_put to memory kind 'pinned_host', to "
        "hbm back to 'device'; on cpu both are the same RAM and XLA compiles the moves to no "
        "copies"]
    checks = [line for line in out.splitlines() if line.startswith("check ")]
    assert [c.split(":")[0] for c in checks] == [  # the results, by their names in the IR
        f"check {n}" for n in ("w1n", "w2n", "m1h", "v1h", "m2h", "v2h", "loss")]
    assert all(": ok " in line for line in checks)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_processes_of_four_devices_run_one_mesh(megatron: Path, tmp_path: Path) -> None:
    """jax.distributed on localhost: 2 processes x 4 CPU devices run the 2 x 4 program; process 0
    writes the outputs, which equal the single-process NumPy run."""
    try:
        port = _free_port()
    except OSError as e:   # no loopback networking: the one thing this platform cannot do
        pytest.skip(f"cannot bind a localhost port for the coordinator: {e}")
    outs = tmp_path / "out.npz"
    stats = tmp_path / "stats.json"
    common = [RUN, str(megatron), "--backend", "jax", "-p", PLACE, "--devices", "4",
              "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--seed", "3",
              "--outputs", str(outs), "--stats-json", str(stats)]
    procs = [subprocess.Popen([*common, "--process-id", str(i)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT) for i in range(2)]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=240)
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for rc, _, err in results:
        assert rc == 0, err[-2000:]
        # Gloo's connection lines (native, on fd 1) are jax's transport talking, not Lamina
        assert not [line for line in err.splitlines() if line.startswith("[Gloo]")], err[-2000:]
    assert results[1][1] == ""   # process 1 prints nothing
    s = json.loads(stats.read_text())
    assert (s["processes"], s["devices"], s["hlo_matches_plan"]) == (2, 8, True)
    module = lamina.apply(lamina.load(str(megatron)), PLACE)
    ref = lamina.run(module, random_inputs(find_entry(module, None), 3))
    with np.load(outs) as got:
        np.testing.assert_allclose(got["yb"], ref.outputs["yb"], rtol=2e-5,
                                   atol=2e-5 * float(np.abs(ref.outputs["yb"]).max()))
