"""Every op of the op table against a NumPy/Python reference written here, independently of
`lamina.ir.ops.formulas`.

Each test builds a one-op program as text, parses and verifies it, runs it with the NumPy
interpreter and compares with a reference computed in float64 (pure-Python `math` per element for
the elementwise ops, explicit index loops for layout ops, explicit mean/variance formulas for the
normalizations) and then rounded to the result's element type (bf16 by our own round-to-nearest-
even on the bit pattern). Shapes, values, broadcasting (rank-0, size-1 dims, lower rank), element
types and attributes are drawn by Hypothesis. `test_every_op_is_covered` fails when the table gains
an op that no test here exercises.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import run_function
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.ops.optable import OPS
from lamina.ir.text.source import parse_text, verify
from strategies import examples
from test_dropout import keep_ref

FLOATS = ("f16", "bf16", "f32", "f64")
INTS = ("i1", "i32", "i64")
ALL = FLOATS + INTS
NP_STORAGE = {"f16": np.float16, "bf16": np.float32, "f32": np.float32, "f64": np.float64,
              "i1": np.bool_, "i32": np.int32, "i64": np.int64}
# (rtol, atol) between the op's result and the float64 reference rounded to the result type
TOL = {"f64": (1e-10, 1e-12), "f32": (2e-5, 2e-5), "f16": (2e-3, 2e-3), "bf16": (1.6e-2, 1.6e-2)}

COVERED: set[str] = set()
EXAMPLES = examples(20)


def covers(*names: str) -> None:
    COVERED.update(names)


# ---- helpers -------------------------------------------------------------------------------------

def bf16_round(x: np.ndarray) -> np.ndarray:
    """Nearest bfloat16 (ties to even) of float32 values, by looking at the two neighbours."""
    x32 = np.asarray(x, dtype=np.float32)
    out = np.empty(x32.shape, dtype=np.float32)
    for idx in np.ndindex(x32.shape):
        v = float(x32[idx])
        if not math.isfinite(v):
            out[idx] = v
            continue
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        low = bits & 0xFFFF0000
        rest = bits & 0xFFFF
        if rest > 0x8000 or (rest == 0x8000 and (low >> 16) & 1):
            low += 0x10000
        out[idx] = struct.unpack("<f", struct.pack("<I", low & 0xFFFFFFFF))[0]
    return out


def store(x: np.ndarray | float, dtype: str) -> np.ndarray:
    """Values in the storage form of `dtype` (what inputs and results look like)."""
    x = np.asarray(x)
    if dtype == "bf16":
        return bf16_round(x.astype(np.float32))
    return x.astype(NP_STORAGE[dtype])


def ty(shape: Sequence[int], dtype: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + dtype + ">"


def ints(vals: Sequence[int]) -> str:
    return "array<i64" + (": " + ", ".join(str(v) for v in vals) if len(vals) else "") + ">"


def run_op(op: str, args: Sequence[tuple[Sequence[int], str]], result: tuple[Sequence[int], str],
           inputs: Sequence[np.ndarray], attrs: str = "", keywords: Sequence[str] = (),
           n_positional: int | None = None) -> np.ndarray:
    """Run `%r = lamina.<op>` on function arguments (the first n_positional positional, the rest
    given by `keywords`) and return its result."""
    n_pos = len(args) - len(keywords) if n_positional is None else n_positional
    names = [f"%a{i}" for i in range(len(args))]
    arg_decl = ", ".join(f"{n}: {ty(s, d)}" for n, (s, d) in zip(names, args, strict=True))
    operand_text = ", ".join(names[:n_pos])
    operand_text += "".join(f" {kw} {n}" for kw, n in zip(keywords, names[n_pos:], strict=True))
    rt = ty(*result)
    types = "(" + ", ".join(ty(s, d) for s, d in args) + ") -> " + rt
    attr_text = f" {{{attrs}}}" if attrs else ""
    text = (f"func.func @main({arg_decl}) -> {rt} {{\n"
            f"  %r = lamina.{op} {operand_text}{attr_text} : {types}\n"
            f"  func.return %r : {rt}\n}}\n")
    module = parse_text(text)
    verify(module)
    out = run_function(find_entry(module, None), list(inputs)).outputs[0]
    assert out.shape == tuple(result[0]), (out.shape, result)
    assert out.dtype == np.dtype(NP_STORAGE[result[1]]), (out.dtype, result[1])
    return out


def check(got: np.ndarray, ref64: np.ndarray, dtype: str) -> None:
    """`got` equals the float64 reference rounded to `dtype`, within the dtype's tolerance."""
    ref = store(np.asarray(ref64, dtype=np.float64), dtype).astype(np.float64)
    g = got.astype(np.float64)
    assert g.shape == ref.shape
    if dtype in TOL:
        rtol, atol = TOL[dtype]
        assert np.array_equal(np.isnan(g), np.isnan(ref)), (g, ref)
        np.testing.assert_allclose(g, ref, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(g, ref)


def values(seed: int, shape: Sequence[int], dtype: str, lo: float = -3.0,
           hi: float = 3.0) -> np.ndarray:
    r = np.random.default_rng(seed)
    if dtype == "i1":
        return r.integers(0, 2, size=shape).astype(bool)
    if dtype in ("i32", "i64"):
        return r.integers(int(lo), int(hi) + 1, size=shape).astype(NP_STORAGE[dtype])
    x = r.uniform(lo, hi, size=shape)
    if r.random() < 0.3 and x.size:       # a few "round" values (exact ties, equalities)
        x.flat[r.integers(0, x.size)] = round(lo + (hi - lo) / 3, 0)
    return store(x, dtype)


def bidx(idx: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    """The operand index that result index `idx` reads under NumPy broadcasting."""
    off = len(idx) - len(shape)
    return tuple(0 if d == 1 else idx[off + i] for i, d in enumerate(shape))


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        sizes = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0} - {1}
        assert len(sizes) <= 1
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def elementwise_ref(fn: Callable[..., float], arrays: Sequence[np.ndarray],
                    out_shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(out_shape, dtype=np.float64)
    for idx in np.ndindex(out_shape):
        out[idx] = fn(*(float(a[bidx(idx, a.shape)]) for a in arrays))
    return out


SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=5)
ND_SHAPES = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5)
SEED = st.integers(0, 2**32 - 1)


