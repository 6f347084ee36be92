"""Lowering one Lamina function into a Python function of JAX arrays, op by op.

`Lowering(func, mesh, moves)` walks the function body once per trace and evaluates every op:
- op-table ops run their row's array-API formula (`OpInfo.formula`) with `jax.numpy` as the
  namespace, wrapped in the same storage rule as the NumPy interpreter's kernels: for arithmetic
  rows (`OpInfo.arith`) float operands are converted to their compute type (float32 for f16 and
  bf16) and the result is rounded to its element type once; every result is converted to the JAX
  dtype of its element type (native bfloat16/float16), so the dtypes are Lamina's whatever JAX's
  x64 mode would otherwise promote to;
- `lamina.fused` runs its body inline (XLA fuses it again as it likes);
- `lamina.free` does nothing (XLA owns the buffers); `lamina.move` is `moves(value, tier)`;
- placement ops (collectives) run their `lax` counterpart (`lamina.backends.jax.collectives`).

Pipeline stages (a result type placed `stage = AXIS[i]`): the devices of other stages hold no
value, so they must not compute it. Each maximal run of consecutive compute ops (table ops and
fused kernels) of one stage is one `lax.cond` on `axis_index(AXIS) == i`: the stage's devices run
the ops, the others return zeros of the same shapes (a buffer the program never reads), and XLA
executes only the branch taken, so the stages' ops are MPMD in one SPMD program. Placement ops
stay outside the conditionals (a collective over other axes of a stage's value runs in groups of
that stage's devices and moves their blocks; the other groups move zeros); a move to another
stage is a `lax.ppermute` along the stage axis.

With `mesh` None the arrays are whole (a `jax.jit` of the function). With a mesh the function is the
per-device body of one `jax.shard_map`: every array is the device's block, op-table ops see local
shapes and attributes (`ShardingRule.local_attrs`, as in the NumPy SPMD runner) and
position-dependent ops (dropout) get `Call.block` with offsets computed from `lax.axis_index`, so
a device's dropout mask is its block of the single-device mask, with no communication.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from lamina.backends.jax import collectives as coll
from lamina.ir.buffers.memory import FreeOp, MoveOp
from lamina.ir.core.diagnostics import error_at
from lamina.ir.core.shapes import TensorInfo
from lamina.ir.mesh.collectives import PlacementOp
from lamina.ir.mesh.placement import Mesh, Placement, spec_or_replicated, stage_of
from lamina.ir.ops.formulas import Block, Call, compute_dtype, native_dtype
from lamina.ir.ops.fused import FusedOp, YieldOp
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from lamina.ir.ops.optable import OpInfo
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation, SSAValue

Moves = Callable[[jax.Array, str], jax.Array]   # (value, destination tier) -> value
RUNNABLE = (LaminaOp, FusedOp, YieldOp, FreeOp, MoveOp, PlacementOp, ReturnOp)


def unsupported_op(func: FuncOp) -> Operation | None:
    """The first op of `func` the JAX backend has no lowering for (checked before tracing)."""
    for op in func.walk():
        if op is not func and not isinstance(op, RUNNABLE):
            return op
    return None


def as_dtype(a: jax.Array, dtype: Any) -> jax.Array:
    return a if a.dtype == dtype else a.astype(dtype)


def evaluate(info: OpInfo, args: Sequence[jax.Array | None], call: Call) -> jax.Array:
    """Op-table row `info` on JAX arrays: its formula under Lamina's storage rules."""
    xs = list(args)
    if info.arith:
        xs = [None if a is None or t is None else as_dtype(a, compute_dtype(jnp, t.dtype))
              for a, t in zip(args, call.operands, strict=True)]
    out = jnp.asarray(info.formula(jnp, xs, call))
    return as_dtype(out, native_dtype(jnp, call.result.dtype))


def local_info(mesh: Mesh, v: SSAValue) -> TensorInfo:
    t = tensor_info(v.type)
    return TensorInfo(Placement(mesh, spec_or_replicated(v.type)).local_shape(t.shape), t.dtype)


def local_call(op: LaminaOp, mesh: Mesh | None) -> Call:
    """The `Call` one device runs `op` with: local shapes and attributes, and for
    position-dependent ops the block's global offsets (`lax.axis_index` arithmetic)."""
    attrs = op.attr_values()
    result = tensor_info(op.results[0].type)
    if mesh is None:
        return Call(attrs, op.operand_infos(), result)
    slots = op.operand_slots()
    infos = [None if v is None else local_info(mesh, v) for v in slots]
    first = slots[0] if slots else None
    attrs = op.info.sharding.local_attrs(attrs, None if first is None else
                                         spec_or_replicated(first.type),
                                         infos[0] if infos else None)
    local = local_info(mesh, op.results[0])
    block = None
    if op.info.position_dependent:
        # the result's block and each operand's (gather on a split table needs its rows)
        operands = tuple(None if v is None or t is None else
                         Block(tensor_info(v.type).shape, _offsets(mesh, v, t.shape))
                         for v, t in zip(slots, infos, strict=True))
        block = Block(result.shape, _offsets(mesh, op.results[0], local.shape), operands)
    return Call(attrs, infos, local, block)


def _offsets(mesh: Mesh, v: SSAValue, local_shape: tuple[int, ...]) -> tuple[Any, ...]:
    """Where this device's block of `v` starts in the global tensor (traced `axis_index`)."""
    spec = spec_or_replicated(v.type)
    return tuple(coll.position(mesh, axes) * k if axes else 0
                 for axes, k in zip(spec.splits, local_shape, strict=True))


