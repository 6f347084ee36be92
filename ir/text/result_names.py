"""What a function's results are called: by the user, in `Run.outputs`, `.npz` files and messages.

A training step has twenty results; `out0..out19` would make its user count. A result is named,
in order of precedence, by its `lamina.name` result attribute (MLIR's place for facts about one
result, as `arg_attrs` is for arguments):

    func.func @f(%x: tensor<4xf32>) -> (tensor<4xf32> {lamina.name = "y"})

else by the returned SSA value's name as written (`func.return %loss` -> "loss"; a returned
argument by the argument's name), else `out<i>` (an unnamed value such as `%0`). A name already
taken by an earlier result gets the first free suffix (`loss`, `loss_1`), so names are unique;
`out<i>` remains a way to look result i up (`Run.outputs["out3"]`), never a second key.
`verify_result_names` (run by `lamina.ir.text.source.verify`) checks the attribute's spelling.

Names are the program's, so a pass must not change them: a pass that replaces a returned value
(assign-memory-tiers moving a result back to HBM before the return) makes a new, unnamed value.
The pass pipeline records every function's result names before each pass and `keep_result_names`
writes a `lamina.name` attribute on each result whose name the pass changed.
"""

from __future__ import annotations

from lamina.ir.core.diagnostics import error_at
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, ModuleOp, StringAttr
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute

RESULT_NAME = "lamina.name"


def result_names(func: FuncOp) -> list[str]:
    """One unique name per result of `func` (see the module docstring)."""
    ret = func.body.block.last_op
    values = list(ret.operands) if ret is not None else []
    attrs = _result_attrs(func)
    names: list[str] = []
    taken: set[str] = set()
    for i in range(len(func.function_type.outputs.data)):
        base = _given(attrs[i] if i < len(attrs) else None) or (
            values[i].name_hint if i < len(values) else None) or positional_name(i)
        name, k = base, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        names.append(name)
    return names


def positional_name(i: int) -> str:
    """The name result `i` answers to whatever it is called (`out<i>`)."""
    return f"out{i}"


def verify_result_names(func: FuncOp) -> None:
    """A function's result attributes are one dictionary per result (MLIR's rule: a shorter
    list would leave the later results' attributes to whoever reads them), and a `lamina.name`
    among them must be a non-empty string."""
    given, results = len(_result_attrs(func)), len(func.function_type.outputs.data)
    if func.res_attrs is not None and given != results:
        raise error_at(func, f"func.func @{func.sym_name.data}: {given} result attribute "
                             f"dictionar{'y' if given == 1 else 'ies'} for {results} result"
                             f"{'' if results == 1 else 's'}")
    for i, attrs in enumerate(_result_attrs(func)):
        if RESULT_NAME not in attrs.data:
            continue
        a = attrs.data[RESULT_NAME]
        if not (isinstance(a, StringAttr) and a.data):
            raise error_at(func, f"func.func @{func.sym_name.data}: result #{i}: attribute "
                                 f"'{RESULT_NAME}' must be a non-empty string, got {a}")


def _result_attrs(func: FuncOp) -> tuple[DictionaryAttr, ...]:
    return tuple(func.res_attrs.data) if func.res_attrs is not None else ()


def _given(attrs: Attribute | None) -> str | None:
    """The `lamina.name` of one result's attribute dictionary, if it has a valid one."""
    if not isinstance(attrs, DictionaryAttr):
        return None
    a = attrs.data.get(RESULT_NAME)
    return a.data if isinstance(a, StringAttr) and a.data else None


def names_by_function(module: ModuleOp) -> dict[str, list[str]]:
    """Every function's result names, by function name (what `keep_result_names` restores)."""
    return {op.sym_name.data: result_names(op) for op in module.ops if isinstance(op, FuncOp)}


def keep_result_names(module: ModuleOp, before: dict[str, list[str]]) -> None:
    """Give back, as `lamina.name` result attributes, the names `before` recorded for results a
    pass renamed (a function the pass made, or whose results it changed in number, has none)."""
    for op in module.ops:
        if not isinstance(op, FuncOp) or (old := before.get(op.sym_name.data)) is None:
            continue
        now = result_names(op)
        if len(now) != len(old) or now == old:
            continue
        attrs = list(_result_attrs(op)) or [DictionaryAttr({}) for _ in now]
        for i, (was, new) in enumerate(zip(old, now, strict=True)):
            if was != new:
                attrs[i] = DictionaryAttr({**attrs[i].data, RESULT_NAME: StringAttr(was)})
        op.res_attrs = ArrayAttr[DictionaryAttr](attrs)
