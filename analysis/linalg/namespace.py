"""An array-API namespace whose arrays are MLIR values: the op table's formulas, run, write linalg.

`LinalgNamespace` is to the linalg export what `jax.numpy` is to the JAX backend: every row's
formula (`OpInfo.formula`) is called with it, so the export computes the definition every backend
evaluates and keeps no list of ops. Its arrays (`Node`) are lazy where that is free:

- elementwise calls (`add`, `exp`, `where`, `astype`, the operators, ...) and `broadcast_to`,
  `arange`, scalars build an expression; `materialize` turns one expression into ONE
  `linalg.generic` (parallel iterators; inputs read through broadcasting indexing maps; the body
  is the expression's arith/math ops, element by element);
- a `reshape` that only adds or drops size-1 dims stays an expression too (the dropout hash's
  global index is then `linalg.index` arithmetic in the body);
- reductions (`sum`, `mean`, `max`, `min`), `matmul`, `permute_dims`, other reshapes, slicing,
  `concat`, `take`, `flip` and `cumulative_sum` materialize their operands and emit their
  structured op (a reduction `linalg.generic`, `linalg.matmul` or a batched-matmul generic,
  `linalg.transpose`, `tensor.collapse_shape` / `expand_shape`, `tensor.extract_slice`,
  `tensor.insert_slice`, a generic reading its operand with `tensor.extract`: take's table,
  flip's mirrored index, the scan's prefix summed in an `scf.for`).

Types follow NumPy (2.x, Python scalars weak) exactly: an expression's dtype is what the NumPy
function gives for zeros of its operands' dtypes, and operands are converted to the common type
before the scalar op, as NumPy does. bf16 is ml_dtypes' bfloat16 (`BF16`; NumPy has none): an
op on it runs in f32 and rounds once (`Body.round_bf16`), as the interpreter does. f64 tanh,
log2, sin and cos, which IREE's CPU runtime does not link, are computed from what it has
(`Body.f64_form`). Float constants are printed as hexadecimal bit patterns, so the output is
exact and deterministic. A formula that calls anything else raises `Unsupported`, naming it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DMap = tuple[int | None, ...]   # per dim of a node: the loop dim it runs along, None: broadcast


class Unsupported(Exception):
    """A formula used a function or a type this namespace has no linalg form for."""



def _bfloat16() -> np.dtype | None:
    """NumPy has no bfloat16: ml_dtypes' (kind "V"), which IREE's runtime reads and writes; None
    without it (a base install, no `iree` extra: bf16 is then refused as an element type)."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


BF16 = _bfloat16()
F32 = np.dtype(np.float32)
_MLIR_TYPES = {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32",
               np.dtype(np.float64): "f64", np.dtype(np.int32): "i32", np.dtype(np.int64): "i64",
               np.dtype(np.bool_): "i1",
               # the dropout hash's words: signless in MLIR, unsigned in the ops that read them
               np.dtype(np.uint32): "i32", np.dtype(np.uint64): "i64",
               **({BF16: "bf16"} if BF16 is not None else {})}


def mlir_type(dtype: np.dtype) -> str:
    """The MLIR element type of a NumPy dtype (signless integers)."""
    if dtype not in _MLIR_TYPES:
        raise Unsupported(f"element type {dtype}")
    return _MLIR_TYPES[dtype]


def kind_of(dtype: np.dtype) -> str:
    """NumPy's `dtype.kind`, but "f" for bf16 (ml_dtypes' bfloat16 says "V": a void record)."""
    return "f" if dtype == BF16 else dtype.kind


def tensor_type(shape: Sequence[int], dtype: np.dtype) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + mlir_type(dtype) + ">"


def scalar_literal(value: Any, dtype: np.dtype) -> str:
    """An exact MLIR literal: floats as their bit pattern, so no decimal rounding is involved."""
    v = np.asarray(value).astype(dtype)
    if kind_of(dtype) == "f":
        bits = v.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize])
        return f"0x{int(bits):0{dtype.itemsize * 2}X}"
    if kind_of(dtype) == "b":
        return "true" if bool(v) else "false"
    if kind_of(dtype) == "u":   # the same bits, written as the signless type's signed value
        return str(int(v.view(np.int32 if dtype.itemsize == 4 else np.int64)))
    return str(int(v))


def dense_literal(arr: np.ndarray) -> str:
    """`dense<...>` for a NumPy array: a splat, a hex blob (numbers) or nested lists (i1)."""
    flat = arr.reshape(-1)
    if flat.size > 0 and bool(np.all(flat == flat[0])) and not np.isnan(flat[0]):
        return f"dense<{scalar_literal(flat[0], arr.dtype)}>"
    if kind_of(arr.dtype) == "b":
        return f"dense<{_nested(arr)}>"
    little = arr.astype(arr.dtype.newbyteorder("<"))
    return f'dense<"0x{little.tobytes().hex().upper()}">'


def _nested(arr: np.ndarray) -> str:
    if arr.ndim == 0:
        return scalar_literal(arr, arr.dtype)
    return "[" + ", ".join(_nested(a) for a in arr) + "]"


def affine_map(rank: int, dmap: DMap) -> str:
    dims = ", ".join(f"d{i}" for i in range(rank))
    res = ", ".join("0" if d is None else f"d{d}" for d in dmap)
    return f"affine_map<({dims}) -> ({res})>"


