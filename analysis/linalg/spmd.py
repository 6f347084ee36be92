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

Pipeline stages (MPMD, issue 28): a staged function (values placed `stage = AXIS[i]`) is not one
program but one per stage (`PerDevice(mesh, stage=(AXIS, i))`, `function_stages` lists them),
each run by the devices of its stage: the arguments, ops and results on that stage or on every
stage (no `stage =`), in the function's order. A `lamina.collective_permute` becomes a send on
its source stage (`func.call @..collective_permute_<n>(%x) : (T) -> ()`, declaration `role =
"send"`) and a receive on its destination stage (`func.call @..() : () -> T`, `role = "recv"`),
both naming the `source` and `target` stage indices; the binder pairs each device with the
device of the other stage at its coordinates on the other axes. Every call of a stage's program
takes one more operand, last, its order token: the previous call's result (a send's is a
`tensor<1xi64>` token; the first call's, `%lamina_device`). IREE keeps calls ordered only by
their data (it moved a receive above the sends before it, and the stages deadlocked); the token
chain keeps them in the function's order, which is what makes the stages' programs meet.
Exported without a stage, a staged function is refused at its first permute.

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
from lamina.ir.mesh.placement import Mesh, spec_or_replicated, stage_of
from lamina.ir.mesh.sharding import Spec
from lamina.ir.ops.formulas import Block, Call
from lamina.ir.ops.opbase import LaminaOp, tensor_info
from xdsl.dialects.builtin import IntegerAttr
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, Operation

Stage = tuple[str, int]   # (stage mesh axis, index), as `stage_of` gives it
SEND, RECV = "send", "recv"   # the two halves of a collective_permute (`Declaration.role`)
SOURCE, TARGET = "source", "target"   # a permute declaration's stage indices (`Declaration.ints`)
TOKEN_TYPE = "tensor<1xi64>"   # what a send returns: the next call's order token

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
    ints: dict[str, int]     # its integer attributes (dim, split_dim, concat_dim; a permute's
                             # source and target stage indices)
    role: str = ""           # a collective_permute's half on this stage: SEND or RECV
    ordered: bool = False    # takes the order token (a stage's program), last


def on_stage(t: Attribute, stage: Stage | None) -> bool:
    """Whether the devices of `stage` hold a value of type `t`: every value for an SPMD program
    (None); else a value of that stage or of every stage (no `stage =`)."""
    st = stage_of(t)
    return stage is None or st is None or st == stage


def function_stages(func: FuncOp, mesh: Mesh) -> list[Stage]:
    """The pipeline stages of a staged function on `mesh`, one per index of its stage axis
    (every index: each runs its own program), or [] when none of its values is on a stage."""
    types = [a.type for a in func.body.block.args] + [r.type for op in func.walk()
                                                      for r in op.results]
    axes = sorted({st[0] for t in types if (st := stage_of(t)) is not None})
    if not axes:
        return []
    if len(axes) > 1:
        raise error_at(func, f"@{func.sym_name.data}: its values are on the stages of "
                       f"{len(axes)} mesh axes ({', '.join(axes)}); the per-stage export takes one")
    return [(axes[0], i) for i in range(mesh.sizes[mesh.axes.index(axes[0])])]


