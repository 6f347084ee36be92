"""A placed function (after the SPMD split) as ONE per-device function, collectives as calls.

Lamina's placed programs export as the program every device of the mesh runs, not as `shard`
dialect annotations: IREE (the export's runner) does not register MLIR's `shard` dialect, and
mlir-opt's sharding pipeline is not what Lamina's own SPMD interpreter checks against. So:

- every tensor type is the device's local shard: a dimension split over axes [a, b] has
  size / (size(a) * size(b)); a `partial` value is the device's summand, of the global shape;
- op-table ops compute their row's formula on the local shards, with the attributes their
  sharding rule gives one device (`ShardingRule.local_attrs`), as the SPMD interpreter
  (`lamina.backends.numpy.spmd`) runs them;
- each collective becomes a `func.call` of a private declaration the caller binds, named
  `@lamina_collectives.<kind>_<n>` (IREE's convention for an import from a module named
  `lamina_collectives`), one per distinct (kind, attributes, operand type, result type). The
  declaration's `lamina.collective` attribute says what the callee does: the kind of the
  collectives table, the mesh axes, the reduce kind, the dimension attributes, and the mesh
  (`mesh_axes`, `mesh_shape`, devices numbered row-major). The binder knows its device's number;
  a group is the devices differing only on `axes`, ordered by their index along them.

Every per-device function takes one more argument, last: `%lamina_device: tensor<Rxi64>`, the
device's coordinates on the mesh's R axes (in the mesh's axis order). A position-dependent op
(dropout's mask is a function of (seed, GLOBAL element index); a gather on a split table looks up
only its block's rows) computes its block's offsets from it where they differ between devices.

Refused with one diagnostic at the op: a `lamina.reshard` (run insert-collectives), a partly
placed function (`check_placed`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lamina.analysis.linalg.namespace import LinalgNamespace, Node
from lamina.ir.core.diagnostics import error_at
from lamina.ir.core.shapes import TensorInfo
from lamina.ir.mesh.collective_kinds import COLLECTIVE_PERMUTE, RESHARD, Collective
from lamina.ir.mesh.collectives import PlacementOp
from lamina.ir.mesh.placement import Mesh, spec_or_replicated
from lamina.ir.mesh.sharding import Spec
from lamina.ir.ops.formulas import Block, Call
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from xdsl.dialects.builtin import IntegerAttr
from xdsl.ir import Attribute

IMPORT_MODULE = "lamina_collectives"   # the module name IREE imports the declarations from


def local_block(mesh: Mesh, spec: Spec, shape: tuple[int, ...], dev: int
                ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(offsets, local shape) of device `dev`'s block of a value placed `spec` (the rule of
    `lamina.backends.arrays.block`, which analysis may not import)."""
    c = mesh.coords(dev)
    offs, local = [], []
    for d, size in enumerate(shape):
        k = size // mesh.size(spec.splits[d])
        offs.append(mesh.index(c, spec.splits[d]) * k)
        local.append(k)
    return tuple(offs), tuple(local)


@dataclass(frozen=True)
class Declaration:
    """What one `lamina_collectives` declaration does, as its `lamina.collective` attribute says
    (a binder of the per-device program implements it from these facts)."""

    symbol: str              # `lamina_collectives.<kind>_<n>`
    collective: Collective   # its record in the collectives table
    axes: tuple[str, ...]    # the mesh axes of its groups
    reduce: str              # the reduce kind (a reducing collective)
    ints: dict[str, int]     # its integer attributes (dim, split_dim, concat_dim)