@dataclass(eq=False)
class Node:
    """An array of the namespace: `kind` "tensor" (an SSA value named `value`), "const" (a
    scalar `value`), "index" (arange), "bcast" (args[0] broadcast to `shape`) or "fn" (the
    elementwise function `value` of `args`, converted to `common` first) or "view" (args[0]
    with size-1 dims added or removed: a reshape that moves no element)."""

    ns: LinalgNamespace
    kind: str
    shape: tuple[int, ...]
    dtype: np.dtype
    args: tuple[Node, ...] = ()
    value: Any = None
    common: np.dtype | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __add__(self, o: Any) -> Node: return self.ns.add(self, o)
    def __radd__(self, o: Any) -> Node: return self.ns.add(o, self)
    def __sub__(self, o: Any) -> Node: return self.ns.subtract(self, o)
    def __rsub__(self, o: Any) -> Node: return self.ns.subtract(o, self)
    def __mul__(self, o: Any) -> Node: return self.ns.multiply(self, o)
    def __rmul__(self, o: Any) -> Node: return self.ns.multiply(o, self)
    def __truediv__(self, o: Any) -> Node: return self.ns.divide(self, o)
    def __rtruediv__(self, o: Any) -> Node: return self.ns.divide(o, self)
    def __pow__(self, o: Any) -> Node: return self.ns.pow(self, o)
    def __neg__(self) -> Node: return self.ns.negative(self)
    def __abs__(self) -> Node: return self.ns.abs(self)
    def __invert__(self) -> Node: return self.ns.logical_not(self)
    def __lt__(self, o: Any) -> Node: return self.ns.less(self, o)
    def __le__(self, o: Any) -> Node: return self.ns.less_equal(self, o)
    def __gt__(self, o: Any) -> Node: return self.ns.greater(self, o)
    def __ge__(self, o: Any) -> Node: return self.ns.greater_equal(self, o)
    def __eq__(self, o: Any) -> Node: return self.ns.equal(self, o)  # type: ignore[override]
    def __ne__(self, o: Any) -> Node: return self.ns.not_equal(self, o)  # type: ignore[override]
    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise Unsupported("a branch on a value")

    def __getitem__(self, index: Any) -> Node:
        return self.ns.slice(self, index)


# array-API elementwise names -> their arith/math op by operand kind: (float, signed integer, i1,
# unsigned integer); the compares' predicates by kind
_FLOAT_CMP = {"equal": "oeq", "not_equal": "une", "less": "olt", "less_equal": "ole",
              "greater": "ogt", "greater_equal": "oge"}
_INT_CMP = {"equal": "eq", "not_equal": "ne", "less": "slt", "less_equal": "sle",
            "greater": "sgt", "greater_equal": "sge"}
_BOOL_CMP = {**_INT_CMP, "less": "ult", "less_equal": "ule", "greater": "ugt",
             "greater_equal": "uge"}
_CMP = {"f": _FLOAT_CMP, "i": _INT_CMP, "b": _BOOL_CMP, "u": _BOOL_CMP}
_BINARY: dict[str, tuple[str | None, ...]] = {
    "add": ("arith.addf", "arith.addi", "arith.ori", "arith.addi"),
    "subtract": ("arith.subf", "arith.subi", None, "arith.subi"),
    "multiply": ("arith.mulf", "arith.muli", "arith.andi", "arith.muli"),
    "divide": ("arith.divf", None, None, None), "pow": ("math.powf", None, None, None),
    "maximum": ("arith.maximumf", "arith.maxsi", "arith.ori", "arith.maxui"),
    "minimum": ("arith.minimumf", "arith.minsi", "arith.andi", "arith.minui"),
    "logical_and": (None, None, "arith.andi", None), "logical_or": (None, None, "arith.ori", None),
    "bitwise_and": (None, "arith.andi", "arith.andi", "arith.andi"),
    "bitwise_or": (None, "arith.ori", "arith.ori", "arith.ori"),
    "bitwise_xor": (None, "arith.xori", "arith.xori", "arith.xori"),
    "bitwise_right_shift": (None, "arith.shrsi", None, "arith.shrui"),
    "bitwise_left_shift": (None, "arith.shli", None, "arith.shli")}
_KINDS = "fibu"
_F64_LIBM_GAPS = ("tanh", "log2", "sin", "cos")   # see `Body.f64_form`
_UNARY_FLOAT = ("exp", "log", "tanh", "sin", "cos", "sqrt", "log2", "floor", "trunc")


def _f64(bits: int) -> float:
    return float(np.array(bits, np.uint64).view(np.float64))


# fdlibm's constants (e_rem_pio2.c, k_sin.c, k_cos.c), by bit pattern: pi/2 as pio2_1, pio2_2,
# pio2_2t, pio2_3, pio2_3t (pio2_1 + pio2_2 + pio2_3 in 33-bit parts, a round's tail the parts
# after it); the sin and cos minimax polynomials' coefficients S1..S6, C1..C6 on [-pi/4, pi/4]
_PIO2 = tuple(_f64(b) for b in (0x3FF921FB54400000, 0x3DD0B4611A600000, 0x3BA3198A2E037073,
                                0x3BA3198A2E000000, 0x397B839A252049C1))
_SIN_COS_MAX = 2.0 ** 30   # past it the reduction loses bits: NaN rather than a wrong value
_SIN = tuple(_f64(b) for b in (0xBFC5555555555549, 0x3F8111111110F8A6, 0xBF2A01A019C161D5,
                               0x3EC71DE357B1FE7D, 0xBE5AE5E68A2B9CEB, 0x3DE5D93A5ACFD57C))
_COS = tuple(_f64(b) for b in (0x3FA555555555554C, 0xBF56C16C16C15177, 0x3EFA01A019CB1590,
                               0xBE927E4F809C52AD, 0x3E21EE9EBDB4B1C4, 0xBDA8FAE9BE8838D4))


