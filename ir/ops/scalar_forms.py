"""Per-element and per-row forms of the rows' formulas: what a compiled fused kernel computes.

A compiled backend (`lamina.backends.compiled`) turns a `lamina.fused` body into one loop over
rows that computes the whole body for one element, or one row, at a time. It gets each op's
arithmetic from its row's `OpInfo.scalar`: a form with a formula's signature, `form(sp, args,
call)`, which the backend runs once on symbolic values to record what one element costs. `sp` is
a *scalar namespace*:

- the array-API functions and dtypes the formulas already use (`exp log tanh sqrt abs negative
  add subtract multiply divide maximum minimum pow where astype trunc floor log2 isfinite
  logical_* bitwise_* asarray reshape broadcast_to permute_dims`, `float32 float64 uint32 uint64
  int32 int64 bool`), each applied to one element, with the formulas' operators and NumPy's type
  rules (Python scalars are weak);
- the row reductions `sum`, `mean`, `max` with the formulas' `axis` / `keepdims` arguments,
  reducing over the dims a fused row holds (a backend chooses the order of a sum and states it:
  the compiled backend's is 64 vector partial sums, within rounding of the interpreter's);
- `element_index()`: the element's flat row-major index in the op's global result, uint64;
- `require(cond)`: a row where `cond` (a per-row truth value) does not hold is recomputed by the
  interpreter's own kernels, so a form may state a fast path that most rows take.

Values are opaque; Python control flow may depend on attributes, never on values (use `where`).

For most rows the form IS the formula, which is written in calls that hold element by element
(every elementwise row, select, cast, broadcast_in_dim) or row by row (the reductions, softmax):
those rows point `scalar` at their formula. The forms below are the ones that differ: dropout,
whose formula builds the indices of a whole block, and the normalizations, whose formulas guard
every row against overflowing squares with a rescaling that costs two more passes; here that
guard is a `require`, as in the NumPy interpreter's whole-array layernorm form, and a row that needs it takes
the formula. Each form computes the formula's bits on every row it accepts.
"""

from __future__ import annotations

from typing import Any

from lamina.ir.ops import formulas as fm
from lamina.ir.ops.formulas import Args, Call

Namespace = Any     # a scalar namespace (above)
Value = Any         # one of its values


def dropout(sp: Namespace, args: Args, call: Call) -> Value:
    """The dropout formula on one element, its global index from the namespace."""
    return fm.dropout_at(sp, args, call, sp.element_index)


def _require_finite(sp: Namespace, v: Value, sq_mean: Value, axes: tuple[int, ...]
                    ) -> tuple[Value, Value, float]:
    """The normalizations' guard on one row: a row whose mean of squares overflowed goes back
    to the formula (which rescales it); every other row is the formula's with s = 1."""
    sp.require(sp.isfinite(sq_mean))
    return v, sq_mean, 1.0


def layernorm(sp: Namespace, args: Args, call: Call) -> Value:
    """The layernorm formula on one row whose squares do not overflow (a finite variance)."""
    return fm.normalized(sp, args, call, True, _require_finite)


def rmsnorm(sp: Namespace, args: Args, call: Call) -> Value:
    """The rmsnorm formula on one row whose mean square is finite."""
    return fm.normalized(sp, args, call, False, _require_finite)
