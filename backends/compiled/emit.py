"""Scheduling a traced fused body into one row loop, and writing it as numba source.

The kernel is `kernel(r0, r1, ibase, flags, *inputs, *outputs)`: rows r0 .. r1-1 of the group,
each computed whole before the next, so a row's intermediates stay in registers and in the
per-call row buffers (L1), and a call computes any set of rows the same way (results do not
depend on how rows are split between threads). Inside a row:

- a node that runs along the tail is computed in a loop over the row's elements (loop `s`), a
  node with one value per row in the row's straight-line code (segment `s`);
- stage `s` of a node is how many reductions it waits for: a reduction's result exists only after
  the loop that produced its input, so a row has one loop per stage (LayerNorm + its epilogue:
  mean, then variance, then everything else: 3 passes over a row in L1, one over memory each way);
- a value a later loop reads is stored in a row buffer (inputs are re-read instead), and so is the
  input of a reduction, which then sums the buffer in 64 vector partial sums
  (`intrinsics.row_sum`, whose order and error bound are stated there): a row's sum differs from
  the interpreter's pairwise one by rounding, and its bits depend on the row's length alone;
- a row whose `require` fails, or whose dropout indices cross a 2**32 boundary (a row of a
  16 GiB tensor), is flagged in `flags` for the interpreter and left.

The tail loop runs over the row's dims collapsed to as few as the inputs allow (a run of dims
along which every input either varies or does not); a row-invariant input such as a bias [T] is
read as is, never repeated per row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from lamina.backends.compiled.trace import CONST, ELEM, KERNEL, ROW, CannotCompile, Domain, Sym

CODEGEN_VERSION = 4     # part of every kernel's source, so a generator change recompiles


@dataclass(frozen=True)
class Output:
    """A step result that leaves the group: a [rows, T] array (`full`) or one value per row."""

    node: Sym
    full: bool
    storage: str        # its Lamina element type: f16 is stored as its uint16 bits


@dataclass(frozen=True)
class Layout:
    """How the runner lays out input `slot` for the kernel: varying along rows or not, and which
    collapsed tail groups it spans (a full input is a [rows, T] array)."""

    rows: bool
    groups: tuple[bool, ...]

    @property
    def full(self) -> bool:
        return self.rows and all(self.groups)


@dataclass
class Generated:
    source: str
    layouts: list[Layout]
    groups: tuple[tuple[int, ...], ...]     # the domain's tail dims of each collapsed group


_NP_TYPES = {"float32": "np.float32", "float64": "np.float64", "int32": "np.int32",
             "int64": "np.int64", "uint32": "np.uint32", "uint64": "np.uint64", "uint16": "np.uint16",
             "bool": "np.bool_"}
# "fn" nodes hold the NumPy ufunc they apply (`trace`), or a string for what is not one
_BINOPS: dict[object, str] = {
    np.add: "+", np.subtract: "-", np.multiply: "*", np.divide: "/", np.equal: "==",
    np.not_equal: "!=", np.less: "<", np.less_equal: "<=", np.greater: ">", np.greater_equal: ">=",
    np.bitwise_and: "&", np.bitwise_or: "|", np.bitwise_xor: "^", np.bitwise_right_shift: ">>",
    np.bitwise_left_shift: "<<", np.logical_and: "&", np.logical_or: "|"}
_U32: dict[object, str] = {
    np.add: "u32_add", np.multiply: "u32_mul", np.bitwise_xor: "u32_xor", np.bitwise_and: "u32_and",
    np.bitwise_or: "u32_or", np.bitwise_right_shift: "u32_shr", np.bitwise_left_shift: "u32_shl"}
_F32_CALLS: dict[object, str] = {np.exp: "exp_f32", np.log: "log_f32", np.tanh: "tanh_f32"}
_F64_CALLS: dict[object, str] = {np.exp: "math.exp", np.log: "math.log", np.tanh: "tanh_f64"}
_CALLS: dict[object, str] = {
    np.sqrt: "np.sqrt", np.floor: "np.floor", np.trunc: "np.trunc", np.isfinite: "np.isfinite",
    np.log2: "np.log2", np.maximum: "maximum", np.minimum: "minimum", np.pow: "math.pow",
    np.abs: "np.abs", np.sin: "np.sin", np.cos: "np.cos", "round_f16": "round_f16",
    "round_bf16": "round_bf16"}
_COMPARE = frozenset((np.equal, np.not_equal, np.less, np.less_equal, np.greater,
                      np.greater_equal))


def _collapse(domain: Domain, loads: Sequence[Sym]) -> tuple[tuple[int, ...], ...]:
    """Tail dims of size > 1 in runs along which every load either varies or does not."""
    groups: list[list[int]] = []
    prev: tuple[bool, ...] | None = None
    for k, n in enumerate(domain.tail):
        if n == 1:
            continue
        d = domain.nl + k
        key = tuple(d in s.dmap for s in loads)
        if prev is not None and key == prev:
            groups[-1].append(d)
        else:
            groups.append([d])
        prev = key
    return tuple(tuple(g) for g in groups)


def _literal(value: np.ndarray) -> str:
    v = value.item()
    if value.dtype.kind == "b":
        return repr(bool(v))
    if value.dtype.kind == "f":
        return f"{_NP_TYPES[value.dtype.name]}(float({repr(float(v))!r}))"
    return f"{_NP_TYPES[value.dtype.name]}({int(v)})"


class _Writer:
    """Source lines with indentation."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)