class Body:
    """The scalar region of one `linalg.generic` over a loop nest of `rank` dims."""

    def __init__(self, ns: LinalgNamespace, rank: int) -> None:
        self.ns, self.rank = ns, rank
        self.lines: list[str] = []
        self.inputs: list[tuple[str, str, DMap, np.dtype]] = []  # (ssa, tensor type, map, dtype)
        self._memo: dict[tuple[int, DMap], str] = {}

    def emit(self, rhs: str) -> str:
        name = self.ns.fresh()
        self.lines.append(f"  {name} = {rhs}")
        return name

    def value(self, node: Node, dmap: DMap) -> str:
        key = (id(node), dmap)
        if key not in self._memo:
            self._memo[key] = self._compute(node, dmap)
        return self._memo[key]

    def input(self, node: Node, dmap: DMap) -> str:
        for i, (ssa, _, m, _) in enumerate(self.inputs):
            if ssa == node.value and m == dmap:
                return f"%in{i}"
        self.inputs.append((node.value, tensor_type(node.shape, node.dtype), dmap, node.dtype))
        return f"%in{len(self.inputs) - 1}"

    def _compute(self, node: Node, dmap: DMap) -> str:
        if node.kind == "tensor":
            return self.input(node, dmap)
        if node.kind == "const":
            return self.emit(f"arith.constant {scalar_literal(node.value, node.dtype)} : "
                             f"{mlir_type(node.dtype)}")
        if node.kind == "index":
            if dmap[0] is None:
                return self.emit("arith.constant 0 : i64")
            i = self.emit(f"linalg.index {dmap[0]} : index")
            return self.emit(f"arith.index_cast {i} : index to i64")
        if node.kind == "view":
            return self.value(node.args[0], _unit_view(node.args[0].shape, node.shape, dmap))
        args = [self.value(a, _aligned(a.shape, node.shape, dmap)) for a in node.args]
        if node.kind == "bcast":
            return args[0]
        assert node.common is not None
        if node.value in ("where", "astype"):
            return self.scalar_op(node, args)
        args = [self.convert(v, a.dtype, node.common) for v, a in zip(args, node.args, strict=True)]
        if node.common == BF16:
            return self.bf16_op(node, args)
        return self.scalar_op(node, args)

    def bf16_op(self, node: Node, args: list[str]) -> str:
        """An op on bf16 (a compare, or a formula that computes in its storage type) as the
        interpreter runs it: in f32, a bf16 result rounded once to nearest even."""
        bf16 = node.common
        assert bf16 is not None
        wide = [self.convert(v, bf16, F32) for v in args]
        r = self.scalar_op(dataclasses.replace(node, common=F32), wide)
        return self.convert(r, F32, bf16) if node.dtype == bf16 else r

    def scalar_op(self, node: Node, args: list[str]) -> str:
        name, common = node.value, node.common
        assert common is not None
        t = mlir_type(common)
        if name == "astype":
            return self.convert(args[0], node.args[0].dtype, node.dtype)
        if name == "where":
            a = self.convert(args[1], node.args[1].dtype, node.dtype)
            b = self.convert(args[2], node.args[2].dtype, node.dtype)
            c = self.convert(args[0], node.args[0].dtype, np.dtype(np.bool_))
            return self.emit(f"arith.select {c}, {a}, {b} : {mlir_type(node.dtype)}")
        k = kind_of(common)
        if name in _FLOAT_CMP:
            op = "arith.cmpf" if k == "f" else "arith.cmpi"
            return self.emit(f"{op} {_CMP[k][name]}, {args[0]}, {args[1]} : {t}")
        if name in _BINARY:
            op = _BINARY[name][_KINDS.index(k)]
            if op is None:
                raise Unsupported(f"{name} on {common}")
            return self.emit(f"{op} {args[0]}, {args[1]} : {t}")
        return self.unary(name, common, args[0])

    def unary(self, name: str, dtype: np.dtype, x: str) -> str:
        t = mlir_type(dtype)
        if dtype == np.float64 and name in _F64_LIBM_GAPS:
            return self.f64_form(name, x)
        if kind_of(dtype) == "f":
            if name in _UNARY_FLOAT:
                return self.emit(f"math.{name} {x} : {t}")
            if name in ("negative", "abs"):
                return self.emit(f"{'arith.negf' if name == 'negative' else 'math.absf'} {x} : {t}")
            if name == "isfinite":
                a = self.emit(f"math.absf {x} : {t}")
                inf = self.emit(f"arith.constant {scalar_literal(math.inf, dtype)} : {t}")
                return self.emit(f"arith.cmpf olt, {a}, {inf} : {t}")
        if kind_of(dtype) == "i" and name in ("negative", "abs"):
            if name == "abs":
                return self.emit(f"math.absi {x} : {t}")
            zero = self.emit(f"arith.constant 0 : {t}")
            return self.emit(f"arith.subi {zero}, {x} : {t}")
        if kind_of(dtype) == "b" and name == "logical_not":
            one = self.emit("arith.constant true")
            return self.emit(f"arith.xori {x}, {one} : i1")
        raise Unsupported(f"{name} on {dtype}")

    def f64_form(self, name: str, x: str) -> str:
        """f64 tanh and log2 from expm1 and log, which IREE's CPU runtime has (it links no f64
        `tanh`, `log2`, `sin`, `cos`): tanh(x) = sign(x) t / (t + 2), t = expm1(2|x|), 1 past
        |x| = 20 (where tanh rounds to 1); log2(x) = log(x) / ln 2 (within 2 ulp: the
        normalizations' guard floors it to pick a power-of-two scale, any near one will do);
        sin and cos from arithmetic alone (`f64_sin_cos`)."""
        def c(v: float) -> str:
            return self.emit(f"arith.constant {scalar_literal(v, np.dtype(np.float64))} : f64")

        if name == "log2":
            lg = self.emit(f"math.log {x} : f64")
            return self.emit(f"arith.mulf {lg}, {c(1.0 / math.log(2.0))} : f64")
        if name in ("sin", "cos"):
            return self.f64_sin_cos(name, x)
        a = self.emit(f"math.absf {x} : f64")
        t = self.emit(f"math.expm1 {self.emit(f'arith.addf {a}, {a} : f64')} : f64")
        r = self.emit(f"arith.divf {t}, {self.emit(f'arith.addf {t}, {c(2.0)} : f64')} : f64")
        big = self.emit(f"arith.cmpf ogt, {a}, {c(20.0)} : f64")
        r = self.emit(f"arith.select {big}, {c(1.0)}, {r} : f64")
        return self.emit(f"math.copysign {r}, {x} : f64")

    def f64_sin_cos(self, name: str, x: str) -> str:
        """f64 sin or cos as fdlibm computes them: x = k pi/2 + (y0 + y1), k = floor(x 2/pi +
        1/2), Cody-Waite with pi/2 in three 33-bit parts (each k * part exact for |k| < 2^20)
        and their tails (`_rem_pio2`); then FreeBSD's __kernel_sin / __kernel_cos on (y0, y1)
        and the quadrant k mod 4 picks which, and its sign.

        Measured against NumPy (IREE llvm-cpu, 4 x 2^20 random x per range, a quarter of those
        for |x| < 1e5 the doubles next to k pi/2, where the reduction cancels most): at most 1
        ulp from NumPy's for |x| < 1e7, 2 ulp (cos) up to 2^30 (past 2^20 k * part is rounded, but
        each round's `w` carries that error on). Past 2^30 the error grows with |x| (off by
        1e-7 at 1e15, outside [-1, 1] past 1e16), so the answer there is NaN, not a wrong
        number; inf and NaN give NaN. IREE's CPU flushes
        subnormals, so sin(x) of a subnormal x is 0 (NumPy: x)."""
        def c(v: float) -> str:
            return self.emit(f"arith.constant {scalar_literal(v, np.dtype(np.float64))} : f64")

        def op(o: str, *xs: str) -> str:
            return self.emit(f"arith.{o} {', '.join(xs)} : f64")

        kx = op("addf", op("mulf", x, c(2.0 / math.pi)), c(0.5))
        k = self.emit(f"math.floor {kx} : f64")
        y0, y1 = self._rem_pio2(x, k, op, c)
        z = op("mulf", y0, y0)
        sin, cos = self._kernel_sin(y0, y1, z, op, c), self._kernel_cos(y0, y1, z, op, c)
        q = op("subf", k, op("mulf", c(4.0), self.emit(f"math.floor {op('mulf', k, c(0.25))} : f64")))
        odd = self.emit(f"arith.ori {self._is(q, 1.0, c)}, {self._is(q, 3.0, c)} : i1")
        if name == "sin":
            base = self.emit(f"arith.select {odd}, {cos}, {sin} : f64")
            neg = self.emit(f"arith.cmpf oge, {q}, {c(2.0)} : f64")
        else:
            base = self.emit(f"arith.select {odd}, {sin}, {cos} : f64")
            neg = self.emit(f"arith.ori {self._is(q, 1.0, c)}, {self._is(q, 2.0, c)} : i1")
        out = self.emit(f"arith.select {neg}, {op('negf', base)}, {base} : f64")
        far = self.emit(f"arith.cmpf ogt, {self.emit(f'math.absf {x} : f64')}, {c(_SIN_COS_MAX)} : f64")
        return self.emit(f"arith.select {far}, {c(math.nan)}, {out} : f64")

    def _is(self, q: str, v: float, c: Callable[[float], str]) -> str:
        return self.emit(f"arith.cmpf oeq, {q}, {c(v)} : f64")

    def _rem_pio2(self, x: str, k: str, op: Callable[..., str], c: Callable[[float], str]
                  ) -> tuple[str, str]:
        """x - k pi/2 as y0 + y1, fdlibm's __ieee754_rem_pio2 medium case with all three rounds
        (each round's error carried into the next `w`)."""
        r, w = op("subf", x, op("mulf", k, c(_PIO2[0]))), ""
        for part, tail in (_PIO2[1:3], _PIO2[3:5]):
            t = r
            w = op("mulf", k, c(part))
            r = op("subf", t, w)
            w = op("subf", op("mulf", k, c(tail)), op("subf", op("subf", t, r), w))
        y0 = op("subf", r, w)
        return y0, op("subf", op("subf", r, y0), w)

    def _kernel_sin(self, y0: str, y1: str, z: str, op: Callable[..., str],
                    c: Callable[[float], str]) -> str:
        """FreeBSD k_sin.c: y0 - ((z (y1/2 - v r) - y1) - v S1), v = z y0, on |y0| <= pi/4."""
        s1, s2, s3, s4, s5, s6 = (c(v) for v in _SIN)
        w = op("mulf", z, z)
        r = op("addf", op("addf", s2, op("mulf", z, op("addf", s3, op("mulf", z, s4)))),
               op("mulf", op("mulf", z, w), op("addf", s5, op("mulf", z, s6))))
        v = op("mulf", z, y0)
        inner = op("subf", op("mulf", c(0.5), y1), op("mulf", v, r))
        return op("subf", y0, op("subf", op("subf", op("mulf", z, inner), y1), op("mulf", v, s1)))

    def _kernel_cos(self, y0: str, y1: str, z: str, op: Callable[..., str],
                    c: Callable[[float], str]) -> str:
        """FreeBSD k_cos.c: w + (((1 - w) - z/2) + (z r - y0 y1)), w = 1 - z/2, on |y0| <= pi/4."""
        c1, c2, c3, c4, c5, c6 = (c(v) for v in _COS)
        w = op("mulf", z, z)
        r = op("addf", op("mulf", z, op("addf", c1, op("mulf", z, op("addf", c2, op("mulf", z, c3))))),
               op("mulf", op("mulf", w, w), op("addf", c4, op("mulf", z, op("addf", c5, op("mulf", z, c6))))))
        hz = op("mulf", c(0.5), z)
        one = c(1.0)
        w = op("subf", one, hz)
        rest = op("addf", op("subf", op("subf", one, w), hz),
                  op("subf", op("mulf", z, r), op("mulf", y0, y1)))
        return op("addf", w, rest)

    def round_bf16(self, x: str) -> str:
        """f32 `x` rounded to bf16's precision to nearest even, still an f32: the interpreter's
        `round_bf16` in integer ops (NaN kept). Not a bare `arith.truncf`: IREE's
        iree-convert-bf16-arith-to-f32 rewrites bf16 arithmetic to f32 and drops an extf of a
        truncf in between, so a fused chain would skip the rounding of each op; this way the
        truncf that follows is exact, kept or dropped."""
        def i(v: int) -> str:
            return self.emit(f"arith.constant {v} : i32")

        b = self.emit(f"arith.bitcast {x} : f32 to i32")
        lsb = self.emit(f"arith.andi {self.emit(f'arith.shrui {b}, {i(16)} : i32')}, {i(1)} : i32")
        up = self.emit(f"arith.addi {self.emit(f'arith.addi {b}, {i(0x7FFF)} : i32')}, {lsb} : i32")
        r = self.emit(f"arith.bitcast {self.emit(f'arith.andi {up}, {i(-0x10000)} : i32')} : i32 to f32")
        nan = self.emit(f"arith.cmpf uno, {x}, {x} : f32")
        return self.emit(f"arith.select {nan}, {x}, {r} : f32")

    def convert(self, x: str, src: np.dtype, dst: np.dtype) -> str:
        """NumPy's astype on one element (float -> int truncates, number -> bool is != 0)."""
        s, d = mlir_type(src), mlir_type(dst)
        if src == dst or (s == d and kind_of(src) in "iu" and kind_of(dst) in "iu"):
            return x   # signless: int64 <-> uint64 keeps the bits
        if kind_of(dst) == "b":
            zero = self.emit(f"arith.constant {scalar_literal(0, src)} : {s}")
            cmp = "arith.cmpf une" if kind_of(src) == "f" else "arith.cmpi ne"
            return self.emit(f"{cmp}, {x}, {zero} : {s}")
        if kind_of(src) == "f" and kind_of(dst) == "f":
            if src.itemsize == dst.itemsize:   # f16 <-> bf16: exactly to f32, rounded once from it
                return self.convert(self.convert(x, src, F32), F32, dst)
            if src == F32 and dst == BF16:
                return self.emit(f"arith.truncf {self.round_bf16(x)} : f32 to bf16")
            op = "arith.extf" if dst.itemsize > src.itemsize else "arith.truncf"
        elif kind_of(dst) == "f":
            op = "arith.uitofp" if kind_of(src) in "bu" else "arith.sitofp"
        elif kind_of(src) == "f":
            op = "arith.fptoui" if kind_of(dst) == "u" else "arith.fptosi"
        elif kind_of(src) in "bu" and dst.itemsize > src.itemsize:
            op = "arith.extui"
        else:
            op = "arith.extsi" if dst.itemsize > src.itemsize else "arith.trunci"
        return self.emit(f"{op} {x} : {s} to {d}")


