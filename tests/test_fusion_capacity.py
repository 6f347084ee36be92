"""Tier overflow is a compile-time fact: with a target known, `fuse-elementwise` never makes a
kernel whose least tile (one row's share of its intermediates) exceeds the target's sram; it
splits the group there and says so. The pipeline hands fuse-elementwise the target of a later
pass."""

from __future__ import annotations

import functools
import os
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.analysis.fusion import fused_least_tiles, intermediate_bytes
from lamina.backends.compare import compare
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import run_function
from lamina.ir.core.dtypes import tensor_dtype
from lamina.ir.ops.fused import FusedOp
from lamina.ir.text.source import make_context, parse_text, verify
from lamina.passes.fuse_elementwise import FuseElementwise
from lamina.passes.pipeline import build_pipeline, run_pipeline
from strategies import examples
from strategies.programs import programs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "ir", "mesh", "targets", "tiny.toml")
_DIR = tempfile.mkdtemp(prefix="lamina-sram-")


@functools.cache
def _target_with_sram(capacity: int) -> str:
    """A copy of the tiny target whose sram holds `capacity` bytes (a path for `target=`)."""
    text = open(TINY).read().replace("capacity = 65536", f"capacity = {capacity}", 1)
    assert f"capacity = {capacity}" in text
    path = os.path.join(_DIR, f"sram{capacity}.toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def _apply(text: str, spec: str):
    ctx = make_context()
    m = parse_text(text, "t.mlir", ctx)
    run_pipeline(ctx, m, build_pipeline(spec))
    verify(m)
    return m


def _fused(m) -> list[FusedOp]:
    return [op for op in m.walk() if isinstance(op, FusedOp)]


@settings(max_examples=examples(20))
@given(programs(min_ops=2, max_ops=16, dtypes=("f32", "f64", "f16")),
       st.one_of(st.sampled_from([1, 64, 256, 1024]), st.integers(1, 4096)))
def test_every_kernel_fits_the_targets_sram(prog, capacity):
    spec = f"fuse-elementwise{{target={_target_with_sram(capacity)}}}"
    m = _apply(prog.text, spec)
    text = str(m)
    for f in _fused(m):
        assert -(-intermediate_bytes(f) // fused_least_tiles(f)) <= capacity, text
    # a second run changes nothing, and the split program computes what the original does
    again = _apply(text, spec)
    assert str(again) == text
    ref = _apply(prog.text, "")
    a = run_function(find_entry(ref, None), prog.inputs)
    b = run_function(find_entry(m, None), prog.inputs)
    outs = find_entry(ref, None).function_type.outputs.data
    for i, (x, y, t) in enumerate(zip(b.outputs, a.outputs, outs, strict=True)):
        d = compare(f"out{i}", tensor_dtype(t), x, y)
        assert d.ok, d.line() + "\n" + prog.text + "\n" + text


def test_adam_step_fits_tiny_after_fusion():
    """The Adam update of mlp_training_offload fused whole holds 1.3 MB of intermediates, 20x
    tiny's 64 KiB sram, but a row of it (256 elements) holds 10 KiB: compiled for tiny it stays
    one kernel that runs tile by tile, the tier plan charges it at most the sram, and the plan
    fits and runs checked. A row too large for the sram is split (the next test)."""
    text = open(os.path.join(ROOT, "samples", "mlp_training_offload.mlir")).read()
    unbounded = _apply(text, "fuse-elementwise")
    assert max(intermediate_bytes(f) for f in _fused(unbounded)) > 1_300_000
    m = _apply(text, "fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=tiny}")
    kernels = _fused(m)
    assert kernels
    assert all(-(-intermediate_bytes(f) // fused_least_tiles(f)) <= 65536 for f in kernels)
    assert max(intermediate_bytes(f) for f in kernels) > 65536   # tiled, not split


def test_a_row_larger_than_sram_is_split():
    """Rows of 8192 f32 (32 KiB per value): on tiny at most two values of a row fit."""
    lines = ["func.func @f(%x: tensor<2x8192xf32>) -> tensor<2x8192xf32> {"]
    prev = "%x"
    for i, op in enumerate(["neg", "exp", "tanh", "abs", "sqrt", "neg"]):
        lines.append(f"  %v{i} = lamina.{op} {prev} : tensor<2x8192xf32>")
        prev = f"%v{i}"
    lines += [f"  func.return {prev} : tensor<2x8192xf32>", "}"]
    m = _apply("\n".join(lines), "fuse-elementwise{target=tiny}")
    kernels = _fused(m)
    assert len(kernels) >= 2
    assert all(-(-intermediate_bytes(f) // fused_least_tiles(f)) <= 65536 for f in kernels)


def test_the_pipeline_hands_its_target_to_fusion():
    def target(spec: str, at: int = 0) -> str:
        p = build_pipeline(spec)[at]
        assert isinstance(p, FuseElementwise)
        return p.target

    assert target("fuse-elementwise") == ""
    assert target("fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=tiny}") == "tiny"
    assert target("fuse-elementwise,assign-memory-tiers") == "h100-node"  # its default counts
    assert target("fuse-elementwise{target=h200-node},assign-memory-tiers{target=tiny}") == "h200-node"
    spec = "propagate-sharding,insert-collectives{target=h100-cluster},fuse-elementwise"
    assert target(spec, 2) == "h100-cluster"
