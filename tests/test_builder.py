"""The one IR builder (`lamina.ir.builder.Builder`), in both of its uses.

As the importers use it: the generic `op(cls, ...)` with a location per node, rule refusals as
`ShapeError`s naming the op. As the VJP rules and the training passes use it: typed methods
whose result types come from the rows' shape rules, scalars made once, identity layout ops left
out, ops inserted before a given op. Whatever the use, every op it builds verifies: a random chain
of typed calls is put in a function and run through the verifier, which re-runs every rule against
the types the builder wrote.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.ir.builder import Builder, is_float_value
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.core.dtypes import tensor_type
from lamina.ir.core.shapes import ShapeError, TensorInfo, info_of
from lamina.ir.ops.lamina import (
    AddOp,
    ConcatOp,
    ConstantOp,
    GeluOp,
    MatmulOp,
    ReduceSumOp,
    ReshapeOp,
    SliceOp,
    TransposeOp,
)
from lamina.ir.text.source import verify
from strategies import examples
from xdsl.dialects.builtin import FileLineColLoc, FunctionType, IntAttr, ModuleOp, StringAttr
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Operation, Region, SSAValue


def _block(*infos: TensorInfo) -> Block:
    return Block(arg_types=[tensor_type(i.shape, i.dtype) for i in infos])


def _module(block: Block, results: Sequence[SSAValue]) -> ModuleOp:
    """`block` returning `results`, as the only function of a module (not yet verified)."""
    if not isinstance(block.last_op, ReturnOp):
        block.add_op(ReturnOp(*results))
    ftype = FunctionType.from_lists([a.type for a in block.args], [r.type for r in results])
    return ModuleOp([FuncOp("f", ftype, Region(block))])


def _loc(line: int, col: int) -> FileLineColLoc:
    return FileLineColLoc(StringAttr("model.onnx"), IntAttr(line), IntAttr(col))


def _names(ops: Sequence[Operation]) -> list[str]:
    return [op.name for op in ops]


# ---- importer-style: the generic entry, a location per node ----------------------------------

def test_importer_style_ops_take_the_location_of_their_node() -> None:
    block = _block(TensorInfo((8, 32), "f32"), TensorInfo((32, 16), "f32"))
    x, w = block.args
    b = Builder(block)
    b.location = _loc(3, 5)
    h = b.op(MatmulOp, x, w)
    b.location = _loc(4, 7)
    y = b.op(GeluOp, h, approximate="tanh")
    r = b.op(ReshapeOp, y, result=TensorInfo((128,), "f32"))
    assert info_of(h) == TensorInfo((8, 16), "f32")
    assert info_of(r) == TensorInfo((128,), "f32")
    ops = list(block.ops)
    assert [op.location for op in ops] == [_loc(3, 5), _loc(4, 7), _loc(4, 7)]
    assert b.emitted == ops
    verify(_module(block, [r]))


def test_importer_constants_are_not_shared() -> None:
    """An importer's constants stay one op per source constant, equal values or not."""
    b = Builder(_block())
    c1 = b.constant(0.5, "f32")
    c2 = b.constant(0.5, "f32")
    d = b.constant(np.array([1.0, 2.0, 3.0]), "bf16")
    assert c1 is not c2
    assert info_of(c1) == TensorInfo((), "f32")
    assert info_of(d) == TensorInfo((3,), "bf16")
    assert _names(b.emitted) == ["lamina.constant"] * 3


def test_generic_entry_fills_optional_and_variadic_slots() -> None:
    block = _block(TensorInfo((2, 3), "f32"), TensorInfo((2, 5), "f32"))
    x, y = block.args
    b = Builder(block)
    c = b.op(ConcatOp, [x, y], dim=1)
    s = b.op(SliceOp, c, start=(0, 1), limit=(2, 8), strides=None)
    assert info_of(c) == TensorInfo((2, 8), "f32")
    assert info_of(s) == TensorInfo((2, 7), "f32")
    assert isinstance(s.owner, SliceOp)
    assert "strides" not in s.owner.properties  # None: absent, the row's default
    verify(_module(block, [s]))


@pytest.mark.parametrize(("call", "message"), [
    (lambda b, x, v: b.op(AddOp, x, v), "lamina.add: operand shapes (4, 8), (3,) do not broadcast"),
    (lambda b, x, v: b.op(AddOp, x), "lamina.add: operand 'rhs' is required"),
    (lambda b, x, v: b.op(AddOp, x, x, x), "lamina.add takes 2 operands, got 3"),
    (lambda b, x, v: b.op(AddOp, x, x, result=info_of(x)),
     "lamina.add infers its result type; result= is not taken"),
    (lambda b, x, v: b.op(ReshapeOp, x), "lamina.reshape needs its result type (result=)"),
    (lambda b, x, v: b.op(GeluOp, x, mode="tanh"), "lamina.gelu has no attribute 'mode'"),
    (lambda b, x, v: b.op(ReshapeOp, x, result=TensorInfo((5,), "f32")),
     "lamina.reshape: cannot reshape"),
])
def test_a_refused_op_is_a_shape_error_naming_the_op_and_builds_nothing(call, message) -> None:
    block = _block(TensorInfo((4, 8), "f32"), TensorInfo((3,), "f32"))
    b = Builder(block)
    with pytest.raises(ShapeError) as e:
        call(b, *block.args)
    assert str(e.value).startswith(message), str(e.value)
    assert list(block.ops) == [] and b.emitted == []