# ---- unary ---------------------------------------------------------------------------------------

def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def _gelu_tanh(x: float) -> float:
    return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


# name -> (reference, input range)
UNARY_REF: dict[str, tuple[Callable[[float], float], tuple[float, float]]] = {
    "neg": (lambda x: -x, (-5, 5)),
    "abs": (abs, (-5, 5)),
    "exp": (math.exp, (-6, 6)),
    "log": (math.log, (0.05, 20)),
    "tanh": (math.tanh, (-5, 5)),
    "sin": (math.sin, (-10, 10)),
    "cos": (math.cos, (-10, 10)),
    "sigmoid": (_sigmoid, (-12, 12)),
    "relu": (lambda x: max(x, 0.0), (-5, 5)),
    "gelu": (lambda x: 0.5 * x * (1 + math.erf(x / math.sqrt(2))), (-5, 5)),
    "erf": (math.erf, (-3, 3)),
    "sqrt": (math.sqrt, (0, 20)),
    "rsqrt": (lambda x: 1 / math.sqrt(x), (0.05, 20)),
    "reciprocal": (lambda x: 1 / x, (0.1, 10)),
}
covers(*UNARY_REF)


@pytest.mark.parametrize("op", sorted(UNARY_REF))
@settings(max_examples=EXAMPLES)
@given(shape=SHAPES, dtype=st.sampled_from(FLOATS), seed=SEED, negate=st.booleans())
def test_unary(op: str, shape, dtype: str, seed: int, negate: bool) -> None:
    fn, (lo, hi) = UNARY_REF[op]
    x = values(seed, shape, dtype, lo, hi)
    if op == "reciprocal" and negate:
        x = -x
    got = run_op(op, [(shape, dtype)], (shape, dtype), [x])
    check(got, elementwise_ref(fn, [x], shape), dtype)


@settings(max_examples=EXAMPLES)
@given(shape=SHAPES, dtype=st.sampled_from(FLOATS), seed=SEED,
       mode=st.sampled_from(["none", "tanh", None]))
def test_gelu_approximate_attribute(shape, dtype: str, seed: int, mode: str | None) -> None:
    x = values(seed, shape, dtype, -5, 5)
    attrs = f'approximate = "{mode}"' if mode else ""
    got = run_op("gelu", [(shape, dtype)], (shape, dtype), [x], attrs)
    fn = _gelu_tanh if mode == "tanh" else UNARY_REF["gelu"][0]
    check(got, elementwise_ref(fn, [x], shape), dtype)


# ---- binary --------------------------------------------------------------------------------------

BINARY_REF: dict[str, tuple[Callable[[float, float], float], tuple[float, float],
                            tuple[float, float]]] = {
    "add": (lambda a, b: a + b, (-5, 5), (-5, 5)),
    "sub": (lambda a, b: a - b, (-5, 5), (-5, 5)),
    "mul": (lambda a, b: a * b, (-5, 5), (-5, 5)),
    "div": (lambda a, b: a / b, (-5, 5), (0.2, 5)),
    "max": (max, (-5, 5), (-5, 5)),
    "min": (min, (-5, 5), (-5, 5)),
    "pow": (lambda a, b: a ** b, (0.1, 5), (-3, 3)),
}
covers(*BINARY_REF)
TWO_SHAPES = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4)


