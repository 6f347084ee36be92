"""The backend interface: the registry, feature checks before a run, options that reach the backend,
and `lamina-run --backend` on top of them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import lamina
import pytest
from lamina.backends.interface import (
    Feature,
    Program,
    check_supported,
    find_entry,
    required_features,
)
from lamina.backends.numpy.options import NumpyOptions
from lamina.backends.registry import backend_names, get_backend
from lamina.ir.core.diagnostics import LaminaError
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp

ROOT = Path(__file__).resolve().parent.parent
RUN = str(Path(sys.executable).with_name("lamina-run"))

PLACED = """
lamina.mesh @m [data = 2]
func.func @f(%x: tensor<4x8xf32, #lamina.place<@m, [[data], []]>>) -> tensor<4x8xf32, #lamina.place<@m, [[data], []]>> {
  %y = lamina.tanh %x : tensor<4x8xf32, #lamina.place<@m, [[data], []]>>
  func.return %y : tensor<4x8xf32, #lamina.place<@m, [[data], []]>>
}
"""

FUSED = """
func.func @g(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %a = lamina.tanh %x : tensor<4x8xf32>
  %b = lamina.exp %a : tensor<4x8xf32>
  lamina.free %a : tensor<4x8xf32>
  func.return %b : tensor<4x8xf32>
}
"""


class WholeArraysOnly:
    """A backend that runs only unplaced, unfused programs (to exercise the feature check; it
    delegates the arithmetic to the NumPy interpreter)."""

    name: ClassVar[str] = "whole-arrays"
    features: ClassVar[frozenset[Feature]] = frozenset({Feature.LIFETIMES})
    Options: ClassVar[type[NumpyOptions]] = NumpyOptions

    def compile(self, module: ModuleOp, func: FuncOp, options: NumpyOptions,
                donate: frozenset[int] = frozenset(), warmup: bool = True) -> Program:
        return get_backend("numpy").compile(module, func, options, donate, warmup)


def test_registry_lists_numpy_and_refuses_unknown_names() -> None:
    assert "numpy" in backend_names()
    assert get_backend("numpy").name == "numpy"
    with pytest.raises(LaminaError, match=r"unknown backend 'nmpy' \(did you mean 'numpy'\?\)"):
        get_backend("nmpy")


def test_required_features_name_the_first_op_needing_each() -> None:
    placed = lamina.parse(PLACED)
    feats = required_features(find_entry(placed, None))
    assert set(feats) == {Feature.PLACED}
    fused = lamina.apply(lamina.parse(FUSED), "fuse-elementwise")
    feats = required_features(find_entry(fused, None))
    assert set(feats) == {Feature.FUSED}   # the free of %a ended inside the kernel
    assert feats[Feature.FUSED].name == "lamina.fused"
    assert Feature.LIFETIMES in required_features(find_entry(lamina.parse(FUSED), None))


def test_unsupported_feature_is_one_diagnostic_at_the_op() -> None:
    module = lamina.apply(lamina.parse(FUSED, "g.mlir"), "fuse-elementwise")
    with pytest.raises(LaminaError) as e:
        check_supported(WholeArraysOnly(), find_entry(module, None))
    assert e.value.message == ("backend 'whole-arrays' does not support fused kernels "
                               "(lamina.fused): lamina.fused needs it")
    assert e.value.loc is not None and (e.value.loc.file, e.value.loc.line) == ("g.mlir", 3)
    placed = lamina.parse(PLACED, "f.mlir")
    with pytest.raises(LaminaError, match="does not support placed programs"):
        check_supported(WholeArraysOnly(), find_entry(placed, None))
    check_supported(WholeArraysOnly(), find_entry(lamina.parse(FUSED), None))  # frees are fine


def test_options_reach_the_backend() -> None:
    """threads and tile size travel in the backend's options (no module globals): the same bits
    either way."""
    text = (ROOT / "samples" / "layernorm_gelu_dropout.mlir").read_text()
    module = lamina.apply(lamina.parse(text), "fuse-elementwise")
    one = lamina.run(module, entry="ln_gelu_dropout_small", threads=1, tile_bytes=256)
    two = lamina.run(module, entry="ln_gelu_dropout_small", threads=2, tile_bytes=256)
    assert one.outputs["out0"].tobytes() == two.outputs["out0"].tobytes()
    # a typo is not ignored; like every API failure it is a LaminaError naming the options
    with pytest.raises(lamina.LaminaError, match=r"backend 'numpy' has no option 'thread' "
                       r"\(its options: threads, tile_bytes, target, kernel_times\)"):
        lamina.run(module, entry="ln_gelu_dropout_small", thread=1)


def test_lamina_run_backend_flag() -> None:
    sample = str(ROOT / "samples" / "layernorm_gelu_dropout.mlir")
    ok = subprocess.run([RUN, sample, "--entry", "ln_gelu_dropout_small", "--backend", "numpy"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([RUN, sample, "--backend", "tpu"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines() == [
        "error: unknown backend 'tpu'; backends: " + ", ".join(backend_names())]
