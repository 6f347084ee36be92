"""Reading numeric literals as MLIR does: dense tensors (`dense<...> : tensor<...>`) without
materializing splats, and integer and float attributes (`3 : i32`, `0x7F800000 : f32`).

xDSL 0.74's reader differs from MLIR in ways that matter to Lamina programs:

- A hexadecimal literal in a float tensor (`dense<0x7F800000> : tensor<f32>`) is MLIR's way to
  write an exact bit pattern (+inf, NaN, a -inf attention mask); xDSL read it as the integer
  2139095040. Here it is the bit pattern, with MLIR's rules and messages: no leading minus, and no
  more bits than the type has. xDSL's printer already writes non-finite floats (and finite f32/f64
  values whose short decimal form would not read back) this way, so they now round-trip; Lamina
  keeps that spelling (lower-case hex for non-finite values; MLIR's is upper-case, and both read).
- A value outside its type (`dense<1.0e+39> : tensor<f32>`, `dense<2> : tensor<i1>`, 2**40 as
  i32, `{eps = 1.0e39 : f32}`) leaked OverflowError / VerifyException with no position, or only
  when printing; here it is one diagnostic at the literal. So is an element type xDSL cannot store
  (f80, f128, i128).
- A splat (`dense<1.0> : tensor<8192x4096xf32>`) was expanded while parsing into one Python value
  per element and then into bytes (2.8 GB for that one line). Here a splat keeps one element: the
  attribute's data holds a single element although its type has many, which xDSL's printer prints
  as a splat, and `lamina.ir.ops.opbase.dense_to_array` expands only when a program runs.

Messages never echo more than `MAX_ECHO` characters of a literal.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any, NoReturn, cast

from xdsl.dialects.builtin import (
    AnyDenseElement,
    AnyFloat,
    BFloat16Type,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    RankedStructure,
    Signedness,
    f64,
    i64,
)
from xdsl.ir import Attribute
from xdsl.parser import AttrParser
from xdsl.utils.lexer import Span
from xdsl.utils.mlir_lexer import MLIRTokenKind

MAX_ECHO = 40

# The float element types Lamina reads bit by bit, with their largest finite value and +inf pattern.
_FLOATS: dict[type, tuple[int, str, str]] = {
    Float16Type: (16, "65504", "0x7C00"),
    BFloat16Type: (16, "3.38953139e+38", "0x7F80"),
    Float32Type: (32, "3.40282347e+38", "0x7F800000"),
    Float64Type: (64, "1.7976931348623157e+308", "0x7FF0000000000000"),
}


def echo(text: str, limit: int = MAX_ECHO) -> str:
    """`text` as a message quotes it: whole when short, else its two ends and its length."""
    if len(text) <= limit:
        return text
    keep = max(limit // 2 - 4, 4)
    return f"{text[:keep]}...{text[-keep:]} ({len(text)} characters)"


def parse_dense(parser: AttrParser, type: Attribute | None) -> DenseIntOrFPElementsAttr:
    """Parse the part of a dense literal after `dense`: `<...>`, then `: TYPE` unless `type` is
    given (xDSL's `parse_dense_int_or_fp_elements_attr` contract, which this replaces)."""
    start = parser.pos
    parser.parse_punctuation("<", " in dense attribute")
    contents = None
    if parser.parse_optional_punctuation(">") is None:
        hex_string = parser.parse_optional_str_literal()
        contents = hex_string if hex_string is not None else parser._parse_tensor_literal()
        parser.parse_punctuation(">", " in dense attribute")
    type_pos = parser.pos
    if type is None:
        parser.parse_punctuation(":", " in dense attribute")
        type_pos = parser.pos
        type = parser._parse_dense_literal_type()
    shaped = cast(RankedStructure[AnyDenseElement], type)
    shape = list(shaped.get_shape())
    numel = math.prod(shape)
    if contents is None:
        if numel != 0:
            parser.raise_error("Expected at least one element in the dense literal, but got None")
        return DenseIntOrFPElementsAttr(shaped, BytesAttr(b""))
    element_type = shaped.get_element_type()
    size = _element_size(parser, element_type, type_pos)
    if isinstance(contents, str):
        return _from_hex_string(parser, shaped, contents, size, numel)
    elements, literal_shape = contents
    if literal_shape and literal_shape != shape:
        # xDSL's message and position (the token after the type), which tests pin
        parser.raise_error(f"Shape mismatch in dense literal. Expected {shape} shape from the "
                           f"type, but got {literal_shape} shape.")
    data = _encode(parser, elements, element_type, start)
    if not literal_shape and numel == 0:
        data = b""  # a splat of no elements
    return DenseIntOrFPElementsAttr(shaped, BytesAttr(data))


def _element_size(parser: AttrParser, element_type: AnyDenseElement, pos: int) -> int:
    """Bytes per element; a diagnostic at the type when xDSL cannot store the element type."""
    try:
        size = element_type.compile_time_size
        if isinstance(element_type, IntegerType):
            _ = element_type.format  # i65 and wider have no struct format
        return size
    except (NotImplementedError, AttributeError):
        parser.raise_error(f"dense literals of element type {element_type} are not supported "
                           "(Lamina's element types: f16, bf16, f32, f64, i1, i32, i64)",
                           at_position=pos, end_position=parser.pos)


def _from_hex_string(parser: AttrParser, type: RankedStructure[AnyDenseElement], text: str, size: int,
                     numel: int) -> DenseIntOrFPElementsAttr:
    """`dense<"0x...">`: raw little-endian element bytes, or one element for a splat."""
    try:
        data = bytes.fromhex(text[2:])
    except ValueError:
        parser.raise_error("Hex string in denseAttr is invalid")
    if len(data) == size and numel != 1:
        data = data if numel else b""  # a splat
    elif len(data) != numel * size:
        parser.raise_error(f"Shape mismatch in dense literal. Expected {numel} elements from the "
                           f"type, but got {len(data) // size} elements.")
    return DenseIntOrFPElementsAttr(type, BytesAttr(data))


def _encode(parser: AttrParser, elements: Sequence[AttrParser._TensorLiteralElement],
            element_type: AnyDenseElement, start: int) -> bytes:
    """The little-endian bytes of the literal's elements, each checked against the type."""
    if isinstance(element_type, IntegerType):
        return _encode_ints(parser, elements, element_type)
    if isinstance(element_type, AnyFloat) and type(element_type) in _FLOATS:
        return b"".join(_float_bytes(parser, e, element_type) for e in elements)
    # complex, index and the other float types Lamina does not compute with: xDSL's conversion
    values = [e.to_type(parser, element_type) for e in elements]
    try:
        # each of these types packs the Python values its own `to_type` produced
        return cast(Any, element_type).pack(values)
    except (NotImplementedError, ValueError, OverflowError, struct.error) as err:
        parser.raise_error(f"cannot store this dense literal as {element_type}: {err}",
                           at_position=start, end_position=parser.pos)


def _encode_ints(parser: AttrParser, elements: Sequence[AttrParser._TensorLiteralElement],
                 element_type: IntegerType) -> bytes:
    values: list[int] = []
    for e in elements:
        v = e.to_int(parser, element_type.signedness.data != Signedness.UNSIGNED,
                     element_type.width.data == 1)
        normalized = element_type.normalized_value(v)
        if normalized is None:
            _fail_at(parser, e.span, int_range_message(e.span.text, element_type))
        values.append(normalized)
    return element_type.pack(values)


def _float_bytes(parser: AttrParser, e: AttrParser._TensorLiteralElement,
                 element_type: AnyFloat) -> bytes:
    """One float element: a hexadecimal literal is its bit pattern, anything else its value
    rounded to the type (an error if it rounds to infinity)."""
    width = _FLOATS[type(element_type)][0]
    text = e.span.text
    if isinstance(e.value, int) and not isinstance(e.value, bool) and _is_hex(text):
        if (problem := hex_float_problem(text, e.value, width, element_type)) is not None:
            _fail_at(parser, e.span, problem)
        return e.value.to_bytes(width // 8, "little")
    value = e.to_float(parser)
    if (problem := float_range_problem(text, value, element_type)) is not None:
        _fail_at(parser, e.span, problem)
    return element_type.pack([value])


def _is_hex(text: str) -> bool:
    return text.lstrip("-").lstrip().startswith(("0x", "0X"))


def int_range_message(text: str, t: IntegerType) -> str:
    """The diagnostic for integer literal `text` outside the values of `t`."""
    if t.width.data == 1:
        return f"integer value {echo(text)} is out of range for i1 (write true or false)"
    lo, hi = t.value_range()
    return f"integer value {echo(text)} is out of range for {t} (it holds {lo} to {hi - 1})"


def hex_float_problem(text: str, bits: int, width: int, t: Attribute) -> str | None:
    """Why hexadecimal literal `text` (value `bits`) is not a bit pattern of float type `t`: MLIR's
    two rules and messages."""
    if bits < 0:
        return "hexadecimal float literal should not have a leading minus"
    if bits >= 1 << width:
        return (f"hexadecimal float constant out of range for type {t}: {echo(text)} has more "
                f"than {width} bits")
    return None


def float_range_problem(text: str, value: float, t: AnyFloat) -> str | None:
    """Why decimal literal `text` (read as `value`) has no finite value in float type `t`, or
    None; only the types Lamina computes with are checked."""
    if type(t) not in _FLOATS:
        return None
    try:
        finite = math.isfinite(t.unpack(t.pack([value]), 1)[0])
    except OverflowError:  # struct refuses what rounds to infinity in f16 and f32
        finite = False
    if finite:
        return None
    width, largest, inf_bits = _FLOATS[type(t)]
    negative_inf = "0x" + format(int(inf_bits, 16) | 1 << (width - 1), "X")
    sign = "-" if value < 0 else ""
    return (f"floating-point value {echo(text)} is out of range for {t} (largest finite value "
            f"{sign}{largest}); write {inf_bits} for +inf, {negative_inf} for -inf")


def parse_scalar_attr(parser: AttrParser) -> IntegerAttr | FloatAttr | None:
    """An integer or float attribute (`3 : i32`, `1.0e-05 : f64`, `0x7F800000 : f32`), if present.

    Replaces xDSL's `parse_optional_builtin_int_or_float_attr` with MLIR's rules, each error at
    the literal: a value outside its type (xDSL: VerifyException without position, or an
    OverflowError when printing), a hexadecimal bit pattern that is negative or too wide, a float
    type xDSL cannot print."""
    if (flag := parser.try_parse_builtin_boolean_attr()) is not None:
        return flag
    start = parser.pos
    value = parser.parse_optional_number()
    if value is None:
        return None
    span = Span(start, start + len(parser.lexer.input.content[start:parser.pos].rstrip()),
                parser.lexer.input)
    if parser._current_token.kind != MLIRTokenKind.COLON:
        t: Attribute = f64 if isinstance(value, float) else i64
    else:
        t = parser._parse_attribute_type()
    if isinstance(t, AnyFloat):
        return _float_attr(parser, span, value, t)
    if isinstance(t, IntegerType | IndexType):
        if isinstance(value, float):
            parser.raise_error("Floating point value is not valid for integer type.")
        if isinstance(t, IntegerType) and t.normalized_value(value) is None:
            _fail_at(parser, span, int_range_message(span.text, t))
        return IntegerAttr(value, t)
    parser.raise_error("Invalid type given for integer or float attribute.")


def _float_attr(parser: AttrParser, span: Span, value: int | float, t: AnyFloat) -> FloatAttr:
    try:
        t.pack([0.0])
    except NotImplementedError:
        _fail_at(parser, span, f"float attributes of type {t} are not supported (use f16, bf16, "
                 "f32 or f64)")
    if isinstance(value, int) and _is_hex(span.text):
        if (problem := hex_float_problem(span.text, value, t.bitwidth, t)) is not None:
            _fail_at(parser, span, problem)
        return FloatAttr(next(t.iter_unpack(value.to_bytes(t.compile_time_size, "little"))), t)
    if (problem := float_range_problem(span.text, float(value), t)) is not None:
        _fail_at(parser, span, problem)
    return FloatAttr(float(value), t)


def _fail_at(parser: AttrParser, span: Span, message: str) -> NoReturn:
    parser.raise_error(message, at_position=span)
