"""The static memory plan (`lamina.analysis.arena`): the planner on random lifetimes, checked by
simulation; `plan_function` on random programs, checked against the program independently; and
the arena against the peak of live bytes on every sample and the GPT-2 block.

The simulation writes each buffer's id into its bytes of an arena when it becomes live and checks,
at every program point, that every live buffer still reads its own id: a plan that lets two live
buffers share a byte fails it, whatever the heuristic. A buffer overwritten in place reads its
successor's id from the point the successor is defined, which is the point the buffer dies.
"""

from __future__ import annotations

import os

import lamina
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.analysis.arena import ArenaPlan, Buffer, Layout, Slot, plan, plan_function
from lamina.ir.buffers.memory import FreeOp
from lamina.ir.ops.opbase import LaminaOp
from lamina.ir.ops.optable import Fusion
from sample_files import VALID
from strategies import examples
from strategies.programs import programs
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import SSAValue

GOAL = 1.1          # arena <= GOAL x peak live bytes
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT2 = os.path.join(ROOT, "samples", "gpt2_block.mlir")
FUSION = "fuse-attention,fuse-elementwise"

# Functions whose arena misses GOAL only because of the 64-byte alignment: they hold a handful of
# buffers of 4-96 bytes each, so padding each to 64 bytes is most of the arena. At alignment 1
# their arena equals the peak, and at 64 it is within GOAL of the least any 64-aligned plan can
# have (`_aligned_floor`); the test checks both.
ALIGNMENT_BOUND = {("dropout_seed_operand.mlir", "seed_constant"),   # 68 B for a 12 B peak
                   ("dtypes.mlir", "compare_select"),                # 452 B for 236 B
                   ("layout.mlir", "layout")}                        # 224 B for 192 B


# ---- the planner on random lifetimes -------------------------------------------------------------

@st.composite
def buffer_lists(draw: st.DrawFn) -> list[Buffer]:
    """Up to 24 buffers on 40 program points; about a third try to overwrite an earlier buffer
    that dies where they start (with its size), and now and then a candidate that is not valid."""
    n = draw(st.integers(0, 24))
    out: list[Buffer] = []
    for i in range(n):
        align = draw(st.sampled_from((1, 4, 16, 64)))
        size = draw(st.sampled_from((0, 1, 3, 4, 64, 100, 256, 1000)))
        first = draw(st.integers(0, 40))
        length = draw(st.integers(0, 12))
        cand = None
        kind = draw(st.integers(0, 5))
        if i and kind <= 1:                       # a valid candidate
            j = draw(st.integers(0, i - 1))
            cand, first, size = j, out[j].last, out[j].size
        elif i and kind == 2:                     # any index, usually not valid
            cand = draw(st.integers(0, i - 1))
        out.append(Buffer(size, first, first + length, align, cand))
    return out


def _live(b: Buffer, p: int) -> bool:
    return b.first <= p <= b.last


def _simulate(buffers: list[Buffer], layout: Layout) -> None:
    """Write each buffer's id into its bytes as it becomes live; every live buffer must read its
    own id at every point (one overwritten in place: until its successor starts)."""
    arena = np.zeros(layout.arena_bytes, np.uint32)
    successor = {c: k for k, c in layout.shared.items()}

    def depth(i: int) -> int:      # a buffer is written after the one it overwrites
        d = 0
        while i in layout.shared:
            i, d = layout.shared[i], d + 1
        return d

    points = sorted({b.first for b in buffers} | {b.last for b in buffers})
    for p in points:
        starting = [i for i, b in enumerate(buffers) if b.first == p]
        for i in sorted(starting, key=depth):
            off = layout.offsets[i]
            arena[off:off + buffers[i].size] = i + 1
        for i, b in enumerate(buffers):
            if not _live(b, p) or b.size == 0:
                continue
            k = successor.get(i)
            if k is not None and buffers[k].first == p:
                continue           # overwritten here by k, its last point
            off = layout.offsets[i]
            got = arena[off:off + b.size]
            assert (got == i + 1).all(), f"buffer {i} {b} at point {p}: {set(got.tolist())}"


