"""Placed training programs: derive-backward, then propagate-sharding,insert-collectives.

On samples/mlp_dp_forward.mlir (the forward of mlp_dp_training_step.mlir, data parallel over 8
devices): the derived backward is placed completely, each parameter gradient is a pending sum over
`data` reduced once to its parameter's placement (latency-bound all_reduces merged into one bucket,
split by `bucket-bytes`), and the SPMD run of all 8 devices equals the single-device run of the
unplaced program and torch.autograd. A parameter split over `data` (ZeRO-style) gets its gradient
by reduce_scatter instead, and a whole AdamW step keeps each parameter's placement and shards its
moments with it.
"""

from __future__ import annotations

import re
from pathlib import Path

import lamina
import numpy as np
import pytest
import torch_ref
from gradcheck import check_gradient
from lamina.backends.compare import compare
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import run_function
from lamina.backends.numpy.spmd import run_spmd
from lamina.ir.mesh.collectives import AllReduceOp, PlacementOp, ReduceScatterOp, ReshardOp
from lamina.ir.mesh.placement import spec_of
from lamina.ir.ops.opbase import tensor_info

SAMPLE = (Path(__file__).resolve().parents[1] / "samples" / "mlp_dp_forward.mlir").read_text()
PLACE = "propagate-sharding,insert-collectives{target=h100-cluster}"


def unplaced(text: str) -> str:
    """The program without mesh or placements: the single-device reference."""
    text = re.sub(r", #lamina\.place<[^>]*>", "", text)
    return "\n".join(line for line in text.splitlines() if not line.startswith("lamina.mesh"))


def _inputs(func, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tensor_info(t).shape).astype(np.float32)
            for t in func.function_type.inputs.data]


def _placed(text: str, pipeline: str, entry: str):
    module = lamina.parse(text)
    lamina.apply(module, pipeline)
    func = find_entry(module, entry)
    for op in func.walk():
        assert not isinstance(op, ReshardOp), "every reshard is lowered"
        for r in op.results:
            assert spec_of(r.type) is not None, f"{op.name} result left unplaced"
    return module, func


def _spmd_equals_reference(text: str, pipeline: str, entry: str, inputs: list[np.ndarray]
                           ) -> list[np.ndarray]:
    module, func = _placed(text, pipeline, entry)
    got = run_spmd(func, inputs).outputs
    ref_module = lamina.parse(unplaced(text))
    lamina.apply(ref_module, pipeline.split(",propagate-sharding")[0])
    ref = run_function(find_entry(ref_module, entry), inputs).outputs
    for k, (g, r) in enumerate(zip(got, ref, strict=True)):
        d = compare(f"out{k}", "f32", g, r)
        assert d.ok, d.line()
    return got


def test_data_parallel_gradients_are_one_bucketed_all_reduce() -> None:
    _, func = _placed(SAMPLE, f"derive-backward{{data=x}},{PLACE}", "dp_forward_grad")
    collectives = [op for op in func.walk() if isinstance(op, PlacementOp)]
    assert len(collectives) == 1 and isinstance(collectives[0], AllReduceOp)
    (bucket,) = collectives
    assert bucket.axis_names() == ("data",) and len(bucket.inputs) == 4
    assert all(spec_of(v.type).partial == ("data",) for v in bucket.inputs)  # type: ignore[union-attr]
    forward = find_entry(lamina.parse(SAMPLE), None).function_type
    want = [forward.outputs.data[0], *forward.inputs.data[1:]]  # y, then like W1, b1, W2, b2
    assert [spec_of(t) for t in func.function_type.outputs.data] == [spec_of(t) for t in want]