@dataclass
class _Plan:
    nodes: list[Sym]
    stage: dict[Sym, int]
    buffered: set[Sym]          # ELEM nodes a later loop reads, or a reduction sums
    direct: dict[Sym, int]      # reduction -> input slot it sums straight from a full input


def _recomputable(n: Sym) -> bool:
    return n.op in ("load", "index", "const") or (n.op == "fn" and n.value == "identity"
                                                    and _recomputable(n.args[0]))


def _schedule(roots: Sequence[Sym], layouts: Sequence[Layout], f16_slots: set[int]) -> _Plan:
    """Stages (how many reductions a node waits for) and which values need row buffers.

    A per-row value is computed as early as it can be (it is cheap); a per-element one as late as
    its first user allows, so values that wait for no reduction (dropout's mask) are computed in
    the loop that uses them instead of being stored by the first loop and read back."""
    seen: dict[Sym, None] = {}
    stack = list(roots)
    while stack:
        n = stack.pop()
        if n not in seen:
            seen[n] = None
            stack.extend(n.args)
    nodes = sorted(seen, key=lambda n: n.id)
    stage: dict[Sym, int] = {}
    for n in nodes:
        s = max((stage[a] for a in n.args), default=0)
        stage[n] = s + 1 if n.op == "reduce" else s
    users: dict[Sym, list[Sym]] = {n: [] for n in nodes}
    for n in nodes:
        for a in n.args:
            users[a].append(n)
    rooted = set(roots)
    for n in reversed(nodes):
        if n.level == ELEM and not _recomputable(n) and n not in rooted and users[n]:
            stage[n] = max(stage[n], min(stage[u] - (u.op == "reduce") for u in users[n]))
    buffered: set[Sym] = set()
    direct: dict[Sym, int] = {}
    for n in nodes:
        for a in n.args:
            if n.op == "reduce":
                src = a
                while src.op == "fn" and src.value == "identity":
                    src = src.args[0]
                if src.op == "load" and layouts[src.value].full and src.value not in f16_slots:
                    direct[n] = src.value
                else:
                    buffered.add(a)
            elif a.level == ELEM and not _recomputable(a) and stage[a] < stage[n]:
                buffered.add(a)
    return _Plan(nodes, stage, buffered, direct)


