"""The base of every op-table op: verification, attributes and one readable custom syntax.

Every compute op has the form

    %r = lamina.NAME %a, %b [KEYWORD %c ...] [{attr = value, ...}] : TYPES

where the positional operands are the required (or variadic) ones, optional operands follow their
keyword (`scale %g`), attributes are an attribute dictionary, and TYPES is a single tensor type
when every operand and the result share it, else `(T1, T2, ...) -> R`. Constants print their value
in place: `%c = lamina.constant dense<1.0> : tensor<4xf32>`. The generic MLIR form is accepted too.

The op classes themselves (`lamina.ir.ops.lamina`: `AddOp`, `DropoutOp`, ...) are thin subclasses
generated from `lamina.ir.ops.optable.OPS` by `lamina.ir.ops.opgen`; each declares its operands and
attributes for IRDL and points at its table row (`INFO`), and everything else comes from here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, cast

import numpy as np
from lamina.ir.buffers import memory as _memory
from lamina.ir.core.dtypes import ITEMSIZE, element_name, element_type, to_storage
from lamina.ir.core.literals import echo
from lamina.ir.core.shapes import ShapeError, TensorInfo, TensorLiteral
from lamina.ir.mesh.placement import placement_problem, sharding_problem
from lamina.ir.ops.optable import AttrKind, AttrSpec, OpInfo
from xdsl.dialects.builtin import (
    AnyTensorType,
    BoolAttr,
    BytesAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    NoneAttr,
    StringAttr,
    TensorType,
    f64,
    i64,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    operand_def,
    result_def,
    traits_def,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import ParseError, VerifyException

SEGMENTS = "operandSegmentSizes"


# ---- attributes <-> Python values ----------------------------------------------------------------

def dense_to_array(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    """The NumPy array (storage dtype) held by a dense elements attribute.

    Read from the attribute's bytes, so bit patterns (NaN payloads, -0.0) survive; data of one
    element under a larger type is a splat (`lamina.ir.dense_literal` keeps splats that way)."""
    dtype = element_name(attr.get_element_type())
    assert dtype is not None
    shape = tuple(attr.get_shape())
    flat = _decode(attr.data.data, dtype)
    if flat.size == 1 and math.prod(shape) != 1:
        arr = np.full(shape, flat[0], dtype=flat.dtype)
    else:
        arr = flat.reshape(shape)
    return to_storage(arr, dtype)


def dense_from_array(array: np.ndarray, dtype: str) -> DenseIntOrFPElementsAttr:
    """The dense elements attribute of element type `dtype` holding `array` (converted to its
    storage form first; bf16 rounded to nearest even). An array whose elements are all the same
    bit pattern is stored as a splat, as the parser keeps `dense<0.0>`."""
    a = np.asarray(to_storage(np.asarray(array), dtype), order="C")  # (ascontiguousarray: rank >= 1)
    if dtype == "bf16":
        data = (a.astype(np.float32).view(np.uint32) >> np.uint32(16)).astype("<u2")
    elif dtype == "i1":
        data = a.astype(np.int8)
    else:
        data = a.astype(np.dtype(_LAYOUT[dtype]))
    flat = data.reshape(-1)
    raw = flat.tobytes()
    if flat.size > 1 and raw == flat[:1].tobytes() * flat.size:
        raw = flat[:1].tobytes()
    return DenseIntOrFPElementsAttr(TensorType(element_type(dtype), list(a.shape)), BytesAttr(raw))


# Little-endian element layouts of xDSL's dense data, per Lamina element type (i1 is one signed
# byte per element, bf16 the high half of an f32).
_LAYOUT = {"f16": "<f2", "f32": "<f4", "f64": "<f8", "i32": "<i4", "i64": "<i8", "i1": "i1",
           "bf16": "<u2"}


def _decode(data: bytes, dtype: str) -> np.ndarray:
    """The elements stored in `data` as a flat, writable array."""
    flat = np.frombuffer(data, dtype=np.dtype(_LAYOUT[dtype]))
    if dtype == "bf16":
        return (flat.astype(np.uint32) << np.uint32(16)).view(np.float32)
    if dtype == "i1":
        return flat != 0
    return flat.copy()


def attr_value(spec: AttrSpec, attr: Attribute | None) -> Any:
    """The Python value of attribute `attr` of kind `spec.kind` (its default when absent).

    An attribute of the wrong kind raises `VerifyException` saying what it must be: a caller
    that reads the attributes of an op not verified yet (a kernel's verifier reading its body
    ops) then fails with the verifier's diagnostic rather than an AttributeError."""
    if attr is None:
        return spec.default
    if not _KIND_CLASSES[spec.kind](attr) and (problem := _check_attr(spec, attr)) is not None:
        raise VerifyException(problem)
    match spec.kind:
        case AttrKind.INT:
            return cast(IntegerAttr, attr).value.data
        case AttrKind.FLOAT:
            return cast(FloatAttr, attr).value.data
        case AttrKind.BOOL:
            return bool(cast(IntegerAttr, attr).value.data)
        case AttrKind.STR:
            return cast(StringAttr, attr).data
        case AttrKind.INTS:
            return tuple(cast(DenseArrayBase[IntegerType], attr).get_values())
        case AttrKind.DENSE:
            dense = cast(DenseIntOrFPElementsAttr, attr)
            info = tensor_info(dense.get_type())
            return TensorLiteral(info.shape, info.dtype, lambda: dense_to_array(dense))