def test_bucket_bytes_splits_the_gradient_buckets() -> None:
    _, func = _placed(SAMPLE, "derive-backward{data=x},propagate-sharding,"
                      "insert-collectives{target=h100-cluster bucket-bytes=17000}",
                      "dp_forward_grad")
    sizes = sorted(len(op.inputs) for op in func.walk() if isinstance(op, AllReduceOp))
    assert sizes == [2, 2], sizes  # (dW1 16 KiB, db1) and (dW2 16 KiB, db2): 17000 B each at most
    _, func = _placed(SAMPLE, "derive-backward{data=x},propagate-sharding,"
                      "insert-collectives{target=h100-cluster bucket=false}", "dp_forward_grad")
    assert sum(isinstance(op, AllReduceOp) for op in func.walk()) == 4


def test_data_parallel_spmd_run_equals_reference_and_autograd() -> None:
    forward = find_entry(lamina.parse(SAMPLE), None)
    inputs = _inputs(forward)
    seed = np.random.default_rng(2).standard_normal((64, 32)).astype(np.float32)
    got = _spmd_equals_reference(SAMPLE, f"derive-backward{{data=x}},{PLACE}", "dp_forward_grad",
                                 [*inputs, seed])
    _, ref = torch_ref.gradients(forward, inputs, [1, 2, 3, 4], 0, seed, upcast="f32")
    _, own = torch_ref.gradients(forward, inputs, [1, 2, 3, 4], 0, seed)
    for g, r, o in zip(got[1:], ref, own, strict=True):
        assert check_gradient(g, r, o, "f32").ok


ZERO = """\
lamina.mesh @m [data = 4]
func.func @f(%x: tensor<16x8xf32, #lamina.place<@m, [[data], []]>>, %w: tensor<8x12xf32, #lamina.place<@m, [[data], []]>>, %b: tensor<12xf32, #lamina.place<@m, [[]]>>) -> tensor<f32> {
  %h = lamina.matmul %x, %w : (tensor<16x8xf32, #lamina.place<@m, [[data], []]>>, tensor<8x12xf32, #lamina.place<@m, [[data], []]>>) -> tensor<16x12xf32>
  %hb = lamina.add %h, %b : (tensor<16x12xf32>, tensor<12xf32, #lamina.place<@m, [[]]>>) -> tensor<16x12xf32>
  %t = lamina.tanh %hb : tensor<16x12xf32>
  %l = lamina.reduce_mean %t {axes = array<i64: 0, 1>} : (tensor<16x12xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
"""


def test_sharded_parameter_gets_its_gradient_by_reduce_scatter() -> None:
    pipeline = f"derive-backward{{data=x}},{PLACE}"
    _, func = _placed(ZERO, pipeline, "f_grad")
    scatters = [op for op in func.walk() if isinstance(op, ReduceScatterOp)]
    assert len(scatters) == 1 and scatters[0].axis_names() == ("data",)
    assert str(spec_of(func.function_type.outputs.data[1])) == str(spec_of(
        func.function_type.inputs.data[1]))
    inputs = _inputs(find_entry(lamina.parse(ZERO), None))
    _spmd_equals_reference(ZERO, pipeline, "f_grad", inputs)


@pytest.mark.parametrize("text, entry", [(ZERO, "f_step"), (SAMPLE, "dp_forward_step")])
def test_placed_adamw_step_keeps_placements_and_equals_reference(text: str, entry: str) -> None:
    pipeline = f"derive-backward{{data=x}},append-optimizer{{weight-decay=0.01}},{PLACE}"
    module, func = _placed(text, pipeline, entry)
    args = {a.name_hint: a for a in func.body.block.args}
    outs = func.function_type.outputs.data
    for k, name in enumerate(n for n in args if f"m_{n}" in args):
        want = str(spec_of(args[name].type))
        assert str(spec_of(args[f"m_{name}"].type)) == want == str(spec_of(outs[k]))
    rng = np.random.default_rng(4)
    inputs = []
    for a in func.body.block.args:
        x = rng.standard_normal(tensor_info(a.type).shape).astype(np.float32)
        inputs.append(np.abs(x) if (a.name_hint or "").startswith("v_") else x)
    assert func.body.block.args[-1].name_hint == "step"
    inputs[-1] = np.asarray(2.0, np.float32)  # two updates done before this one
    _spmd_equals_reference(text, pipeline, entry, inputs)