@pytest.mark.parametrize("op", sorted(BINARY_REF))
@settings(max_examples=EXAMPLES)
@given(shapes=TWO_SHAPES, dtype=st.sampled_from(FLOATS), seed=SEED)
def test_binary_broadcasting(op: str, shapes, dtype: str, seed: int) -> None:
    fn, ra, rb = BINARY_REF[op]
    sa, sb = shapes.input_shapes
    out = shapes.result_shape
    a = values(seed, sa, dtype, *ra)
    b = values(seed + 1, sb, dtype, *rb)
    got = run_op(op, [(sa, dtype), (sb, dtype)], (out, dtype), [a, b])
    check(got, elementwise_ref(fn, [a, b], out), dtype)


INT_BINARY_REF: dict[str, Callable[[int, int], int]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "max": max, "min": min}
INT_UNARY_REF: dict[str, Callable[[int], int]] = {"neg": lambda a: -a, "abs": abs}


@pytest.mark.parametrize("op", sorted(INT_BINARY_REF))
@settings(max_examples=EXAMPLES)
@given(shapes=TWO_SHAPES, dtype=st.sampled_from(["i32", "i64"]), seed=SEED)
def test_integer_binary(op: str, shapes, dtype: str, seed: int) -> None:
    """The rows also defined on integers compute exactly (values far from overflow)."""
    sa, sb = shapes.input_shapes
    out = shapes.result_shape
    a = values(seed, sa, dtype, -1000, 1000)
    b = values(seed + 1, sb, dtype, -1000, 1000)
    got = run_op(op, [(sa, dtype), (sb, dtype)], (out, dtype), [a, b])
    ref = np.empty(out, dtype=np.int64)
    for idx in np.ndindex(out):
        ref[idx] = INT_BINARY_REF[op](int(a[bidx(idx, sa)]), int(b[bidx(idx, sb)]))
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("op", sorted(INT_UNARY_REF))
@settings(max_examples=EXAMPLES)
@given(shape=SHAPES, dtype=st.sampled_from(["i32", "i64"]), seed=SEED)
def test_integer_unary(op: str, shape, dtype: str, seed: int) -> None:
    x = values(seed, shape, dtype, -1000, 1000)
    got = run_op(op, [(shape, dtype)], (shape, dtype), [x])
    ref = np.vectorize(INT_UNARY_REF[op])(x.astype(np.int64)) if x.size else x
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("op", ["div", "pow", "exp", "relu"])
def test_float_only_rows_refuse_integers(op: str) -> None:
    from lamina.ir.core.diagnostics import LaminaError

    n = len(OPS[op].operands)
    args = ", ".join(f"%a{i}" for i in range(n))
    sig = ", ".join(f"%a{i}: tensor<2xi32>" for i in range(n))
    text = (f"func.func @f({sig}) -> tensor<2xi32> {{\n  %r = lamina.{op} {args} : "
            f"tensor<2xi32>\n  func.return %r : tensor<2xi32>\n}}\n")
    with pytest.raises(LaminaError, match="float element type"):
        verify(parse_text(text))


def test_max_min_propagate_nan() -> None:
    a = np.array([np.nan, 1.0, 2.0], dtype=np.float32)
    b = np.array([0.0, np.nan, 1.0], dtype=np.float32)
    for op in ("max", "min"):
        got = run_op(op, [((3,), "f32")] * 2, ((3,), "f32"), [a, b])
        assert np.isnan(got[0]) and np.isnan(got[1]) and got[2] == (2.0 if op == "max" else 1.0)


# ---- compare and select --------------------------------------------------------------------------

COMPARE_REF = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
               "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}
covers(*COMPARE_REF)


@pytest.mark.parametrize("op", sorted(COMPARE_REF))
@settings(max_examples=EXAMPLES)
@given(shapes=TWO_SHAPES, dtype=st.sampled_from(ALL), seed=SEED)
def test_compare(op: str, shapes, dtype: str, seed: int) -> None:
    sa, sb = shapes.input_shapes
    out = shapes.result_shape
    # small ranges so that equal elements are common
    a = values(seed, sa, dtype, -2, 2)
    b = values(seed + 1, sb, dtype, -2, 2)
    if dtype in FLOATS:
        a, b = store(np.round(a.astype(np.float64) * 2) / 2, dtype), \
            store(np.round(b.astype(np.float64) * 2) / 2, dtype)
    got = run_op(op, [(sa, dtype), (sb, dtype)], (out, "i1"), [a, b])
    ref = np.empty(out, dtype=bool)
    fn = COMPARE_REF[op]
    for idx in np.ndindex(out):
        x, y = a[bidx(idx, sa)], b[bidx(idx, sb)]
        ref[idx] = fn(float(x), float(y)) if dtype in FLOATS else fn(int(x), int(y))
    np.testing.assert_array_equal(got, ref)


covers("select")


@settings(max_examples=EXAMPLES)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, max_side=4),
       dtype=st.sampled_from(ALL), seed=SEED)