def _non_unit(shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(n for n in shape if n != 1)


def _unit_view(shape: tuple[int, ...], out: tuple[int, ...], dmap: DMap) -> DMap:
    """The loop dims of `shape` seen as `out`, the same dims but for size-1 ones."""
    loops = iter(d for n, d in zip(out, dmap, strict=True) if n != 1)
    return tuple(None if n == 1 else next(loops) for n in shape)


def _aligned(shape: tuple[int, ...], out: tuple[int, ...], dmap: DMap) -> DMap:
    """The loop dims of an operand of `shape` broadcast (NumPy, right-aligned) to `out`."""
    off = len(out) - len(shape)
    return tuple(None if n == 1 and out[j + off] != 1 else dmap[j + off]
                 for j, n in enumerate(shape))


@dataclass
class LinalgNamespace:
    """The namespace (see the module docstring); `lines` is the function body written so far."""

    lines: list[str] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _done: dict[int, tuple[Node, Node]] = field(default_factory=dict)  # id -> (node, tensor)

    float16, float32, float64 = np.float16, np.float32, np.float64
    int32, int64, uint32, uint64 = np.int32, np.int64, np.uint32, np.uint64
    bool = np.bool_

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise Unsupported(f"xp.{name}")

    def fresh(self) -> str:
        return f"%v{next(self._ids)}"

    def emit(self, rhs: str) -> str:
        name = self.fresh()
        self.lines.append(f"    {name} = {rhs}")
        return name

    def tensor(self, name: str, shape: Sequence[int], dtype: Any) -> Node:
        return Node(self, "tensor", tuple(shape), np.dtype(dtype), value=name)

    # -- scalars and elementwise expressions --
    def wrap(self, x: Any) -> Node | Any:
        """A Node, or a Python scalar kept weak until it meets an array (NEP 50)."""
        if isinstance(x, Node) or isinstance(x, bool | int | float):
            return x
        if isinstance(x, np.generic):
            return Node(self, "const", (), x.dtype, value=x)
        if isinstance(x, np.ndarray):
            return self.asarray(x)
        raise Unsupported(f"an operand of type {type(x).__name__}")

    def fn(self, name: str, *xs: Any) -> Node:
        ws = [self.wrap(x) for x in xs]
        probes = [np.zeros((), w.dtype) if isinstance(w, Node) else w for w in ws]
        nodes = [w for w in ws if isinstance(w, Node)]
        if not nodes:
            raise Unsupported(f"{name} on Python scalars only")
        with np.errstate(all="ignore"):   # the probes are zeros: only their dtypes matter
            out = getattr(np, name)(*probes)
        common = np.result_type(*probes[1:]) if name == "where" else np.result_type(*probes)
        if kind_of(out.dtype) == "f" and kind_of(common) != "f":
            common = out.dtype
        if name == "where":
            common = out.dtype
        args = tuple(w if isinstance(w, Node) else
                     Node(self, "const", (), common if name != "where" or i else np.dtype(np.bool_),
                          value=w) for i, w in enumerate(ws))
        shape = np.broadcast_shapes(*(a.shape for a in args))
        return Node(self, "fn", tuple(shape), out.dtype, args, name, common)

    def astype(self, x: Any, dtype: Any, copy: bool = True) -> Node:
        node = self.wrap(x)
        dt = np.dtype(dtype)
        if not isinstance(node, Node):
            return Node(self, "const", (), dt, value=node)
        if node.dtype == dt:
            return node
        return Node(self, "fn", node.shape, dt, (node,), "astype", node.dtype)

    def where(self, c: Any, a: Any, b: Any) -> Node:
        return self.fn("where", c, a, b)

    def asarray(self, x: Any, dtype: Any = None) -> Node:
        if isinstance(x, Node):
            return x if dtype is None else self.astype(x, dtype)
        arr = np.asarray(x, dtype=dtype)
        if arr.ndim == 0:
            return Node(self, "const", (), arr.dtype, value=arr[()])
        name = self.emit(f"arith.constant {dense_literal(arr)} : {tensor_type(arr.shape, arr.dtype)}")
        return self.tensor(name, arr.shape, arr.dtype)

    def full(self, shape: Sequence[int], value: Any, dtype: Any = None) -> Node:
        return self.broadcast_to(self.asarray(value, dtype), tuple(shape))

    def zeros(self, shape: Sequence[int], dtype: Any = None) -> Node:
        return self.full(shape, 0, dtype if dtype is not None else np.float64)

    def arange(self, n: int) -> Node:
        return Node(self, "index", (int(n),), np.dtype(np.int64))

    def broadcast_to(self, x: Any, shape: Sequence[int]) -> Node:
        node = self.asarray(x)
        if node.shape == tuple(shape):
            return node
        return Node(self, "bcast", tuple(shape), node.dtype, (node,))

    # -- materializing --
    def materialize(self, x: Any) -> Node:
        """The array as a tensor value: one `linalg.generic` for an expression."""
        node = self.asarray(x)
        if node.kind == "tensor":
            return node
        if id(node) not in self._done:   # the node is kept alive with it: its id stays unique
            self._done[id(node)] = (node, self._generic(node))
        return self._done[id(node)][1]

    def empty(self, shape: Sequence[int], dtype: np.dtype) -> str:
        return self.emit(f"tensor.empty() : {tensor_type(shape, dtype)}")

    def _generic(self, node: Node) -> Node:
        body = Body(self, len(node.shape))
        result = body.value(node, tuple(range(len(node.shape))))
        return self._emit_generic(body, result, node.shape, node.dtype)

    def _emit_generic(self, body: Body, result: str, shape: tuple[int, ...], dtype: np.dtype
                      ) -> Node:
        """A parallel `linalg.generic` of `body` (its inputs, its lines) yielding `result`."""
        rank = len(shape)
        out_t = tensor_type(shape, dtype)
        init = self.empty(shape, dtype)
        maps = [affine_map(rank, m) for _, _, m, _ in body.inputs]
        maps.append(affine_map(rank, tuple(range(rank))))
        ins = ""
        if body.inputs:
            ins = (" ins(" + ", ".join(s for s, _, _, _ in body.inputs) + " : "
                   + ", ".join(t for _, t, _, _ in body.inputs) + ")")
        block = [f"%in{i}: {mlir_type(d)}" for i, (_, _, _, d) in enumerate(body.inputs)]
        block.append(f"%out: {mlir_type(dtype)}")
        name = self.fresh()
        self.lines += [
            f"    {name} = linalg.generic {{indexing_maps = [{', '.join(maps)}], "
            f"iterator_types = {_iterators(['parallel'] * rank)}}}{ins} "
            f"outs({init} : {out_t}) {{",
            f"    ^bb0({', '.join(block)}):",
            *("    " + line for line in body.lines),
            f"      linalg.yield {result} : {mlir_type(dtype)}",
            f"    }} -> {out_t}"]
        return self.tensor(name, shape, dtype)

    # -- reductions --
    def sum(self, x: Any, axis: Any = None, keepdims: bool = False, dtype: Any = None) -> Node:
        return self._reduce("add", x, axis, keepdims)

    def max(self, x: Any, axis: Any = None, keepdims: bool = False) -> Node:
        return self._reduce("maximum", x, axis, keepdims)

    def min(self, x: Any, axis: Any = None, keepdims: bool = False) -> Node:
        return self._reduce("minimum", x, axis, keepdims)

    def mean(self, x: Any, axis: Any = None, keepdims: bool = False) -> Node:
        """NumPy's mean: the sum in the operand's type, divided by the count (a weak int)."""
        node = self.asarray(x)
        axes = _axes(axis, node.ndim)
        total = self.sum(node, axes, keepdims)
        return self.divide(total, math.prod(node.shape[a] for a in axes))

    def _reduce(self, combine: str, x: Any, axis: Any, keepdims: bool) -> Node:
        """One reduction `linalg.generic` into an init filled with `combine`'s identity."""
        node = self.asarray(x)
        if kind_of(node.dtype) == "b":
            node = self.astype(node, np.int64)
        axes = _axes(axis, node.ndim)
        if not axes:
            return node
        src = self.materialize(node)
        kept = tuple(d for d in range(node.ndim) if d not in axes)
        shape = tuple(node.shape[d] for d in kept)
        dt, t = node.dtype, mlir_type(node.dtype)
        ident = {"add": 0, "maximum": -math.inf if kind_of(dt) == "f" else np.iinfo(dt).min,
                 "minimum": math.inf if kind_of(dt) == "f" else np.iinfo(dt).max}[combine]
        init = self._filled(shape, dt, ident)
        body = Body(self, node.ndim)
        op = _BINARY[combine][0 if kind_of(dt) == "f" else 1]
        acc = body.emit(f"{op} %in0, %out : {t}")
        out_t = tensor_type(shape, dt)
        name = self.fresh()
        iters = ["reduction" if d in axes else "parallel" for d in range(node.ndim)]
        self.lines += [
            f"    {name} = linalg.generic {{indexing_maps = ["
            f"{affine_map(node.ndim, tuple(range(node.ndim)))}, {affine_map(node.ndim, kept)}], "
            f"iterator_types = {_iterators(iters)}}} ins({src.value} : "
            f"{tensor_type(src.shape, dt)}) outs({init} : {out_t}) {{",
            f"    ^bb0(%in0: {t}, %out: {t}):",
            *("    " + line for line in body.lines),
            f"      linalg.yield {acc} : {t}",
            f"    }} -> {out_t}"]
        out = self.tensor(name, shape, dt)
        if keepdims:
            return self.reshape(out, tuple(1 if d in axes else n for d, n in enumerate(node.shape)))
        return out

    def _filled(self, shape: Sequence[int], dtype: np.dtype, value: Any) -> str:
        init = self.empty(shape, dtype)
        c = self.emit(f"arith.constant {scalar_literal(value, dtype)} : {mlir_type(dtype)}")
        return self.emit(f"linalg.fill ins({c} : {mlir_type(dtype)}) outs({init} : "
                         f"{tensor_type(shape, dtype)}) -> {tensor_type(shape, dtype)}")

    # -- contraction --
    def matmul(self, a: Any, b: Any) -> Node:
        """`linalg.matmul` for two matrices; with batch dims a generic with matmul's maps
        (batch dims broadcast as NumPy's, a size-1 batch dim read at 0)."""
        x, y = self.materialize(a), self.materialize(b)
        if x.dtype != y.dtype or x.ndim < 2 or y.ndim < 2:
            raise Unsupported(f"matmul of {x.dtype}{list(x.shape)} and {y.dtype}{list(y.shape)}")
        dt, t = x.dtype, mlir_type(x.dtype)
        batch = tuple(np.broadcast_shapes(x.shape[:-2], y.shape[:-2]))
        shape = (*batch, x.shape[-2], y.shape[-1])
        init = self._filled(shape, dt, 0)
        out_t = tensor_type(shape, dt)
        ins = f"ins({x.value}, {y.value} : {tensor_type(x.shape, dt)}, {tensor_type(y.shape, dt)})"
        name = self.fresh()
        if not batch:
            self.lines.append(f"    {name} = linalg.matmul {ins} outs({init} : {out_t}) -> {out_t}")
            return self.tensor(name, shape, dt)
        nb, rank = len(batch), len(batch) + 3
        bdims = tuple(range(nb))
        amap = (*_aligned(x.shape[:-2], batch, bdims), nb, nb + 2)
        bmap = (*_aligned(y.shape[:-2], batch, bdims), nb + 2, nb + 1)
        maps = [affine_map(rank, m) for m in (amap, bmap, (*bdims, nb, nb + 1))]
        mul, add = ("arith.mulf", "arith.addf") if kind_of(dt) == "f" else ("arith.muli", "arith.addi")
        self.lines += [
            f"    {name} = linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = "
            f"{_iterators(['parallel'] * (nb + 2) + ['reduction'])}}} {ins} outs({init} : {out_t}) {{",
            f"    ^bb0(%a: {t}, %b: {t}, %acc: {t}):",
            f"      %p = {mul} %a, %b : {t}",
            f"      %s = {add} %acc, %p : {t}",
            f"      linalg.yield %s : {t}",
            f"    }} -> {out_t}"]
        return self.tensor(name, shape, dt)

    # -- layout --
    def permute_dims(self, x: Any, axes: Sequence[int]) -> Node:
        src = self.materialize(x)
        perm = [int(a) for a in axes]
        if perm == list(range(src.ndim)):
            return src
        shape = tuple(src.shape[p] for p in perm)
        init = self.empty(shape, src.dtype)
        name = self.emit(f"linalg.transpose ins({src.value} : {tensor_type(src.shape, src.dtype)}) "
                         f"outs({init} : {tensor_type(shape, src.dtype)}) permutation = {perm}")
        return self.tensor(name, shape, src.dtype)

    def reshape(self, x: Any, shape: Sequence[int]) -> Node:
        """Through the flat vector: `tensor.collapse_shape` to rank 1, `expand_shape` to `shape`."""
        node = self.asarray(x)
        target = tuple(int(d) for d in np.empty(node.shape, np.bool_).reshape(tuple(shape)).shape)
        if target == node.shape:
            return node
        if node.kind != "tensor" and _non_unit(target) == _non_unit(node.shape):
            return Node(self, "view", target, node.dtype, (node,))   # stays an expression
        src = self.materialize(node)
        flat = self._flat(src)
        if len(target) == 1:
            return flat
        if not target:
            name = self.emit(f"tensor.collapse_shape {flat.value} [] : "
                             f"{tensor_type(flat.shape, flat.dtype)} into {tensor_type((), flat.dtype)}")
            return self.tensor(name, (), flat.dtype)
        name = self.emit(f"tensor.expand_shape {flat.value} [{list(range(len(target)))}] "
                         f"output_shape {list(target)} : {tensor_type(flat.shape, flat.dtype)} "
                         f"into {tensor_type(target, flat.dtype)}")
        return self.tensor(name, target, flat.dtype)

    def _flat(self, src: Node) -> Node:
        n = math.prod(src.shape)
        if src.ndim == 1:
            return src
        t, f = tensor_type(src.shape, src.dtype), tensor_type((n,), src.dtype)
        if src.ndim == 0:
            name = self.emit(f"tensor.expand_shape {src.value} [] output_shape [1] : {t} into {f}")
        else:
            name = self.emit(f"tensor.collapse_shape {src.value} [{list(range(src.ndim))}] : "
                             f"{t} into {f}")
        return self.tensor(name, (n,), src.dtype)

    def slice(self, x: Any, index: Any) -> Node:
        """`x[index]` for a tuple of slices: one `tensor.extract_slice`."""
        src = self.materialize(x)
        index = index if isinstance(index, tuple) else (index,)
        if len(index) > src.ndim or not all(isinstance(s, slice) for s in index):
            raise Unsupported("indexing other than by slices")
        full = list(index) + [slice(None)] * (src.ndim - len(index))
        ranges = [s.indices(n) for s, n in zip(full, src.shape, strict=True)]
        if any(st <= 0 for _, _, st in ranges):
            raise Unsupported("a slice with a negative step")
        sizes = [len(range(a, b, st)) for a, b, st in ranges]
        name = self.emit(
            f"tensor.extract_slice {src.value}[{', '.join(str(a) for a, _, _ in ranges)}] "
            f"[{', '.join(map(str, sizes))}] [{', '.join(str(st) for _, _, st in ranges)}] : "
            f"{tensor_type(src.shape, src.dtype)} to {tensor_type(sizes, src.dtype)}")
        return self.tensor(name, tuple(sizes), src.dtype)

    def take(self, x: Any, indices: Any, axis: int = 0) -> Node:
        """`x` along `axis` at a vector of in-range indices: a generic whose body reads `x` with
        `tensor.extract` (the loop index elsewhere, the loaded index on `axis`)."""
        src, idx = self.materialize(x), self.materialize(indices)
        if idx.ndim != 1 or kind_of(idx.dtype) not in "iu":
            raise Unsupported("take with indices other than a vector of integers")
        axis %= src.ndim
        shape = (*src.shape[:axis], idx.shape[0], *src.shape[axis + 1:])
        body = Body(self, len(shape))
        i = body.input(idx, (axis,))
        at = body.emit(f"arith.index_cast {i} : {mlir_type(idx.dtype)} to index")
        subs = [at if d == axis else body.emit(f"linalg.index {d} : index") for d in range(len(shape))]
        v = body.emit(f"tensor.extract {src.value}[{', '.join(subs)}] : "
                      f"{tensor_type(src.shape, src.dtype)}")
        return self._emit_generic(body, v, shape, src.dtype)

    def flip(self, x: Any, axis: int) -> Node:
        """`x` reversed along `axis`: a generic reading it with `tensor.extract` at n - 1 - i."""
        src = self.materialize(x)
        axis %= src.ndim
        body = Body(self, src.ndim)
        last = body.emit(f"arith.constant {src.shape[axis] - 1} : index")
        subs = [body.emit(f"linalg.index {d} : index") for d in range(src.ndim)]
        subs[axis] = body.emit(f"arith.subi {last}, {subs[axis]} : index")
        v = body.emit(f"tensor.extract {src.value}[{', '.join(subs)}] : "
                      f"{tensor_type(src.shape, src.dtype)}")
        return self._emit_generic(body, v, src.shape, src.dtype)

    def cumulative_sum(self, x: Any, axis: int, dtype: Any = None,
                       include_initial: bool = False) -> Node:
        """The running sum along `axis` (`include_initial`: a leading 0, one element more): a
        parallel generic whose body sums its element's prefix in an `scf.for`, left to right
        from 0, the interpreter's order (`np.cumulative_sum`'s running sum rounds as this does),
        so the bits are its bits. Each element sums its prefix anew: n(n+1)/2 adds per line of
        n, one dispatch (a loop carrying the running sum across slices would be n dispatches)."""
        src = self.materialize(self.astype(x, dtype) if dtype is not None else x)
        axis %= src.ndim
        dt, t = src.dtype, mlir_type(src.dtype)
        shape = tuple(n + int(include_initial) if d == axis else n for d, n in enumerate(src.shape))
        body = Body(self, src.ndim)
        subs = [body.emit(f"linalg.index {d} : index") for d in range(src.ndim)]
        zero, one = body.emit("arith.constant 0 : index"), body.emit("arith.constant 1 : index")
        end = subs[axis] if include_initial else body.emit(f"arith.addi {subs[axis]}, {one} : index")
        init = body.emit(f"arith.constant {scalar_literal(0, dt)} : {t}")
        k, acc, v, s, total = (self.fresh() for _ in range(5))
        subs[axis] = k
        body.lines += [
            f"  {total} = scf.for {k} = {zero} to {end} step {one} iter_args({acc} = {init}) "
            f"-> ({t}) {{",
            f"    {v} = tensor.extract {src.value}[{', '.join(subs)}] : {tensor_type(src.shape, dt)}",
            f"    {s} = {'arith.addf' if kind_of(dt) == 'f' else 'arith.addi'} {acc}, {v} : {t}",
            f"    scf.yield {s} : {t}",
            "  }"]
        return self._emit_generic(body, total, shape, dt)

    def concat(self, xs: Sequence[Any], axis: int = 0) -> Node:
        """Each part `tensor.insert_slice`d into an empty result at its offset."""
        parts = [self.materialize(x) for x in xs]
        dt = np.result_type(*(p.dtype for p in parts))
        parts = [self.materialize(self.astype(p, dt)) for p in parts]
        axis %= parts[0].ndim
        shape = list(parts[0].shape)
        shape[axis] = sum(p.shape[axis] for p in parts)
        acc, offset = self.empty(shape, dt), 0
        for p in parts:
            offs = [offset if d == axis else 0 for d in range(len(shape))]
            acc = self.emit(f"tensor.insert_slice {p.value} into {acc}{offs} {list(p.shape)} "
                            f"{[1] * len(shape)} : {tensor_type(p.shape, dt)} into "
                            f"{tensor_type(shape, dt)}")
            offset += p.shape[axis]
        return self.tensor(acc, tuple(shape), dt)


def _iterators(kinds: Sequence[str]) -> str:
    return "[" + ", ".join(f'"{k}"' for k in kinds) + "]"


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        return (axis % ndim,)
    return tuple(sorted(int(a) % ndim for a in axis))


def _elementwise(name: str) -> Callable[..., Node]:
    def f(self: LinalgNamespace, *xs: Any) -> Node:
        return self.fn(name, *xs)

    f.__name__ = name
    return f


# the elementwise functions of the array API the formulas call, each `fn` of its own name
for _name in (*_BINARY, *_FLOAT_CMP, *_UNARY_FLOAT, "negative", "abs", "isfinite", "logical_not"):
    setattr(LinalgNamespace, _name, _elementwise(_name))
