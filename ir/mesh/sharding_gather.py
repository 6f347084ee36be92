"""The sharding rule of `lamina.gather` (an embedding lookup, ONNX Gather).

Kept beside `lamina.ir.mesh.sharding`, whose rule classes it extends, so that module stays one screen of
rules per op kind. The rule:
- the indices' splits move to the result dimensions that replace the gathered one;
- the input's other dimensions keep their splits in the result;
- an input split over axes A along the gathered dimension (a vocabulary-split embedding table,
  Megatron's VocabParallelEmbedding) makes the result `partial = sum[A]`: each device looks up the
  rows its block holds and gives 0 for the others (`lamina.ir.ops.formulas.gather`), so the sum over
  A is the lookup. The result is linear in the input (a pending-sum table gives a pending-sum
  result) and not in the indices, which must never be partial.
"""

from __future__ import annotations

from lamina.ir.mesh.sharding import Axes, ShardingRule, Spec


class Gather(ShardingRule):
    """See the module docstring."""

    name = "gather"

    def result(self, info, ops, specs, attrs, result, partial, kind):
        x, sx, si = ops[0], specs[0], specs[1]
        assert x is not None and sx is not None and si is not None
        axis = attrs["axis"] % len(x.shape)
        splits = sx.splits[:axis] + si.splits + sx.splits[axis + 1:]
        return Spec(splits, partial + sx.splits[axis], "sum")

    def operand_hint(self, i, shape, rshape, h, attrs):
        if i == 0:   # the input: its other dims are the result's, the gathered one stays open
            k = len(rshape) - len(shape) + 1      # the indices' rank
            axis = attrs["axis"] % len(shape)
            return h[:axis] + (None,) + h[axis + k:]
        rank = len(rshape) - len(shape) + 1      # the input's rank
        axis = attrs["axis"] % rank
        return h[axis: axis + len(shape)]

    def follow(self, i, shape, lshape, leader, own, rshape) -> list[Axes]:
        """The input and the indices never need to line up: each keeps its own splits."""
        return list(own.splits)