def test_select(shapes, dtype: str, seed: int) -> None:
    sc, st_, sf = shapes.input_shapes
    out = shapes.result_shape
    c = values(seed, sc, "i1")
    t = values(seed + 1, st_, dtype, -5, 5)
    f = values(seed + 2, sf, dtype, -5, 5)
    got = run_op("select", [(sc, "i1"), (st_, dtype), (sf, dtype)], (out, dtype), [c, t, f])
    ref = np.empty(out, dtype=NP_STORAGE[dtype])
    for idx in np.ndindex(out):
        ref[idx] = t[bidx(idx, st_)] if c[bidx(idx, sc)] else f[bidx(idx, sf)]
    np.testing.assert_array_equal(got, ref)


# ---- cast ----------------------------------------------------------------------------------------

covers("cast")


def _cast_ref(v: float | int | bool, src: str, dst: str) -> float:
    if dst == "i1":
        return float(v != 0)
    if src == "i1":
        return float(bool(v))
    if dst in INTS:
        return float(math.trunc(float(v)))
    return float(v)


@pytest.mark.parametrize("src", ALL)
@settings(max_examples=EXAMPLES)
@given(dst=st.sampled_from(ALL), shape=SHAPES, seed=SEED, zeros=st.booleans())
def test_cast(src: str, dst: str, shape, seed: int, zeros: bool) -> None:
    x = values(seed, shape, src, -300, 300)
    if zeros and x.size:
        x.flat[0] = 0
    got = run_op("cast", [(shape, src)], (shape, dst), [x])
    ref = np.empty(shape, dtype=np.float64)
    for idx in np.ndindex(shape):
        ref[idx] = _cast_ref(x[idx].item(), src, dst)
    if dst in FLOATS:
        check(got, ref, dst)
    else:
        np.testing.assert_array_equal(got, ref.astype(NP_STORAGE[dst]))


def test_cast_float_to_int_truncates_toward_zero() -> None:
    x = np.array([-2.7, -0.5, 0.0, 0.5, 2.7, 7.999], dtype=np.float32)
    got = run_op("cast", [((6,), "f32")], ((6,), "i32"), [x])
    np.testing.assert_array_equal(got, [-2, 0, 0, 0, 2, 7])
    got = run_op("cast", [((6,), "f32")], ((6,), "i1"), [x])
    np.testing.assert_array_equal(got, [True, True, False, True, True, True])


# ---- dropout and constant ------------------------------------------------------------------------

covers("dropout")


@settings(max_examples=EXAMPLES)
@given(shape=SHAPES, dtype=st.sampled_from(FLOATS), seed=SEED,
       rate=st.sampled_from([0.0, 0.2, 0.5, 0.8]), dseed=st.integers(-(2**63), 2**63 - 1))
def test_dropout(shape, dtype: str, seed: int, rate: float, dseed: int) -> None:
    x = values(seed, shape, dtype)
    got = run_op("dropout", [(shape, dtype)], (shape, dtype), [x],
                 f"rate = {rate!r} : f64, seed = {dseed} : i64")
    keep = keep_ref(dseed, rate, tuple(shape))
    check(got, np.where(keep, x.astype(np.float64) / (1 - rate), 0.0), dtype)


covers("constant")


def _literal(v, dtype: str) -> str:
    if dtype == "i1":
        return "true" if v else "false"
    if dtype in INTS:
        return str(int(v))
    return repr(float(v))


@settings(max_examples=EXAMPLES)
@given(shape=SHAPES, dtype=st.sampled_from(ALL), seed=SEED, splat=st.booleans())
def test_constant(shape, dtype: str, seed: int, splat: bool) -> None:
    r = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dtype == "i1":
        flat = [bool(v) for v in r.integers(0, 2, n)]
    elif dtype in INTS:
        flat = [int(v) for v in r.integers(-1000, 1000, n)]
    else:   # values exact in every float type: multiples of 1/8 in [-8, 8]
        flat = [float(v) / 8 for v in r.integers(-64, 65, n)]
    if splat:
        flat = [flat[0]] * n
        lit = _literal(flat[0], dtype)
    else:
        it = iter(flat)

        def nest(dims) -> str:
            if not dims:
                return _literal(next(it), dtype)
            return "[" + ", ".join(nest(dims[1:]) for _ in range(dims[0])) + "]"

        lit = nest(tuple(shape))
    t = ty(shape, dtype)
    text = (f"func.func @main() -> {t} {{\n  %c = lamina.constant dense<{lit}> : {t}\n"
            f"  func.return %c : {t}\n}}\n")
    module = parse_text(text)
    verify(module)
    got = run_function(find_entry(module, None), []).outputs[0]
    assert got.shape == tuple(shape) and got.dtype == np.dtype(NP_STORAGE[dtype])
    np.testing.assert_array_equal(got, np.array(flat, dtype=NP_STORAGE[dtype]).reshape(shape))


# ---- reductions ----------------------------------------------------------------------------------

REDUCE_REF = {"reduce_sum": math.fsum, "reduce_mean": lambda xs: math.fsum(xs) / len(xs),
              "reduce_max": max}
covers(*REDUCE_REF)


@pytest.mark.parametrize("op", sorted(REDUCE_REF))
@settings(max_examples=EXAMPLES)
@given(shape=ND_SHAPES, dtype=st.sampled_from(FLOATS), seed=SEED, keep=st.sampled_from(
    [True, False, None]), data=st.data())
