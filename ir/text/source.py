"""Reading Lamina programs: the context, a parser that records where each op was written, and a
verifier whose errors point at that position.

xDSL's parser does not remember source positions and its verifier errors carry none, so
`LocatedParser` stamps every op it parses with a `FileLineColLoc` (the op's MLIR location, which
clones and rewrites keep), and `verify` runs each op's verifier itself to know which op failed.
"""

from __future__ import annotations

import bisect
import dataclasses
import difflib
import re
import sys
from collections.abc import Callable

from lamina.ir.buffers.memory import FreeOp, free_problem
from lamina.ir.buffers.updates import verify_gradients, verify_roles, verify_updates
from lamina.ir.core.attrs import verify_attributes
from lamina.ir.core.diagnostics import LaminaError, error_at, from_parse_error, note_at, record_source
from lamina.ir.mesh.placement import placement_problem
from lamina.ir.ops.lamina import Lamina
from lamina.ir.ops.opbase import type_problem
from lamina.ir.text.result_names import verify_result_names
from lamina.ir.text.robust_parser import RobustParser, nesting_error, shorten_message
from xdsl.context import Context
from xdsl.dialects.arith import Arith
from xdsl.dialects.builtin import Builtin, FileLineColLoc, IntAttr, ModuleOp, StringAttr, UnknownLoc
from xdsl.dialects.func import Func, FuncOp
from xdsl.ir import Block, BlockArgument, Operation, OpResult, SSAValue
from xdsl.parser.core import UnresolvedOperand
from xdsl.traits import SymbolTable
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException
from xdsl.utils.lexer import Span
from xdsl.utils.mlir_lexer import MLIRTokenKind


def make_context() -> Context:
    """A context with every dialect a Lamina program may use."""
    ctx = Context()
    for dialect in (Builtin, Func, Arith, Lamina):
        ctx.load_dialect(dialect)
    return ctx


class LocatedParser(RobustParser):
    """A parser that records each op's `file:line:col` as its location.

    `line_offset` shifts reported lines, for chunks of a `--split-input-file` input.
    """

    def __init__(self, ctx: Context, text: str | bytes, name: str = "<unknown>",
                 line_offset: int = 0) -> None:
        super().__init__(ctx, text, name)
        self.line_offset = line_offset
        self.first_forward_use: dict[str, Span] = {}
        self._line_starts: list[int] | None = None

    def parse_operation(self) -> Operation:
        start = self._current_token.span.start
        op = super().parse_operation()
        if isinstance(op.location, UnknownLoc):
            line, col = self._line_col(start)
            op.location = FileLineColLoc(StringAttr(self.lexer.input.name),
                                         IntAttr(line + self.line_offset), IntAttr(col))
        return op

    def _line_col(self, pos: int) -> tuple[int, int]:
        # `Span.get_location` counts the newlines from the start of the input on every call,
        # which made parsing quadratic in the program size; index the line starts once.
        if self._line_starts is None:
            content = self.lexer.input.content
            ends = (m.end() for m in re.finditer("\n", content)) if isinstance(content, str) \
                else (m.end() for m in re.finditer(b"\n", content))
            self._line_starts = [0, *ends]
        line = bisect.bisect_right(self._line_starts, pos)
        return line, pos - self._line_starts[line - 1] + 1

    def resolve_operand(self, operand: UnresolvedOperand, type):  # type: ignore[override]
        # Remember where a not-yet-defined value is first used, so "used but not defined"
        # points at that use rather than at the end of the input.
        name = operand.operand_name
        if name not in self.ssa_values and name not in self.first_forward_use:
            self.first_forward_use[name] = operand.span
        return super().resolve_operand(operand, type)

    def parse_module(self, allow_implicit_module: bool = True) -> ModuleOp:
        if allow_implicit_module and self._current_token.kind == MLIRTokenKind.EOF:
            # Empty input (or only comments, e.g. after a trailing `// -----`) is an empty
            # module, as in mlir-opt; xDSL says "Could not parse entire input!".
            return self._located_module(ModuleOp([]))
        try:
            return self._located_module(super().parse_module(allow_implicit_module))
        except ParseError as e:
            pending = [self.first_forward_use[n] for n in self.forward_ssa_references
                       if n in self.first_forward_use]
            if not e.msg.startswith("values used but not defined") or not pending:
                raise
            names = ", ".join("%" + n for n in self.forward_ssa_references)
            raise ParseError(min(pending, key=lambda s: s.start),
                             f"values used but not defined: [{names}]") from None

    def _located_module(self, module: ModuleOp) -> ModuleOp:
        """`module` located at the start of its text when it has no position of its own (an
        implicit module): a diagnostic about the module as a whole ("the module has no
        function") then names the file and line 1."""
        if isinstance(module.location, UnknownLoc):
            module.location = FileLineColLoc(StringAttr(self.lexer.input.name),
                                             IntAttr(1 + self.line_offset), IntAttr(1))
        return module

    def _get_op_by_name(self, name: str):  # type: ignore[override]
        # xDSL reports an unknown op at the token after its name; point at the name itself,
        # and suggest the closest registered op, as an unknown pass or option gets one.
        try:
            return super()._get_op_by_name(name)
        except ParseError as e:
            start = self.lexer.input.content.rfind(name, 0, self._current_token.span.start)
            if start < 0:
                raise
            msg = e.msg
            if "is not registered" in msg:
                # compared within the op's dialect, without the shared `lamina.` prefix that
                # would make every name look close to every other
                dialect, _, short = name.rpartition(".")
                names = {op.name.rpartition(".")[2]: op.name for op in self.ctx.loaded_ops
                         if op.name.rpartition(".")[0] == dialect}
                close = difflib.get_close_matches(short, list(names), n=1, cutoff=0.7)
                if close:
                    msg = f"{msg} (did you mean '{names[close[0]]}'?)"
            raise ParseError(Span(start, start + len(name), self.lexer.input), msg) from None


