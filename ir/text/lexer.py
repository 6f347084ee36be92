"""Lamina's lexer: xDSL's MLIR lexer with three faults of xDSL 0.74 fixed.

- Its string-literal regex nests quantifiers (`(?:[^"...]+|...)*"`): on a string with no closing
  quote the regex engine tries every way to split the text before giving up, so `"` followed by 30
  characters took 35 s. The same language is matched here with possessive quantifiers, which never
  backtrack, so an unclosed string fails at once; and where xDSL said "End of file reached" for
  every malformed string, the message says whether the quote is missing or an escape is bad.
- Its "Expected suffix identifier after {first_char}" leaves the placeholder unfilled.
- A decimal integer literal of more than 4,300 digits makes `int()` raise ValueError (Python's
  guard against quadratic conversion), an internal error with no position. No element type holds
  such a number, so the lexer refuses the literal where it is written.
"""

from __future__ import annotations

import re
import sys

from xdsl.utils.exceptions import ParseError
from xdsl.utils.lexer import Position, Span
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRToken, MLIRTokenKind

# Python refuses to convert longer decimal strings (sys.get_int_max_str_digits(), 4300 by default).
MAX_INTEGER_DIGITS = sys.get_int_max_str_digits() or 4300


class LaminaLexer(MLIRLexer):
    """`MLIRLexer` that lexes unclosed strings in linear time and positions its errors fully."""

    # xDSL's language (escapes \n \t \\ \" and two hex digits; no raw newline), but possessive:
    # the alternatives start with distinct characters, so no match is lost by not backtracking.
    _unescaped_characters_regex = re.compile(
        r'"(?:[^"\\\n\v\f]++|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*+"'
    )

    def _lex_string_literal(self, start_pos: Position) -> MLIRToken:
        try:
            return super()._lex_string_literal(start_pos)
        except ParseError as e:
            if not e.msg.startswith("End of file reached before closing string"):
                raise
            # xDSL says "end of file" for every malformed string; say what is wrong, and where.
            raise self._string_error(start_pos) from None

    _escape_regex = re.compile(r'\\(?:["nt\\]|[0-9A-Fa-f]{2})')

    def _string_error(self, start_pos: Position) -> ParseError:
        """Why the string literal at `start_pos` does not lex: a bad escape, or no closing quote
        before the end of its line."""
        text, pos = self.input.content, start_pos + 1
        while pos < len(text) and text[pos] not in '"\n\v\f':
            if text[pos] == "\\":
                if self._escape_regex.match(text, pos) is None:
                    seq = text[pos:pos + 2]
                    shown = f"'{seq}'" if seq.isprintable() else repr(seq)
                    return ParseError(Span(pos, pos + 2, self.input),
                                      f"invalid escape sequence {shown} in string "
                                      "literal (escapes: \\n \\t \\\\ \\\" and \\XX, two hex digits)")
                pos += 2
            else:
                pos += 1
        return ParseError(Span(start_pos, start_pos + 1, self.input),
                          "unterminated string literal: no closing '\"' before the end of the "
                          "line")

    def _lex_prefixed_ident(self, start_pos: Position) -> MLIRToken:
        try:
            return super()._lex_prefixed_ident(start_pos)
        except ParseError as e:
            if "{first_char}" not in e.msg:
                raise
            first = self.input.at(start_pos) or "?"
            raise ParseError(e.span, f"Expected suffix identifier after {first} (a name such "
                             f"as {first}x or a number such as {first}0)") from None

    def _lex_number(self, start_pos: Position) -> MLIRToken:
        token = super()._lex_number(start_pos)
        if token.kind == MLIRTokenKind.INTEGER_LIT and not token.text.startswith("0x") \
                and len(token.text) > MAX_INTEGER_DIGITS:
            raise ParseError(token.span, f"integer literal of {len(token.text)} digits is too "
                             f"large for any type (at most {MAX_INTEGER_DIGITS} digits are read)")
        return token