def test_reduce(op: str, shape, dtype: str, seed: int, keep: bool | None, data) -> None:
    rank = len(shape)
    axes = data.draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    shown = [a - rank if data.draw(st.booleans()) else a for a in axes]
    keepdims = bool(keep)
    out = tuple(1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes)
    x = values(seed, shape, dtype)
    attrs = f"axes = {ints(shown)}" + ("" if keep is None else
                                       f", keepdims = {'true' if keep else 'false'}")
    got = run_op(op, [(shape, dtype)], (out, dtype), [x], attrs)
    groups: dict[tuple[int, ...], list[float]] = {}
    for idx in np.ndindex(shape):
        key = tuple(0 if i in axes else v for i, v in enumerate(idx) if keepdims or i not in axes)
        groups.setdefault(key, []).append(float(x[idx]))
    ref = np.empty(out, dtype=np.float64)
    for key, xs in groups.items():
        ref[key] = REDUCE_REF[op](xs)
    check(got, ref, dtype)


# ---- normalizations and softmax ------------------------------------------------------------------

covers("layernorm", "rmsnorm", "softmax")


def _rows(x: np.ndarray, axis: int) -> np.ndarray:
    """x as (outer, inner) float64 rows over the dims axis..rank-1."""
    inner = int(np.prod(x.shape[axis:]))
    return x.astype(np.float64).reshape(-1, inner)


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
@settings(max_examples=EXAMPLES)
@given(shape=ND_SHAPES, dtype=st.sampled_from(FLOATS), seed=SEED, data=st.data())
def test_normalization(op: str, shape, dtype: str, seed: int, data) -> None:
    rank = len(shape)
    axis = data.draw(st.integers(-rank, rank - 1))
    show_axis = axis != -1 or data.draw(st.booleans())
    eps = data.draw(st.sampled_from([None, 1e-5, 1e-3, 0.5]))
    with_scale = data.draw(st.booleans())
    with_bias = op == "layernorm" and data.draw(st.booleans())
    ax = axis % rank
    norm = tuple(shape[ax:])
    x = values(seed, shape, dtype)
    args, inputs, kws = [(shape, dtype)], [x], []
    scale = values(seed + 1, norm, dtype, 0.5, 2) if with_scale else None
    bias = values(seed + 2, norm, dtype) if with_bias else None
    if scale is not None:
        args.append((norm, dtype))
        inputs.append(scale)
        kws.append("scale")
    if bias is not None:
        args.append((norm, dtype))
        inputs.append(bias)
        kws.append("bias")
    attrs = ", ".join(([f"axis = {axis} : i64"] if show_axis else []) +
                      ([f"eps = {eps:.6e} : f64"] if eps is not None else []))
    got = run_op(op, args, (shape, dtype), inputs, attrs, kws)
    e = 1e-5 if eps is None else eps
    rows = _rows(x, ax)
    out = np.empty_like(rows)
    for r in range(rows.shape[0]):
        row = rows[r]
        n = len(row)
        if op == "layernorm":
            mean = math.fsum(row) / n
            var = math.fsum((v - mean) ** 2 for v in row) / n
            out[r] = [(v - mean) / math.sqrt(var + e) for v in row]
        else:
            ms = math.fsum(v * v for v in row) / n
            out[r] = [v / math.sqrt(ms + e) for v in row]
        if scale is not None:
            out[r] *= scale.astype(np.float64).reshape(-1)
        if bias is not None:
            out[r] += bias.astype(np.float64).reshape(-1)
    check(got, out.reshape(shape), dtype)


@settings(max_examples=EXAMPLES)
@given(shape=ND_SHAPES, dtype=st.sampled_from(FLOATS), seed=SEED, data=st.data())
def test_softmax(shape, dtype: str, seed: int, data) -> None:
    check_softmax_family("softmax", shape, dtype, seed, data,
                         lambda v, m, total: math.exp(v - m) / total)


@settings(max_examples=EXAMPLES)
@given(shape=ND_SHAPES, dtype=st.sampled_from(FLOATS), seed=SEED, data=st.data())
def test_safe_softmax(shape, dtype: str, seed: int, data) -> None:
    """softmax with `safe` on lines with some and with every entry -inf: a line of only -inf is
    0 (the plain softmax's is nan), -inf entries of other lines 0, and every line that is not
    only -inf has the plain softmax's bits."""
    rank = len(shape)
    axis = data.draw(st.integers(-rank, rank - 1))
    ax = axis % rank
    r = np.random.default_rng(seed)
    whole = r.random(shape[:ax] + (1,) + shape[ax + 1:]) < 0.4
    x = np.where(whole | (r.random(shape) < 0.3), -np.inf, values(seed, shape, dtype, -10, 10))
    x = x.astype(NP_STORAGE[dtype])
    got = run_op("softmax", [(shape, dtype)], (shape, dtype), [x],
                 f"axis = {axis} : i64, safe = true")
    plain = run_op("softmax", [(shape, dtype)], (shape, dtype), [x], f"axis = {axis} : i64")
    empty = np.broadcast_to(np.all(np.isneginf(x), axis=ax, keepdims=True), shape)
    ref = np.zeros(shape, dtype=np.float64)
    for idx in np.ndindex(shape):
        line = [float(x[idx[:ax] + (k,) + idx[ax + 1:]]) for k in range(shape[ax])]
        m = max(line)
        if m != -math.inf:
            ref[idx] = math.exp(float(x[idx]) - m) / math.fsum(math.exp(v - m) for v in line)
    check(got, ref, dtype)
    assert np.isnan(plain[empty]).all()
    assert np.array_equal(got[~empty], plain[~empty])


