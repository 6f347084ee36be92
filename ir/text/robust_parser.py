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
- bounds sizes that no program has and that xDSL parses slowly enough to be a denial of service:
  a shape of more than `MAX_PARSED_RANK` dimensions (xDSL lexes `1x1x...` as one identifier and
  re-lexes its rest after each `x`, quadratic: a rank-50,000 type took 12 s to parse and refuse)
  and a list of more than `MAX_ARGUMENTS` arguments (a function or region; xDSL reads about
  5,000 arguments a second on a loaded 2-core machine, so 100,000 took more than 40 s, and a
  block's, which xDSL inserts one by one, 100 s). Each is refused at the dimension or argument
  past the limit. A shape costs the time to read the limit (0.14 s on that machine at a load of
  7); an argument list is counted in the raw text before any of it is parsed (a regex pass over
  its brackets, strings and names, `_prescan_arguments`), so refusing 100,000 arguments takes
  about 6 ms instead of the 0.4-1 s of parsing the first 4,096.
  The verifier's own limit on rank (`MAX_RANK`, 64, NumPy's) is lower; the parser's is only the
  point past which a text is not worth reading on.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import NoReturn, TypeVar

from lamina.ir.core.literals import echo, parse_dense, parse_scalar_attr
from lamina.ir.ops.opbase import MAX_RANK
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
from xdsl.ir import Attribute, Block, Region, TypeAttribute
from xdsl.parser import Parser
from xdsl.parser.generic_parser import ParserState
from xdsl.utils.exceptions import ParseError
from xdsl.utils.lexer import Input, Position, Span
from xdsl.utils.mlir_lexer import MLIRTokenKind

MAX_REGION_DEPTH = 48
MAX_ATTRIBUTE_DEPTH = 48
MAX_MESSAGE = 400
# sizes refused while parsing (see the module docstring): far above the verifier's rank limit
# and the arguments of any real step function (a GPT-2 step with its Adam state has about 450)
MAX_PARSED_RANK = 256
MAX_ARGUMENTS = 4096

_T = TypeVar("_T")

# What `RobustParser._prescan_arguments` looks at in an argument list: strings and comments
# (skipped whole: a bracket or `%` in them is text), `->` (not a closing `>`), brackets and the
# `%` that starts an argument's name.
_ARGUMENT_SCAN = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|->|[<>()\[\]{}%]')
_OPENERS = frozenset("<([{")
_CLOSERS = frozenset(">)]}")