def parse_text(text: str | bytes, name: str = "<stdin>", ctx: Context | None = None,
               line_offset: int = 0) -> ModuleOp:
    """Parse a module; a malformed program raises `LaminaError` with its position.

    The text is recorded (`record_source`) so diagnostics can echo the line they point at."""
    record_source(name, text, line_offset)
    try:
        parser = LocatedParser(ctx or make_context(), text, name, line_offset)  # lexes a token
        try:
            return parser.parse_module()
        except RecursionError:
            raise nesting_error(parser) from None
    except ParseError as e:
        e.span = dataclasses.replace(e.span, line_offset=line_offset)
        e.msg = shorten_message(e.msg)
        raise from_parse_error(e) from None


def verify(module: Operation) -> None:
    """Verify every op, innermost first (after each function's signature); the first failure
    raises `LaminaError` at its op.

    Innermost first (an op after the ops of its regions) because a kernel's verifier reads its
    body ops' attributes (`lamina.fused "attention"` reads its softmax's axis): the body ops'
    own verifiers must have checked those attributes' kinds first, so that a string where an
    integer belongs is reported as such at the op that holds it. Linear in the program: each
    block's op positions are indexed once and shared by the dominance check and the lifetime
    rules of `lamina.free`."""
    positions: dict[Block, dict[Operation, int]] = {}

    def position(op: Operation) -> int:
        block = op.parent_block()
        assert block is not None
        index = positions.get(block)
        if index is None:
            index = positions[block] = {o: k for k, o in enumerate(block.ops)}
        return index[op]

    # a function's argument and result types first, as MLIR verifies an op before its regions:
    # a bad placement is reported where it is first written, the signature
    for op in module.walk():
        if isinstance(op, FuncOp):
            _verify_op(op, _check_func_types)
        elif op.parent_op() is module:
            # a symbol the signatures look up (a mesh): its attributes' kinds first, or the
            # lookup fails in xDSL's words on a `sym_name` that is no string
            _verify_op(op, verify_attributes)
    funcs: list[FuncOp] = []
    for op in module.walk(region_first=True):
        _verify_op(op, position=position)
        if isinstance(op, FuncOp):
            funcs.append(op)
        for i, v in enumerate(op.operands):
            if not _dominates(v, op, position):
                definer = v.op if isinstance(v, OpResult) else \
                    v.block.parent_op() if isinstance(v, BlockArgument) else None
                raise error_at(op, f"{op.name}: operand #{i} does not dominate this use",
                               (note_at(definer, f"operand #{i} defined here"),))
    # after the ops, so that a bad type is reported at the op that uses it, where there is one
    for func in funcs:
        _verify_op(func, _check_signature)
        verify_updates(func)  # which result replaces which argument (`lamina.ir.buffers.updates`)
        verify_gradients(func)  # which argument each gradient result differentiates
        verify_roles(func)    # what each argument holds (`lamina.role`, the same module)
        verify_result_names(func)  # what results are called (`lamina.ir.text.result_names`)


