"""LLVM-level building blocks of compiled fused kernels: what numba's Python surface cannot say.

Generated kernels are numba functions; these few pieces are written in LLVM IR (numba
intrinsics, inlined into the kernel, so LLVM vectorizes around them):

- `f32_bits` / `bits_f32`: a float32 and the int32 of the same bits, which `libm`'s exp and log
  need to build 2**n and to split off an exponent without leaving vector registers;
- `fma`: a*b + c rounded once (the polynomials of `libm`);
- `u32_add` ... `u32_shr`: uint32 arithmetic in 32-bit lanes (dropout's hash);
- `pairwise_sum(n)`: the sum of n contiguous elements in NumPy's pairwise order. NumPy adds a
  contiguous run with `pairwise_sum` (numpy/_core/src/umath/loops_utils.h.src): a run of at most
  128 elements in 8 interleaved accumulators, combined ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then
  its last n % 8 elements in order (a run shorter than 8 is summed in order from 0); a longer run
  is split at n/2 rounded down to a multiple of 8 and the halves' sums added. The 8 accumulators
  are one 8-lane vector here and the tree is unrolled for the row length (known when the kernel
  is generated), so a row's sum has the interpreter's bits at vector speed; rows longer than
  `UNROLL_MAX` recurse with a vector loop per leaf, in the same order;
- `row_max`: the maximum of n contiguous elements, NaN if any is NaN (NumPy's `max`), in 4 x 8
  lanes (the order of a maximum does not change its value).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

UNROLL_MAX = 8192    # longest row whose pairwise tree is unrolled into straight-line code
LANES = 8            # NumPy's accumulators per leaf

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


def _tree(n: int, off: int = 0) -> tuple[Any, ...]:
    """NumPy's pairwise tree of a run of n elements at `off`: ("leaf", off, n) or ("pair", a, b)."""
    if n <= 128:
        return ("leaf", off, n)
    half = n // 2
    half -= half % LANES
    return ("pair", _tree(half, off), _tree(n - half, off + half))


def _hsum(builder: Any, acc: Any) -> Any:
    """((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)) of an 8-lane vector."""
    r = [builder.extract_element(acc, ir.Constant(_I32, k)) for k in range(LANES)]
    while len(r) > 1:
        r = [builder.fadd(r[k], r[k + 1]) for k in range(0, len(r), 2)]
    return r[0]


def _unrolled_sum(n: int) -> Callable[..., Any]:
    tree = _tree(n)

    def gen(typingctx: Any, arr: Any, off: Any) -> Any:
        if not (isinstance(arr, types.Array) and isinstance(arr.dtype, types.Float)):
            return None

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            base, fty, size = _row_pointer(context, builder, sig.args[0], args[0], args[1])
            vty = ir.VectorType(fty, LANES)

            def at(k: int) -> Any:
                return builder.gep(base, [ir.Constant(_I64, k)])

            def emit(node: tuple[Any, ...]) -> Any:
                if node[0] == "pair":
                    return builder.fadd(emit(node[1]), emit(node[2]))
                _, o, m = node
                if m < LANES:
                    res = ir.Constant(fty, 0.0)
                    for k in range(o, o + m):
                        res = builder.fadd(res, builder.load(at(k), align=size))
                    return res
                full = m - m % LANES
                acc = None
                for k in range(o, o + full, LANES):
                    v = builder.load(builder.bitcast(at(k), vty.as_pointer()), align=size)
                    acc = v if acc is None else builder.fadd(acc, v)
                res = _hsum(builder, acc)
                for k in range(o + full, o + m):
                    res = builder.fadd(res, builder.load(at(k), align=size))
                return res

            return emit(tree)

        return arr.dtype(arr, types.intp), codegen

    gen.__name__ = f"pairwise_sum_{n}"
    return intrinsic(gen)


@lowered
def _leaf_vector_sum(typingctx: Any, arr: Any, off: Any, m: Any) -> Any:
    """The 8-accumulator part of a leaf of m (a multiple of 8, >= 8) elements, combined."""
    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        base, fty, size = _row_pointer(context, builder, sig.args[0], args[0], args[1])
        vty = ir.VectorType(fty, LANES)
        m_v = args[2]

        def vload(i: Any) -> Any:
            return builder.load(builder.bitcast(builder.gep(base, [i]), vty.as_pointer()),
                                align=size)

        first = vload(ir.Constant(m_v.type, 0))
        entry = builder.basic_block
        head = builder.append_basic_block("leaf.head")
        body = builder.append_basic_block("leaf.body")
        done = builder.append_basic_block("leaf.done")
        builder.branch(head)
        builder.position_at_end(head)
        i = builder.phi(m_v.type)
        acc = builder.phi(vty)
        i.add_incoming(ir.Constant(m_v.type, LANES), entry)
        acc.add_incoming(first, entry)
        builder.cbranch(builder.icmp_signed("<", i, m_v), body, done)
        builder.position_at_end(body)
        acc_next = builder.fadd(acc, vload(i))
        i.add_incoming(builder.add(i, ir.Constant(m_v.type, LANES)), body)
        acc.add_incoming(acc_next, body)
        builder.branch(head)
        builder.position_at_end(done)
        return _hsum(builder, acc)

    return arr.dtype(arr, types.intp, types.intp), codegen


@njit(error_model="numpy")
def _pairwise_rec(a: Any, off: int, n: int) -> Any:
    if n < 8:
        res = a.dtype.type(0)
        for k in range(off, off + n):
            res += a[k]
        return res
    if n <= 128:
        full = n - n % 8
        res = _leaf_vector_sum(a, off, full)
        for k in range(off + full, off + n):
            res += a[k]
        return res
    half = n // 2
    half -= half % 8
    return _pairwise_rec(a, off, half) + _pairwise_rec(a, off + half, n - half)


@functools.cache
def pairwise_sum(n: int) -> Callable[..., Any]:
    """`f(row, off)`: the sum of row[off:off+n] in NumPy's pairwise order (module docstring)."""
    if n <= UNROLL_MAX:
        return _unrolled_sum(n)
    count = n

    @njit(error_model="numpy", inline="always")
    def long_sum(a: Any, off: int) -> Any:
        return _pairwise_rec(a, off, count)

    return long_sum


@lowered
def row_max(typingctx: Any, arr: Any, off: Any, n: Any) -> Any:
    """max(row[off:off+n]) for n >= 1, NaN when any element is NaN."""
    if not (isinstance(arr, types.Array) and isinstance(arr.dtype, types.Float)):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        base, fty, size = _row_pointer(context, builder, sig.args[0], args[0], args[1])
        n_v = args[2]
        ity = n_v.type
        width = 4 * LANES
        vty = ir.VectorType(fty, LANES)

        def pick(v: Any, acc: Any) -> Any:   # v if v > acc or v is NaN, else acc
            take = builder.or_(builder.fcmp_ordered(">", v, acc), builder.fcmp_unordered("uno", v, v))
            return builder.select(take, v, acc)

        def load(i: Any, ty: Any) -> Any:
            ptr = builder.gep(base, [i])
            return builder.load(builder.bitcast(ptr, ty.as_pointer()) if ty is vty else ptr,
                                align=size)

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

    return arr.dtype(arr, types.intp, types.intp), codegen