@dataclass
class PerDevice:
    """What the per-device export needs beyond the single-device one: local shapes, local calls
    and the collective declarations written so far."""

    mesh: Mesh
    coords: Node | None = None   # this function's `%lamina_device` argument (export_function)
    decls: dict[str, Declaration] = field(default_factory=dict)   # key -> declaration
    decl_lines: list[str] = field(default_factory=list)

    def local_shape(self, t: Attribute) -> tuple[int, ...]:
        return local_block(self.mesh, spec_or_replicated(t), tensor_info(t).shape, 0)[1]

    def local_call(self, op: LaminaOp, ns: LinalgNamespace) -> Call:
        """The call one device makes. Where an offset of a position-dependent op's block differs
        from device to device (dropout, gather on a split dimension), it is computed from the
        device's coordinates (`%lamina_device`), as the JAX lowering computes it from
        `axis_index`."""
        calls = [self._call_on(op, dev) for dev in range(self.mesh.devices)]
        first = calls[0]
        if not op.info.position_dependent or all(c.block == first.block for c in calls):
            return first
        assert first.block is not None
        values = [op.results[0], *op.operand_slots()]
        blocks = [first.block, *first.block.operands]
        per_dev = [[c.block, *c.block.operands] for c in calls if c.block is not None]
        made = [None if b is None or v is None else
                Block(b.global_shape, self._offsets(ns, v.type, b.global_shape,
                                                    [d[k] for d in per_dev]))
                for k, (v, b) in enumerate(zip(values, blocks, strict=True))]
        out = made[0]
        assert out is not None
        return Call(first.attrs, first.operands, first.result,
                    Block(out.global_shape, out.offsets, tuple(made[1:])))

    def _offsets(self, ns: LinalgNamespace, t: Attribute, shape: tuple[int, ...],
                 blocks: list[Block | None]) -> tuple[Any, ...]:
        """A block's offsets: ints where every device has the same, else expressions of the
        device's coordinates (the index along the dimension's axes times the block size)."""
        spec = spec_or_replicated(t)
        offs: list[Any] = []
        for d, size in enumerate(shape):
            if len({b.offsets[d] for b in blocks if b is not None}) <= 1:
                offs.append(blocks[0].offsets[d] if blocks[0] is not None else 0)
                continue
            offs.append(self._axis_index(ns, spec.splits[d]) * (size // self.mesh.size(
                spec.splits[d])))
        return tuple(offs)

    def _axis_index(self, ns: LinalgNamespace, axes: tuple[str, ...]) -> Node:
        """The device's mixed-radix index along `axes` (major to minor), from `%lamina_device`."""
        assert self.coords is not None
        index: Any = 0
        for a in axes:
            k = self.mesh.axes.index(a)
            c = ns.reshape(self.coords[k:k + 1], ())
            index = index * self.mesh.sizes[k] + c
        return index

    def _call_on(self, op: LaminaOp, dev: int) -> Call:
        infos: list[TensorInfo | None] = []
        blocks: list[Block | None] = []
        for v, t in zip(op.operand_slots(), op.operand_infos(), strict=True):
            if v is None or t is None:
                infos.append(None)
                blocks.append(None)
                continue
            offs, local = local_block(self.mesh, spec_or_replicated(v.type), t.shape, dev)
            infos.append(TensorInfo(local, t.dtype))
            blocks.append(Block(t.shape, offs))
        r = tensor_info(op.results[0].type)
        offs, local = local_block(self.mesh, spec_or_replicated(op.results[0].type), r.shape, dev)
        x = op.operand_slots()[0] if op.operand_slots() else None
        attrs = op.info.sharding.local_attrs(
            dict(op.attr_values()), spec_or_replicated(x.type) if x is not None else None,
            infos[0] if infos else None)
        return Call(attrs, infos, TensorInfo(local, r.dtype), Block(r.shape, offs, tuple(blocks)))

    def declaration(self, op: PlacementOp, operand: str, result: str) -> str:
        """The symbol of the declaration for `op` on one operand of type `operand` (text)."""
        if op.COLLECTIVE is RESHARD:
            raise error_at(op, f"{op.name}: not lowered to collectives; run -p insert-collectives "
                           "before exporting a placed program")
        if op.COLLECTIVE is COLLECTIVE_PERMUTE:
            raise error_at(op, f"{op.name}: pipeline stages are not supported by the linalg "
                           "export (its per-device modules are SPMD; stages run different ops)")
        attrs = [f'kind = "{op.COLLECTIVE.kind}"', f"axes = {_strings(op.axis_names())}"]
        if op.COLLECTIVE.reduces:
            attrs.append(f'reduce = "{op.reduce_kind()}"')
        ints = {k: op.int_attr(k) for k in op.COLLECTIVE.int_attrs
                if isinstance(op.properties.get(k), IntegerAttr)}
        attrs += [f"{k} = {v} : i64" for k, v in ints.items()]
        m = self.mesh
        attrs.append(f"mesh_axes = {_strings(m.axes)}")
        attrs.append(f"mesh_shape = [{', '.join(f'{s} : i64' for s in m.sizes)}]")
        key = f"{', '.join(attrs)}|{operand}|{result}"
        if key not in self.decls:
            sym = f"{IMPORT_MODULE}.{op.COLLECTIVE.kind}_{len(self.decls)}"
            self.decls[key] = Declaration(sym, op.COLLECTIVE, op.axis_names(), op.reduce_kind(),
                                          ints)
            self.decl_lines.append(
                f"  func.func private @{sym}({operand}) -> {result} "
                f"attributes {{lamina.collective = {{{', '.join(attrs)}}}}}\n")
        return self.decls[key].symbol


def _strings(xs: tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{x}"' for x in xs) + "]"


def header(mesh: Mesh) -> str:
    """The comment at the top of a per-device module: the mesh and the calling convention."""
    axes = ", ".join(f"{a} = {s}" for a, s in zip(mesh.axes, mesh.sizes, strict=True))
    return (f"// lamina: per-device program of mesh @{mesh.name} [{axes}] ({mesh.devices} devices,"
            " numbered row-major over the axes);\n"
            "// tensor types are one device's shards; every device runs the same functions and "
            f"binds the `{IMPORT_MODULE}` module:\n"
            "// each declaration's `lamina.collective` attribute says which collective it is, over "
            "which axes;\n"
            "// every function's last argument, %lamina_device, is the device's coordinates on "
            f"({', '.join(mesh.axes)}) (see lamina.analysis.linalg.spmd)")

