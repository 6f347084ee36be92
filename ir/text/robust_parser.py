"""xDSL's parser made safe on hostile input: every malformed text ends in one positioned
`ParseError`, quickly, never in a hang, an internal error or a huge message.

`RobustParser` is the base of `lamina.ir.text.source.LocatedParser`. It
- lexes with `LaminaLexer` (linear-time strings, filled-in messages, over-long integers refused);
- reads numeric literals with `lamina.ir.core.literals` (hex floats as bit patterns, values checked
  against their type, lazy splats);
- bounds nesting: xDSL parses recursively, and about 95 nested regions (generic form) or 150
  nested types exhaust Python's stack, which surfaced as RecursionError with no position. Deeper
  nesting than `MAX_REGION_DEPTH` regions or `MAX_ATTRIBUTE_DEPTH` levels of types and attributes
  is refused at the token that goes too deep. Both limits are far above any real program (Lamina
  programs nest module > func > fused kernel) and low enough that the verifier, the printer and the
  passes, which recurse over the same structure, stay within the stack together with them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from lamina.ir.core.literals import echo, parse_dense, parse_scalar_attr
from lamina.ir.text.lexer import LaminaLexer
from xdsl.context import Context
from xdsl.dialects.builtin import (
    AnyDenseElement,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
    RankedStructure,
)
from xdsl.ir import Attribute, Region, TypeAttribute
from xdsl.parser import Parser
from xdsl.parser.generic_parser import ParserState
from xdsl.utils.exceptions import ParseError
from xdsl.utils.lexer import Input

MAX_REGION_DEPTH = 48
MAX_ATTRIBUTE_DEPTH = 48
MAX_MESSAGE = 400

_T = TypeVar("_T")


class RobustParser(Parser):
    """A `Parser` that lexes with `LaminaLexer`, reads dense literals as MLIR and bounds nesting."""

    def __init__(self, ctx: Context, text: str | bytes, name: str = "<unknown>") -> None:
        # xDSL's constructor builds its own lexer and lexes the first token with it, which would
        # already hang on an unclosed string at the start of the input: give it nothing to lex.
        super().__init__(ctx, "", name)
        content = text.decode("utf-8") if isinstance(text, bytes) else text
        self._parser_state = ParserState(LaminaLexer(Input(content, name)))
        self._region_depth = 0
        self._attribute_depth = 0

    def parse_dense_int_or_fp_elements_attr(
        self, type: RankedStructure[AnyDenseElement] | None
    ) -> DenseIntOrFPElementsAttr:
        return parse_dense(self, type)

    def parse_optional_builtin_int_or_float_attr(self) -> IntegerAttr | FloatAttr | None:
        return parse_scalar_attr(self)

    def _parse_builtin_densearray_attr(self) -> DenseArrayBase | None:
        # `array<f32: 1.0e39>` and `array<f128: ...>` fail inside xDSL's packing, unpositioned
        start = self.pos
        try:
            return super()._parse_builtin_densearray_attr()
        except OverflowError:
            self.raise_error("array literal: a value is out of range for its element type",
                             start, self.pos)
        except NotImplementedError:
            self.raise_error("array literal: its element type cannot be stored (use i1, i32, "
                             "i64, f16, f32 or f64)", start, self.pos)

    def parse_optional_region(self, arguments: Iterable[Parser.Argument] | None = None) -> Region | None:
        if self._region_depth >= MAX_REGION_DEPTH:
            self.raise_error(f"nesting too deep: more than {MAX_REGION_DEPTH} nested regions")
        self._region_depth += 1
        try:
            return super().parse_optional_region(arguments)
        finally:
            self._region_depth -= 1

    def parse_optional_type(self) -> TypeAttribute | None:
        return self._nested(super().parse_optional_type)

    def parse_optional_attribute(self) -> Attribute | None:
        return self._nested(super().parse_optional_attribute)

    def _parse_tensor_literal(self) -> tuple[list[Parser._TensorLiteralElement], list[int]]:
        return self._nested(super()._parse_tensor_literal)

    def _nested(self, parse: Callable[[], _T]) -> _T:
        """Run `parse` one level deeper in types and attributes, refusing too deep a level."""
        if self._attribute_depth >= MAX_ATTRIBUTE_DEPTH:
            self.raise_error(f"nesting too deep: types and attributes nested more than "
                             f"{MAX_ATTRIBUTE_DEPTH} levels")
        self._attribute_depth += 1
        try:
            return parse()
        finally:
            self._attribute_depth -= 1


def shorten_message(message: str, limit: int = MAX_MESSAGE) -> str:
    """A diagnostic message cut to about `limit` characters: messages (ours and xDSL's) quote
    attributes and source text, which can be megabytes long in a malformed or generated file."""
    return echo(message, limit)


def nesting_error(parser: Parser) -> ParseError:
    """The diagnostic for a RecursionError that a nesting path not bounded above still hit,
    at the token the parser had reached."""
    return ParseError(parser._current_token.span, "nesting too deep for the parser")
