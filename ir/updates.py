"""Which result of a function replaces which argument: the function attribute `lamina.updates`.

    func.func @f_step(%x: ..., %w: ..., %m_w: ..., %v_w: ..., %step: ...) -> (...)
        attributes {lamina.updates = array<i64: 1, 2, 3, 4, -1>}

One entry per function result, in result order: the index of the argument that result replaces
(the next call of the function takes the result in that argument's place), or -1 for a result that
replaces nothing (a training step's loss). `append-optimizer` writes it on every `@NAME_step` for
each parameter, Adam moment and the step count; consumers (buffer donation, the input generator)
read it instead of guessing from names. Rules, checked by `verify_updates` (which
`lamina.ir.source.verify` runs on every function): one entry per result, each -1 or an argument
index, no argument replaced by two results, and a result has exactly its argument's type (shape,
element type and the whole placement: mesh splits and memory tier), since it is fed back there.
"""

from __future__ import annotations

from collections.abc import Mapping

from lamina.ir.diagnostics import error_at
from xdsl.dialects.builtin import DenseArrayBase, IntegerType, i64
from xdsl.dialects.func import FuncOp

UPDATES_ATTR = "lamina.updates"
NONE = -1  # the entry of a result that replaces no argument


def _entries(func: FuncOp) -> list[int] | None:
    """The attribute's entries, or None when the function has none (or it is no i64 array)."""
    attr = func.attributes.get(UPDATES_ATTR)
    if not isinstance(attr, DenseArrayBase) or not isinstance(attr.elt_type, IntegerType):
        return None
    return [int(i) for i in attr.get_values()]


def updates_of(func: FuncOp) -> dict[int, int]:
    """Result index -> index of the argument it replaces ({} without the attribute)."""
    return {r: a for r, a in enumerate(_entries(func) or []) if a != NONE}


def updated_arguments(func: FuncOp) -> set[int]:
    """The indices of the arguments some result of `func` replaces."""
    return set(updates_of(func).values())


def set_updates(func: FuncOp, mapping: Mapping[int, int]) -> None:
    """Record `mapping` (result index -> argument index) on `func`, -1 for every other result;
    an empty mapping removes the attribute. The caller makes it valid (`verify_updates`)."""
    if not mapping:
        func.attributes.pop(UPDATES_ATTR, None)
        return
    n = len(func.function_type.outputs.data)
    entries = [NONE] * n
    for r, a in mapping.items():
        if not 0 <= r < n:
            raise ValueError(f"@{func.sym_name.data} has no result #{r} ({n} results)")
        entries[r] = a
    func.attributes[UPDATES_ATTR] = DenseArrayBase.from_list(i64, entries)


def _arg(func: FuncOp, a: int) -> str:
    name = func.body.block.args[a].name_hint if func.body.blocks else None
    return f"argument #{a} (%{name})" if name else f"argument #{a}"


def updates_problem(func: FuncOp) -> str | None:
    """What is wrong with `func`'s `lamina.updates` (module docstring), or None."""
    if UPDATES_ATTR not in func.attributes:
        return None
    head = f"func.func @{func.sym_name.data}: {UPDATES_ATTR}"
    attr = func.attributes[UPDATES_ATTR]
    entries = _entries(func)
    if entries is None or not isinstance(attr, DenseArrayBase) or attr.elt_type != i64:
        return f"{head} must be an array<i64: ...> with one argument index (or -1) per result, " \
            f"got {attr}"
    ins, outs = func.function_type.inputs.data, func.function_type.outputs.data
    if len(entries) != len(outs):
        have = f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}"
        return f"{head} has {have} for {len(outs)} result{'' if len(outs) == 1 else 's'} " \
            "(one per result)"
    seen: dict[int, int] = {}
    for r, a in enumerate(entries):
        if a == NONE:
            continue
        if not 0 <= a < len(ins):
            return f"{head}: result #{r} names argument #{a}, which does not exist " \
                f"({len(ins)} arguments; -1 for a result that replaces none)"
        if a in seen:
            return f"{head}: results #{seen[a]} and #{r} both update {_arg(func, a)}"
        seen[a] = r
        if outs[r] != ins[a]:
            return f"{head}: result #{r} updates {_arg(func, a)} but has type {outs[r]}, not " \
                f"the argument's {ins[a]}"
    return None


def verify_updates(func: FuncOp) -> None:
    """Raise the diagnostic of `updates_problem` at `func`, if any."""
    if (problem := updates_problem(func)) is not None:
        raise error_at(func, problem)