# ---- typed methods: result types from the rows' rules --------------------------------------

def test_typed_methods_infer_result_types() -> None:
    block = _block(TensorInfo((4, 8), "f32"), TensorInfo((8,), "f32"), TensorInfo((8, 3), "f32"))
    x, v, w = block.args
    b = Builder.at_end(block)
    s = b.mul(x, b.scalar(0.5, "f32"))
    t = b.reduce_sum(b.add(s, v), (1,), keepdims=True)
    m = b.matmul(x, w)
    p = b.transpose(m, (1, 0))
    c = b.cast(p, "bf16")
    g = b.gt(x, v)
    d = b.sum_to(b.add(x, v), (8,))
    assert info_of(s) == TensorInfo((4, 8), "f32")
    assert info_of(t) == TensorInfo((4, 1), "f32")
    assert info_of(m) == TensorInfo((4, 3), "f32")
    assert info_of(p) == TensorInfo((3, 4), "f32")
    assert info_of(c) == TensorInfo((3, 4), "bf16")
    assert info_of(g) == TensorInfo((4, 8), "i1") and not is_float_value(g)
    assert info_of(d) == TensorInfo((8,), "f32")
    # summed over the added dim with keepdims, then the kept (1,) dropped
    assert isinstance(d.owner, ReshapeOp) and isinstance(d.owner.operands[0].owner, ReduceSumOp)
    verify(_module(block, [t, c, g, d]))


def test_ops_are_inserted_before_the_given_op_with_its_location() -> None:
    block = _block(TensorInfo((4,), "f32"))
    (x,) = block.args
    ret = ReturnOp(x)
    block.add_op(ret)
    b = Builder.before_op(ret, _loc(9, 1))
    y = b.exp(b.neg(x))
    ret.operands = [y]
    assert _names(list(block.ops)) == ["lamina.neg", "lamina.exp", "func.return"]
    assert all(op.location == _loc(9, 1) for op in b.emitted)
    verify(_module(block, [y]))


def test_a_splat_stores_one_element() -> None:
    b = Builder.at_end(_block())
    z = b.zeros(TensorInfo((1000, 1000), "f32"))
    one = b.splat(1.0, TensorInfo((3, 3), "bf16"))
    assert info_of(z) == TensorInfo((1000, 1000), "f32")
    for v, size in ((z, 4), (one, 2)):
        assert isinstance(v.owner, ConstantOp)
        assert len(v.owner.properties["value"].data.data) == size  # pyright: ignore


# ---- scalars made once ----------------------------------------------------------------------

def test_scalar_constants_are_made_once_per_value_and_type() -> None:
    block = _block(TensorInfo((4,), "f32"))
    (x,) = block.args
    b = Builder.at_end(block)
    half = b.scalar(0.5, "f32")
    assert b.scalar(0.5, "f32") is half
    assert b.like(0.5, x) is half
    assert b.scalar(0.5, "f64") is not half
    assert b.scalar(1.0, "f32") is not half
    assert b.scalar(1, "f32") is b.scalar(1.0, "f32")
    assert _names(b.emitted).count("lamina.constant") == 3


def test_builders_sharing_a_scalar_table_share_scalars() -> None:
    block = _block()
    table: dict[tuple[float, str], SSAValue] = {}
    first = Builder.at_end(block, scalars=table)
    second = Builder.at_end(block, scalars=table)
    alone = Builder.at_end(block)
    two = first.scalar(2.0, "f32")
    assert second.scalar(2.0, "f32") is two
    assert alone.scalar(2.0, "f32") is not two
    assert len(list(block.ops)) == 2


# ---- identity layout ops are left out -------------------------------------------------------

def test_identity_layout_ops_are_not_emitted() -> None:
    block = _block(TensorInfo((2, 3), "f32"), TensorInfo((2, 0), "f32"))
    x, empty = block.args
    b = Builder.at_end(block)
    assert b.reshape(x, (2, 3)) is x
    assert b.transpose(x, (0, 1)) is x
    assert b.broadcast_in_dim(x, (2, 3), (0, 1)) is x
    assert b.broadcast_to(x, (2, 3)) is x
    assert b.slice(x, (0, 0), (2, 3)) is x
    assert b.slice(x, (0, 0), (2, 3), (1, 1)) is x
    assert b.reduce_sum(x, ()) is x
    assert b.reduce_mean(x, []) is x
    assert b.cast(x, "f32") is x
    assert b.concat([x], 1) is x
    assert b.concat([x, empty], 1) is x
    assert b.sum_to(x, (2, 3)) is x
    assert b.emitted == [] and list(block.ops) == []


