"""Bytes of a value: whole, per device under its placement, and how messages print them.

Sizes count elements at the width a device stores them (`lamina.ir.core.dtypes.ITEMSIZE`: a bf16 is 2
bytes even though the NumPy interpreter keeps it in 4), so every plan, cost and statistic agrees
with the others on what a value weighs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from lamina.ir.core.dtypes import ITEMSIZE, tensor_dtype, tensor_shape
from lamina.ir.mesh.placement import resolve
from lamina.ir.mesh.sharding import Spec
from xdsl.ir import Attribute, Operation, SSAValue


def type_bytes(t: Attribute) -> int:
    """Bytes of a whole value of tensor type `t` (every device's shard together, once)."""
    return math.prod(tensor_shape(t)) * ITEMSIZE[tensor_dtype(t)]


def local_bytes(v: SSAValue, anchor: Operation) -> int:
    """Bytes of `v` on one device: its local shard under its placement (`anchor` finds the mesh)."""
    shape = tensor_shape(v.type)
    place = resolve(v.type, anchor)
    if place is not None:
        shape = place.local_shape(shape)
    return math.prod(shape) * ITEMSIZE[tensor_dtype(v.type)]


def spec_local_bytes(t: Attribute, spec: Spec, sizes: Mapping[str, int]) -> int:
    """Bytes of one device's shard of a value of type `t` if it were placed `spec` on a mesh of
    axis `sizes` (for costing placements a value does not have yet)."""
    shards = math.prod(sizes[a] for d in spec.splits for a in d)
    return type_bytes(t) // shards


def fmt_bytes(n: float) -> str:
    """`25 MiB`, `1.5 KiB`, `12 B`: four significant digits, binary units."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n:.0f} B"
