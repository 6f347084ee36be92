"""`lamina.gather` on a mesh: its sharding rule, checked by running every placement.

A table split along its gathered dimension (Megatron's vocabulary-parallel embedding) gives a
pending sum, which the SPMD interpreter computes device by device from the rows each device holds
(`Block.operands`); after propagate-sharding and insert-collectives the result equals the
single-device lookup for every placement of table and indices, negative and out-of-range indices
included.
"""

from __future__ import annotations

import numpy as np
import pytest
from lamina import LaminaError, apply, parse, run
from lamina.ir.core.shapes import TensorInfo
from lamina.ir.ops.formulas import Block, Call, gather

MESH = "lamina.mesh @m [data = 2, model = 2]"


def _program(table: str, index: str) -> str:
    """A vocabulary lookup of [8, 4] rows by [4, 3] indices, then a layernorm (which needs the
    pending sum reduced), with the given placements of table and indices."""
    tt = f"tensor<8x4xf32{table}>"
    it = f"tensor<4x3xi64{index}>"
    return f"""{MESH}
func.func @emb(%w: {tt}, %i: {it}) -> tensor<4x3x4xf32> {{
  %g = lamina.gather %w, %i : ({tt}, {it}) -> tensor<4x3x4xf32>
  %n = lamina.layernorm %g : tensor<4x3x4xf32>
  func.return %n : tensor<4x3x4xf32>
}}
"""


PLACEMENTS = ["", ", #lamina.place<@m, [[model], []]>", ", #lamina.place<@m, [[], [model]]>",
              ", #lamina.place<@m, [[model, data], []]>"]
INDEX_PLACEMENTS = ["", ", #lamina.place<@m, [[data], []]>", ", #lamina.place<@m, [[], []]>"]


@pytest.mark.parametrize("table", PLACEMENTS)
@pytest.mark.parametrize("index", INDEX_PLACEMENTS)
def test_every_placement_computes_the_lookup(table: str, index: str) -> None:
    if "data" in table and "data" in index:
        pytest.skip("one mesh axis cannot split both")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 4)).astype(np.float32)
    i = rng.integers(-10, 10, (4, 3))        # negative ones from the end, |i| > 8 look up 0
    inputs = {"w": w, "i": i}
    want = run(parse(_program("", "")), inputs).outputs["out0"]
    placed = apply(parse(_program(table, index)),
                   "propagate-sharding,insert-collectives{target=h100-node}")
    got = run(placed, inputs).outputs["out0"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_vocabulary_split_table_gives_a_pending_sum() -> None:
    text = _program(PLACEMENTS[1], INDEX_PLACEMENTS[1])
    placed = apply(parse(text), "propagate-sharding")
    gather_line = next(line for line in str(placed).splitlines() if "lamina.gather" in line)
    assert "partial = sum[model]" in gather_line and "[[data], [], []]" in gather_line


def test_partial_indices_are_refused() -> None:
    bad = """lamina.mesh @m [model = 2]
func.func @f(%w: tensor<8x4xf32, #lamina.place<@m, [[], []]>>, %i: tensor<4xi64, #lamina.place<@m, [[]], partial = sum[model]>>) -> tensor<4x4xf32, #lamina.place<@m, [[], []]>> {
  %g = lamina.gather %w, %i : (tensor<8x4xf32, #lamina.place<@m, [[], []]>>, tensor<4xi64, #lamina.place<@m, [[]], partial = sum[model]>>) -> tensor<4x4xf32, #lamina.place<@m, [[], []]>>
  func.return %g : tensor<4x4xf32, #lamina.place<@m, [[], []]>>
}
"""
    with pytest.raises(LaminaError, match="not linear in operand 1"):
        parse(bad)


def test_blocks_without_the_tables_block_are_refused() -> None:
    """A backend running gather on blocks must say which rows the table's block holds; a Block
    without operand blocks is an error, not a lookup in the wrong rows."""
    t = TensorInfo((4, 2), "f32")
    call = Call({"axis": 0}, [t, TensorInfo((3,), "i64")], TensorInfo((3, 2), "f32"),
                Block((3, 2), (0, 0)))
    with pytest.raises(ValueError, match="needs its input's block"):
        gather(np, [np.zeros((4, 2), np.float32), np.array([0, 1, 2])], call)