@dataclass
class PerDevice:
    """What the per-device export needs beyond the single-device one: local shapes, local calls
    and the collective declarations written so far."""

    mesh: Mesh
    stage: Stage | None = None   # the pipeline stage exported (None: an SPMD program)
    coords: Node | None = None   # this function's `%lamina_device` argument (export_function)
    token: tuple[str, str] | None = None   # a stage's order token: (SSA name, type) to pass next
    decls: dict[str, Declaration] = field(default_factory=dict)   # key -> declaration
    decl_lines: list[str] = field(default_factory=list)

    def holds(self, t: Attribute) -> bool:
        """Whether this program's devices hold a value of type `t`: every value for an SPMD
        program; else a value of this stage or of every stage."""
        return on_stage(t, self.stage)

    def runs(self, op: Operation) -> bool:
        """Whether `op` runs in this program: an op runs on its results' stage (a permute on
        both of its stages: the send and the receive)."""
        if op.name == COLLECTIVE_PERMUTE.op_name:
            return any(self.holds(v.type) for v in (*op.operands, *op.results))
        return all(self.holds(r.type) for r in op.results) and (
            bool(op.results) or all(self.holds(v.type) for v in op.operands))

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

    def role(self, op: PlacementOp) -> str:
        """A collective_permute's half in this stage's program (SEND on its source stage, RECV
        on its target stage); "" for every other collective. Exported without a stage, a
        permute is refused: an SPMD program has no stage to send from."""
        if op.COLLECTIVE is not COLLECTIVE_PERMUTE:
            return ""
        if self.stage is None:
            raise error_at(op, f"{op.name}: a pipeline-staged function exports one program per "
                           "stage (lamina.analysis.linalg.spmd.function_stages; --backend iree "
                           "runs them), not as one SPMD module")
        return SEND if stage_of(op.inputs[0].type) == self.stage else RECV

    def declaration(self, op: PlacementOp, operand: str, result: str) -> str:
        """The symbol of the declaration for `op` on one operand of type `operand` and result
        of type `result` (text); a permute's send gives a token, its receive takes no operand;
        in a stage's program every call takes the order token too."""
        if op.COLLECTIVE is RESHARD:
            raise error_at(op, f"{op.name}: not lowered to collectives; run -p insert-collectives "
                           "before exporting a placed program")
        role = self.role(op)
        attrs = [f'kind = "{op.COLLECTIVE.kind}"', f"axes = {_strings(op.axis_names())}"]
        if role:
            attrs.append(f'role = "{role}"')
        if op.COLLECTIVE.reduces:
            attrs.append(f'reduce = "{op.reduce_kind()}"')
        ints = {k: op.int_attr(k) for k in op.COLLECTIVE.int_attrs
                if isinstance(op.properties.get(k), IntegerAttr)}
        if role:
            src, dst = stage_of(op.inputs[0].type), stage_of(op.outputs[0].type)
            assert src is not None and dst is not None   # the op's verifier checks its stages
            ints |= {SOURCE: src[1], TARGET: dst[1]}
        attrs += [f"{k} = {v} : i64" for k, v in ints.items()]
        m = self.mesh
        attrs.append(f"mesh_axes = {_strings(m.axes)}")
        attrs.append(f"mesh_shape = [{', '.join(f'{s} : i64' for s in m.sizes)}]")
        ins = [] if role == RECV else [operand]
        if self.token is not None:
            ins.append(self.token[1])
        outs = TOKEN_TYPE if role == SEND else result
        key = f"{', '.join(attrs)}|{', '.join(ins)}|{outs}"
        if key not in self.decls:
            sym = f"{IMPORT_MODULE}.{op.COLLECTIVE.kind}_{len(self.decls)}"
            self.decls[key] = Declaration(sym, op.COLLECTIVE, op.axis_names(), op.reduce_kind(),
                                          ints, role, self.token is not None)
            self.decl_lines.append(
                f"  func.func private @{sym}({', '.join(ins)}) -> {outs} "
                f"attributes {{lamina.collective = {{{', '.join(attrs)}}}}}\n")
        return self.decls[key].symbol


def _strings(xs: tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{x}"' for x in xs) + "]"


def header(mesh: Mesh, stage: Stage | None = None) -> str:
    """The comment at the top of a per-device module: the mesh (and the pipeline stage whose
    devices run it) and the calling convention."""
    axes = ", ".join(f"{a} = {s}" for a, s in zip(mesh.axes, mesh.sizes, strict=True))
    which = "every device" if stage is None else f"every device of stage {stage[0]}[{stage[1]}]"
    return (f"// lamina: per-device program of mesh @{mesh.name} [{axes}] ({mesh.devices} devices,"
            " numbered row-major over the axes);\n"
            f"// tensor types are one device's shards; {which} runs the same functions and "
            f"binds the `{IMPORT_MODULE}` module:\n"
            "// each declaration's `lamina.collective` attribute says which collective it is, over "
            "which axes;\n"
            "// every function's last argument, %lamina_device, is the device's coordinates on "
            f"({', '.join(mesh.axes)}) (see lamina.analysis.linalg.spmd)")