covers("log_softmax")


@settings(max_examples=EXAMPLES)
@given(shape=ND_SHAPES, dtype=st.sampled_from(FLOATS), seed=SEED, data=st.data())
def test_log_softmax(shape, dtype: str, seed: int, data) -> None:
    check_softmax_family("log_softmax", shape, dtype, seed, data,
                         lambda v, m, total: v - m - math.log(total))


def check_softmax_family(op: str, shape: tuple[int, ...], dtype: str, seed: int, data,
                         ref_of: Callable[[float, float, float], float]) -> None:
    """Run `op` along a drawn axis (written out or left to its default -1) against `ref_of(v, m,
    total)`, the element v's exact value from its line's max m and total = fsum(exp(line - m)):
    softmax and log_softmax differ only there."""
    rank = len(shape)
    axis = data.draw(st.integers(-rank, rank - 1))
    show = axis != -1 or data.draw(st.booleans())
    x = values(seed, shape, dtype, -10, 10)
    got = run_op(op, [(shape, dtype)], (shape, dtype), [x], f"axis = {axis} : i64" if show else "")
    ax = axis % rank
    ref = np.empty(shape, dtype=np.float64)
    for idx in np.ndindex(shape):
        line = [float(x[idx[:ax] + (k,) + idx[ax + 1:]]) for k in range(shape[ax])]
        m = max(line)
        ref[idx] = ref_of(float(x[idx]), m, math.fsum(math.exp(v - m) for v in line))
    check(got, ref, dtype)


# ---- scans ---------------------------------------------------------------------------------------

covers("cumsum")


@settings(max_examples=EXAMPLES)
@given(shape=ND_SHAPES, dtype=st.sampled_from(FLOATS + ("i32", "i64")), seed=SEED,
       exclusive=st.booleans(), reverse=st.booleans(), data=st.data())
def test_cumsum(shape, dtype: str, seed: int, exclusive: bool, reverse: bool, data) -> None:
    """Element i is the exact sum of the elements before it along axis (with itself unless
    exclusive; from the end when reverse), by an explicit loop; integers exactly."""
    rank = len(shape)
    axis = data.draw(st.integers(-rank, rank - 1))
    ax = axis % rank
    n = shape[ax]
    x = values(seed, shape, dtype, -5, 5)
    flags = [f"axis = {axis} : i64"]
    if exclusive or data.draw(st.booleans()):
        flags.append(f"exclusive = {str(exclusive).lower()}")
    flags += ["reverse = true"] if reverse else []
    got = run_op("cumsum", [(shape, dtype)], (shape, dtype), [x], ", ".join(flags))
    ref = np.zeros(shape, dtype=np.float64 if dtype in FLOATS else np.int64)
    for o in np.ndindex(shape):
        i = o[ax]
        js = range(i, n) if reverse else range(0, i + 1)
        js = [j for j in js if not (exclusive and j == i)]
        terms = [x[o[:ax] + (j,) + o[ax + 1:]] for j in js]
        ref[o] = math.fsum(float(t) for t in terms) if dtype in FLOATS else \
            sum(int(t) for t in terms)
    if dtype in FLOATS:
        check(got, ref, dtype)
    else:
        np.testing.assert_array_equal(got, ref.astype(NP_STORAGE[dtype]))


def test_cumsum_refuses_rank_0_i1_and_a_bad_axis() -> None:
    for t, axis in (("tensor<f32>", 0), ("tensor<3xi1>", 0), ("tensor<3xf32>", 1)):
        text = (f"func.func @main(%a: {t}) -> {t} {{\n"
                f"  %r = lamina.cumsum %a {{axis = {axis} : i64}} : {t}\n  func.return %r : {t}\n}}\n")
        with pytest.raises(LaminaError, match="rank >= 1|numeric element type|out of range"):
            verify(parse_text(text))


covers("pad")


@settings(max_examples=EXAMPLES)
@given(shape=ND_SHAPES, dtype=st.sampled_from(FLOATS + ("i32", "i64")), seed=SEED,
       value=st.sampled_from([0.0, -100.0, 1.5, 0.1]), data=st.data())
