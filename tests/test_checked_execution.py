# ruff: noqa: E501  (MLIR types in test programs)
"""Checked execution: bytes per tier per device, overflow / host-compute / use-after-free errors,
stats and the memory plot, through lamina-run and the observer directly."""

from __future__ import annotations

import json

import numpy as np
import pytest
from lamina.cli.run import main as run_main
from lamina.ir.core.diagnostics import LaminaError
from memtools import checked_run, parse, target_with

T = "tensor<64x64xf32>"  # 16 KiB
H = "tensor<64x64xf32, #lamina.place<tier = host>>"
D = "tensor<64x64xf32, #lamina.place<tier = hbm>>"
X = np.ones((64, 64), np.float32)


def test_bytes_per_tier_and_moves():
    _, m = parse(f"""
func.func @f(%x: {T}) -> {T} {{
  %a = lamina.exp %x : {T}
  %h = lamina.move %a to host : {T} -> {H}
  lamina.free %a : {T}
  %b = lamina.move %h to hbm : {H} -> {D}
  lamina.free %h : {H}
  %c = lamina.neg %b : ({D}) -> {T}
  lamina.free %b : {D}
  func.return %c : {T}
}}""")
    res, ck = checked_run(m, [X], target_with(hbm=3 * 16384))
    np.testing.assert_array_equal(res.outputs[0], -np.exp(X))
    assert ck.peak == {"sram": 0, "hbm": 3 * 16384, "host": 16384, "nvme": 0}
    assert ck.stats()["moved_bytes"] == {"hbm->host": 16384, "host->hbm": 16384}


def test_sharded_values_count_local_shards():
    _, m = parse("""
lamina.mesh @m [data = 4]
func.func @f(%x: tensor<64x64xf32, #lamina.place<@m, [[data], []]>>) -> tensor<64x64xf32, #lamina.place<@m, [[data], []]>> {
  %a = lamina.exp %x : tensor<64x64xf32, #lamina.place<@m, [[data], []]>>
  func.return %a : tensor<64x64xf32, #lamina.place<@m, [[data], []]>>
}""")
    _, ck = checked_run(m, [X])
    assert ck.peak["hbm"] == 2 * 16384 // 4


def test_capacity_overflow_names_live_values():
    _, m = parse(f"""
func.func @f(%x: {T}, %y: {T}) -> {T} {{
  %a = lamina.exp %x : {T}
  %b = lamina.add %a, %y : {T}
  func.return %b : {T}
}}""")
    with pytest.raises(LaminaError) as e:
        checked_run(m, [X, X], target_with(hbm=3 * 16384))
    msg = e.value.message
    assert "capacity overflow in tier 'hbm' at %b = lamina.add: 65536 bytes per device live, " \
           "capacity 49152 (target 'tiny')" in msg
    assert "live: %x (16 KiB), %y (16 KiB), %a (16 KiB), %b (16 KiB)" in msg
    assert e.value.loc is not None and e.value.loc.line == 4


def unverified(text):
    return parse(text, check=False)[1]


def test_use_after_free():
    m = unverified(f"""
func.func @f(%x: {T}) -> {T} {{
  %a = lamina.exp %x : {T}
  lamina.free %a : {T}
  %b = lamina.neg %a : {T}
  func.return %b : {T}
}}""")
    with pytest.raises(LaminaError) as e:
        checked_run(m, [X])
    assert "lamina.neg uses %a after its lamina.free" in e.value.message
    assert e.value.loc is not None and e.value.loc.line == 5


def test_double_free():
    m = unverified(f"""
func.func @f(%x: {T}) -> {T} {{
  %a = lamina.exp %x : {T}
  lamina.free %a : {T}
  lamina.free %a : {T}
  func.return %x : {T}
}}""")
    with pytest.raises(LaminaError, match="%a is freed twice"):
        checked_run(m, [X])


def test_compute_on_host_value():
    m = unverified(f"""
func.func @f(%x: {H}) -> {T} {{
  %a = lamina.exp %x : ({H}) -> {T}
  func.return %a : {T}
}}""")
    with pytest.raises(LaminaError) as e:
        checked_run(m, [X])
    assert "compute op %a = lamina.exp reads %x in tier 'host'" in e.value.message


def write(tmp_path, text):
    p = tmp_path / "p.mlir"
    p.write_text(text)
    return str(p)