class _Emitter:
    def __init__(self, domain: Domain, outputs: Sequence[Output], requires: Sequence[Sym],
                 loads: Sequence[Sym], splits_index: bool, header: str) -> None:
        self.domain = domain
        self.outputs = list(outputs)
        self.requires = list(requires)
        self.splits_index = splits_index
        self.header = header
        self.groups = _collapse(domain, loads)
        self.sizes = [math.prod(domain.dims[d] for d in g) for g in self.groups]
        self.T = math.prod(self.sizes)
        self.layouts = [Layout(any(d is not None and d < domain.nl for d in s.dmap),
                               tuple(g[0] in s.dmap for g in self.groups)) for s in loads]
        self.consts: dict[tuple[str, str], str] = {}
        self.w = _Writer()

    # ---- expressions ----------------------------------------------------------------------------

    def const(self, n: Sym) -> str:
        lit = _literal(n.value)
        key = (n.dtype.name, lit)
        if key not in self.consts:
            self.consts[key] = f"_k{len(self.consts)}"
        return self.consts[key]

    def ref(self, n: Sym) -> str:
        if n.op == "const":
            return self.const(n)
        while n.op == "fn" and n.value == "identity":
            n = n.args[0]
            if n.op == "const":
                return self.const(n)
        return f"v{n.id}"

    def load_expr(self, n: Sym) -> str:
        lay = self.layouts[n.value]
        if lay.full:
            idx = "r, j"
        else:
            parts = (["r"] if lay.rows else []) + [f"i{k}" for k, p in enumerate(lay.groups) if p]
            idx = ", ".join(parts) if parts else "0"
        e = f"a{n.value}[{idx}]"
        return f"f16_value({e})" if n.dtype == np.float32 and self._f16_slot(n.value) else e

    def _f16_slot(self, slot: int) -> bool:
        return slot in self.f16_slots

    def expr(self, n: Sym) -> str:
        a = [self.ref(x) for x in n.args]
        t = _NP_TYPES.get(n.dtype.name)
        if n.op == "load":
            return self.load_expr(n)
        if n.op == "index":
            return "(base + j)" if n.value == "full" else "(ibase + r)"
        if n.op == "index_hi":
            return "(base >> 32)" if n.args[0].value == "full" else "((ibase + r) >> 32)"
        if n.op == "astype":
            if n.dtype.kind == "b":
                return f"({a[0]} != 0)"
            return f"{t}({a[0]})"
        if n.op == "where":
            c, x, y = (self.cast(s, n.dtype, v) for s, v in zip(n.args, a, strict=True))
            return f"({x} if {a[0]} else {y})"
        assert n.op == "fn", n.op
        fn = n.value
        if n.args and n.args[0].op == "index":   # the index's low word, in 32-bit lanes
            if int(n.args[1].value) != 0xFFFFFFFF:
                raise CannotCompile("the element index masked other than to its low word")
            if n.args[0].value == "row":         # one value per row: the row's own index
                return "np.uint64((ibase + r) & 4294967295)"
            return "np.uint64(u32_add(np.uint32(base & 4294967295), np.uint32(j)))"
        if fn in _U32 and n.dtype == np.uint32 and all(x.dtype == np.uint32 for x in n.args):
            return f"{_U32[fn]}({a[0]}, {a[1]})"
        kind = n.dtype.kind
        cast = [self.cast(s, n.dtype, v) if fn not in _COMPARE else v
                for s, v in zip(n.args, a, strict=True)]
        if fn in _BINOPS:
            e = f"({cast[0]} {_BINOPS[fn]} {cast[1]})"
        elif fn is np.negative:
            e = f"(-{cast[0]})"
        elif fn is np.logical_not:
            e = f"(not {cast[0]})"
        elif kind == "f" and fn in _F32_CALLS:
            e = f"{(_F32_CALLS if n.dtype == np.float32 else _F64_CALLS)[fn]}({cast[0]})"
        elif fn in _CALLS:
            e = f"{_CALLS[fn]}({', '.join(cast)})"
        else:
            raise CannotCompile(f"no scalar form for '{getattr(fn, '__name__', fn)}' on {n.dtype}")
        return f"{t}({e})" if kind in "iu" else e

    def cast(self, s: Sym, dtype: np.dtype, v: str) -> str:
        if s.dtype == dtype or dtype.kind == "b":
            return v
        return f"{_NP_TYPES[dtype.name]}({v})"

    # ---- statements -----------------------------------------------------------------------------

    def assign(self, n: Sym) -> None:
        if n.op == "const" or n.op == "fn" and n.value == "identity":
            return
        self.w(f"v{n.id} = {self.expr(n)}")

    def generate(self, f16_slots: set[int]) -> Generated:
        self.f16_slots = f16_slots
        roots = [o.node for o in self.outputs] + self.requires
        plan = _schedule(roots, self.layouts, f16_slots)
        self.plan = plan
        w = self.w
        nargs = ", ".join([f"a{k}" for k in range(len(self.layouts))]
                          + [f"o{k}" for k in range(len(self.outputs))])
        w("@njit(nogil=True, cache=True, error_model='numpy', boundscheck=False)")
        w(f"def kernel(r0, r1, ibase, flags, {nargs}):")
        w.depth += 1
        for n in plan.nodes:
            if n.level == KERNEL:
                self.assign(n)
        for n in sorted(plan.buffered, key=lambda n: n.id):
            w(f"b{n.id} = np.empty({self.T}, {_NP_TYPES[n.dtype.name]})")
        w("for r in range(r0, r1):")
        w.depth += 1
        w(f"base = ibase + r * {self.T}")
        if not self.groups:
            w("j = 0")      # one element per row
        if self.splits_index:
            w(f"if (base >> 32) != ((base + {self.T - 1}) >> 32):")
            w("    flags[r] = 1")
            w("    continue")
        last = max([plan.stage[n] for n in plan.nodes] + [0])
        for s in range(last + 1):
            self.segment(s)
            self.loop(s)
        w.depth -= 2
        return self.finish()

    def segment(self, s: int) -> None:
        """The row's straight-line code of stage s: its reductions, per-row values, checks."""
        plan, w = self.plan, self.w
        for n in plan.nodes:
            if n.level != ROW or plan.stage[n] != s:
                continue
            if n.op == "reduce":
                x = n.args[0]
                src = f"a{plan.direct[n]}[r]" if n in plan.direct else f"b{x.id}"
                if n.value == "sum":
                    w(f"v{n.id} = row_sum({src}, 0, {self.T})")
                else:
                    w(f"v{n.id} = row_max({src}, 0, {self.T})")
            else:
                self.assign(n)
        for c in self.requires:
            if plan.stage[c] == s:
                w(f"if not {self.ref(c)}:")
                w("    flags[r] = 1")
                w("    continue")
        for k, o in enumerate(self.outputs):
            if not o.full and plan.stage[o.node] == s:
                w(f"o{k}[r] = {self.store(o)}")

    def store(self, o: Output) -> str:
        v = self.ref(o.node)
        if o.node.op == "const":
            v = self.const(o.node)
        return f"f16_bits({v})" if o.storage == "f16" else v

    def loop(self, s: int) -> None:
        plan, w = self.plan, self.w
        body = [n for n in plan.nodes if plan.stage[n] == s and (
            n.level == ELEM and not _recomputable(n) or n in plan.buffered)]
        outs = [(k, o) for k, o in enumerate(self.outputs) if o.full and plan.stage[o.node] == s]
        if not body and not outs or self.T == 1 and not body:
            if outs:   # one element per row
                for k, o in outs:
                    w(f"o{k}[r, 0] = {self.store(o)}")
            return
        for k, size in enumerate(self.sizes):
            w(f"for i{k} in range({size}):")
            w.depth += 1
        if self.sizes:      # else one element per row, and j = 0 (`run`)
            flat = "i0"
            for k in range(1, len(self.sizes)):
                flat = f"({flat} * {self.sizes[k]} + i{k})"
            w(f"j = {flat}")
        ready: set[Sym] = set()

        def need(n: Sym) -> None:
            if n in ready or n.level != ELEM:
                return
            ready.add(n)
            if plan.stage[n] < s and not _recomputable(n):
                w(f"v{n.id} = b{n.id}[j]")
                return
            for a in n.args:
                need(a)
            self.assign(n)

        for n in body:
            need(n)
        for n in body:
            if n in plan.buffered:
                w(f"b{n.id}[j] = {self.ref(n)}")
        for k, o in outs:
            need(o.node)
            w(f"o{k}[r, j] = {self.store(o)}")
        w.depth -= len(self.sizes)

    def finish(self) -> Generated:
        consts = [f"{name} = {lit}" for (_, lit), name in self.consts.items()]
        head = [f"# Lamina compiled fused kernel (codegen {CODEGEN_VERSION}), generated from:"]
        head += [f"#   {line}" for line in self.header.splitlines()]
        head += ["import math", "", "import numpy as np", "from numba import njit",
                 "from lamina.backends.compiled.intrinsics import (row_max, row_sum, u32_add, "
                 "u32_and, u32_mul,", "    u32_or, u32_shl, u32_shr, u32_xor)",
                 "from lamina.backends.compiled.libm import (exp_f32, f16_bits, f16_value, "
                 "log_f32, maximum, minimum,", "    round_bf16, round_f16, tanh_f32, tanh_f64)", ""]
        src = "\n".join(head + consts + ["", ""] + self.w.lines) + "\n"
        return Generated(src, self.layouts, self.groups)


def generate(domain: Domain, outputs: Sequence[Output], requires: Sequence[Sym],
             loads: Sequence[Sym], f16_slots: set[int], splits_index: bool,
             header: str) -> Generated:
    """The kernel's source for a traced body (see the module docstring)."""
    for o in outputs:
        if o.node.level == ELEM and not o.full:
            raise CannotCompile("a per-row result that varies along the row")
    levels = {n.level for n in (o.node for o in outputs)}
    assert levels <= {CONST, KERNEL, ROW, ELEM}
    return _Emitter(domain, outputs, requires, loads, splits_index, header).generate(f16_slots)