class Lowering:
    """`func` as a function of JAX arrays (see the module docstring); call it under a trace."""

    def __init__(self, func: FuncOp, mesh: Mesh | None, moves: Moves):
        self.func = func
        self.mesh = mesh
        self.moves = moves

    def table_op(self, op: LaminaOp, env: dict[SSAValue, jax.Array]) -> jax.Array:
        args = [None if v is None else env[v] for v in op.operand_slots()]
        out = evaluate(op.info, args, local_call(op, self.mesh))
        want = local_info(self.mesh, op.results[0]).shape if self.mesh is not None \
            else tensor_info(op.results[0].type).shape
        if tuple(out.shape) != want:
            raise error_at(op, f"{op.name}: the JAX lowering produced shape {tuple(out.shape)}, "
                           f"the type says {want} (backend bug)")
        return out

    def block(self, ops: Sequence[Operation], env: dict[SSAValue, jax.Array]
              ) -> list[jax.Array]:
        """Run `ops` in order on `env`; the values the terminator returns or yields."""
        for op in ops:
            if isinstance(op, ReturnOp | YieldOp):
                return [env[v] for v in op.operands]
            self.run(op, env)
        raise error_at(self.func, f"@{self.func.sym_name.data} has no terminator")

    def run(self, op: Operation, env: dict[SSAValue, jax.Array]) -> None:
        """Evaluate one op (not a terminator) on `env`, adding its results."""
        if isinstance(op, LaminaOp):
            env[op.results[0]] = self.table_op(op, env)
        elif isinstance(op, FusedOp):
            inner: dict[SSAValue, jax.Array] = dict(zip(op.body.block.args,
                                                         (env[v] for v in op.inputs),
                                                         strict=True))
            outs = self.block(list(op.body.block.ops), inner)
            env.update(zip(op.results, outs, strict=True))
        elif isinstance(op, MoveOp):
            env[op.results[0]] = self.moves(env[op.source], op.tier)
        elif isinstance(op, FreeOp):
            return
        elif isinstance(op, PlacementOp):
            if self.mesh is None:   # on whole arrays a placement op is the identity
                outs = [env[v] for v in op.inputs]
            else:
                outs = coll.lower(op, [env[v] for v in op.inputs], self.mesh)
            env.update(zip(op.results, outs, strict=True))
        else:
            raise error_at(op, f"backend 'jax' cannot run '{op.name}'")

    def staged(self, ops: Sequence[Operation], stage: tuple[str, int],
               env: dict[SSAValue, jax.Array]) -> None:
        """Run `ops` (compute ops of pipeline stage `stage`) on that stage's devices only: one
        `lax.cond`, zeros of the results' local shapes on the other devices."""
        assert self.mesh is not None
        mesh = self.mesh
        made = {r for op in ops for r in op.results}
        reads = list(dict.fromkeys(v for op in ops for v in op.operands if v not in made))
        results = [r for op in ops for r in op.results]

        def run(*xs: jax.Array) -> tuple[jax.Array, ...]:
            local = dict(zip(reads, xs, strict=True))
            for op in ops:
                self.run(op, local)
            return tuple(local[r] for r in results)

        def idle(*xs: jax.Array) -> tuple[jax.Array, ...]:
            return tuple(jnp.zeros(local_info(mesh, r).shape,
                                   native_dtype(jnp, tensor_info(r.type).dtype))
                         for r in results)

        outs = jax.lax.cond(coll.on_stage(stage), run, idle, *(env[v] for v in reads))
        env.update(zip(results, outs, strict=True))

    def top_level(self, ops: Sequence[Operation], env: dict[SSAValue, jax.Array]
                  ) -> list[jax.Array]:
        """The function body: runs of one stage's compute ops each under its `lax.cond`
        (`staged`), every other op as `block` runs it."""
        if self.mesh is None or not any(_compute_stage(op) for op in ops):
            return self.block(ops, env)
        run: list[Operation] = []
        run_stage: tuple[str, int] | None = None
        for op in ops:
            if isinstance(op, FreeOp):
                continue   # XLA owns the buffers; a free would only split a stage's run
            stage = _compute_stage(op)
            if run and stage != run_stage:
                assert run_stage is not None
                self.staged(run, run_stage, env)
                run = []
            if stage is not None:
                run.append(op)
                run_stage = stage
                continue
            if isinstance(op, ReturnOp):
                return [env[v] for v in op.operands]
            self.run(op, env)
        raise error_at(self.func, f"@{self.func.sym_name.data} has no terminator")

    def __call__(self, *args: jax.Array) -> tuple[jax.Array, ...]:
        block = self.func.body.block
        values = list(args)
        if self.mesh is not None:
            values = [coll.enter(self.mesh, spec_or_replicated(v.type), a)
                      for v, a in zip(block.args, values, strict=True)]
        env: dict[SSAValue, jax.Array] = dict(zip(block.args, values, strict=True))
        outs = self.top_level(list(block.ops), env)
        if self.mesh is not None:
            ret = block.last_op
            assert ret is not None
            outs = [coll.leave(spec_or_replicated(v.type), a, stage_of(v.type))
                    for v, a in zip(ret.operands, outs, strict=True)]
        return tuple(outs)


def _compute_stage(op: Operation) -> tuple[str, int] | None:
    """The pipeline stage a compute op (table op or fused kernel) runs on, or None (placement
    ops, moves, frees and unstaged ops run on every device)."""
    if not isinstance(op, LaminaOp | FusedOp) or not op.results:
        return None
    return stage_of(op.results[0].type)