def _peak(buffers: list[Buffer], shared: dict[int, int]) -> int:
    """Most bytes live at one point, a buffer overwritten in place there not counted twice."""
    overwritten_at = {c: buffers[k].first for k, c in shared.items()}
    points = {b.first for b in buffers} | {b.last for b in buffers}
    return max((sum(b.size for i, b in enumerate(buffers)
                    if _live(b, p) and overwritten_at.get(i) != p) for p in points), default=0)


@settings(max_examples=examples(50), deadline=None)
@given(buffer_lists())
def test_plan_simulates(buffers: list[Buffer]) -> None:
    layout = plan(buffers)
    assert len(layout.offsets) == len(buffers)
    for i, b in enumerate(buffers):
        assert layout.offsets[i] % b.alignment == 0
        assert layout.offsets[i] + b.size <= layout.arena_bytes
    for k, c in layout.shared.items():        # only valid candidates, each overwritten once
        assert buffers[k].in_place == c and buffers[c].last == buffers[k].first
        assert buffers[c].size == buffers[k].size and layout.offsets[k] == layout.offsets[c]
    assert len(set(layout.shared.values())) == len(layout.shared)
    _simulate(buffers, layout)
    peak = _peak(buffers, dict(layout.shared))
    assert layout.peak_live_bytes == peak
    assert layout.arena_bytes >= peak
    # never more than every block side by side, each padded to the largest alignment
    top = max((b.alignment for b in buffers), default=1)
    tails = [b for i, b in enumerate(buffers) if i not in layout.shared.values()]
    assert layout.arena_bytes <= sum(-(-b.size // top) * top for b in tails)


def test_plan_takes_valid_in_place_candidates_only() -> None:
    bufs = [Buffer(256, 0, 2), Buffer(256, 2, 4, in_place=0),    # valid: shares with 0
            Buffer(256, 3, 5, in_place=1),                      # 1 lives on past 3: refused
            Buffer(128, 5, 6, in_place=2)]                      # sizes differ: refused
    layout = plan(bufs)
    assert dict(layout.shared) == {1: 0}
    assert layout.offsets[0] == layout.offsets[1]
    assert layout.peak_live_bytes == 512 and layout.arena_bytes == 512
    with pytest.raises(ValueError):
        plan([Buffer(4, 0, 1, alignment=3)])
    assert plan([]) == Layout((), 0, 0, {})


# ---- plan_function on random programs ------------------------------------------------------------

def _functions(module: ModuleOp) -> list[FuncOp]:
    return [op for op in module.walk() if isinstance(op, FuncOp)]


def _check_function(func: FuncOp, p: ArenaPlan) -> None:
    """The plan against the function, computed independently: who has a slot, lifetimes that
    cover every use, no shared bytes between values live at once but in-place pairs."""
    ops = list(func.body.block.ops)
    root: dict[SSAValue, SSAValue] = {}
    returned: set[SSAValue] = set()
    defined: list[SSAValue] = []
    for i, op in enumerate(ops):
        if isinstance(op, ReturnOp):
            returned = {root.get(v, v) for v in op.operands}
        elif isinstance(op, LaminaOp) and op.info.fusion is Fusion.LAYOUT \
                and not op.info.launches_kernel:
            root[op.results[0]] = root.get(op.operands[0], op.operands[0])
        else:
            defined.extend(op.results)
        if isinstance(op, FreeOp):
            continue
        for inner in op.walk():
            for v in inner.operands:
                r = root.get(v, v)
                if r in p.slots:
                    assert p.slots[r].first <= i <= p.slots[r].last, (v, i, p.slots[r])
    assert set(p.slots) == {v for v in defined if v not in returned}
    for v, s in p.slots.items():
        assert ops[s.first] is v.owner and s.offset + s.size <= p.arena_bytes[s.tier]
    for v, r in p.in_place.items():
        a, b = p.slots[v], p.slots[r]
        assert a.offset == b.offset and a.size == b.size and a.tier == b.tier
        assert b.last == a.first
        assert isinstance(v.owner, LaminaOp) and v.owner.info.fusion is Fusion.ELEMENTWISE
    chain: dict[SSAValue, SSAValue] = {}        # in-place chains share by design

    def head(v: SSAValue) -> SSAValue:
        while v in p.in_place:
            v = p.in_place[v]
        return v

    for v in p.slots:
        chain[v] = head(v)
    items = sorted(p.slots.items(), key=lambda kv: kv[1].first)
    for x, (v, a) in enumerate(items):
        for w, b in items[x + 1:]:
            if b.first > a.last:
                break
            if a.tier != b.tier or chain[v] is chain[w] or a.size == 0 or b.size == 0:
                continue
            assert a.offset + a.size <= b.offset or b.offset + b.size <= a.offset, (a, b)
    for tier, size in p.arena_bytes.items():
        assert size >= p.peak_live_bytes[tier]


@settings(max_examples=examples(20), deadline=None)
@given(programs(min_ops=2, max_ops=14, dtypes=("f32", "bf16", "f64")))
def test_plan_function_random_programs(prog) -> None:
    _check_program(prog.text)


# views (reshapes) read later than their operand, elementwise ops on both sides of layout ops
@settings(max_examples=examples(20), deadline=None)
@given(programs(min_ops=4, max_ops=14, families=("layout", "layout_between", "elementwise")))
def test_plan_function_random_layout_programs(prog) -> None:
    _check_program(prog.text)


def _check_program(text: str) -> None:
    module = lamina.parse(text)
    for func in _functions(module):
        _check_function(func, plan_function(func))
    lamina.apply(module, "fuse-elementwise")
    for func in _functions(module):
        _check_function(func, plan_function(func, alignment=16))


def test_plan_function_views_in_place_and_returns() -> None:
    module = lamina.parse("""
func.func @f(%x: tensor<4x8xf32>) -> (tensor<32xf32>, tensor<4x8xf32>) {
  %a = lamina.exp %x : tensor<4x8xf32>
  %v = lamina.reshape %a : (tensor<4x8xf32>) -> tensor<32xf32>
  %b = lamina.tanh %x : tensor<4x8xf32>
  %c = lamina.neg %b : tensor<4x8xf32>
  %w = lamina.reshape %c : (tensor<4x8xf32>) -> tensor<32xf32>
  %d = lamina.abs %w : tensor<32xf32>
  %e = lamina.reshape %d : (tensor<32xf32>) -> tensor<4x8xf32>
  %f = lamina.add %e, %x : tensor<4x8xf32>
  func.return %v, %f : tensor<32xf32>, tensor<4x8xf32>
}
""")
    (func,) = _functions(module)
    p = plan_function(func)
    names = {v.name_hint: v for v in p.slots}
    # %a escapes through the returned view %v; %f is returned; views have no slot
    assert set(names) == {"b", "c", "d"}
    b, c, d = names["b"], names["c"], names["d"]
    assert p.slots[d].last == 7        # read through the view %e by the add
    assert p.in_place == {c: b, d: c}  # neg over tanh; abs over neg, through a reshape
    assert p.arena_bytes == {"hbm": 128} and p.peak_live_bytes == {"hbm": 128}
    assert isinstance(p.slots[b], Slot) and p.slots[b].tier == "hbm"
    # the NumPy interpreter's own sizes
    assert plan_function(func, lambda v: 2 * 128).arena_bytes == {"hbm": 256}
    assert "%b" in p.report() and "in place of %b" in p.report()


# ---- the goal on the samples and the GPT-2 block -------------------------------------------------

def _aligned_floor(p: ArenaPlan, tier: str, alignment: int = 64) -> int:
    """The least arena any plan can have with offsets aligned to `alignment`: at each point, the
    live buffers below the highest one each take their size rounded up to the alignment (a buffer
    overwritten in place at that point is its successor's bytes, not counted twice)."""
    overwritten_at = {r: p.slots[v].first for v, r in p.in_place.items()}
    slots = {v: s for v, s in p.slots.items() if s.tier == tier}
    best = 0
    for pt in {s.first for s in slots.values()}:
        live = [s for v, s in slots.items()
                if s.first <= pt <= s.last and overwritten_at.get(v) != pt]
        padded = [-(-s.size // alignment) * alignment for s in live]
        best = max(best, sum(padded) - max(a - s.size for a, s in zip(padded, live, strict=True)))
    return best


def _sample_functions() -> list[tuple[str, str, str | None]]:
    out: list[tuple[str, str, str | None]] = []
    for path in VALID:
        for func in _functions(lamina.load(path)):
            out.append((path, func.sym_name.data, None))
    out.append((GPT2, "gpt2_block", FUSION))
    return out


@pytest.mark.parametrize("path,name,pipeline", _sample_functions(),
                         ids=lambda x: os.path.basename(x) if isinstance(x, str) else str(x))
def test_arena_within_goal(path: str, name: str, pipeline: str | None) -> None:
    module = lamina.load(path)
    if pipeline:
        lamina.apply(module, pipeline)
    (func,) = [f for f in _functions(module) if f.sym_name.data == name]
    p = plan_function(func)
    _check_function(func, p)
    for tier, size in p.arena_bytes.items():
        peak = p.peak_live_bytes[tier]
        if size <= GOAL * peak:
            continue
        key = (os.path.basename(path), name)
        assert key in ALIGNMENT_BOUND, f"{key} {tier}: arena {size} B, peak {peak} B " \
            f"({size / peak:.3f}x)"
        assert plan_function(func, alignment=1).arena_bytes[tier] <= GOAL * peak
        assert size <= GOAL * _aligned_floor(p, tier)


def test_one_arena_per_tier() -> None:
    """After assign-memory-tiers offloads to host, each tier has its own arena."""
    module = lamina.load(os.path.join(ROOT, "samples", "mlp_training_offload.mlir"))
    lamina.apply(module, "fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=tiny}")
    (func,) = _functions(module)
    p = plan_function(func)
    _check_function(func, p)
    assert {"hbm", "host"} <= set(p.arena_bytes)
    for tier, size in p.arena_bytes.items():
        assert size <= GOAL * p.peak_live_bytes[tier]


# ---- prepared calls: kernels that return views of an arena slot -----------------------------------

# `%t` is a transpose kernel's result: NumPy's `permute_dims`, a view of `%a`'s bytes. A fused
# op reads it and is returned, so `%t` escapes (a fused result may alias its operands), stays out
# of the arena, and its step hands out the view. `%a` dies at the transpose, and `%b`, of its
# size, is made before the fused op runs: a plan that took `%t` for a buffer of its own gave `%b`
# `%a`'s offset, and the fused op read `exp(y)` where `exp(x)^T` was (the GPT-2 step under
# fuse-elementwise: a weight gradient made by a transpose, read by the fused AdamW update).
VIEW_INTO_FUSED = """
func.func @f(%x: tensor<8x16xf32>, %y: tensor<16x8xf32>) -> (tensor<16x8xf32>, tensor<16x8xf32>) {
  %a = lamina.exp %x : tensor<8x16xf32>
  %t = lamina.transpose %a {permutation = array<i64: 1, 0>} : (tensor<8x16xf32>) -> tensor<16x8xf32>
  %b = lamina.exp %y : tensor<16x8xf32>
  %c = lamina.neg %b : tensor<16x8xf32>
  %f = lamina.fused "loop" (%u = %t) : (tensor<16x8xf32>) -> tensor<16x8xf32> {
    %e = lamina.add %u, %u : tensor<16x8xf32>
    lamina.yield %e : tensor<16x8xf32>
  }
  func.return %c, %f : tensor<16x8xf32>, tensor<16x8xf32>
}
"""


def _calls_equal_fresh_runs(module: ModuleOp, calls: int = 3) -> None:
    """`calls` calls of one executable (the first checked, the rest prepared steps on the
    arena) on different inputs, each equal bit for bit to a fresh `lamina.run` on them."""
    exe = lamina.compile(module, warmup=False)
    for seed in range(calls):
        inputs = lamina.inputs(module, seed=seed)
        got = exe(inputs).outputs
        want = lamina.run(module, inputs).outputs
        assert got.keys() == want.keys()
        for k in want:
            assert np.array_equal(got[k], want[k], equal_nan=True), (seed, k)


def test_view_kernel_read_by_fused_op_keeps_its_operand_live() -> None:
    module = lamina.parse(VIEW_INTO_FUSED)
    _calls_equal_fresh_runs(module)
    x = lamina.inputs(module, seed=1)
    f = lamina.compile(module)(x).outputs["f"]
    np.testing.assert_array_equal(f, 2 * np.exp(x["x"]).T)


def _fused_returns(text: str) -> str:
    """`text` (one generated function) with every float result computed by a one-op
    `lamina.fused` kernel reading it (`v + v`), so the values results are made from reach the
    return through a fused op, which may alias its operands; before those kernels, per such
    result, an elementwise op on a new argument of its type (and one more result), whose value
    may take the offset of a buffer the result is a view of."""
    lines = text.rstrip().splitlines()
    header, ret = lines[0], lines[-2]
    assert header.startswith("func.func @") and ret.startswith("  func.return ") and \
        lines[-1] == "}", text
    name, rest = header.split("(", 1)
    args = rest.rsplit(") -> ", 1)[0]
    values_part, types_part = ret.removeprefix("  func.return ").split(" : ", 1)
    values, types = values_part.split(", "), types_part.split(", ")
    body: list[str] = []
    out: list[str] = []
    new_args: list[str] = []
    result_types: list[str] = []
    for k, (v, t) in enumerate(zip(values, types, strict=True)):
        if not (t.endswith("f32>") or t.endswith("f64>")):
            out.append(v)
            result_types.append(t)
            continue
        new_args.append(f"%fa{k}: {t}")
        body.append(f"  %fw{k} = lamina.exp %fa{k} : {t}\n  %fx{k} = lamina.neg %fw{k} : {t}\n")
        body.append(f'  %fz{k} = lamina.fused "loop" (%fu{k} = {v}) : ({t}) -> {t} {{\n'
                    f"    %fe{k} = lamina.add %fu{k}, %fu{k} : {t}\n"
                    f"    lamina.yield %fe{k} : {t}\n  }}\n")
        out += [f"%fz{k}", f"%fx{k}"]
        result_types += [t, t]
    all_args = ", ".join(a for a in (args, *new_args) if a)
    head = f"{name}({all_args}) -> ({', '.join(result_types)}) {{"
    return "\n".join([head, *lines[1:-2], "".join(body).rstrip("\n"),
                      f"  func.return {', '.join(out)} : {', '.join(result_types)}", "}"]) + "\n"


# layout and broadcast kernels (whose NumPy results are views) left outside fused kernels that
# read them, with elementwise ops after them that may take their operands' offsets
@settings(max_examples=examples(25), deadline=None)
@given(programs(min_ops=3, max_ops=12, dtypes=("f32", "f64"),
                families=("layout", "layout_between", "broadcast", "elementwise")))
def test_prepared_calls_with_fused_readers_equal_fresh_runs(prog) -> None:
    module = lamina.parse(_fused_returns(prog.text))
    _calls_equal_fresh_runs(module)
