"""`lamina.fused`: a group of op-table ops that runs as one kernel, and its `lamina.yield` terminator.

    %y, %m = lamina.fused "row_reduction" (%a = %x, %b = %gamma)
               : (tensor<8x16xf32>, tensor<16xf32>) -> (tensor<8x16xf32>, tensor<8x1xf32>) {
      %0 = lamina.layernorm %a {axis = -1 : i64} : tensor<8x16xf32>
      ...
      lamina.yield %3, %1 : tensor<8x16xf32>, tensor<8x1xf32>
    }

The operands are the group's external inputs; the body's block arguments mirror them one to one
(`%a = %x` binds block argument `%a` to operand `%x`); the body is isolated from above (it sees
only its block arguments and constants defined inside it) and ends in `lamina.yield` of the
group's outputs, one per result. The kind string says how the group is executed:

    "loop"           only ELEMENTWISE / BROADCAST / SOURCE ops: blocks of elements
    "row_reduction"  may also hold REDUCTION ops that reduce the same trailing dims: row tiles
    "attention"      softmax(f(q k^T)) v with linear ops on the probabilities, one online
                     softmax over key blocks (its body's structure: `lamina.ir.ops.attention`)
    "matmul"         one row-tiled OPAQUE op (a matmul by a weight matrix) at its root and an
                     epilogue on its result (elementwise ops, row reductions over its trailing
                     dims): blocks of the result's rows

Any kind may hold LAYOUT ops (transpose, reshape, slice, concat) at its edges: a body reads an
input through them (their operands are block arguments or such views) or writes an output through
them (their results are yielded, never read inside the body); see `lamina.ir.ops.view_rules`.

This module depends only on the op table (not on the generated op classes), so `lamina.ir.ops.lamina`
can import it to register both ops in the `lamina` dialect without an import cycle; that is why the
body check looks rows up by op name here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from lamina.ir.buffers.memory import FreeOp
from lamina.ir.core.attrs import AttrRule, is_string
from lamina.ir.ops.attention import NotAttention, attention_parts
from lamina.ir.ops.optable import Fusion, lookup
from xdsl.dialects.builtin import AnyTensorType, StringAttr
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    prop_def,
    region_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsolatedFromAbove, IsTerminator, Pure
from xdsl.utils.exceptions import VerifyException

FUSION_KINDS: dict[str, frozenset[Fusion]] = {
    "loop": frozenset({Fusion.ELEMENTWISE, Fusion.BROADCAST, Fusion.SOURCE, Fusion.LAYOUT}),
    "row_reduction": frozenset({Fusion.ELEMENTWISE, Fusion.BROADCAST, Fusion.SOURCE,
                                Fusion.REDUCTION, Fusion.LAYOUT}),
    "matmul": frozenset({Fusion.ELEMENTWISE, Fusion.BROADCAST, Fusion.SOURCE, Fusion.LAYOUT,
                         Fusion.REDUCTION, Fusion.OPAQUE}),
    "attention": frozenset({Fusion.ELEMENTWISE, Fusion.BROADCAST, Fusion.SOURCE,
                            Fusion.REDUCTION, Fusion.OPAQUE}),
}


def _print_types(printer: Printer, types: Sequence[Attribute]) -> None:
    printer.print_string("(")
    printer.print_list(types, printer.print_attribute)
    printer.print_string(")")


@irdl_op_definition
class FusedOp(IRDLOperation):
    """`lamina.fused`: op-table ops executed as one kernel (see the module docstring)."""

    name = "lamina.fused"
    inputs = var_operand_def(AnyTensorType)
    outputs = var_result_def(AnyTensorType)
    kind = prop_def(StringAttr)
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), Pure())
    # checked before IRDL's constraints (`lamina.ir.core.attrs`); an unknown discardable
    # attribute is refused by `verify_`, which names the kind
    ATTRIBUTES: ClassVar[tuple[AttrRule, ...]] = (
        AttrRule("kind", "a fusion kind string (" + ", ".join(f'"{k}"' for k in FUSION_KINDS)
                 + ")", is_string, required=True),)
    CLOSED_ATTRIBUTES: ClassVar[bool] = False

    def __init__(self, kind: str, inputs: Sequence[SSAValue], result_types: Sequence[Attribute],
                 body: Region):
        super().__init__(operands=[list(inputs)], result_types=[list(result_types)],
                         properties={"kind": StringAttr(kind)}, regions=[body])

    @property
    def fusion_kind(self) -> str:
        return self.kind.data

    @property
    def yield_op(self) -> YieldOp:
        term = self.body.block.last_op
        assert isinstance(term, YieldOp)
        return term

    # -- verification --
    def verify_(self) -> None:
        kind = self.kind.data
        if kind not in FUSION_KINDS:
            raise VerifyException(f"lamina.fused: unknown kind \"{kind}\" (expected one of "
                                  f"{', '.join(repr(k) for k in FUSION_KINDS)})")
        allowed = FUSION_KINDS[kind]
        for key in self.attributes:
            # as for op-table ops: an attribute nothing reads is a typo or a value lost, unless
            # it is another tool's (dialect-prefixed)
            if "." not in key:
                raise VerifyException(f"lamina.fused \"{kind}\" has no attribute '{key}' (it "
                                      "takes none; other attributes must be dialect-prefixed, "
                                      "e.g. 'mytool.tag')")
        block = self.body.block
        if len(block.args) != len(self.inputs):
            raise VerifyException(f"lamina.fused: {len(self.inputs)} operands but "
                                  f"{len(block.args)} block arguments")
        for i, (arg, v) in enumerate(zip(block.args, self.inputs, strict=True)):
            if arg.type != v.type:
                raise VerifyException(f"lamina.fused: block argument #{i} has type {arg.type}, "
                                      f"operand #{i} has type {v.type}")
        term = block.last_op
        if not isinstance(term, YieldOp):
            raise VerifyException("lamina.fused: body must end with lamina.yield")
        got = [v.type for v in term.values]
        want = [r.type for r in self.outputs]
        if got != want:
            raise VerifyException(f"lamina.fused: yields ({', '.join(map(str, got))}) but the "
                                  f"results are ({', '.join(map(str, want))})")
        for op in block.ops:
            if op is term or isinstance(op, FreeOp):
                continue  # lamina.free: the end of an intermediate's tile buffer (annotate-lifetimes)
            info = lookup(op.name)
            if info is None:
                raise VerifyException(f"lamina.fused: body may hold only op-table ops, found "
                                      f"{op.name}")
            if info.fusion not in allowed:
                raise VerifyException(f"lamina.fused \"{kind}\": {op.name} is "
                                      f"{info.fusion.value} and cannot be part of it")
            if info.fusion == Fusion.OPAQUE and not info.row_tiled:
                raise VerifyException(f"lamina.fused \"{kind}\": {op.name} cannot be run by "
                                      "blocks of result rows")
        if kind == "matmul":
            roots = [o for o in block.ops if (i := lookup(o.name)) is not None
                     and i.fusion == Fusion.OPAQUE]
            if len(roots) != 1:
                raise VerifyException(f"lamina.fused \"matmul\": needs exactly one row-tiled "
                                      f"opaque op at its root, found {len(roots)}")
        if kind == "attention":
            try:
                attention_parts(block)
            except NotAttention as e:
                raise VerifyException(f"lamina.fused \"attention\": {e}") from None

    # -- syntax --
    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attribute(self.kind)
        printer.print_string(" (")
        args = self.body.block.args

        def assign(pair: tuple[SSAValue, SSAValue]) -> None:
            printer.print_ssa_value(pair[0])
            printer.print_string(" = ")
            printer.print_ssa_value(pair[1])

        printer.print_list(list(zip(args, self.inputs, strict=True)), assign)
        printer.print_string(") : ")
        _print_types(printer, [v.type for v in self.inputs])
        printer.print_string(" -> ")
        res = [r.type for r in self.outputs]
        if len(res) == 1:
            printer.print_attribute(res[0])
        else:
            _print_types(printer, res)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False)
        extra = dict(self.attributes)
        if extra:
            printer.print_op_attributes(extra)

    @classmethod
    def parse(cls, parser: Parser) -> FusedOp:
        kind = parser.parse_str_literal()
        pos = parser.pos

        def assignment() -> tuple[Parser.UnresolvedArgument, UnresolvedOperand]:
            arg = parser.parse_argument(expect_type=False)
            parser.parse_punctuation("=")
            return arg, parser.parse_unresolved_operand()

        pairs = parser.parse_comma_separated_list(Parser.Delimiter.PAREN, assignment)
        parser.parse_punctuation(":")
        in_types = parser.parse_comma_separated_list(Parser.Delimiter.PAREN, parser.parse_type)
        parser.parse_punctuation("->")
        if parser.parse_optional_punctuation("("):
            out_types = []
            if not parser.parse_optional_punctuation(")"):  # `-> ()`: a group with no results
                out_types = parser.parse_comma_separated_list(Parser.Delimiter.NONE,
                                                              parser.parse_type)
                parser.parse_punctuation(")")
        else:
            out_types = [parser.parse_type()]
        if len(in_types) != len(pairs):
            parser.raise_error(f"lamina.fused: {len(pairs)} operands but {len(in_types)} "
                               "operand types", at_position=pos)
        inputs = parser.resolve_operands([u for _, u in pairs], in_types, pos)
        args = [a.resolve(t) for (a, _), t in zip(pairs, in_types, strict=True)]
        body = parser.parse_region(args)
        attrs = parser.parse_optional_attr_dict()
        op = cls(kind, inputs, out_types, body)
        op.attributes |= attrs
        return op


@irdl_op_definition
class YieldOp(IRDLOperation):
    """`lamina.yield`: the outputs of a `lamina.fused` body, one per result of the fused op."""

    name = "lamina.yield"
    values = var_operand_def(AnyTensorType)
    traits = traits_def(IsTerminator(), HasParent(FusedOp), Pure())
    ATTRIBUTES: ClassVar[tuple[AttrRule, ...]] = ()   # none (dialect-prefixed ones aside)

    def __init__(self, values: Sequence[SSAValue]):
        super().__init__(operands=[list(values)])

    def print(self, printer: Printer) -> None:
        if self.values:
            printer.print_string(" ")
            printer.print_list(self.values, printer.print_ssa_value)
            printer.print_string(" : ")
            printer.print_list([v.type for v in self.values], printer.print_attribute)

    @classmethod
    def parse(cls, parser: Parser) -> YieldOp:
        pos = parser.pos
        unresolved = []
        first = parser.parse_optional_unresolved_operand()
        if first is not None:
            unresolved.append(first)
            while parser.parse_optional_punctuation(","):
                unresolved.append(parser.parse_unresolved_operand())
        types: list[Attribute] = []
        if unresolved:
            parser.parse_punctuation(":")
            types = parser.parse_comma_separated_list(Parser.Delimiter.NONE, parser.parse_type)
        if len(types) != len(unresolved):
            parser.raise_error(f"lamina.yield: {len(unresolved)} values but {len(types)} types",
                               at_position=pos)
        return cls(parser.resolve_operands(unresolved, types, pos))


def make_body(arg_types: Sequence[Attribute]) -> tuple[Region, Block]:
    """An empty single-block region whose block has arguments of `arg_types`."""
    block = Block(arg_types=list(arg_types))
    return Region(block), block
