"""Which result of a function replaces which argument: the function attribute `lamina.updates`.

    func.func @f_step(%x: ..., %w: ..., %m_w: ..., %v_w: ..., %step: ...) -> (...)
        attributes {lamina.updates = array<i64: 1, 2, 3, 4, -1>}

One entry per function result, in result order: the index of the argument that result replaces
(the next call of the function takes the result in that argument's place), or -1 for a result that
replaces nothing (a training step's loss). `append-optimizer` writes it on every `@NAME_step` for
each parameter, Adam moment and the step count; consumers (buffer donation, the input generator)
read it instead of guessing from names. Rules, checked by `verify_updates` (which
`lamina.ir.text.source.verify` runs on every function): one entry per result, each -1 or an argument
index, no argument replaced by two results, and a result has exactly its argument's type (shape,
element type and the whole placement: mesh splits and memory tier), since it is fed back there.

What an argument holds is its *role*, an argument attribute (MLIR's `arg_attrs`, printed after
the argument's type):

    func.func @f_step(%x: ..., %w: ... {lamina.role = "parameter"},
                      %m_w: ... {lamina.role = "first_moment"},
                      %v_w: ... {lamina.role = "second_moment"}, %step: ... {lamina.role = "step_count"})

`ROLES` is the one table of roles, each with the values such an argument may hold (`Domain`):
a second moment is never negative, a step count is a whole number, a learning rate is a small
positive number. `append-optimizer` writes a role on every argument it updates, and on the
learning rate it reads as an input (`lr-input=true`, which no result replaces: a training loop
feeds each step's rate from its schedule); the input generator (`lamina.backends.inputs`) draws each
argument from its role's domain rather than guessing from its name. `verify_roles` (run by
`lamina.ir.text.source.verify`) refuses a role the table does not hold. An argument without a role
(a training step's data) may hold anything its type can. The torch importer writes the role
`frozen` on the arguments it makes from the model's buffers and lifted constants (state that is
read, never trained: `{lamina.role = "frozen"}`); derive-backward's default `wrt` leaves them out
and keeps every role on `@NAME_grad`, so the step's frozen arguments are neither data nor trained.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from lamina.ir.core.diagnostics import error_at
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    Float64Type,
    FloatAttr,
    IntegerType,
    StringAttr,
    i64,
)
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


def _count_mismatch(head: str, have: int, n: int, per: str) -> str:
    """The one message of both per-position attributes (`lamina.updates` per result, `arg_attrs`
    per argument) when they hold `have` entries for `n` positions."""
    entries = f"{have} entr{'y' if have == 1 else 'ies'}"
    return f"{head} has {entries} for {n} {per}{'' if n == 1 else 's'} (one per {per})"


def updates_problem(func: FuncOp) -> str | None:
    """What is wrong with `func`'s `lamina.updates` (module docstring), or None."""
    if UPDATES_ATTR not in func.attributes:
        return None
    head = f"func.func @{func.sym_name.data}: {UPDATES_ATTR}"
    attr = func.attributes[UPDATES_ATTR]
    entries = _entries(func)
    if entries is None or not isinstance(attr, DenseArrayBase) or attr.elt_type != i64:
        return f"func.func @{func.sym_name.data}: attribute '{UPDATES_ATTR}' must be an " \
            f"array<i64: ...> with one argument index (or -1) per result, got {attr}"
    ins, outs = func.function_type.inputs.data, func.function_type.outputs.data
    if len(entries) != len(outs):
        return _count_mismatch(head, len(entries), len(outs), "result")
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


# ---- gradients: which argument each gradient result differentiates -------------------------

GRADIENTS_ATTR = "lamina.gradients"
# derive-backward's mark on the op that makes each gradient result (so later passes and analyses
# find a gradient where it is made, not only where the function returns it)
GRADIENT_ATTR = "lamina.gradient"


def gradients_problem(func: FuncOp) -> str | None:
    """What is wrong with `func`'s `lamina.gradients`, or None. derive-backward writes it on
    `@NAME_grad`: one distinct argument index per gradient result (results 1.., after the loss),
    which append-optimizer reads to pair each parameter with its gradient; checked at load so a
    hand-edited one is a diagnostic there, not an index error in a later pass."""
    attr = func.attributes.get(GRADIENTS_ATTR)
    if attr is None:
        return None
    head = f"func.func @{func.sym_name.data}: attribute '{GRADIENTS_ATTR}'"
    if not isinstance(attr, DenseArrayBase) or attr.elt_type != i64:
        return f"{head} must be an array<i64: ...> of argument indices, got {attr}"
    entries = [int(i) for i in attr.get_values()]
    ins, outs = func.function_type.inputs.data, func.function_type.outputs.data
    if len(entries) != len(outs) - 1:
        return f"{head} has {len(entries)} entries for {len(outs) - 1} gradient results (the " \
            "results after the loss)"
    for r, a in enumerate(entries, start=1):
        if not 0 <= a < len(ins):
            return f"{head}: result #{r} names argument #{a}, which does not exist " \
                f"({len(ins)} arguments)"
        if entries.index(a) != r - 1:
            return f"{head}: results #{entries.index(a) + 1} and #{r} are both the gradient of " \
                f"{_arg(func, a)}"
    return None


def verify_gradients(func: FuncOp) -> None:
    """Raise the diagnostic of `gradients_problem` at `func`, if any."""
    if (problem := gradients_problem(func)) is not None:
        raise error_at(func, problem)


# ---- roles: what an argument holds ----------------------------------------------------------

ROLE_ATTR = "lamina.role"
FROZEN = "frozen"   # the role of model state that is read, never trained (`ROLES`)


