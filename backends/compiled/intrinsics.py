"""LLVM-level building blocks of compiled fused kernels: what numba's Python surface cannot say.

Generated kernels are numba functions; these few pieces are written in LLVM IR (numba
intrinsics, inlined into the kernel, so LLVM vectorizes around them):

- `f32_bits` / `bits_f32`: a float32 and the int32 of the same bits, which `libm`'s exp and log
  need to build 2**n and to split off an exponent without leaving vector registers;
- `fma`: a*b + c rounded once (the polynomials of `libm`);
- `u32_add` ... `u32_shr`: uint32 arithmetic in 32-bit lanes (dropout's hash);
- `row_sum(row, off, n)`: the sum of n contiguous elements in 64 partial sums, so that it runs
  at vector speed (NumPy's pairwise order is 8 partial sums per 128 elements, which the vector
  units cannot keep busy). The order, which fixes every bit: a run of at most `SUM_LEAF`
  elements is a leaf; in a leaf of m >= 64 elements, element i < m - m % 64 goes to partial sum
  i % 64 (four 16-lane vectors, partial k in lane k % 16 of vector k // 16), each partial adds
  its elements in increasing i starting from its first; the vectors are combined (v0+v1)+(v2+v3)
  and the 16 lanes as a balanced tree ((l0+l1)+(l2+l3))+..., left to right; then the last m % 64
  elements are added in order. A leaf shorter than 64 is summed in order from its first element.
  A longer run is cut into blocks of SUM_LEAF elements (the last one shorter), each a leaf,
  whose sums are combined as a binary counter does: after each block, the two latest subtrees
  are added (older + newer) while they hold as many blocks; at the end the subtrees left are
  added from the newest back, stack[k] + (stack[k+1] + ...). The order depends on n alone,
  never on threads or on where a row lies. Error: every element passes through at most
  k(n) = (min(n, SUM_LEAF) / 64 + 6 + 63) + 2 ceil(log2(n / SUM_LEAF)) roundings, so
  |sum - exact| <= k(n) u sum(|x|) (u = 2**-24 for float32, 2**-53 for float64;
  `sum_error_bound`); NumPy's own pairwise sum has k of about 23 + log2(n / 128), so the two
  differ by rounding, within the sum of both bounds;
- `row_max`: the maximum of n contiguous elements, NaN if any is NaN (NumPy's `max`), in 4 x 8
  lanes (the order of a maximum does not change its value).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

SUM_LANES = 16       # lanes of one partial-sum vector
SUM_VECTORS = 4      # partial-sum vectors: SUM_LANES * SUM_VECTORS partial sums in a leaf
SUM_LEAF = 4096      # longest run summed as one leaf; longer rows are split in halves
LANES = 8            # lanes of row_max's vectors

_I32 = ir.IntType(32)
_I64 = ir.IntType(64)


def lowered(gen: Callable[..., Any]) -> Any:
    """numba's `@intrinsic`, typed for pyright as what callers see: a function of the values
    alone (the typing context is numba's first argument, never the caller's)."""
    return intrinsic(gen)


@lowered
def f32_bits(typingctx: Any, x: Any) -> Any:
    """The int32 with the bits of float32 `x`."""
    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.bitcast(args[0], _I32)

    return types.int32(types.float32), codegen


@lowered
def bits_f32(typingctx: Any, i: Any) -> Any:
    """The float32 with the bits of int32 `i`."""
    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@lowered
def bits_f64(typingctx: Any, i: Any) -> Any:
    """The float64 with the bits of int64 `i` (libm's float64 tanh builds 2**n with it)."""
    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


@lowered
def fma(typingctx: Any, a: Any, b: Any, c: Any) -> Any:
    """a * b + c with one rounding (llvm.fma), for float32 or float64 operands of one type."""
    if not (isinstance(a, types.Float) and a == b == c):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        fty = context.get_value_type(sig.return_type)
        fn = builder.module.declare_intrinsic("llvm.fma", [fty], ir.FunctionType(fty, [fty] * 3))
        return builder.call(fn, list(args))

    return a(a, a, a), codegen


def _u32_op(name: str, emit: Callable[[Any, Any, Any], Any]) -> Any:
    def gen(typingctx: Any, a: Any, b: Any) -> Any:
        if not (a == b == types.uint32):
            return None

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return emit(builder, args[0], args[1])

        return types.uint32(types.uint32, types.uint32), codegen

    gen.__name__ = name
    return intrinsic(gen)


# uint32 arithmetic in 32-bit lanes: numba widens uint32 operands to 64 bits, and LLVM keeps a
# vectorized multiply in 64-bit lanes (twice the registers, a slower multiply)
u32_add = _u32_op("u32_add", lambda b, x, y: b.add(x, y))
u32_mul = _u32_op("u32_mul", lambda b, x, y: b.mul(x, y))
u32_xor = _u32_op("u32_xor", lambda b, x, y: b.xor(x, y))
u32_and = _u32_op("u32_and", lambda b, x, y: b.and_(x, y))
u32_or = _u32_op("u32_or", lambda b, x, y: b.or_(x, y))
u32_shr = _u32_op("u32_shr", lambda b, x, y: b.lshr(x, b.and_(y, ir.Constant(_I32, 31))))
u32_shl = _u32_op("u32_shl", lambda b, x, y: b.shl(x, b.and_(y, ir.Constant(_I32, 31))))


def _row_pointer(context: Any, builder: Any, aryty: Any, ary: Any, off: Any) -> tuple[Any, Any, int]:
    """(pointer to element `off` of a 1-D contiguous array, element type, element size)."""
    data = context.make_array(aryty)(context, builder, value=ary).data
    fty = context.get_value_type(aryty.dtype)
    return builder.gep(data, [off]), fty, context.get_abi_sizeof(fty)


def _float_row(arr: Any, codegen: Any) -> Any:
    """The typing of a row intrinsic `(arr, off, n) -> arr.dtype` with `codegen`: only float
    arrays (None: numba tries other implementations, then reports the call as untyped)."""
    if not (isinstance(arr, types.Array) and isinstance(arr.dtype, types.Float)):
        return None
    return arr.dtype(arr, types.intp, types.intp), codegen


def _row_loads(context: Any, builder: Any, sig: Any, args: Any, lanes: int
               ) -> tuple[Callable[[Any, Any], Any], Any, Any]:
    """(load, element type, vector type of `lanes` elements) for a row intrinsic's arguments
    (arr, off, n): load(i, ty) reads element off + i as `ty`, the element type or (a vector
    type) the `lanes` elements from there, aligned only to the element size."""
    base, fty, size = _row_pointer(context, builder, sig.args[0], args[0], args[1])
    vty = ir.VectorType(fty, lanes)

    def load(i: Any, ty: Any) -> Any:
        ptr = builder.gep(base, [i])
        return builder.load(builder.bitcast(ptr, ty.as_pointer()) if ty is vty else ptr,
                            align=size)

    return load, fty, vty


def _hsum(builder: Any, acc: Any, lanes: int) -> Any:
    """The lanes of a vector added as a balanced tree: ((r0+r1)+(r2+r3))+..., left to right."""
    r = [builder.extract_element(acc, ir.Constant(_I32, k)) for k in range(lanes)]
    while len(r) > 1:
        r = [builder.fadd(r[k], r[k + 1]) for k in range(0, len(r), 2)]
    return r[0]


def _counted_loop(builder: Any, start: Any, stop: Any, step: int, carried: list[Any],
                  body: Callable[[Any, list[Any]], list[Any]], name: str) -> list[Any]:
    """for i in range(start, stop, step): carried = body(i, carried); the carried values after.
    (`stop - start` is a multiple of `step`, or the loop runs while i < stop.)"""
    ity = start.type
    entry = builder.basic_block
    head = builder.append_basic_block(f"{name}.head")
    loop = builder.append_basic_block(f"{name}.body")
    done = builder.append_basic_block(f"{name}.done")
    builder.branch(head)
    builder.position_at_end(head)
    i = builder.phi(ity)
    phis = [builder.phi(v.type) for v in carried]
    i.add_incoming(start, entry)
    for ph, v in zip(phis, carried, strict=True):
        ph.add_incoming(v, entry)
    builder.cbranch(builder.icmp_signed("<", i, stop), loop, done)
    builder.position_at_end(loop)
    nxt = body(i, list(phis))
    end = builder.basic_block
    i.add_incoming(builder.add(i, ir.Constant(ity, step)), end)
    for ph, v in zip(phis, nxt, strict=True):
        ph.add_incoming(v, end)
    builder.branch(head)
    builder.position_at_end(done)
    return list(phis)


@lowered
def _lanes_leaf(typingctx: Any, arr: Any, off: Any, m: Any) -> Any:
    """The sum of row[off:off+m], m >= 1, in the order of `row_sum` (module docstring)."""

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        load, fty, vty = _row_loads(context, builder, sig, args, SUM_LANES)
        m_v = args[2]
        ity = m_v.type

        def const(k: int) -> Any:
            return ir.Constant(ity, k)

        width = SUM_LANES * SUM_VECTORS
        full = builder.sub(m_v, builder.srem(m_v, const(width)))
        wide = builder.icmp_signed(">=", full, const(width))
        x0 = load(const(0), fty)
        entry = builder.basic_block
        vec_bb = builder.append_basic_block("sum.vectors")
        join = builder.append_basic_block("sum.join")
        builder.cbranch(wide, vec_bb, join)
        builder.position_at_end(vec_bb)
        first = [load(const(k * SUM_LANES), vty) for k in range(SUM_VECTORS)]

        def step(i: Any, accs: list[Any]) -> list[Any]:
            return [builder.fadd(acc, load(builder.add(i, const(k * SUM_LANES)), vty))
                    for k, acc in enumerate(accs)]

        accs = _counted_loop(builder, const(width), full, width, first, step, "sum.v")
        while len(accs) > 1:
            accs = [builder.fadd(accs[k], accs[k + 1]) for k in range(0, len(accs), 2)]
        tree = _hsum(builder, accs[0], SUM_LANES)
        vec_end = builder.basic_block
        builder.branch(join)
        builder.position_at_end(join)
        start = builder.phi(fty)            # the vectors' sum, or the first element
        start.add_incoming(tree, vec_end)
        start.add_incoming(x0, entry)
        i0 = builder.phi(ity)
        i0.add_incoming(full, vec_end)
        i0.add_incoming(const(1), entry)
        res = _counted_loop(builder, i0, m_v, 1, [start],
                            lambda i, c: [builder.fadd(c[0], load(i, fty))], "sum.tail")
        return res[0]

    return _float_row(arr, codegen)


@njit(error_model="numpy")
def _blocks_sum(a: Any, off: int, n: int) -> Any:
    """A run longer than SUM_LEAF: its blocks' sums as a binary counter combines them (not
    recursive: numba cannot load a cached kernel that calls a recursive function)."""
    stack = np.empty(64, a.dtype)       # subtree sums, oldest first; 2**64 blocks never come
    sizes = np.empty(64, np.int64)      # blocks in each
    top = 0
    for b0 in range(off, off + n, SUM_LEAF):
        stack[top] = _lanes_leaf(a, b0, min(SUM_LEAF, off + n - b0))
        sizes[top] = 1
        top += 1
        while top >= 2 and sizes[top - 2] == sizes[top - 1]:
            stack[top - 2] = stack[top - 2] + stack[top - 1]
            sizes[top - 2] *= 2
            top -= 1
    res = stack[top - 1]
    for k in range(top - 2, -1, -1):
        res = stack[k] + res
    return res


def sum_error_bound(n: int) -> int:
    """k(n) of the module docstring: |row_sum - exact sum| <= k(n) * u * sum(|x|)."""
    k = min(n, SUM_LEAF) // (SUM_LANES * SUM_VECTORS) + 6 + SUM_LANES * SUM_VECTORS - 1
    return k + 2 * math.ceil(math.log2(n / SUM_LEAF)) if n > SUM_LEAF else k


@njit(error_model="numpy", inline="always")
def row_sum(a: Any, off: int, n: int) -> Any:
    """The sum of row[off:off+n], n >= 1, in the order the module docstring states."""
    return _lanes_leaf(a, off, n) if n <= SUM_LEAF else _blocks_sum(a, off, n)


@lowered
def row_max(typingctx: Any, arr: Any, off: Any, n: Any) -> Any:
    """max(row[off:off+n]) for n >= 1, NaN when any element is NaN."""

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        load, fty, vty = _row_loads(context, builder, sig, args, LANES)
        n_v = args[2]
        ity = n_v.type
        width = 4 * LANES

        def pick(v: Any, acc: Any) -> Any:   # v if v > acc or v is NaN, else acc
            take = builder.or_(builder.fcmp_ordered(">", v, acc), builder.fcmp_unordered("uno", v, v))
            return builder.select(take, v, acc)

        first = load(ir.Constant(ity, 0), fty)
        init = builder.insert_element(ir.Constant(vty, ir.Undefined), first, ir.Constant(_I32, 0))
        init = builder.shuffle_vector(init, ir.Constant(vty, ir.Undefined),
                                      ir.Constant(ir.VectorType(_I32, LANES), [0] * LANES))
        full = builder.sub(n_v, builder.srem(n_v, ir.Constant(ity, width)))
        entry = builder.basic_block
        blocks = [builder.append_basic_block(f"max.{b}")
                  for b in ("vhead", "vbody", "hsum", "shead", "sbody", "done")]
        vhead, vbody, hsum, shead, sbody, done = blocks
        builder.branch(vhead)
        builder.position_at_end(vhead)
        i = builder.phi(ity)
        accs = [builder.phi(vty) for _ in range(4)]
        i.add_incoming(ir.Constant(ity, 0), entry)
        for a in accs:
            a.add_incoming(init, entry)
        builder.cbranch(builder.icmp_signed("<", i, full), vbody, hsum)
        builder.position_at_end(vbody)
        for k, a in enumerate(accs):
            a.add_incoming(pick(load(builder.add(i, ir.Constant(ity, k * LANES)), vty), a), vbody)
        i.add_incoming(builder.add(i, ir.Constant(ity, width)), vbody)
        builder.branch(vhead)
        builder.position_at_end(hsum)
        vec = pick(pick(accs[0], accs[1]), pick(accs[2], accs[3]))
        lanes = [builder.extract_element(vec, ir.Constant(_I32, k)) for k in range(LANES)]
        while len(lanes) > 1:
            lanes = [pick(lanes[k], lanes[k + 1]) for k in range(0, len(lanes), 2)]
        builder.branch(shead)
        builder.position_at_end(shead)
        j = builder.phi(ity)
        res = builder.phi(fty)
        j.add_incoming(full, hsum)
        res.add_incoming(lanes[0], hsum)
        builder.cbranch(builder.icmp_signed("<", j, n_v), sbody, done)
        builder.position_at_end(sbody)
        res.add_incoming(pick(load(j, fty), res), sbody)
        j.add_incoming(builder.add(j, ir.Constant(ity, 1)), sbody)
        builder.branch(shead)
        builder.position_at_end(done)
        return res

    return _float_row(arr, codegen)