def _verify_op(op: Operation, check: Callable[[Operation], None] | None = None,
               position: Callable[[Operation], int] | None = None) -> None:
    """Run `check` (default: the op's own verifier and Lamina's extra rules) on `op`, turning a
    failure into a `LaminaError` at the op."""
    try:
        if check is not None:
            check(op)
        else:
            _check_symbols(op)
            verify_attributes(op)  # before IRDL's constraints, which name no attribute
            op.verify(verify_nested_ops=False)
            if isinstance(op, FreeOp) and position is not None and \
                    (problem := free_problem(op, position)) is not None:
                raise VerifyException(problem)
    except (VerifyException, DiagnosticException) as e:
        # xDSL puts the reason on the lines after "operand 'x' ... does not verify:"
        message = " ".join(line.strip() for line in str(e).strip().splitlines()) \
            or type(e).__name__
        if not message.startswith(op.name):
            message = f"{op.name}: {message}"
        raise error_at(op, shorten_message(message)) from None


def _check_func_types(op: Operation) -> None:
    """The placements of a function's argument and result types."""
    assert isinstance(op, FuncOp)
    for t in (*op.function_type.inputs.data, *op.function_type.outputs.data):
        if (problem := placement_problem(t, op)) is not None:
            raise VerifyException(f"func.func @{op.sym_name.data}: {problem}")


def _check_symbols(op: Operation) -> None:
    """A symbol defined twice in one symbol table is an error at the second definition with a
    note at the first (xDSL's module verifier names neither)."""
    if not op.has_trait(SymbolTable):
        return
    seen: dict[str, Operation] = {}
    for region in op.regions:
        for block in region.blocks:
            for child in block.ops:
                name = child.properties.get("sym_name") or child.attributes.get("sym_name")
                if not isinstance(name, StringAttr):
                    continue
                first = seen.setdefault(name.data, child)
                if first is not child:
                    raise error_at(child, f"redefinition of symbol named '{name.data}'",
                                   (note_at(first, "see existing symbol definition here"),))


def _check_signature(op: Operation) -> None:
    """Function arguments and results are tensors Lamina can run: what the backends feed in and
    read out (a tuple argument otherwise passed the verifier and failed in the runner)."""
    assert isinstance(op, FuncOp)
    for kind, types in (("argument", op.function_type.inputs.data),
                        ("result", op.function_type.outputs.data)):
        for i, t in enumerate(types):
            if (problem := type_problem(t)) is not None:
                raise VerifyException(f"func.func @{op.sym_name.data}: {kind} #{i}: {problem}")


def _dominates(value: SSAValue, user: Operation, position: Callable[[Operation], int]) -> bool:
    """Whether `value` is visible at `user`: defined earlier in `user`'s block or an enclosing one
    (xDSL's verifier does not check this; Lamina regions are single-block SSA)."""
    if isinstance(value, BlockArgument):
        block, definer = value.block, None
    elif isinstance(value, OpResult):
        block, definer = value.op.parent_block(), value.op
    else:
        return True
    if block is None:
        return False
    anchor: Operation | None = user
    while anchor is not None and anchor.parent_block() is not block:
        anchor = anchor.parent_op()
    if anchor is None:
        return False
    if definer is None:
        return True
    if definer is anchor:
        return False
    return position(definer) < position(anchor)


def read_source(path: str) -> tuple[str, str]:
    """The text of `path` ('-' for stdin) and the name diagnostics use for it."""
    if path == "-":
        data, name = sys.stdin.buffer.read(), "<stdin>"
    else:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise LaminaError(f"cannot read '{path}': {e.strerror}") from None
        name = path
    try:
        return data.decode("utf-8"), name
    except UnicodeDecodeError as e:
        raise LaminaError(f"'{name}' is not UTF-8 text (byte {e.start})") from None


def load(path: str, ctx: Context | None = None) -> ModuleOp:
    """Read, parse and verify the program in `path` ('-' for stdin)."""
    text, name = read_source(path)
    module = parse_text(text, name, ctx)
    verify(module)
    return module
