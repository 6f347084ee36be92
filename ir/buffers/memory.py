"""Memory tiers and lifetimes in the IR: `lamina.move`, `lamina.free` and their verifier rules.

    %h = lamina.move %x to host : tensor<64x128xf32, #lamina.place<tier = hbm>>
                                  -> tensor<64x128xf32, #lamina.place<tier = host>>
    %y = lamina.move %h to hbm {prefetch = 3 : i64} : ... -> ...
    lamina.free %x : tensor<64x128xf32, #lamina.place<tier = hbm>>

- `lamina.move %x to TIER` is a copy of `%x` into another memory tier; `%x` stays valid until its
  own `lamina.free`. The result type is the operand type with `tier = TIER` (same shape, element
  type and mesh placement). The optional `prefetch = N` says the move was issued N compute ops
  before the first use of its result (0 or absent: issued right before it).
- `lamina.free %x` ends `%x`'s lifetime: its bytes are released in its tier.

Rules (checked by the verifiers):
- nothing uses a value after its `lamina.free` (in program order within the block that frees it;
  checked by `lamina.ir.text.source.verify` with one position index per block, see `free_problem`;
  uses nested in later ops' regions count as uses by those ops);
- nothing is freed twice; function results (operands of `func.return`) are never freed;
- compute ops (op-table ops) read and write only values in compute tiers (`sram`, `hbm`) or values
  with no tier yet (`tier_problem`, called from every op-table op's verifier).

A value whose type states no tier is "not yet assigned"; the checked interpreter counts it as `hbm`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from lamina.ir.core.attrs import INTEGER, AttrRule, is_integer, is_string
from lamina.ir.mesh.placement import COMPUTE_TIERS, TIERS, PlaceAttr, place_of, tier_of
from xdsl.dialects.builtin import AnyTensorType, IntegerAttr, NoneAttr, StringAttr, TensorType, i64
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

DEFAULT_TIER = "hbm"


def with_tier(t: Attribute, tier: str | None) -> TensorType:
    """Tensor type `t` with its placement's tier set to `tier` (None: drop the tier)."""
    assert isinstance(t, TensorType)
    place = place_of(t)
    if place is None:
        if tier is None:
            return t
        enc: Attribute = PlaceAttr.make(None, [], tier=tier)
    else:
        if place.mesh_name is None and tier is None:
            enc = NoneAttr()
        else:
            enc = PlaceAttr.make(place.mesh_name, place.splits, place.partial_axes,
                                 place.partial_kind.data, tier, place.stage)
    return TensorType(t.element_type, t.get_shape(), enc)


def effective_tier(t: Attribute) -> str:
    """The tier a value lives in at run time (no tier stated: hbm)."""
    return tier_of(t) or DEFAULT_TIER


def tier_problem(op: Operation) -> str | None:
    """Why compute op `op` touches a value outside the compute tiers, or None."""
    for kind, values in (("reads", op.operands), ("writes", op.results)):
        for v in values:
            tier = tier_of(v.type)
            if tier is not None and tier not in COMPUTE_TIERS:
                return (f"{op.name} {kind} a value in tier '{tier}'; compute ops may only read and "
                        f"write {' or '.join(COMPUTE_TIERS)} values (insert a lamina.move to hbm)")
    return None


def _same_but_tier(a: Attribute, b: Attribute) -> bool:
    if not (isinstance(a, TensorType) and isinstance(b, TensorType)):
        return False
    return with_tier(a, None) == with_tier(b, None)