class Domain(Enum):
    """The values an argument of a role may hold (what an input generator may draw)."""

    REAL = "any real number"
    NONNEGATIVE = "a real number >= 0"
    COUNT = "a whole number >= 0"
    RATE = "a small real number > 0 (a step size)"


@dataclass(frozen=True)
class Role:
    """One role of the table: its name (the attribute's value) and the values it may hold."""

    name: str
    domain: Domain
    optimizer_state: bool = False   # the optimizer's per-parameter state (ZeRO shards it)


ROLES: dict[str, Role] = {r.name: r for r in (
    Role("parameter", Domain.REAL),            # a trained weight, replaced by its new value
    Role("first_moment", Domain.REAL, optimizer_state=True),   # Adam's running mean of the gradient
    Role("second_moment", Domain.NONNEGATIVE, optimizer_state=True),  # ... of its square: sqrt
    Role("step_count", Domain.COUNT),          # updates done before this call (state['step'])
    Role("momentum_buffer", Domain.REAL, optimizer_state=True),  # SGD's (torch's momentum_buffer)
    Role("learning_rate", Domain.RATE),        # this step's learning rate, an input of the step
    # mixed-precision's dynamic loss scale and its count of clean steps since the scale last
    # changed (torch.amp.GradScaler's _scale and _growth_tracker), replaced by their next values
    Role("loss_scale", Domain.RATE),
    Role("good_steps", Domain.COUNT),
    # model state that is read, never trained (torch's buffers and lifted constant tensors: a
    # rotary table's inv_freq, BERT's position_ids): derive-backward's default wrt leaves it out,
    # no result replaces it, a trainer takes its value from the init. Named "frozen", not torch's
    # "buffer": "momentum_buffer" is trained state, and Lamina's buffers are memory
    # (`lamina.ir.buffers`); nor "constant", which would say a pass may fold its value.
    Role(FROZEN, Domain.REAL),
)}
OPTIMIZER_STATE = tuple(r.name for r in ROLES.values() if r.optimizer_state)


def _arg_dicts(func: FuncOp) -> list[DictionaryAttr]:
    """One attribute dictionary per argument (`arg_attrs`, padded with empty ones)."""
    n = len(func.function_type.inputs.data)
    have = list(func.arg_attrs.data) if func.arg_attrs is not None else []
    return (have + [DictionaryAttr({})] * n)[:n]


def roles_of(func: FuncOp) -> dict[int, Role]:
    """Argument index -> its role, for every argument with a known one."""
    out: dict[int, Role] = {}
    for i, d in enumerate(_arg_dicts(func)):
        attr = d.data.get(ROLE_ATTR)
        if isinstance(attr, StringAttr) and attr.data in ROLES:
            out[i] = ROLES[attr.data]
    return out


def set_roles(func: FuncOp, roles: Mapping[int, str]) -> None:
    """Give argument `i` the role `roles[i]`, keeping every other argument attribute; `arg_attrs`
    gets one dictionary per argument (an argument added since it was written gets an empty one)."""
    n = len(func.function_type.inputs.data)
    dicts = [dict(d.data) for d in _arg_dicts(func)]
    for i, name in roles.items():
        if name not in ROLES or not 0 <= i < n:
            raise ValueError(f"@{func.sym_name.data}: no role '{name}' for argument #{i}")
        dicts[i][ROLE_ATTR] = StringAttr(name)
    func.arg_attrs = ArrayAttr([DictionaryAttr(d) for d in dicts])


INIT_ATTR = "lamina.init"   # an argument's first value, where a pass states one (a loss scale)


def initial_values(func: FuncOp) -> dict[int, float]:
    """Argument index -> the first value a training loop gives it (`INIT_ATTR`, an f64 float
    attribute beside the role: mixed-precision's `%loss_scale` starts at its `init` option)."""
    out: dict[int, float] = {}
    for i, d in enumerate(_arg_dicts(func)):
        attr = d.data.get(INIT_ATTR)
        if isinstance(attr, FloatAttr):
            out[i] = float(attr.value.data)
    return out


def set_initial_value(func: FuncOp, i: int, value: float) -> None:
    """Record `value` as argument `i`'s first value (`initial_values`)."""
    dicts = [dict(d.data) for d in _arg_dicts(func)]
    dicts[i][INIT_ATTR] = FloatAttr(value, Float64Type())
    func.arg_attrs = ArrayAttr([DictionaryAttr(d) for d in dicts])


def roles_problem(func: FuncOp) -> str | None:
    """What is wrong with `func`'s argument attributes: not one dictionary per argument (MLIR's
    rule), or a role the table does not hold."""
    if func.arg_attrs is None:
        return None
    n, have = len(func.function_type.inputs.data), len(func.arg_attrs.data)
    if have != n:
        return _count_mismatch(f"func.func @{func.sym_name.data}: arg_attrs", have, n, "argument")
    for i, d in enumerate(func.arg_attrs.data):
        attr = d.data.get(ROLE_ATTR)
        if attr is None or isinstance(attr, StringAttr) and attr.data in ROLES:
            continue
        known = ", ".join(f'"{r}"' for r in ROLES)
        return f"func.func @{func.sym_name.data}: {_arg(func, i)}: attribute '{ROLE_ATTR}' " \
            f"must be a role, one of {known}, got {attr}"
    return None


def verify_roles(func: FuncOp) -> None:
    """Raise the diagnostic of `roles_problem` at `func`, if any."""
    if (problem := roles_problem(func)) is not None:
        raise error_at(func, problem)
