"""`bytes_moved` in the run statistics: each kernel's distinct operands plus its results.

`bytes_accessed` counts every operand slot, so `mul %x, %x` reads x twice there; a kernel reads a
value once, and the issue's table of kernels and bytes (issue 13) counts it once: that is
`bytes_moved`. A fused op is one kernel, its traffic its inputs and results; on a mesh both
counters are per device (device 0's shards).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import run_function
from lamina.backends.numpy.spmd import run_spmd
from lamina.ir.text.source import make_context, parse_text
from lamina.passes.pipeline import build_pipeline, run_pipeline

F = "tensor<4x8xf32>"          # 128 bytes
SQUARE = (f"func.func @f(%x: {F}) -> {F} {{\n"
          f"  %y = lamina.mul %x, %x : {F}\n"
          f"  %z = lamina.add %y, %x : {F}\n"
          f"  func.return %z : {F}\n}}\n")


def _module(text: str, pipeline: str = ""):
    ctx = make_context()
    m = parse_text(text, "t.mlir", ctx)
    if pipeline:
        run_pipeline(ctx, m, build_pipeline(pipeline))
    return find_entry(m, None)


def test_an_operand_passed_twice_counts_once() -> None:
    x = np.ones((4, 8), np.float32)
    stats = run_function(_module(SQUARE), [x]).stats
    # mul: x (once) + y; add: y + x + z. bytes_accessed reads x twice in the mul.
    assert stats["bytes_moved"] == (2 + 3) * 128
    assert stats["bytes_accessed"] == (3 + 3) * 128


def test_a_fused_kernel_moves_its_inputs_and_results_only() -> None:
    x = np.ones((4, 8), np.float32)
    stats = run_function(_module(SQUARE, "fuse-elementwise"), [x]).stats
    assert stats["kernels"] == 1
    assert stats["bytes_moved"] == 2 * 128     # x in, z out; y never leaves the tile


def test_placed_programs_count_per_device_and_fused_ops_once() -> None:
    placed = "tensor<4x8xf32, #lamina.place<@m, [[data], []]>>"
    text = ("lamina.mesh @m [data = 2]\n"
            f"func.func @f(%x: {placed}) -> {F} {{\n"
            f"  %y = lamina.mul %x, %x : ({placed}, {placed}) -> {F}\n"
            f"  %z = lamina.add %y, %x : ({F}, {placed}) -> {F}\n"
            f"  func.return %z : {F}\n}}\n")
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    unfused = run_spmd(_module(text, "propagate-sharding"), [x]).stats
    fused = run_spmd(_module(text, "propagate-sharding,fuse-elementwise"), [x]).stats
    assert unfused["bytes_moved"] == (2 + 3) * 64   # half of every value per device
    assert fused["kernels"] == 1 and fused["bytes_moved"] == 2 * 64


def test_lamina_run_writes_bytes_moved(tmp_path: Path) -> None:
    (tmp_path / "p.mlir").write_text(SQUARE)
    res = subprocess.run([sys.executable, "-m", "lamina.cli.run", "p.mlir", "--stats-json", "-"],
                         cwd=tmp_path, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["bytes_moved"] == 5 * 128