# The attribute classes `attr_value` reads per kind: a cheap test on every read, the full check
# (`_check_attr`, element types and choices) only when it fails.
_KIND_CLASSES: dict[AttrKind, Callable[[Attribute], bool]] = {
    AttrKind.INT: lambda a: isinstance(a, IntegerAttr),
    AttrKind.FLOAT: lambda a: isinstance(a, FloatAttr),
    AttrKind.BOOL: lambda a: isinstance(a, IntegerAttr),
    AttrKind.STR: lambda a: isinstance(a, StringAttr),
    AttrKind.INTS: lambda a: isinstance(a, DenseArrayBase),
    AttrKind.DENSE: lambda a: isinstance(a, DenseIntOrFPElementsAttr),
}


def make_attr(spec: AttrSpec, value: Any) -> Attribute:
    """Build the attribute for a Python value (used by builders and passes)."""
    match spec.kind:
        case AttrKind.INT:
            return IntegerAttr(int(value), i64)
        case AttrKind.FLOAT:
            return FloatAttr(float(value), f64)
        case AttrKind.BOOL:
            return BoolAttr.from_bool(bool(value))
        case AttrKind.STR:
            return StringAttr(str(value))
        case AttrKind.INTS:
            return DenseArrayBase.from_list(i64, [int(v) for v in value])
        case AttrKind.DENSE:
            assert isinstance(value, Attribute)
            return value


def _check_attr(spec: AttrSpec, attr: Attribute) -> str | None:
    """Why `attr` is not a valid value for `spec`, or None."""
    ok: bool
    match spec.kind:
        case AttrKind.INT:
            ok = isinstance(attr, IntegerAttr) and isinstance(attr.type, IntegerType) \
                and attr.type.width.data > 1
            want = "an integer"
        case AttrKind.FLOAT:
            ok = isinstance(attr, FloatAttr)
            want = "a float (e.g. 1.0e-05)"
        case AttrKind.BOOL:
            ok = isinstance(attr, IntegerAttr) and isinstance(attr.type, IntegerType) \
                and attr.type.width.data == 1
            want = "true or false"
        case AttrKind.STR:
            ok = isinstance(attr, StringAttr) and (not spec.choices or attr.data in spec.choices)
            want = "one of " + ", ".join(f'"{c}"' for c in spec.choices) if spec.choices \
                else "a string"
        case AttrKind.INTS:
            ok = isinstance(attr, DenseArrayBase) and isinstance(attr.elt_type, IntegerType)
            want = "an integer array like array<i64: 0, 1>"
        case AttrKind.DENSE:
            value_type = attr.get_type() if isinstance(attr, DenseIntOrFPElementsAttr) else None
            ok = isinstance(value_type, TensorType) and \
                element_name(value_type.get_element_type()) is not None
            want = "a dense<...> tensor literal of a supported element type"
            if isinstance(value_type, TensorType) and ok \
                    and not isinstance(value_type.encoding, NoneAttr):
                return (f"attribute '{spec.name}' must have a type without encoding (a "
                        f"placement belongs in the result type), got {value_type}")
    return None if ok else f"attribute '{spec.name}' must be {want}, got {attr}"


