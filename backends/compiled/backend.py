"""`--backend compiled`: the NumPy interpreter, with each `lamina.fused` op one compiled kernel.

Everything but fused kernels (matmuls, layout ops, collectives, every device of a placed program,
checked memory) runs exactly as in `lamina.backends.numpy`: this backend is that one with its
fused-op runner replaced for whole-array runs (`NumpyBackend.op_runners`). A fused kernel is
generated from its body's rows (`OpInfo.scalar`), compiled by numba once per body, shapes and
dtypes and cached on disk (`lamina.backends.compiled.cache`), and computes each row whole in one
parallel loop over rows (`lamina.backends.compiled.fused`); a compiled program (`lamina.compile`)
plans each kernel once per argument layout and later calls only run it
(`lamina.backends.compiled.replay`). Its outputs match the interpreter's
within `lamina.backends.compare`'s tolerances: a row's sum is added in 64 vector partial sums,
within the rounding bound `lamina.backends.compiled.intrinsics` states of the interpreter's
pairwise sum (and the same bits on any thread count), dropout masks are the same bits, and exp,
log and tanh differ from NumPy's by the few ulp that `lamina.backends.compiled.libm` states.

Imports: the three backends (numpy, jax, compiled) are independent of each other, sharing only
`lamina.ir`, `lamina.analysis` and the top-level modules of `lamina.backends`, with one named
exception, this backend: being the NumPy interpreter with compiled fused kernels, it builds on
that interpreter (its backend class, runner, fused-op plans and tile loop, attention kernel,
result pool and NumPy forms), so `lamina.backends.compiled` may import `lamina.backends.numpy`
and never the other way (pyproject.toml's independence contract, `ignore_imports`).
"""

from __future__ import annotations

from typing import ClassVar

import lamina.backends.compiled.attention  # noqa: F401  (registers the attention kind's runner)
from lamina.backends.compiled.replay import run_fused_replayed
from lamina.backends.interface import Feature
from lamina.backends.numpy.backend import NumpyBackend
from lamina.backends.numpy.runner import OpRunner
from lamina.ir.ops.fused import FusedOp
from xdsl.ir import Operation


class CompiledBackend(NumpyBackend):
    """The NumPy interpreter with compiled fused kernels (see the module docstring)."""

    name: ClassVar[str] = "compiled"
    features: ClassVar[frozenset[Feature]] = frozenset(Feature)
    op_runners: ClassVar[dict[type[Operation], OpRunner]] = {FusedOp: run_fused_replayed}
    whole_small_fused: ClassVar[bool] = False
    # `lamina.compile` makes the checked call on zeros: numba compiles (or loads) every kernel
    # then, inside `compile_seconds`, not in the first real call
    warm: ClassVar[bool] = True
