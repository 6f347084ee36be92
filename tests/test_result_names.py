"""Results are called what the program calls them (`lamina.ir.text.result_names`), everywhere.

A `lamina.name` result attribute first, then the returned SSA value's name, then `out<i>`; a
name taken by an earlier result gets a suffix; `out<i>` finds result i in `Run.outputs` without
being a second key; a pass never renames a result (the pipeline writes the attribute back).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import lamina
import numpy as np
import pytest
from lamina.backends.interface import find_entry
from lamina.ir.text.result_names import result_names

ROOT = Path(__file__).resolve().parents[1]
T = "tensor<4xf32>"
NAMED = f"""
func.func @f(%x: {T}) -> ({T}, {T}, {T}, {T} {{lamina.name = "z"}}, {T}) {{
  %0 = lamina.add %x, %x : ({T}, {T}) -> {T}
  %y = lamina.mul %x, %x : ({T}, {T}) -> {T}
  func.return %0, %x, %x, %0, %y : {T}, {T}, {T}, {T}, {T}
}}
"""


def test_attribute_then_ssa_name_then_position_with_suffixes_for_repeats() -> None:
    module = lamina.parse(NAMED)
    assert result_names(find_entry(module, "f")) == ["out0", "x", "x_1", "z", "y"]
    again = lamina.parse(lamina.to_text(module))   # the names survive the text format
    assert result_names(find_entry(again, "f")) == ["out0", "x", "x_1", "z", "y"]


def test_outputs_by_name_and_by_position_without_a_second_key() -> None:
    run = lamina.run(lamina.parse(NAMED), {"x": np.arange(4, dtype=np.float32)})
    assert list(run.outputs) == ["out0", "x", "x_1", "z", "y"] and len(run.outputs) == 5
    assert run.outputs["out4"] is run.outputs["y"] and run.outputs["out3"] is run.outputs["z"]
    assert "out4" in run.outputs and "out5" not in run.outputs and "w" not in run.outputs
    np.testing.assert_array_equal(run.outputs["y"], np.arange(4, dtype=np.float32) ** 2)
    with pytest.raises(KeyError, match="no result 'w' .results: out0, x, x_1, z, y"):
        run.outputs["w"]
    with pytest.raises(KeyError):
        run.outputs["out04"]   # only the canonical spelling finds a position


def test_an_empty_or_non_string_name_is_a_diagnostic() -> None:
    bad = NAMED.replace('{lamina.name = "z"}', "{lamina.name = 3 : i64}")
    with pytest.raises(lamina.LaminaError, match=r"<string>:2:1: error: func.func @f: result #3: "
                       r"attribute 'lamina.name' must be a non-empty string, got 3 : i64"):
        lamina.parse(bad)


def test_a_pass_that_replaces_a_returned_value_keeps_its_name() -> None:
    """assign-memory-tiers returns two moments through new moves: the pipeline writes their old
    names as result attributes, so the run reports them as before."""
    sample = ROOT / "samples" / "mlp_training_offload.mlir"
    before = result_names(find_entry(lamina.load(str(sample)), None))
    module = lamina.apply(lamina.load(str(sample)),
                          "fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=tiny}")
    func = find_entry(module, None)
    assert before == ["w1n", "w2n", "m1n", "v1n", "m2n", "v2n", "loss"]
    assert result_names(func) == before
    assert 'lamina.name = "m2n"' in lamina.to_text(module)   # written where it was lost


def test_the_cli_names_summary_check_npz_and_stats_by_result(tmp_path: Path) -> None:
    src = tmp_path / "f.mlir"
    src.write_text(NAMED)
    res = subprocess.run([sys.executable, "-m", "lamina.cli.run", str(src), "--check",
                          "--outputs", str(tmp_path / "o.npz"), "--stats-json",
                          str(tmp_path / "s.json")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines[:5]] == ["out0", "x", "x_1", "z", "y"]
    assert [ln.split(":")[0] for ln in lines[5:]] == [f"check {n}" for n in
                                                      ("out0", "x", "x_1", "z", "y")]
    with np.load(tmp_path / "o.npz") as got:
        assert sorted(got.files) == sorted(["out0", "x", "x_1", "z", "y"])
    stats = json.loads((tmp_path / "s.json").read_text())
    assert [o["name"] for o in stats["outputs"]] == ["out0", "x", "x_1", "z", "y"]


def test_result_attributes_shorter_than_the_results_are_refused() -> None:
    """The text form writes one dictionary per result; a pass that builds a shorter list (so a
    later result's name or update entry would be read from nowhere) is caught by the verifier."""
    from lamina.ir.core.diagnostics import LaminaError
    from lamina.ir.text.source import verify
    from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, StringAttr

    module = lamina.parse(
        'func.func @f(%x: tensor<4xf32>) -> (tensor<4xf32> {lamina.name = "a"}, tensor<4xf32>) {\n'
        "  func.return %x, %x : tensor<4xf32>, tensor<4xf32>\n}\n")
    verify(module)
    func = find_entry(module, "f")
    func.res_attrs = ArrayAttr([DictionaryAttr({"lamina.name": StringAttr("a")})])
    with pytest.raises(LaminaError, match=r"@f: 1 result attribute dictionary for 2 results"):
        verify(module)