def test_layout_ops_that_change_something_are_emitted() -> None:
    block = _block(TensorInfo((2, 3), "f32"))
    (x,) = block.args
    b = Builder.at_end(block)
    r = b.reshape(x, (3, 2))
    t = b.transpose(x, (1, 0))
    bc = b.broadcast_to(x, (4, 2, 3))
    s = b.slice(x, (0, 0), (2, 3), (1, 2))
    c = b.concat([x, x], 0)
    assert [info_of(v).shape for v in (r, t, bc, s, c)] == [(3, 2), (3, 2), (4, 2, 3), (2, 2),
                                                           (4, 3)]
    assert isinstance(t.owner, TransposeOp) and isinstance(r.owner, ReshapeOp)
    assert tuple(s.owner.properties["strides"].get_values()) == (1, 2)  # pyright: ignore
    verify(_module(block, [r, t, bc, s, c]))


# ---- whatever is built verifies -------------------------------------------------------------

_UNARY = ("neg", "exp", "tanh", "erf", "sqrt", "rsqrt", "log")
_BINARY = ("add", "sub", "mul", "div", "pow")


@st.composite
def _chains(draw: st.DrawFn) -> tuple[tuple[int, ...], str, list[tuple[str, int]]]:
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=3)))
    dtype = draw(st.sampled_from(["f16", "bf16", "f32", "f64"]))
    steps = draw(st.lists(st.tuples(st.sampled_from(
        [*_UNARY, *_BINARY, "scalar", "reduce", "transpose", "reshape", "broadcast", "sum_to",
         "slice", "concat", "matmul", "cast", "select", "dropout"]), st.integers(0, 7)),
        min_size=1, max_size=12))
    return shape, dtype, steps


def _step(b: Builder, v: SSAValue, x: SSAValue, what: str, k: int) -> SSAValue:
    """One typed call on the chain's value `v` (and the argument `x`), chosen by `k`."""
    info = info_of(v)
    rank, shape = info.rank, info.shape
    if what in _UNARY:
        return getattr(b, what)(v)
    if what in _BINARY:
        same = info_of(x).shape == shape   # the argument, where it is v's shape
        other = b.cast(x, info.dtype) if same and not k % 2 else b.like(0.5 + k, v)
        return getattr(b, what)(v, other) if k % 3 else getattr(b, what)(other, v)
    if what == "scalar":
        return b.mul(v, b.scalar(float(k), info.dtype))
    if what == "reduce" and rank:
        axes = [d for d in range(rank) if (k >> d) & 1]
        return (b.reduce_sum if k % 2 else b.reduce_mean)(v, axes, keepdims=bool(k & 4))
    if what == "transpose":
        perm = list(range(rank))
        return b.transpose(v, perm[k % max(rank, 1):] + perm[:k % max(rank, 1)])
    if what == "reshape":
        return b.reshape(v, (*shape, 1) if k % 2 else tuple(d for d in shape if d != 1))
    if what == "broadcast":
        return b.broadcast_to(v, (k % 3 + 1, *shape))
    if what == "sum_to" and rank:
        return b.sum_to(v, (1,) * (k % 2) + shape[1:])
    if what == "slice" and rank:
        return b.slice(v, [0] * rank, [max(1, d - k % 2) for d in shape])
    if what == "concat" and rank:
        return b.concat([v, v][: 1 + k % 2], k % rank)
    if what == "matmul" and rank >= 2:
        w = b.broadcast_to(b.like(1.0, v), (shape[-1], k % 3 + 1))
        return b.matmul(v, w)
    if what == "cast":
        return b.cast(b.cast(v, ("f32", "f64", "bf16", "f16")[k % 4]), info.dtype)
    if what == "select":
        return b.select(b.gt(v, b.like(0.0, v)), v, b.neg(v))
    if what == "dropout":
        return b.dropout(v, 0.25, k, None)
    return v


@settings(max_examples=examples(40))
@given(_chains())
def test_every_op_built_verifies(chain: tuple[tuple[int, ...], str, list[tuple[str, int]]]) -> None:
    shape, dtype, steps = chain
    block = _block(TensorInfo(shape, dtype))
    (x,) = block.args
    ret = ReturnOp(x)
    block.add_op(ret)
    b = Builder.before_op(ret)
    v = x
    for what, k in steps:
        v = _step(b, v, x, what, k)
    ret.operands = [v]
    assert all(op.parent_block() is block for op in b.emitted)
    verify(_module(block, [v]))  # the verifier re-runs every rule on the types written


def test_the_verifier_check_above_can_fail() -> None:
    """A type the rule would not give is refused by the same `verify` the property relies on."""
    block = _block(TensorInfo((4,), "f32"))
    (x,) = block.args
    y = Builder.at_end(block).exp(x)
    y._type = tensor_type((5,), "f32")  # noqa: SLF001 - the wrong type, on purpose
    with pytest.raises(LaminaError):
        verify(_module(block, [y]))