# xDSL's messages for a token that is not there ("Expected '>' after ...", "'>' expected in
# dense array", "type expected"), as opposed to one that is there and wrong
_MISSING_TOKEN = re.compile(r"Expected '[^']*'|'[^']*' expected|\w+ expected")


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
        # arguments read so far in each comma-separated list being parsed, innermost last
        self._list_arguments: list[int] = []

    def raise_error(self, msg: str, at_position: Span[str] | Position | None = None,
                    end_position: Position | None = None) -> NoReturn:
        # A missing token (`tensor<4xf32` without its `>`) is found at the next token, which is
        # often on a later line: report it where it was expected, just after the text before
        # it, as mlir-opt does, rather than at the start of the next line.
        at_token = at_position is None or at_position == self._current_token.span
        if at_token and end_position is None and _MISSING_TOKEN.match(msg):
            at_position = expected if (expected := self._expected_at()) is not None \
                else at_position
        super().raise_error(msg, at_position, end_position)  # type: ignore[arg-type]

    def _expected_at(self) -> Span[str] | None:
        """The position just after the last code before the current token, when that token
        starts a later line (else None: the current token is the place)."""
        content = self.lexer.input.content
        if not isinstance(content, str):
            return None
        start = self._current_token.span.start
        line_start = content.rfind("\n", 0, start) + 1
        if content[line_start:start].strip():
            return None  # the token is not the first on its line
        end = line_start - 1  # the newline ending the previous line
        while end > 0:
            prev_start = content.rfind("\n", 0, end) + 1
            code = _strip_comment(content[prev_start:end]).rstrip()
            if code:
                pos = prev_start + len(code)
                return Span(pos, pos, self.lexer.input)
            end = prev_start - 1
        return None

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

    def parse_dimension_list(self) -> list[int]:
        # xDSL's loop, with the rank bounded: each dimension is refused where it is written
        dims: list[int] = []
        kinds = (MLIRTokenKind.INTEGER_LIT, MLIRTokenKind.QUESTION)
        if self._current_token.kind not in kinds:
            return dims
        dims.append(self.parse_shape_dimension())
        while self._parse_optional_shape_delimiter():
            if self._current_token.kind not in kinds:
                # a trailing `x` belongs to the element type that follows (`4xf32`)
                self._resume_from(self._current_token.span.start - 1)
                break
            if len(dims) >= MAX_PARSED_RANK:
                self.raise_error(f"shape has more than {MAX_PARSED_RANK} dimensions (Lamina "
                                 f"computes with at most {MAX_RANK})")
            dims.append(self.parse_shape_dimension())
        return dims

    def parse_comma_separated_list(self, delimiter: Parser.Delimiter,
                                   parse: Callable[[], _T],
                                   context_msg: str = "") -> list[_T]:
        self._list_arguments.append(0)
        try:
            return super().parse_comma_separated_list(delimiter, parse, context_msg)
        finally:
            self._list_arguments.pop()

    def parse_optional_argument(  # type: ignore[override]  # (xDSL overloads it on expect_type)
            self, expect_type: bool = True) -> Parser.UnresolvedArgument | \
            Parser.Argument | None:
        if self._list_arguments and self._current_token.kind == MLIRTokenKind.PERCENT_IDENT:
            self._list_arguments[-1] += 1
            if self._list_arguments[-1] == 1:
                self._prescan_arguments(self._current_token.span.start)
            if self._list_arguments[-1] > MAX_ARGUMENTS:
                self._too_many_arguments(self._current_token.span)
        return super().parse_optional_argument(expect_type)

    def _parse_optional_block_arg_list(self, block: Block) -> Block | None:
        # a block's arguments (`^bb0(%a: T, ...)`) are read by xDSL without
        # `parse_optional_argument`: count them here, from the token after the `(`
        if self._current_token.kind == MLIRTokenKind.L_PAREN:
            self._prescan_arguments(self._current_token.span.end)
        return super()._parse_optional_block_arg_list(block)

    def _prescan_arguments(self, start: int) -> None:
        """Refuse an argument list of more than `MAX_ARGUMENTS` before parsing any of it.

        Counting while parsing (above) costs the time to parse the first `MAX_ARGUMENTS`
        arguments, types and all (about 0.4 s); counting the `%` that start an argument at the
        list's own bracket level in the raw text costs a regex match per bracket, name and
        string, a few milliseconds. The scan stops at the list's closing bracket or at the
        argument past the limit, so a list within it costs a scan of itself, once."""
        content = self.lexer.input.content
        if not isinstance(content, str):
            return
        depth, count = 0, 0
        for m in _ARGUMENT_SCAN.finditer(content, start):
            token = m.group()
            if token == "%":
                if depth == 0:
                    count += 1
                    if count > MAX_ARGUMENTS:
                        self._too_many_arguments(Span(m.start(), m.start() + 1,
                                                      self.lexer.input))
            elif token in _OPENERS:
                depth += 1
            elif token in _CLOSERS:
                depth -= 1
                if depth < 0:
                    return  # the end of the list

    def _too_many_arguments(self, at: Span[str]) -> NoReturn:
        self.raise_error(f"more than {MAX_ARGUMENTS} arguments in one list (a function's or a "
                         "region's)", at)

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


def _strip_comment(line: str) -> str:
    """`line` without its `//` comment (a `//` inside a string literal is not one)."""
    in_string = False
    i = 0
    while i < len(line):
        c = line[i]
        if in_string and c == "\\":
            i += 2
            continue
        if c == '"':
            in_string = not in_string
        elif not in_string and line.startswith("//", i):
            return line[:i]
        i += 1
    return line


def shorten_message(message: str, limit: int = MAX_MESSAGE) -> str:
    """A diagnostic message cut to about `limit` characters: messages (ours and xDSL's) quote
    attributes and source text, which can be megabytes long in a malformed or generated file."""
    return echo(message, limit)


def nesting_error(parser: Parser) -> ParseError:
    """The diagnostic for a RecursionError that a nesting path not bounded above still hit,
    at the token the parser had reached."""
    return ParseError(parser._current_token.span, "nesting too deep for the parser")
