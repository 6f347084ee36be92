"""Every attribute of every op of the `lamina` dialect is type-checked by its verifier (issue 23).

The audit is complete by construction: the op classes come from the dialect itself, each needs a
valid example (from the samples and round-trip tests, or `EXTRA` below for ops no input file
holds), and in each example every attribute is replaced by values of every other kind, removed,
and joined by an unknown one. Each mutant either verifies (a removed optional attribute) or is
refused with a located `LaminaError` that names the attribute; an AttributeError, an assertion
or any other exception type fails the test, as does a wrong kind that is accepted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.ops.lamina import Lamina
from lamina.ir.text.source import parse_text, verify
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    UnitAttr,
    f64,
    i1,
    i64,
)
from xdsl.ir import Attribute, Operation

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [*sorted((ROOT / "samples").glob("*.mlir")),
           *sorted((ROOT / "tests" / "filecheck" / "roundtrip").glob("*.mlir"))]

_MESH = "lamina.mesh @m [data = 2, model = 4]\n"


def _t(splits: str, extra: str = "") -> str:
    return f"tensor<8x16xf32, #lamina.place<@m, {splits}{', ' + extra if extra else ''}>>"


def _unary(op: str, attrs: str, tin: str, tout: str) -> str:
    return (_MESH + f"func.func @f(%x: {tin}) -> {tout} {{\n"
            f"  %0 = lamina.{op} %x {attrs} : {tin} -> {tout}\n  func.return %0 : {tout}\n}}\n")


_PENDING, _REPLICATED = _t("[[], []]", "partial = sum[model]"), _t("[[], []]")
_HOST = "tensor<4xf32, #lamina.place<tier = host>>"

# Ops that no sample or round-trip file writes (passes make them): one valid use each, with
# every attribute the op takes that a valid use can hold at once.
EXTRA: dict[str, str] = {
    "lamina.all_reduce": _unary("all_reduce", '{axes = ["model"], kind = "sum", '
                                'algorithm = "hierarchical", inner = 2 : i64}',
                                _PENDING, _REPLICATED),
    "lamina.all_gather": _unary("all_gather", '{dim = 1 : i64, axes = ["model"], algorithm = '
                                '"ring"}', _t("[[data], [model]]"), _t("[[data], []]")),
    "lamina.reduce_scatter": _unary("reduce_scatter", '{dim = 1 : i64, axes = ["model"], '
                                    'kind = "sum"}', _PENDING, _t("[[], [model]]")),
    "lamina.all_to_all": _unary("all_to_all", '{split_dim = 0 : i64, concat_dim = 1 : i64, '
                                'axes = ["model"]}', _t("[[data], [model]]"),
                                _t("[[data, model], []]")),
    "lamina.all_slice": _unary("all_slice", '{dim = 0 : i64, axes = ["data"]}', _REPLICATED,
                               _t("[[data], []]")),
    "lamina.reshard": _unary("reshard", "", _t("[[data], [model]]"), _t("[[data], []]")),
    "lamina.collective_permute": _unary("collective_permute", '{axes = ["model"], '
                                        'algorithm = "direct"}', _t("[[data], []]", "stage = model[0]"),
                                        _t("[[data], []]", "stage = model[3]")),
    "lamina.move": (f"func.func @f(%x: tensor<4xf32>) -> {_HOST} {{\n"
                    f"  %0 = lamina.move %x to host {{prefetch = 2 : i64}} : tensor<4xf32> -> "
                    f"{_HOST}\n  func.return %0 : {_HOST}\n}}\n"),
    "lamina.free": ("func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {\n"
                    "  lamina.free %x : tensor<4xf32>\n  func.return %y : tensor<4xf32>\n}\n"),
    "lamina.fused": ("func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
                     '  %0 = "lamina.fused"(%x) <{kind = "loop"}> ({\n'
                     "  ^bb0(%a: tensor<4xf32>):\n    %1 = lamina.exp %a : tensor<4xf32>\n"
                     "    lamina.yield %1 : tensor<4xf32>\n"
                     "  }) : (tensor<4xf32>) -> tensor<4xf32>\n  func.return %0 : tensor<4xf32>\n}\n"),
    "lamina.gather": ("func.func @f(%t: tensor<8x4xf32>, %i: tensor<3xi64>) -> tensor<3x4xf32> {\n"
                      "  %0 = lamina.gather %t, %i {axis = 0 : i64} : (tensor<8x4xf32>, "
                      "tensor<3xi64>) -> tensor<3x4xf32>\n  func.return %0 : tensor<3x4xf32>\n}\n"),
    "lamina.iota": ("func.func @f() -> tensor<4xf32> {\n"
                    "  %0 = lamina.iota {dim = 0 : i64} : () -> tensor<4xf32>\n"
                    "  func.return %0 : tensor<4xf32>\n}\n"),
    "lamina.log_softmax": ("func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {\n"
                           "  %0 = lamina.log_softmax %x {axis = -1 : i64} : tensor<4x8xf32>\n"
                           "  func.return %0 : tensor<4x8xf32>\n}\n"),
}
EXTRA["lamina.yield"] = EXTRA["lamina.fused"]
EXTRA["lamina.mesh"] = _unary("reshard", "", _t("[[data], [model]]"), _t("[[data], []]"))


def _chunks() -> Iterator[str]:
    for path in SOURCES:
        yield from path.read_text().split("// -----")


def _valid(text: str) -> ModuleOp | None:
    try:
        module = parse_text(text, "example.mlir")
        verify(module)
    except LaminaError:
        return None
    return module


def _examples() -> dict[str, str]:
    """The smallest valid program that holds each op of the dialect."""
    names = {cls.name for cls in Lamina.operations}
    found: dict[str, str] = {}
    for text in sorted(_chunks(), key=len):
        if not any(n in text for n in names - found.keys()):
            continue
        module = _valid(text)
        if module is None:
            continue
        for op in module.walk():
            if op.name in names:
                found.setdefault(op.name, text)
    for name, text in EXTRA.items():
        found.setdefault(name, text)
    return found


EXAMPLES = _examples()
OP_NAMES = sorted(cls.name for cls in Lamina.operations)


def test_every_op_of_the_dialect_has_a_valid_example() -> None:
    assert set(OP_NAMES) <= EXAMPLES.keys(), sorted(set(OP_NAMES) - EXAMPLES.keys())
    for name in EXTRA:
        assert _valid(EXTRA[name]) is not None, name


def _kind(a: Attribute) -> tuple[object, ...]:
    """What kind of attribute `a` is, finely enough that two different kinds never both fit
    one attribute (an i1 is a bool, not an integer; a list of strings is not a list of ints)."""
    if isinstance(a, IntegerAttr):
        return (IntegerAttr, isinstance(a.type, IntegerType) and a.type.width.data == 1)
    if isinstance(a, ArrayAttr):
        return (ArrayAttr, frozenset(type(x) for x in a.data))
    if isinstance(a, DenseArrayBase):
        return (DenseArrayBase, a.elt_type)
    return (type(a),)


WRONG: tuple[Attribute, ...] = (
    StringAttr("x"), IntegerAttr(7, i64), IntegerAttr(1, i1), FloatAttr(0.5, f64),
    ArrayAttr([IntegerAttr(1, i64)]), ArrayAttr([StringAttr("data")]),
    DenseArrayBase.from_list(i64, [1]), UnitAttr())


def _target(module: ModuleOp, name: str) -> Operation:
    return next(op for op in module.walk() if op.name == name)


def _refused(module: ModuleOp) -> LaminaError | None:
    """The diagnostic verifying `module` gives (None if it verifies); any other exception
    propagates and fails the test."""
    try:
        verify(module)
    except LaminaError as e:
        assert e.loc is not None, e.message
        return e
    return None


def _keys(op: Operation) -> list[str]:
    """The op's own attributes (a dialect-prefixed one is another tool's, of any kind)."""
    return [k for k in (*op.properties, *op.attributes)
            if k != "operandSegmentSizes" and "." not in k]


@pytest.mark.parametrize("name", OP_NAMES)
def test_every_attribute_of_every_op_is_type_checked(name: str) -> None:
    text = EXAMPLES[name]
    keys = _keys(_target(parse_text(text, "p.mlir"), name))
    checked = 0
    for key in keys:
        for wrong in WRONG:
            module = parse_text(text, "p.mlir")
            op = _target(module, name)
            where = op.properties if key in op.properties else op.attributes
            if _kind(where[key]) == _kind(wrong):
                continue
            where[key] = wrong
            e = _refused(module)
            assert e is not None, f"{name}: attribute '{key}' = {wrong} was accepted"
            assert re.search(rf"attribute '{key}'", e.message), e.message
            checked += 1
        module = parse_text(text, "p.mlir")  # removed: a located error (or none: optional)
        op = _target(module, name)
        (op.properties if key in op.properties else op.attributes).pop(key)
        _refused(module)
    assert checked or not keys


@pytest.mark.parametrize("name", OP_NAMES)
@pytest.mark.parametrize("as_property", [True, False])
def test_an_unknown_attribute_is_refused_on_every_op(name: str, as_property: bool) -> None:
    module = parse_text(EXAMPLES[name], "p.mlir")
    op = _target(module, name)
    (op.properties if as_property else op.attributes)["bogus_attr"] = IntegerAttr(1, i64)
    e = _refused(module)
    assert e is not None and "has no attribute 'bogus_attr'" in e.message, name
    op.attributes.pop("bogus_attr", None)
    op.properties.pop("bogus_attr", None)
    op.attributes["mytool.tag"] = IntegerAttr(1, i64)   # a dialect-prefixed one is another tool's
    assert _refused(module) is None