def tensor_info(t: Attribute) -> TensorInfo:
    assert isinstance(t, TensorType)
    dtype = element_name(t.element_type)
    assert dtype is not None
    return TensorInfo(tuple(t.get_shape()), dtype)


# NumPy's limit on array rank: a higher-rank tensor cannot be run, so the verifier refuses it.
MAX_RANK = 64


def type_problem(t: Attribute) -> str | None:
    """Why `t` is not a tensor type Lamina can compute with (any placement aside), or None."""
    if not isinstance(t, TensorType):
        return f"expected a tensor type, got {t}"
    if element_name(t.element_type) is None:
        return f"unsupported element type {t.element_type} (use f16, bf16, f32, f64, i1, i32, i64)"
    if any(d < 0 for d in t.get_shape()):
        return f"dynamic shapes are not supported: {t}"
    if len(t.get_shape()) > MAX_RANK:
        return f"rank {len(t.get_shape())} is more than the {MAX_RANK} dimensions Lamina supports"
    if math.prod(t.get_shape()) * ITEMSIZE[element_name(t.element_type) or "f64"] >= 1 << 63:
        return "tensor type is larger than 2**63 bytes, more than any device can address"
    return None


# ---- the common op base --------------------------------------------------------------------------

class LaminaOp(IRDLOperation):
    """Base of every table-driven Lamina op: verification, attributes and syntax from `info`."""

    INFO: ClassVar[OpInfo]

    result = result_def(AnyTensorType)
    traits = traits_def(Pure())

    @property
    def info(self) -> OpInfo:
        """This op's entry in the op table."""
        return self.INFO

    # -- facts --
    def attr_values(self) -> dict[str, Any]:
        """Every attribute of the op as a Python value, defaults filled in."""
        return {a.name: attr_value(a, self.properties.get(a.name)) for a in self.info.attrs}

    def operand_slots(self) -> list[SSAValue | None]:
        """Operands by the table's operand list: None for an absent optional, flattened variadic."""
        slots: list[SSAValue | None] = []
        for spec in self.info.operands:
            got = getattr(self, spec.name)
            if spec.variadic:
                slots.extend(got)
            else:
                slots.append(got)
        return slots

    def operand_infos(self) -> list[TensorInfo | None]:
        return [None if v is None else tensor_info(v.type) for v in self.operand_slots()]

    # -- verification --
    def verify_attributes(self) -> None:
        """Every attribute is one the table lists (or dialect-prefixed), every required one is
        present, each of its kind. `lamina.ir.text.source.verify` runs this before IRDL's own
        checks, which would report an unknown property in xDSL's words, naming no choices; a
        bad operand or result type is left to `verify_`, which reports it first."""
        if self._type_problem() is None:
            self._check_attributes()

    def _type_problem(self) -> str | None:
        """Why an operand or result type is one Lamina cannot compute with, or None."""
        for v in (*self.operands, *self.results):
            if (problem := type_problem(v.type) or placement_problem(v.type, self)) is not None:
                return f"{self.name}: {problem}"
        return _memory.tier_problem(self)

    def _check_attributes(self) -> None:
        name = self.name
        known = {a.name for a in self.info.attrs}
        for key in (*self.properties, *self.attributes):
            if key not in known and key != SEGMENTS and "." not in key:
                raise VerifyException(
                    f"{name} has no attribute '{key}' (it takes: {', '.join(sorted(known)) or 'none'}; "
                    "other attributes must be dialect-prefixed, e.g. 'mytool.tag')")
        for spec in self.info.attrs:
            attr = self.properties.get(spec.name)
            if attr is None:
                if spec.required:
                    raise VerifyException(f"{name}: missing required attribute '{spec.name}'")
                continue
            if (problem := _check_attr(spec, attr)) is not None:
                raise VerifyException(f"{name}: {problem}")

    def verify_(self) -> None:
        name = self.name
        if (problem := self._type_problem()) is not None:
            raise VerifyException(problem)
        self._check_attributes()
        declared = tensor_info(self.results[0].type)
        slots = self.operand_slots()
        infos = [None if v is None else tensor_info(v.type) for v in slots]
        attrs = self.attr_values()
        try:
            expected = self.info.shape(infos, attrs, declared)
        except ShapeError as e:
            raise VerifyException(f"{name}: {e}") from None
        if expected != declared:
            raise VerifyException(
                f"{name}: result type {declared} does not match the expected {expected}"
            )
        problem = sharding_problem(self, self.info, [None if v is None else v.type for v in slots],
                                   attrs, infos, declared)
        if problem is not None:
            raise VerifyException(problem if problem.startswith(name) else f"{name}: {problem}")

    # -- custom syntax --
    def print(self, printer: Printer) -> None:
        if self.info.name == "constant":
            if self.attributes:   # discardable ones (derive-backward's seed mark), before the literal
                printer.print_op_attributes(self.attributes)
            _print_constant(printer, self.properties["value"], self.results[0].type)
            return
        positional: list[SSAValue] = []
        keyword: list[tuple[str, SSAValue]] = []
        for spec in self.info.operands:
            got = getattr(self, spec.name)
            if spec.variadic:
                positional.extend(got)
            elif spec.optional:
                if got is not None:
                    keyword.append((spec.name, got))
            else:
                positional.append(got)
        if positional:
            printer.print_string(" ")
            printer.print_list(positional, printer.print_ssa_value)
        for kw, v in keyword:
            printer.print_string(f" {kw} ")
            printer.print_ssa_value(v)
        props = {k: v for k, v in self.properties.items() if k != SEGMENTS}
        if props or self.attributes:
            printer.print_op_attributes({**props, **self.attributes})
        printer.print_string(" : ")
        types = [v.type for v in self.operands]
        result = self.results[0].type
        if all(t == result for t in types):    # also an op without operands (iota)
            printer.print_attribute(result)
        else:
            printer.print_string("(")
            printer.print_list(types, printer.print_attribute)
            printer.print_string(") -> ")
            printer.print_attribute(result)

    @classmethod
    def parse(cls, parser: Parser) -> LaminaOp:
        info = cls.INFO
        if info.name == "constant":
            marks = parser.parse_optional_attr_dict()
            value, result = _parse_constant(parser)
            return cls.build(properties={"value": value}, attributes=marks, result_types=[result])
        pos = parser.pos
        positional: list[UnresolvedOperand] = []
        first = parser.parse_optional_unresolved_operand()
        if first is not None:
            positional.append(first)
            while parser.parse_optional_punctuation(","):
                positional.append(parser.parse_unresolved_operand())
        keyword: dict[str, UnresolvedOperand] = {}
        optional_names = [s.name for s in info.operands if s.optional]
        progress = True
        while progress:
            progress = False
            for kw in optional_names:
                if kw not in keyword and parser.parse_optional_keyword(kw):
                    keyword[kw] = parser.parse_unresolved_operand()
                    progress = True
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        n_ops = len(positional) + len(keyword)
        if parser.parse_optional_punctuation("("):
            types = [] if parser.parse_optional_punctuation(")") else None
            if types is None:
                types = parser.parse_comma_separated_list(Parser.Delimiter.NONE,
                                                          parser.parse_type)
                parser.parse_punctuation(")")
            parser.parse_punctuation("->")
            result = parser.parse_type()
        else:
            result = parser.parse_type()
            types = [result] * n_ops
        if len(types) != n_ops:
            parser.raise_error(f"{info.full_name}: {n_ops} operands but {len(types)} operand "
                               f"types", at_position=pos)
        # operand order in the type list: positional first, then keyword operands in table order
        ordered_kw = [(k, keyword[k]) for k in optional_names if k in keyword]
        unresolved = positional + [u for _, u in ordered_kw]
        values = parser.resolve_operands(unresolved, types, pos)
        pos_vals, kw_vals = values[: len(positional)], values[len(positional):]
        kw_map = dict(zip([k for k, _ in ordered_kw], kw_vals, strict=True))
        groups: list[SSAValue | Sequence[SSAValue] | None] = []
        required = [s for s in info.operands if not s.optional]
        if any(s.variadic for s in required):
            groups_req: list[Sequence[SSAValue] | SSAValue] = [pos_vals]
        else:
            if len(pos_vals) != len(required):
                parser.raise_error(
                    f"{info.full_name} expects {len(required)} positional operand(s) "
                    f"({', '.join(s.name for s in required)}), got {len(pos_vals)}",
                    at_position=pos)
            groups_req = list(pos_vals)
        it = iter(groups_req)
        for s in info.operands:
            if s.optional:
                v = kw_map.get(s.name)
                groups.append([v] if v is not None else [])
            else:
                groups.append(next(it))
        known = {a.name for a in info.attrs}
        props = {k: v for k, v in attrs.items() if k in known}
        discardable = {k: v for k, v in attrs.items() if k not in known}
        for k in discardable:
            if "." not in k:
                parser.raise_error(f"{info.full_name} has no attribute '{k}' (it takes: "
                                   f"{', '.join(sorted(known)) or 'none'})", at_position=pos)
        return cls.build(operands=groups, properties=props, attributes=discardable,
                         result_types=[result])


