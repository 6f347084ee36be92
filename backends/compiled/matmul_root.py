"""A kernel rooted at a matmul, on the compiled backend: one BLAS call, then the compiled epilogue.

`fuse-elementwise` roots a kernel at a matmul by a weight matrix (`OpInfo.row_tiled`) and fuses its
epilogue (elementwise ops, row reductions over the trailing dims such as the next LayerNorm). The
interpreter's tile loop runs both per block of result rows on one thread: its blocks are as large
as the whole result at the GPT-2 block's sizes, because BLAS packs the weight again per call, so
the epilogue runs single-threaded on tiles that live in memory, not in cache (measured there: the
MLP's GeLU epilogue took ~40 ms of the 155 ms up-projection kernel).

Here the kernel is split at its root (`split_root`): the matmul runs first, once over every row
(BLAS threading itself over all cores; the row's in-place tile form, the NumPy interpreter's
`specialized.matmul_tile`: the same call on the same operands as the interpreter's whole-result
block), into an array from the interpreter's `result_pool` (a fresh 32 MiB one would cost ~6 ms
of page faults per call). What is left is an
ordinary plan whose input is that buffer: the compiled backend compiles it into one parallel row
loop like any other body, or, where it cannot, runs it on the interpreter's tile loop, now with
cache-sized tiles on every core. The result bits of the matmul are the interpreter's; the epilogue
keeps the compiled backend's stated tolerances.

When the matmul's own value leaves the kernel too, it is written into that result (the plan's
`out2d`) instead of an intermediate.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from lamina.backends.numpy import result_pool
from lamina.backends.numpy.fused import FusedPlan
from lamina.backends.numpy.runner import make_call, run_kernel
from lamina.backends.numpy.specialized import forms
from lamina.backends.numpy.tile_threads import TileScratch
from lamina.ir.core.dtypes import STORAGE
from lamina.ir.ops.opbase import tensor_info
from lamina.ir.ops.optable import Fusion


def split_root(plan: FusedPlan) -> FusedPlan | None:
    """Run the plan's matmul root over every row now and return the plan of its epilogue, whose
    env holds the matmul's result; None when the plan has no matmul root."""
    if not plan.steps or plan.steps[0].op.info.fusion != Fusion.OPAQUE or \
            any(p.slot == 0 for p in plan.paths):   # the matmul's own value written through views
        return None
    root, space = plan.steps[0], plan.space
    o = root.op
    res = o.results[0]
    x, w = (plan.env[v] for v in o.operand_slots() if v is not None)
    dtype = np.dtype(STORAGE[root.call.result.dtype])
    out = root.out2d if root.out2d is not None else result_pool.empty((space.rows,) + root.tail, dtype)
    lhs = x.reshape((space.rows,) + x.shape[space.nl:])
    native = {t.dtype for t in root.call.operands if t is not None} == {root.call.result.dtype} \
        and dtype in (np.float32, np.float64)
    factory = forms(o.info).tile
    tile = factory(root.call, dtype, TileScratch()) if native and factory else None
    if tile is not None:
        tile([lhs, w], out, 0, space.rows)
    else:   # a storage type without a native BLAS call (f16, bf16): the row's formula, whole
        out[...] = run_kernel(o.info, [x, w], make_call(o)).reshape(out.shape)
    env = dict(plan.env)
    env[res] = out.reshape(tensor_info(res.type).shape)
    slot_of = {v: i - 1 for v, i in plan.slot_of.items() if i > 0}
    paths = [dataclasses.replace(p, slot=p.slot - 1) for p in plan.paths]
    return dataclasses.replace(plan, steps=plan.steps[1:], slot_of=slot_of, env=env, paths=paths)