@irdl_op_definition
class MoveOp(IRDLOperation):
    """`lamina.move %x to TIER [{prefetch = N}]`: copy a value into another memory tier."""

    name = "lamina.move"
    source = operand_def(AnyTensorType)
    result = result_def(AnyTensorType)
    to = prop_def(StringAttr)
    prefetch = opt_prop_def(IntegerAttr)
    # checked before IRDL's constraints (`lamina.ir.core.attrs`)
    ATTRIBUTES: ClassVar[tuple[AttrRule, ...]] = (
        AttrRule("to", "a memory tier name (" + ", ".join(f'"{t}"' for t in TIERS) + ")",
                 is_string, required=True),
        AttrRule("prefetch", INTEGER, is_integer))

    def __init__(self, source: SSAValue, to: str, prefetch: int | None = None):
        props: dict[str, Attribute] = {"to": StringAttr(to)}
        if prefetch is not None:
            props["prefetch"] = IntegerAttr(prefetch, i64)
        super().__init__(operands=[source], result_types=[with_tier(source.type, to)],
                         properties=props)

    @property
    def tier(self) -> str:
        return self.to.data

    @property
    def prefetch_distance(self) -> int | None:
        return None if self.prefetch is None else self.prefetch.value.data

    def verify_(self) -> None:
        to = self.to.data
        if to not in TIERS:
            raise VerifyException(f"lamina.move: unknown memory tier '{to}' (tiers: "
                                  f"{', '.join(TIERS)})")
        if self.prefetch is not None and self.prefetch.value.data < 0:
            raise VerifyException(f"lamina.move: prefetch distance must be >= 0, got "
                                  f"{self.prefetch.value.data}")
        src, res = self.source.type, self.result.type
        if tier_of(res) != to:
            raise VerifyException(f"lamina.move to {to}: the result type must have tier = {to}, "
                                  f"got {res}")
        if not _same_but_tier(src, res):
            raise VerifyException(f"lamina.move: the result type {res} must equal the operand "
                                  f"type {src} except for its tier")
        if tier_of(src) == to:
            raise VerifyException(f"lamina.move: the value is already in tier '{to}'")
        for k in self.attributes:
            if "." not in k:
                raise VerifyException(f"lamina.move has no attribute '{k}' (it takes: prefetch)")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_ssa_value(self.source)
        printer.print_string(f" to {self.to.data}")
        extra: dict[str, Attribute] = dict(self.attributes)
        if self.prefetch is not None:
            extra = {"prefetch": self.prefetch, **extra}
        if extra:
            printer.print_op_attributes(extra)
        printer.print_string(" : ")
        printer.print_attribute(self.source.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> MoveOp:
        pos = parser.pos
        src = parser.parse_unresolved_operand()
        parser.parse_keyword("to")
        tpos = parser.pos
        to = parser.parse_identifier("memory tier")
        if to not in TIERS:
            parser.raise_error(f"unknown memory tier '{to}' (tiers: {', '.join(TIERS)})",
                               at_position=tpos, end_position=parser.pos)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        src_t = parser.parse_type()
        parser.parse_punctuation("->")
        res_t = parser.parse_type()
        (value,) = parser.resolve_operands([src], [src_t], pos)
        props: dict[str, Attribute] = {"to": StringAttr(to)}
        discardable: dict[str, Attribute] = {}
        for k, v in attrs.items():
            if k == "prefetch":
                if not is_integer(v):
                    parser.raise_error(f"lamina.move: attribute 'prefetch' must be {INTEGER}, "
                                       f"got {v}", at_position=pos)
                props[k] = v
            elif "." in k:
                discardable[k] = v
            else:
                parser.raise_error(f"lamina.move has no attribute '{k}' (it takes: prefetch)",
                                   at_position=pos)
        return cls.build(operands=[value], result_types=[res_t], properties=props,
                         attributes=discardable)


def ancestor_in(op: Operation, block: Block) -> Operation | None:
    """`op` itself or the op enclosing it that sits directly in `block` (None if not inside)."""
    cur: Operation | None = op
    while cur is not None and cur.parent_block() is not block:
        cur = cur.parent_op()
    return cur


@irdl_op_definition
class FreeOp(IRDLOperation):
    """`lamina.free %x : T`: the end of `%x`'s lifetime."""

    name = "lamina.free"
    value = operand_def(AnyTensorType)
    ATTRIBUTES: ClassVar[tuple[AttrRule, ...]] = ()   # none (dialect-prefixed ones aside)

    def __init__(self, value: SSAValue):
        super().__init__(operands=[value])

    def verify_(self) -> None:
        # Order-independent rule only: ordering (use after free, double free) needs positions in
        # the block, which `lamina.ir.text.source.verify` computes once per block and checks with
        # `free_problem`; asking xDSL's `is_before_in_block` per use made verification O(n^2).
        for use in self.value.uses:
            if use.operation.name == "func.return":
                raise VerifyException(f"lamina.free: {value_label(self.value)} is a function "
                                      "result and must not be freed")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_ssa_value(self.value)
        if self.attributes:
            printer.print_op_attributes(dict(self.attributes))
        printer.print_string(" : ")
        printer.print_attribute(self.value.type)

    @classmethod
    def parse(cls, parser: Parser) -> FreeOp:
        pos = parser.pos
        v = parser.parse_unresolved_operand()
        attrs = parser.parse_optional_attr_dict()
        for k in attrs:
            if "." not in k:
                parser.raise_error(f"lamina.free has no attribute '{k}'", at_position=pos)
        parser.parse_punctuation(":")
        t = parser.parse_type()
        (value,) = parser.resolve_operands([v], [t], pos)
        return cls.build(operands=[value], attributes=dict(attrs))


def value_label(v: SSAValue) -> str:
    return f"%{v.name_hint}" if v.name_hint else "the value"


def free_problem(free: FreeOp, position: Callable[[Operation], int]) -> str | None:
    """Why `free` breaks a lifetime rule (use after free, double free, freed result), or None.

    `position(op)` is op's index in its block (`lamina.ir.text.source.verify` keeps one index per
    block), so the check is O(uses of the value)."""
    v = free.value
    block = free.parent_block()
    name = value_label(v)
    here = position(free)
    for use in v.uses:
        user = use.operation
        if user is free:
            continue
        if isinstance(user, FreeOp):
            if user.parent_block() is block and position(user) < here:
                continue  # reported by the first free's verifier as the double free
            return f"lamina.free: {name} is freed twice"
        if user.name == "func.return":
            return f"lamina.free: {name} is a function result and must not be freed"
        anc = ancestor_in(user, block) if block is not None else None
        if anc is None:
            continue  # used in an unrelated block: not ordered with this free
        if anc is free or here < position(anc):
            return f"lamina.free: {name} is used by {user.name} after it is freed"
    return None


MEMORY_OPS = (MoveOp, FreeOp)