def test_cli_overflow_exit_1_and_stats(tmp_path, capsys):
    f = write(tmp_path, open("samples/long_chain_frees.mlir").read())
    assert run_main([f, "--target", "tiny"]) == 1
    head, *echo = capsys.readouterr().err.rstrip("\n").split("\n")
    assert "capacity overflow in tier 'hbm'" in head
    line = int(head.split(":")[1])  # one diagnostic: its line, then the source line and a caret
    assert echo == [open(f).read().split("\n")[line - 1], "  ^"]
    stats = tmp_path / "s.json"
    assert run_main([f, "-p", "annotate-lifetimes", "--target", "tiny", "--stats-json",
                     str(stats)]) == 0
    d = json.loads(stats.read_text())
    assert d["peak_bytes"] == {"sram": 0, "hbm": 2 * 262144, "host": 0, "nvme": 0}
    assert d["moved_bytes"] == {}


def test_memory_plot(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "mem.png"
    assert run_main(["samples/zero_offload_step.mlir", "-p",
                     "annotate-lifetimes,assign-memory-tiers{target=tiny}", "--target", "tiny",
                     "--memory-plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10000


# Each memory sample's documented pipelines (the "Run:" lines in its header): with --check the
# outputs equal the program as parsed, the checked run under `tiny` never overflows, and every
# output is finite (the Adam samples read |v| so sqrt never sees a negative random input).
DOCUMENTED = [
    ("samples/mlp_training_offload.mlir", "annotate-lifetimes,assign-memory-tiers{target=tiny}"),
    ("samples/mlp_training_offload.mlir",
     "fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=tiny}"),
    ("samples/zero_offload_step.mlir", ""),
    ("samples/zero_offload_step.mlir", "annotate-lifetimes,assign-memory-tiers{target=tiny}"),
    ("samples/long_chain_frees.mlir", "annotate-lifetimes"),
    ("samples/long_chain_frees.mlir", "annotate-lifetimes,assign-memory-tiers{target=tiny}"),
]


@pytest.mark.parametrize("sample,pipeline", DOCUMENTED)
def test_documented_pipelines_check_and_finite(tmp_path, capsys, sample, pipeline):
    out = tmp_path / "o.npz"
    args = [sample, "--check", "--outputs", str(out), "--seed", "3"]
    if pipeline:
        args += ["-p", pipeline, "--target", "tiny"]
    assert run_main(args) == 0, capsys.readouterr().err
    text = capsys.readouterr().out
    assert "check FAILED" not in text and text.count("check ") >= 1
    with np.load(out) as z:
        assert z.files
        for k in z.files:
            assert np.isfinite(z[k]).all(), f"{sample} {pipeline}: output {k} is not finite"


FULL = ("fuse-elementwise,propagate-sharding,insert-collectives,annotate-lifetimes,"
        "assign-memory-tiers{target=tiny}")


def test_full_pipeline_on_training_step_verifies_and_checks(tmp_path, capsys):
    # the composition bullet: fusion, placement, lifetimes and tiers on the training step
    stats = tmp_path / "s.json"
    assert run_main(["samples/mlp_training_offload.mlir", "-p", FULL, "--target", "tiny",
                     "--check", "--stats-json", str(stats)]) == 0, capsys.readouterr().err
    d = json.loads(stats.read_text())
    assert all(o["ok"] for o in d["outputs"]) and len(d["outputs"]) == 7
    assert d["peak_bytes"]["hbm"] <= 1 << 20 and d["moved_bytes"].get("hbm->host", 0) > 0
    assert d["peak_bytes"]["sram"] > 0  # the fused Adam kernels' intermediates


def test_full_pipeline_on_placed_training_step(tmp_path, capsys):
    stats = tmp_path / "s.json"
    assert run_main(["samples/mlp_dp_training_step.mlir", "-p", FULL, "--check",
                     "--stats-json", str(stats)]) == 0, capsys.readouterr().err
    d = json.loads(stats.read_text())
    assert all(o["ok"] for o in d["outputs"]) and d["devices"] > 1


def test_placed_training_step_without_fusion(tmp_path, capsys):
    p = "propagate-sharding,insert-collectives,annotate-lifetimes,assign-memory-tiers{target=tiny}"
    stats = tmp_path / "s.json"
    assert run_main(["samples/mlp_dp_training_step.mlir", "-p", p, "--check",
                     "--stats-json", str(stats)]) == 0, capsys.readouterr().err
    d = json.loads(stats.read_text())
    assert all(o["ok"] for o in d["outputs"]) and d["devices"] > 1