def test_pad(shape, dtype: str, seed: int, value: float, data) -> None:
    """Each result element is the operand's at its index minus low, or the fill (rounded to the
    element type) outside, by an explicit loop."""
    if dtype in ("i32", "i64"):
        value = float(int(value))
    rank = len(shape)
    low = data.draw(st.lists(st.integers(0, 2), min_size=rank, max_size=rank))
    high = data.draw(st.lists(st.integers(0, 2), min_size=rank, max_size=rank))
    out = tuple(n + lo + hi for n, lo, hi in zip(shape, low, high, strict=True))
    x = values(seed, shape, dtype, -50, 50)
    attrs = f"low = {ints(low)}, high = {ints(high)}"
    if value != 0.0 or data.draw(st.booleans()):
        attrs += f", value = {value!r} : f64"
    got = run_op("pad", [(shape, dtype)], (out, dtype), [x], attrs)
    fill = store(np.asarray(value), dtype)
    for o in np.ndindex(out):
        i = tuple(k - lo for k, lo in zip(o, low, strict=True))
        inside = all(0 <= k < n for k, n in zip(i, shape, strict=True))
        want = x[i] if inside else fill
        assert got[o] == want, (o, got[o], want)


# ---- indexing ------------------------------------------------------------------------------------

covers("gather", "iota")


@settings(max_examples=EXAMPLES)
@given(shape=ND_SHAPES, dtype=st.sampled_from(ALL), index_dtype=st.sampled_from(["i32", "i64"]),
       index_shape=hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=4),
       seed=SEED, data=st.data())
def test_gather(shape, dtype: str, index_dtype: str, index_shape, seed: int, data) -> None:
    """Every index in [-n-2, n+2): in range (negative ones from the end) picks the element,
    outside gives 0; ONNX Gather / numpy.take on the in-range ones."""
    rank = len(shape)
    axis = data.draw(st.integers(-rank, rank - 1))
    ax = axis % rank
    n = shape[ax]
    x = values(seed, shape, dtype, -100, 100)
    idx = np.random.default_rng(seed).integers(-n - 2, n + 2, size=index_shape)
    idx = idx.astype(NP_STORAGE[index_dtype])
    out = shape[:ax] + tuple(index_shape) + shape[ax + 1:]
    got = run_op("gather", [(shape, dtype), (index_shape, index_dtype)], (out, dtype), [x, idx],
                 f"axis = {axis} : i64" if axis != 0 or data.draw(st.booleans()) else "")
    k = len(index_shape)
    for o in np.ndindex(out):
        i = int(idx[o[ax:ax + k]])
        if -n <= i < 0:
            i += n
        want = x[o[:ax] + (i,) + o[ax + k:]] if 0 <= i < n else 0
        assert got[o] == want, (o, i, got[o], want)


@settings(max_examples=EXAMPLES)
@given(shape=ND_SHAPES, dtype=st.sampled_from(["f16", "bf16", "f32", "f64", "i32", "i64"]),
       data=st.data())
def test_iota(shape, dtype: str, data) -> None:
    rank = len(shape)
    dim = data.draw(st.integers(-rank, rank - 1))
    t = ty(shape, dtype)
    attr = f" {{dim = {dim} : i64}}" if dim != 0 or data.draw(st.booleans()) else ""
    text = f"func.func @main() -> {t} {{\n  %r = lamina.iota{attr} : {t}\n  func.return %r : {t}\n}}\n"
    module = parse_text(text)
    verify(module)
    got = run_function(find_entry(module, None), []).outputs[0]
    assert got.shape == tuple(shape) and got.dtype == np.dtype(NP_STORAGE[dtype])
    for o in np.ndindex(shape):
        assert got[o] == o[dim % rank]


# ---- matmul --------------------------------------------------------------------------------------

covers("matmul")


@settings(max_examples=EXAMPLES)
@given(batch=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, max_side=3),
       m=st.integers(1, 5), k=st.integers(1, 5), n=st.integers(1, 5),
       dtype=st.sampled_from(FLOATS), seed=SEED)
def test_matmul(batch, m: int, k: int, n: int, dtype: str, seed: int) -> None:
    ba, bb = batch.input_shapes
    sa, sb = ba + (m, k), bb + (k, n)
    out = batch.result_shape + (m, n)
    a = values(seed, sa, dtype)
    b = values(seed + 1, sb, dtype)
    got = run_op("matmul", [(sa, dtype), (sb, dtype)], (out, dtype), [a, b])
    ref = np.empty(out, dtype=np.float64)
    for bidx_ in np.ndindex(batch.result_shape):
        a2 = a[bidx(bidx_, ba)].astype(np.float64)
        b2 = b[bidx(bidx_, bb)].astype(np.float64)
        ref[bidx_] = np.einsum("mk,kn->mn", a2, b2)
    check(got, ref, dtype)


# ---- layout --------------------------------------------------------------------------------------

covers("transpose", "reshape", "broadcast_in_dim", "slice", "concat")


