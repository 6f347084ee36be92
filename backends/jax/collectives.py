"""Lamina's placement ops as their `jax.lax` counterparts, inside the one `jax.shard_map`.

Every function here runs on one device's block, traced inside `shard_map` over the program's
mesh (axis names as declared in `lamina.mesh`). The correspondences, each the NumPy SPMD runner's
semantics (`lamina.backends.numpy.spmd`) bit for bit on data movement:

    all_reduce sum / max       lax.psum / lax.pmax over the op's axes; several operands (an
                               insert-collectives bucket) are one flat buffer, one all-reduce
                               (one per element type in a bucket of mixed types)
    reduce_scatter sum         lax.psum_scatter(tiled=True) along `dim` (moved to the front)
    reduce_scatter max         lax.pmax, then the device's slice along `dim` (XLA has no
                               max reduce-scatter in lax)
    all_gather                 lax.all_gather along `dim` (gathered in front, moved into place)
    all_to_all                 lax.all_to_all(tiled=True), split_dim -> concat_dim
    all_slice                  the device's slice along `dim` at its axis index (no collective)
    reshard                    as the NumPy runner defines it: reduce the pending axes, gather
                               every split dimension, then take the destination's block

A collective whose groups hold one device each (its axes have size 1) moves nothing and is not
emitted (the value passes through unchanged, as the NumPy runner's reduction of one part does).
A tuple of axes is major to minor, as in Lamina; XLA orders each replica group the same way, so
block j of a group is the device whose index along the axes is j. Sums of f16/bf16 values are
computed in float32 and rounded once, Lamina's rule (XLA:CPU promotes a bf16 psum to an f32
all-reduce anyway). Algorithm attributes (ring, tree, hierarchical) are Lamina's cost-model plan;
XLA chooses its own algorithm, so they do not change what is lowered.

Function arguments and results: a `partial = sum[...]` argument enters as the NumPy runner
distributes it (the whole value on the devices at coordinate 0 of every partial axis, zeros on the
others; `max` partials: the whole value everywhere). A partial result leaves as every device's
block, stacked along a new leading dimension over all mesh axes, and the host adds the blocks up
exactly as the NumPy runner's `assemble` does, so no collective that Lamina did not insert
appears in the compiled program.

`LOWERINGS` holds the lowering of every kind of the collectives table (`lamina.ir.mesh.collective_kinds`),
registered against its record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from lamina.ir.core.diagnostics import error_at
from lamina.ir.core.dtypes import tensor_dtype
from lamina.ir.mesh.collective_kinds import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_SLICE,
    ALL_TO_ALL,
    COLLECTIVE_PERMUTE,
    CONCAT_DIM,
    DIM,
    MAX,
    REDUCE_KINDS,
    REDUCE_SCATTER,
    RESHARD,
    SPLIT_DIM,
    SUM,
    Lowerings,
)
from lamina.ir.mesh.collectives import PlacementOp
from lamina.ir.mesh.placement import Mesh, spec_or_replicated, stage_of
from lamina.ir.mesh.sharding import Spec

NARROW = ("f16", "bf16")   # element types whose sums run in float32
PRIMITIVE: dict[str, Any] = {SUM.name: lax.psum, MAX.name: lax.pmax}   # by reduce kind


def names(axes: Sequence[str]) -> Any:
    """The `axis_name` argument of a lax collective: one name, or a tuple (major to minor)."""
    return axes[0] if len(axes) == 1 else tuple(axes)


def position(mesh: Mesh, axes: Sequence[str]) -> Any:
    """The device's index along `axes` (mixed radix, major to minor), traced."""
    pos: Any = 0
    for a in axes:
        pos = pos * mesh.size([a]) + lax.axis_index(a)
    return pos


def owner(axes: Sequence[str]) -> Any:
    """True on the devices at coordinate 0 of every axis in `axes`."""
    flag: Any = True
    for a in axes:
        flag = jnp.logical_and(flag, lax.axis_index(a) == 0)
    return flag


def slice_at(x: jax.Array, dim: int, axes: Sequence[str], mesh: Mesh) -> jax.Array:
    """The device's block of `x` along `dim` when that dimension is split over `axes`."""
    k = x.shape[dim] // mesh.size(axes)
    return lax.dynamic_slice_in_dim(x, position(mesh, axes) * k, k, axis=dim)


