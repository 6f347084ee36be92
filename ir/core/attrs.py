"""Attribute kinds of the dialect's hand-written ops, and the one diagnostic for a wrong one.

Malformed input must be refused with a message that names the attribute and what it must be
(issue 23): `lamina.move: attribute 'prefetch' must be an integer, got "3"`. xDSL's own property
constraints (`prop_def(StringAttr)`) run before an op's `verify_` and say neither
(`"3" should be of base attribute integer`), and an attribute the op does not read is otherwise
kept silently. So every op that is not generated from the op table (whose attributes
`lamina.ir.ops.opbase` checks from their table specs) declares its attributes as a tuple of
`AttrRule`s in the class variable `ATTRIBUTES`, and `lamina.ir.text.source.verify` runs
`verify_attributes` on each op *before* the op's own verifier: by the time IRDL's constraints or
the op's `verify_` read an attribute, its kind is known to be right, and the first error a user
sees is this module's.

The set of attributes an op declares is closed: an undeclared attribute (property or
discardable) is an error unless it is dialect-prefixed (`mytool.tag`), the rule op-table ops
follow. Values within the right kind (a tier name that does not exist, a negative distance) are
the op's own verifier's to judge.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
)
from xdsl.ir import Attribute, Operation
from xdsl.utils.exceptions import VerifyException


@dataclass(frozen=True)
class AttrRule:
    """One attribute an op takes: its name, the kind it must have (`accepts`, described by
    `want` in the diagnostic, e.g. "an integer") and whether the op needs it."""

    name: str
    want: str
    accepts: Callable[[Attribute], bool]
    required: bool = False


def is_integer(a: Attribute) -> bool:
    """An integer attribute of an integer type wider than i1 (`true` is not an integer)."""
    return isinstance(a, IntegerAttr) and isinstance(a.type, IntegerType) and a.type.width.data > 1


def is_string(a: Attribute) -> bool:
    return isinstance(a, StringAttr)


def is_float(a: Attribute) -> bool:
    return isinstance(a, FloatAttr)


def is_string_list(a: Attribute) -> bool:
    """A list of strings (`["data", "model"]`), possibly empty."""
    return isinstance(a, ArrayAttr) and all(isinstance(x, StringAttr) for x in a.data)


def is_integer_array(a: Attribute) -> bool:
    """A dense integer array wider than i1 (`array<i64: 2, 4>`)."""
    return isinstance(a, DenseArrayBase) and isinstance(a.elt_type, IntegerType) \
        and a.elt_type.width.data > 1


INTEGER = "an integer"
STRING = "a string"
STRING_LIST = 'a list of strings like ["data", "model"]'
INTEGER_ARRAY = "an integer array like array<i64: 2, 4>"


def wrong_kind(op_name: str, name: str, want: str, got: Attribute | str) -> VerifyException:
    """The diagnostic of attribute `name` of `op_name` holding `got`, which is not `want`."""
    return VerifyException(f"{op_name}: attribute '{name}' must be {want}, got {got}")


def verify_attributes(op: Operation) -> None:
    """Check `op`'s attributes against its class's `ATTRIBUTES` rules (module docstring). An op
    class with a `verify_attributes` method of its own (the op-table ops, whose attribute specs
    live in the table) runs that instead; one with neither is left to its own verifier."""
    own: Callable[[], None] | None = getattr(op, "verify_attributes", None)
    if own is not None:
        own()
        return
    rules: Sequence[AttrRule] | None = getattr(type(op), "ATTRIBUTES", None)
    if rules is None:
        return
    check_attributes(op, rules, discardable=getattr(type(op), "CLOSED_ATTRIBUTES", True))


def check_attributes(op: Operation, rules: Sequence[AttrRule], label: str | None = None,
                     discardable: bool = True) -> None:
    """Raise the diagnostic of the first attribute of `op` that breaks `rules`: an unknown
    undotted one, a missing required one, or one of the wrong kind. `label` names the op in
    the message (default: its name). `discardable=False` leaves unknown discardable attributes
    to the op's own verifier (`lamina.fused` names its kind in that message); an unknown
    property is always refused."""
    name = label or op.name
    by_name = {r.name: r for r in rules}
    for key in (*op.properties, *(op.attributes if discardable else ())):
        if key not in by_name and "." not in key:
            takes = ", ".join(by_name) or "none"
            raise VerifyException(f"{name} has no attribute '{key}' (it takes: {takes}; other "
                                  "attributes must be dialect-prefixed, e.g. 'mytool.tag')")
    for rule in rules:
        attr = op.properties.get(rule.name, op.attributes.get(rule.name))
        if attr is None:
            if rule.required:
                raise VerifyException(f"{name}: missing required attribute '{rule.name}', "
                                      f"which must be {rule.want}")
            continue
        if not rule.accepts(attr):
            raise wrong_kind(name, rule.name, rule.want, attr)