@settings(max_examples=EXAMPLES)
@given(shape=SHAPES, dtype=st.sampled_from(ALL), seed=SEED, data=st.data())
def test_transpose(shape, dtype: str, seed: int, data) -> None:
    perm = data.draw(st.permutations(range(len(shape))))
    out = tuple(shape[p] for p in perm)
    x = values(seed, shape, dtype, -100, 100)
    got = run_op("transpose", [(shape, dtype)], (out, dtype), [x], f"permutation = {ints(perm)}")
    for idx in np.ndindex(out):
        src = [0] * len(shape)
        for i, p in enumerate(perm):
            src[p] = idx[i]
        assert got[idx] == x[tuple(src)]


@settings(max_examples=EXAMPLES)
@given(shape=SHAPES, dtype=st.sampled_from(ALL), seed=SEED, data=st.data())
def test_reshape(shape, dtype: str, seed: int, data) -> None:
    n = int(np.prod(shape))
    dims: list[int] = []
    rest = n
    for _ in range(data.draw(st.integers(0, 3))):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        d = data.draw(st.sampled_from(divisors))
        dims.append(d)
        rest //= d
    out = tuple(dims + ([rest] if rest != 1 or data.draw(st.booleans()) else []))
    x = values(seed, shape, dtype, -100, 100)
    got = run_op("reshape", [(shape, dtype)], (out, dtype), [x])
    flat = [x[idx] for idx in np.ndindex(shape)]
    assert [got[idx] for idx in np.ndindex(out)] == flat


@settings(max_examples=EXAMPLES)
@given(shape=SHAPES, dtype=st.sampled_from(ALL), seed=SEED, data=st.data())
def test_broadcast_in_dim(shape, dtype: str, seed: int, data) -> None:
    rank = len(shape)
    out_rank = data.draw(st.integers(rank, 4))
    dims = data.draw(st.lists(st.integers(0, max(out_rank - 1, 0)), min_size=rank,
                              max_size=rank, unique=True))
    out = [data.draw(st.integers(1, 4)) for _ in range(out_rank)]
    for i, d in enumerate(dims):
        if shape[i] != 1 or data.draw(st.booleans()):
            out[d] = shape[i]
    out = tuple(out)
    x = values(seed, shape, dtype, -100, 100)
    got = run_op("broadcast_in_dim", [(shape, dtype)], (out, dtype), [x],
                 f"broadcast_dimensions = {ints(dims)}")
    for idx in np.ndindex(out):
        src = tuple(0 if shape[i] == 1 else idx[d] for i, d in enumerate(dims))
        assert got[idx] == x[src]


@settings(max_examples=EXAMPLES)
@given(shape=ND_SHAPES, dtype=st.sampled_from(ALL), seed=SEED, data=st.data())
def test_slice(shape, dtype: str, seed: int, data) -> None:
    start, limit, strides = [], [], []
    for d in shape:
        s = data.draw(st.integers(0, d))
        e = data.draw(st.integers(s, d))
        start.append(s)
        limit.append(e)
        strides.append(data.draw(st.integers(1, 3)))
    show_strides = any(s != 1 for s in strides) or data.draw(st.booleans())
    if not show_strides:
        strides = [1] * len(shape)
    ranges = [range(s, e, st_) for s, e, st_ in zip(start, limit, strides, strict=True)]
    out = tuple(len(r) for r in ranges)
    x = values(seed, shape, dtype, -100, 100)
    attrs = f"start = {ints(start)}, limit = {ints(limit)}"
    if show_strides:
        attrs += f", strides = {ints(strides)}"
    got = run_op("slice", [(shape, dtype)], (out, dtype), [x], attrs)
    for idx in np.ndindex(out):
        assert got[idx] == x[tuple(r[i] for r, i in zip(ranges, idx, strict=True))]


@settings(max_examples=EXAMPLES)
@given(shape=ND_SHAPES, dtype=st.sampled_from(ALL), seed=SEED, data=st.data())
def test_concat(shape, dtype: str, seed: int, data) -> None:
    rank = len(shape)
    dim = data.draw(st.integers(0, rank - 1))
    sizes = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    shapes = [shape[:dim] + (s,) + shape[dim + 1:] for s in sizes]
    xs = [values(seed + i, s, dtype, -100, 100) for i, s in enumerate(shapes)]
    out = shape[:dim] + (sum(sizes),) + shape[dim + 1:]
    shown = dim - rank if data.draw(st.booleans()) else dim
    got = run_op("concat", [(s, dtype) for s in shapes], (out, dtype), xs, f"dim = {shown} : i64")
    for idx in np.ndindex(out):
        k = idx[dim]
        part = 0
        while k >= sizes[part]:
            k -= sizes[part]
            part += 1
        assert got[idx] == xs[part][idx[:dim] + (k,) + idx[dim + 1:]]


# ---- coverage ------------------------------------------------------------------------------------

def test_every_op_is_covered() -> None:
    missing = sorted(set(OPS) - COVERED)
    assert not missing, f"ops without a reference test in test_ops.py: {missing}"
    assert not sorted(COVERED - set(OPS)), "test_ops covers ops that are not in the table"