def reduce(xs: Sequence[jax.Array], dtypes: Sequence[str], axes: Sequence[str],
           kind: str) -> list[jax.Array]:
    """psum / pmax of `xs` over `axes` (narrow floats summed in float32). Several operands (an
    insert-collectives bucket) travel as one flat buffer per element type, one collective each."""
    wide = [x.astype(jnp.float32) if d in NARROW and REDUCE_KINDS[kind].widens else x
            for x, d in zip(xs, dtypes, strict=True)]
    op = PRIMITIVE[kind]
    out: list[jax.Array | None] = [None] * len(xs)
    for dtype in dict.fromkeys(w.dtype for w in wide):
        idx = [i for i, w in enumerate(wide) if w.dtype == dtype]
        if len(idx) == 1:
            out[idx[0]] = op(wide[idx[0]], names(axes))
            continue
        flat = op(jnp.concatenate([wide[i].reshape(-1) for i in idx]), names(axes))
        start = 0
        for i in idx:
            n = wide[i].size
            out[i] = flat[start:start + n].reshape(wide[i].shape)
            start += n
    return [r.astype(x.dtype) for r, x in zip(out, xs, strict=True) if r is not None]


def reduce_scatter(x: jax.Array, dtype: str, axes: Sequence[str], kind: str, dim: int,
                   mesh: Mesh) -> jax.Array:
    """Device j of a group gets block j along `dim` of the group's sum (max). A dimension other
    than the leading one is first split into (n, size/n) and n moved to the front, so XLA
    scatters contiguous blocks (on XLA:CPU a scatter along a minor dimension transposes the
    whole operand into another layout and back, measured 2x slower)."""
    if kind == MAX.name:   # XLA has no max reduce-scatter in lax
        return slice_at(lax.pmax(x, names(axes)), dim, axes, mesh)
    wide = x.astype(jnp.float32) if dtype in NARROW else x
    if dim == 0:
        out = lax.psum_scatter(wide, names(axes), scatter_dimension=0, tiled=True)
    else:
        n = mesh.size(axes)
        s = wide.shape
        front = jnp.moveaxis(wide.reshape(s[:dim] + (n, s[dim] // n) + s[dim + 1:]), dim, 0)
        out = lax.psum_scatter(front, names(axes), scatter_dimension=0, tiled=True)[0]
    return out.astype(x.dtype)


def all_gather(x: jax.Array, axes: Sequence[str], dim: int) -> jax.Array:
    """The group's blocks concatenated along `dim` in group order (gathered along a new leading
    dimension and moved into place: contiguous blocks for XLA, as in `reduce_scatter`)."""
    if dim == 0:
        return lax.all_gather(x, names(axes), axis=0, tiled=True)
    g = jnp.moveaxis(lax.all_gather(x, names(axes), axis=0, tiled=False), 0, dim)
    s = g.shape
    return g.reshape(s[:dim] + (s[dim] * s[dim + 1],) + s[dim + 2:])


def reshard(x: jax.Array, dtype: str, src: Spec, dst: Spec, mesh: Mesh) -> jax.Array:
    """Assemble the whole value (reduce pending axes, gather every split), take `dst`'s block.
    The same spec on both sides (a reshard that only changes the pipeline stage) moves nothing
    here (`lower` then moves the block to the other stage)."""
    if src == dst:
        return x
    if mesh.size(src.partial) > 1:
        (x,) = reduce([x], [dtype], src.partial, src.partial_kind)
    for d, axes in enumerate(src.splits):
        if mesh.size(axes) > 1:
            x = all_gather(x, axes, d)
    for d, axes in enumerate(dst.splits):
        if axes:
            x = slice_at(x, d, axes, mesh)
    return enter(mesh, Spec(((),) * len(dst.splits), dst.partial, dst.partial_kind), x)


# -- one lowering per kind of the collectives table --
# (op, the device's blocks of its operands, mesh) -> the device's blocks of its results
JaxLowering = Callable[[PlacementOp, list[jax.Array], Mesh], list[jax.Array]]
LOWERINGS: Lowerings[JaxLowering] = Lowerings("jax")


def _dtypes(op: PlacementOp) -> list[str]:
    return [tensor_dtype(v.type) for v in op.inputs]


@LOWERINGS.register(ALL_REDUCE)
def _all_reduce(op: PlacementOp, xs: list[jax.Array], mesh: Mesh) -> list[jax.Array]:
    return reduce(xs, _dtypes(op), op.axis_names(), op.reduce_kind())


@LOWERINGS.register(REDUCE_SCATTER)
def _reduce_scatter(op: PlacementOp, xs: list[jax.Array], mesh: Mesh) -> list[jax.Array]:
    (x,), (dtype,) = xs, _dtypes(op)
    return [reduce_scatter(x, dtype, op.axis_names(), op.reduce_kind(), op.int_attr(DIM), mesh)]


@LOWERINGS.register(ALL_GATHER)
def _all_gather(op: PlacementOp, xs: list[jax.Array], mesh: Mesh) -> list[jax.Array]:
    (x,) = xs
    return [all_gather(x, op.axis_names(), op.int_attr(DIM))]


@LOWERINGS.register(ALL_TO_ALL)
def _all_to_all(op: PlacementOp, xs: list[jax.Array], mesh: Mesh) -> list[jax.Array]:
    (x,) = xs
    return [lax.all_to_all(x, names(op.axis_names()), op.int_attr(SPLIT_DIM),
                           op.int_attr(CONCAT_DIM), tiled=True)]


@LOWERINGS.register(ALL_SLICE)
def _all_slice(op: PlacementOp, xs: list[jax.Array], mesh: Mesh) -> list[jax.Array]:
    (x,) = xs
    return [slice_at(x, op.int_attr(DIM), op.axis_names(), mesh)]


@LOWERINGS.register(RESHARD)
def _reshard(op: PlacementOp, xs: list[jax.Array], mesh: Mesh) -> list[jax.Array]:
    (x,), (dtype,) = xs, _dtypes(op)
    return [reshard(x, dtype, spec_or_replicated(op.inputs[0].type),
                    spec_or_replicated(op.outputs[0].type), mesh)]


@LOWERINGS.register(COLLECTIVE_PERMUTE)
def _collective_permute(op: PlacementOp, xs: list[jax.Array], mesh: Mesh) -> list[jax.Array]:
    return list(xs)   # the block as it is: `lower` moves it to the result's stage (`to_stage`)


def lower(op: PlacementOp, xs: list[jax.Array], mesh: Mesh) -> list[jax.Array]:
    """The per-device results of placement op `op` on blocks `xs` (see the module docstring):
    its kind's lowering, then, where a result lives on another pipeline stage than its operand,
    the move between the stages (`to_stage`)."""
    c = op.COLLECTIVE
    if c.needs_axes and mesh.size(op.axis_names()) == 1:
        outs = list(xs)   # groups of one device: nothing moves
    else:
        lowering = LOWERINGS.get(c)
        if lowering is None:
            raise error_at(op, f"backend 'jax' has no lowering for '{op.name}'")
        outs = lowering(op, xs, mesh)
    return [to_stage(x, stage_of(v.type), stage_of(r.type))
            for x, v, r in zip(outs, op.inputs, op.outputs, strict=True)]


def to_stage(x: jax.Array, src: tuple[str, int] | None, dst: tuple[str, int] | None
             ) -> jax.Array:
    """A block held by pipeline stage `src` (None: by every stage) as stage `dst` holds it: a
    `lax.ppermute` along the stage axis from `src`'s index to `dst`'s (XLA's collective-permute:
    each device of `src` sends its block to the device of `dst` with the same coordinates on the
    other axes). From every stage to one: nothing moves (the block is there already)."""
    if src is None or src == dst:
        return x
    if dst is None:
        raise NotImplementedError("a value of one stage read by every stage (lamina's verifier "
                                  "refuses it)")
    (axis, i), (axis_j, j) = src, dst
    assert axis == axis_j, "stages on two different mesh axes"
    return lax.ppermute(x, axis, perm=[(i, j)])


def on_stage(stage: tuple[str, int]) -> Any:
    """True on the devices of pipeline stage `stage` (traced)."""
    axis, index = stage
    return lax.axis_index(axis) == index


def enter(mesh: Mesh, spec: Spec, x: jax.Array) -> jax.Array:
    """A function argument's block as the NumPy runner distributes it (pending sums: the whole
    value on coordinate-0 devices of the partial axes, zeros elsewhere)."""
    if not spec.partial or REDUCE_KINDS[spec.partial_kind].idempotent:
        return x
    return jnp.where(owner(spec.partial), x, jnp.zeros_like(x))


def leave(spec: Spec, x: jax.Array, stage: tuple[str, int] | None = None) -> jax.Array:
    """A function result's block as it leaves the shard_map: a partial value, or one held by a
    single pipeline stage, keeps every device's block (stacked along a new leading dimension; the
    host reduces the parts, or reads the stage's devices), others leave as placed."""
    return x[None] if spec.partial or stage is not None else x


def in_spec(spec: Spec) -> jax.sharding.PartitionSpec:
    """The PartitionSpec an argument placed `spec` enters the shard_map with (pending axes are
    replicated there; `enter` keeps the value on their coordinate-0 devices only)."""
    return jax.sharding.PartitionSpec(*(names(axes) if axes else None for axes in spec.splits))


def out_spec(spec: Spec, mesh: Mesh, stage: tuple[str, int] | None = None
             ) -> jax.sharding.PartitionSpec:
    """The PartitionSpec a result placed `spec` leaves with: a partial or single-stage result
    keeps every device's block along the new leading dimension `leave` adds, others leave as
    placed."""
    if spec.partial or stage is not None:
        return jax.sharding.PartitionSpec(names(mesh.axes), *([None] * len(spec.splits)))
    return in_spec(spec)
