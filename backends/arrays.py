"""Host arrays every backend shares: a run's inputs checked against its arguments, and a placed
value cut into and put back from one block per device of its mesh.

- `check_inputs`: the inputs converted to the arguments' storage dtypes (a LaminaError on a count,
  shape or kind mismatch, or a value its argument type cannot hold);
- `block`: device `dev`'s block of a value placed `spec` (offsets, local shape). Devices are
  numbered row-major over the mesh axes (as `Target.axis_level` assumes); a dimension split over
  axes [a, b] (major to minor) is cut into size(a) * size(b) blocks, and the device with
  coordinates (i, j) on (a, b) holds block i * size(b) + j;
- `distribute`: a whole array as one local array per device. A value `partial = sum[axes]` puts
  the whole value on the devices whose coordinate on every partial axis is 0 and zeros elsewhere
  (`max` partials: everywhere); axes named nowhere replicate;
- `assemble`: the whole array from the devices' local arrays, summing (maxing) a partial value
  over its partial axes (`reduce_parts`, in the compute type, rounded once).

The NumPy interpreter's SPMD runner (`lamina.backends.numpy.spmd`) holds every value so; the JAX
backend enters and leaves `shard_map` with the same blocks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from lamina.backends.interface import arg_names
from lamina.ir.core.diagnostics import error_at
from lamina.ir.core.dtypes import COMPUTE, STORAGE, to_storage, unrepresentable
from lamina.ir.mesh.collective_kinds import REDUCE_KINDS, SUM
from lamina.ir.mesh.placement import Mesh
from lamina.ir.mesh.sharding import Spec
from lamina.ir.ops.opbase import tensor_info
from xdsl.dialects.func import FuncOp

Shards = list[np.ndarray]


def check_inputs(func: FuncOp, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Inputs converted to the arguments' storage dtypes; LaminaError on count/shape/kind mismatch."""
    names = arg_names(func)
    types = func.function_type.inputs.data
    if len(inputs) != len(types):
        raise error_at(func, f"@{func.sym_name.data} takes {len(types)} arguments, got "
                       f"{len(inputs)} inputs")
    out: list[np.ndarray] = []
    for name, t, a in zip(names, types, inputs, strict=True):
        info = tensor_info(t)
        a = np.asarray(a)
        if tuple(a.shape) != info.shape:
            raise error_at(func, f"input '{name}' has shape {tuple(a.shape)}, argument type "
                           f"is {t}")
        want = STORAGE[info.dtype]
        if a.dtype != want and not np.can_cast(a.dtype, want, casting="same_kind"):
            raise error_at(func, f"input '{name}' has dtype {a.dtype}, argument type is {t}")
        if (a.dtype != want or info.dtype == "bf16") and \
                (why := unrepresentable(a, info.dtype)) is not None:
            raise error_at(func, f"input '{name}' does not fit its argument type {t}: {why}")
        out.append(to_storage(a, info.dtype) if a.dtype != want or info.dtype == "bf16" else a)
    return out


def block(mesh: Mesh, spec: Spec, shape: Sequence[int], dev: int
          ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(offsets, local shape) of device `dev`'s block of a value placed `spec`."""
    c = mesh.coords(dev)
    offs, local = [], []
    for d, size in enumerate(shape):
        axes = spec.splits[d]
        n = mesh.size(axes)
        k = size // n
        offs.append(mesh.index(c, axes) * k)
        local.append(k)
    return tuple(offs), tuple(local)


def _index(offs: Sequence[int], local: Sequence[int]) -> tuple[slice, ...]:
    return tuple(slice(o, o + k) for o, k in zip(offs, local, strict=True))


def distribute(mesh: Mesh, spec: Spec, a: np.ndarray) -> Shards:
    shards: Shards = []
    cache: dict[tuple, np.ndarray] = {}
    for dev in range(mesh.devices):
        offs, local = block(mesh, spec, a.shape, dev)
        c = mesh.coords(dev)
        owner = REDUCE_KINDS[spec.partial_kind].idempotent or all(c[x] == 0 for x in spec.partial)
        key = (offs, owner)
        if key not in cache:
            piece = a[_index(offs, local)]
            piece = np.array(piece)  # a copy; keeps 0-d arrays 0-d
            cache[key] = piece if owner else np.zeros_like(piece)
        shards.append(cache[key])
    return shards


def reduce_parts(parts: Sequence[np.ndarray], kind: str, dtype: str) -> np.ndarray:
    """The sum (`kind` sum) or maximum of devices' partial values of element type `dtype`."""
    if len(parts) == 1 or all(p is parts[0] for p in parts) and REDUCE_KINDS[kind].idempotent:
        return parts[0]
    comp = COMPUTE.get(dtype, STORAGE[dtype])
    acc = parts[0].astype(comp)
    for p in parts[1:]:
        acc = acc + p.astype(comp) if kind == SUM.name else np.maximum(acc, p.astype(comp))
    return to_storage(acc, dtype)


def assemble(mesh: Mesh, spec: Spec, shards: Shards, shape: Sequence[int], dtype: str) -> np.ndarray:
    out = np.empty(tuple(shape), dtype=shards[0].dtype)
    done: set[tuple[int, ...]] = set()
    for group in mesh.groups(spec.partial) if spec.partial else [[d] for d in range(mesh.devices)]:
        offs, local = block(mesh, spec, shape, group[0])
        if offs in done:
            continue
        done.add(offs)
        out[_index(offs, local)] = reduce_parts([shards[d] for d in group], spec.partial_kind,
                                                dtype)
    return out
