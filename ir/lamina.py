"""The `lamina` dialect: tensor ops generated from the op table, with one readable custom syntax.

Every compute op has the form

    %r = lamina.NAME %a, %b [KEYWORD %c ...] [{attr = value, ...}] : TYPES

where the positional operands are the required (or variadic) ones, optional operands follow their
keyword (`scale %g`), attributes are an attribute dictionary, and TYPES is a single tensor type
when every operand and the result share it, else `(T1, T2, ...) -> R`. Constants print their value
in place: `%c = lamina.constant dense<1.0> : tensor<4xf32>`. The generic MLIR form is accepted too.

Op classes are generated from `lamina.ir.optable.OPS`; `LaminaOp.info` gives an op's table entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, cast

import numpy as np
from lamina.ir import memory as _memory
from lamina.ir.dtypes import element_name, to_storage
from lamina.ir.fused import FusedOp, YieldOp
from lamina.ir.optable import OPS, AttrKind, AttrSpec, OpInfo
from lamina.ir.placement import MeshOp, PlaceAttr, placement_problem, sharding_problem
from lamina.ir.shapes import ShapeError, TensorInfo, TensorLiteral
from xdsl.dialects.builtin import (
    AnyTensorType,
    BoolAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    f64,
    i64,
)
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    AnyAttr,
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

SEGMENTS = "operandSegmentSizes"


# ---- attributes <-> Python values ----------------------------------------------------------------

def dense_to_array(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    """The NumPy array (storage dtype) held by a dense elements attribute."""
    dtype = element_name(attr.get_element_type())
    assert dtype is not None
    shape = tuple(attr.get_shape())
    values = attr.get_values()
    if attr.is_splat() and len(values) == 1:
        arr = np.full(shape, values[0], dtype=np.float64 if dtype.startswith(("f", "b"))
                      else np.int64)
    else:
        arr = np.asarray(values).reshape(shape)
    return to_storage(arr, dtype)


def attr_value(spec: AttrSpec, attr: Attribute | None) -> Any:
    """The Python value of attribute `attr` of kind `spec.kind` (its default when absent)."""
    if attr is None:
        return spec.default
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
            ok = isinstance(attr, DenseIntOrFPElementsAttr) and \
                element_name(attr.get_element_type()) is not None
            want = "a dense<...> tensor literal of a supported element type"
    return None if ok else f"attribute '{spec.name}' must be {want}, got {attr}"


def tensor_info(t: Attribute) -> TensorInfo:
    assert isinstance(t, TensorType)
    dtype = element_name(t.element_type)
    assert dtype is not None
    return TensorInfo(tuple(t.get_shape()), dtype)


def _type_problem(t: Attribute) -> str | None:
    if not isinstance(t, TensorType):
        return f"expected a tensor type, got {t}"
    if element_name(t.element_type) is None:
        return f"unsupported element type {t.element_type} (use f16, bf16, f32, f64, i1, i32, i64)"
    if any(d < 0 for d in t.get_shape()):
        return f"dynamic shapes are not supported: {t}"
    return None


# ---- the common op base --------------------------------------------------------------------------

class LaminaOp(IRDLOperation):
    """Base of every table-driven Lamina op: verification, attributes and syntax from `info`."""

    INFO: ClassVar[OpInfo]

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
    def verify_(self) -> None:
        name = self.name
        for v in (*self.operands, *self.results):
            if (problem := _type_problem(v.type) or placement_problem(v.type, self)) is not None:
                raise VerifyException(f"{name}: {problem}")
        if (problem := _memory.tier_problem(self)) is not None:
            raise VerifyException(problem)
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
            printer.print_string(" ")
            printer.print_attribute(self.properties["value"])
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
        if types and all(t == result for t in types):
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
            start = parser.pos
            value = parser.parse_attribute()
            if not isinstance(value, DenseIntOrFPElementsAttr):
                parser.raise_error(f"lamina.constant expects a dense<...> literal, got {value}",
                                   at_position=start, end_position=parser.pos)
            return cls.build(properties={"value": value}, result_types=[value.get_type()])
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


def _make_op(info: OpInfo) -> type[LaminaOp]:
    body: dict[str, Any] = {
        "name": info.full_name,
        "__doc__": f"`{info.full_name}`: {info.summary}.",
        "__module__": __name__,
        "result": result_def(AnyTensorType),
        "traits": traits_def(Pure()),
    }
    n_optional = 0
    for spec in info.operands:
        if spec.variadic:
            body[spec.name] = var_operand_def(AnyTensorType)
        elif spec.optional:
            body[spec.name] = opt_operand_def(AnyTensorType)
            n_optional += 1
        else:
            body[spec.name] = operand_def(AnyTensorType)
    for spec in info.attrs:
        key = spec.name if spec.name not in body else f"{spec.name}_attr"
        body[key] = opt_prop_def(AnyAttr(), prop_name=spec.name)
    if n_optional > 1:
        body["irdl_options"] = (AttrSizedOperandSegments(as_property=True),)
    camel = "".join(p.capitalize() for p in info.name.split("_")) + "Op"
    cls = irdl_op_definition(type(camel, (LaminaOp,), body))
    cls.INFO = info  # set after definition: IRDL accepts only IR fields in the class body
    return cls


OP_CLASSES: dict[str, type[LaminaOp]] = {name: _make_op(info) for name, info in OPS.items()}

# Module-level names for Python builders: lamina.AddOp, lamina.LayernormOp, ...
globals().update({cls.__name__: cls for cls in OP_CLASSES.values()})


def build(name: str, operands: Sequence[SSAValue | Sequence[SSAValue] | None],
          result_type: Attribute, **attrs: Any) -> LaminaOp:
    """Build `lamina.<name>` from SSA values and Python attribute values (for passes and tests)."""
    info = OPS[name]
    cls = OP_CLASSES[name]
    groups: list[SSAValue | Sequence[SSAValue]] = []
    for spec, v in zip(info.operands, operands, strict=True):
        groups.append(([] if v is None else [v]) if spec.optional else v)  # type: ignore[list-item]
    props = {k: make_attr(info.attr(k), v) for k, v in attrs.items() if v is not None}
    return cls.build(operands=groups, properties=props, result_types=[result_type])


from lamina.ir.collectives import COLLECTIVES as _COLLECTIVES  # noqa: E402

Lamina = Dialect("lamina", [*OP_CLASSES.values(), MeshOp, FusedOp, YieldOp, *_memory.MEMORY_OPS,
                            *_COLLECTIVES], [PlaceAttr])