def _print_constant(printer: Printer, value: Attribute, result: Attribute) -> None:
    """`dense<...> : T` with T the result type: a pass may have given the result a placement or
    tier (`tensor<f32, #lamina.place<tier = hbm>>`) that the value's own type does not carry."""
    printer.print_string(" ")
    if not isinstance(value, DenseIntOrFPElementsAttr) or value.get_type() == result:
        printer.print_attribute(value)
        return
    value.print_without_type(printer)
    printer.print_string(" : ")
    printer.print_attribute(result)


def _parse_constant(parser: Parser) -> tuple[DenseIntOrFPElementsAttr, Attribute]:
    """The value and result type of `lamina.constant dense<...> : T`: the result type is T, the
    value's type is T without its encoding (placements belong to values, not to literals)."""
    start = parser.pos
    if parser.parse_optional_keyword("dense"):
        value = parser.parse_dense_int_or_fp_elements_attr(None)
    else:
        try:
            attr = parser.parse_attribute()
        except ParseError:
            # e.g. `0.5 : tensor<f32>`, which xDSL reads as a float attribute of a tensor type
            # and rejects further on with a message that names neither the op nor the fix
            line = parser.lexer.input.content[start:].split("\n", 1)[0].strip()
            parser.raise_error(f"lamina.constant expects a dense<...> literal, got "
                               f"'{echo(line)}'{_splat_hint(line)}", at_position=start)
        parser.raise_error(f"lamina.constant expects a dense<...> literal, got {echo(str(attr))}",
                           at_position=start, end_position=parser.pos)
    result = value.get_type()
    if isinstance(result, TensorType) and not isinstance(result.encoding, NoneAttr):
        plain = TensorType(result.element_type, result.get_shape())
        value = DenseIntOrFPElementsAttr(plain, value.data)
    return value, result


def _splat_hint(text: str) -> str:
    """' (write dense<0.5> : tensor<f32>)' for a scalar written where a dense literal belongs."""
    m = re.fullmatch(r"(-?[0-9][\w.+-]*|true|false)\s*:\s*(tensor<.*>)", text)
    return f" (write dense<{m[1]}> : {m[2]})" if m else ""


class UnaryOp(LaminaOp):
    """Base of the ops with one tensor operand (`input`)."""

    input = operand_def(AnyTensorType)


class BinaryOp(LaminaOp):
    """Base of the ops with two tensor operands (`lhs`, `rhs`)."""

    lhs = operand_def(AnyTensorType)
    rhs = operand_def(AnyTensorType)
