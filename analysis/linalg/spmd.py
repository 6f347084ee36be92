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

Refused with one diagnostic at the op: a position-dependent op (dropout, gather) whose block
differs from device to device (its per-device form needs the device's offsets, not built yet),
a `lamina.reshard` (run insert-collectives), a partly placed function (`check_placed`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lamina.analysis.placed import check_placed
from lamina.ir.core.diagnostics import error_at
from lamina.ir.core.shapes import TensorInfo
from lamina.ir.mesh.collective_kinds import RESHARD, Collective
from lamina.ir.mesh.collectives import PlacementOp
from lamina.ir.mesh.placement import Mesh, MeshOp, spec_or_replicated
from lamina.ir.mesh.sharding import Spec
from lamina.ir.ops.formulas import Block, Call
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from xdsl.dialects.builtin import IntegerAttr
from xdsl.dialects.func import FuncOp
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
    decls: dict[str, Declaration] = field(default_factory=dict)   # key -> declaration
    decl_lines: list[str] = field(default_factory=list)

    def local_shape(self, t: Attribute) -> tuple[int, ...]:
        return local_block(self.mesh, spec_or_replicated(t), tensor_info(t).shape, 0)[1]

    def local_call(self, op: LaminaOp) -> Call:
        """The call one device makes; the same on every device, or a diagnostic."""
        calls = [self._call_on(op, dev) for dev in range(self.mesh.devices)]
        if op.info.position_dependent and any(c.block != calls[0].block for c in calls):
            raise error_at(op, f"{op.name}: its per-device form needs the device's offsets "
                           "(it runs on a split dimension); the per-device export of that is not "
                           "built yet: run it with --backend numpy or jax")
        return calls[0]

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


def per_device(func: FuncOp, mesh: MeshOp) -> PerDevice:
    """The per-device context of placed `func` (a partly placed one is refused first)."""
    check_placed(func)
    return PerDevice(mesh.mesh)


def header(mesh: Mesh) -> str:
    """The comment at the top of a per-device module: the mesh and the calling convention."""
    axes = ", ".join(f"{a} = {s}" for a, s in zip(mesh.axes, mesh.sizes, strict=True))
    return (f"// lamina: per-device program of mesh @{mesh.name} [{axes}] ({mesh.devices} devices,"
            " numbered row-major over the axes);\n"
            "// tensor types are one device's shards; every device runs the same functions and "
            f"binds the `{IMPORT_MODULE}` module:\n"
            "// each declaration's `lamina.collective` attribute says which collective it is, over "
            "which axes (see lamina.analysis.linalg.spmd)")

