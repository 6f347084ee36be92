"""How messages name values: `%x` as written in the source, else the number the printer gives it.

xDSL's printer numbers the values that have no name in the order it prints them (block arguments,
then op results, nested regions in place), so a message that says `%3` points at the `%3` of the
printed program. One `Namer` per function computes those numbers once (O(ops)); code that names a
single value without its function at hand uses `value_label`.
"""

from __future__ import annotations

from lamina.ir.buffers.memory import value_label
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, SSAValue


class Namer:
    """Printable names of a function's values (see the module docstring)."""

    def __init__(self, func: FuncOp):
        self.names: dict[SSAValue, str] = {}
        n = 0
        for v in [*func.body.block.args, *(r for op in func.body.walk() for r in op.results)]:
            if v.name_hint:
                self.names[v] = "%" + v.name_hint
            else:
                self.names[v] = f"%{n}"
                n += 1

    def __call__(self, v: SSAValue) -> str:
        return self.names.get(v) or value_label(v)

    def op(self, op: Operation) -> str:
        """`%y = lamina.gelu` (the op's first result and name), or just the name."""
        if op.results:
            return f"{self(op.results[0])} = {op.name}"
        return op.name
