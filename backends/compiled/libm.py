"""The functions generated kernels call: vectorizable float32 transcendentals and storage rounding.

libm's `expf`, `logf` and `tanhf` are scalar calls that stop LLVM from vectorizing a loop (the
difference between 25 ms and 330 ms for LayerNorm + GeLU + Dropout on f32[8192, 4096]); the float32
functions here are branch-free (every case is computed and selected), built from `fma` and bit
casts, so a loop that calls them runs 8 or 16 elements per instruction. float64 exp and log call
libm (numba's `math.*`), whose results are within 1 ulp of the true value; float64 tanh is
branch-free here too (the table's last row), since tanh-GeLU puts it in every element.

Accuracy, in ulp of float32, over dense sweeps (every 2**-15 of [-104, 89] for exp, 4096
mantissas in every binade for log, every 2**-17 of [-12, 12] and tiny values for tanh; special
values included; `tests/test_compiled_backend.py` checks both columns):

| function | max ulp vs NumPy | vs the correctly rounded result | NumPy vs it |
|---|---|---|---|
| exp  | 3 | 1 | 3 |
| log  | 3 | 1 | 3 |
| tanh | 5 | 4 | 1 |
| tanh, float64 (ulp of float64) | 3 | - | - |

(float64 tanh: every 2**-15 of [-21, 21], every 1e-6 of [-0.4, 0.4], 20000 tiny values and the
special values.)

exp: 2**n e**r with n = rint(x log2 e), r = x - n ln 2 in two fma (Cody-Waite), e**r a degree-6
polynomial, 2**n applied in two halves so that subnormal results are rounded once. log: x = 2**k m
with m in [sqrt(1/2), sqrt(2)), log m = f - (f^2/2 - s (f^2/2 + R(s^2))), s = f / (2 + f)
(fdlibm's form, R fitted here), subnormals scaled first. tanh: a = |x|, a P(a^2) / Q(a^2) with P
of degree 5 and Q of degree 4, and 1 from a = 9.0109 on (where tanh rounds to 1; infinities
too); the sign of x copied (tanh(-0) = -0, NaN stays NaN). One rational and no exp: 0.16 ns per
element (measured on this machine's AVX-512 cores) against 0.47 for the exp-based form it
replaced (2 ulp), which was most of LayerNorm + GeLU + Dropout's arithmetic; its 4-5 ulp are
the float32 rounding of the two Horner chains, the fit itself is within 0.02 ulp. float64
tanh: e = expm1(2a) from Cody-Waite and a Taylor polynomial to degree 13, then e / (e + 2),
with no cancellation near 0.
The coefficients are least-squares fits to the Taylor series (exp) or to atanh's series (log)
or to tanh(a)/a itself (tanh, relative error) on Chebyshev nodes, iterated towards minimax;
each approximation error is below 0.1 ulp, so the error is float32 rounding. NumPy's own
float32 exp and log (SIMD kernels) are the ones 3 ulp from the correctly rounded result here,
so those rows' NumPy column is mostly theirs.

Everything built on these inherits their error: sigmoid and softmax (exp), tanh-GeLU (tanh):
0.5 x (1 + tanh(u)) cancels for x below about -3, where both NumPy's and this tanh's rounding
near -1 leave only noise (NumPy's float32 tanh-GeLU of -4.955 is +4.4e-7), so its bound is
absolute: |compiled - NumPy| <= 4 * 2**-24 * max(|x|, |y|) everywhere, and within 4 ulp for
x >= -1 (`GELU_TANH_BOUNDS`, checked over every 2**-14 of [-16, 16]); erf-GeLU runs erf's
float64 formula (libm's exp), which rounds to the float32 NumPy gives in all but rare cases
(none in that sweep). sqrt, division and the arithmetic are IEEE operations and match the interpreter's bits.

Storage rounding for bf16 and f16 is integer arithmetic with NumPy's results (ties to even; NaN
stays NaN, infinities and overflow go to infinity): the interpreter rounds after every op, and so
do the kernels (`round_bf16`, `round_f16`); f16 arrays reach a kernel as their uint16 bits.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from lamina.backends.compiled.intrinsics import bits_f32, bits_f64, f32_bits, fma
from numba import njit

# max ulp against NumPy's float32 function, and against the correctly rounded result (the table)
ULP_BOUNDS: dict[np.ufunc, int] = {np.exp: 3, np.log: 3, np.tanh: 5}
ULP_BOUNDS_TRUE: dict[np.ufunc, int] = {np.exp: 1, np.log: 1, np.tanh: 4}
ULP_BOUNDS_F64: dict[np.ufunc, int] = {np.tanh: 3}     # float64, against NumPy's (libm's)
# float32 tanh-GeLU against NumPy's: (k of the absolute bound k 2**-24 max(|x|, |y|), max ulp
# where x >= the third number)
GELU_TANH_BOUNDS: tuple[float, int, float] = (4.0, 4, -1.0)

F32 = np.float32
_ZERO, _ONE, _TWO, _HALF = F32(0.0), F32(1.0), F32(2.0), F32(0.5)
_NAN = F32(np.nan)
_INF = F32(np.inf)


# ---- exp -----------------------------------------------------------------------------------------
_LOG2E = F32(1.4426950408889634)
_LN2_HI = F32(0.693145751953125)        # 12 significant bits: n * _LN2_HI is exact for |n| < 4096
_LN2_LO = F32(1.428606765330187e-06)    # ln 2 - _LN2_HI
_EXP_HI, _EXP_LO = F32(89.0), F32(-104.0)  # beyond: inf and 0 (the clamps keep 2**n finite)
# e**r = 1 + r + r^2 (E0 + E1 r + E2 r^2 + E3 r^3 + E4 r^4) on |r| <= ln(2)/2
_E0, _E1, _E2 = F32(0.4999999803213318), F32(0.16666580202743397), F32(0.041667886515559346)
_E3, _E4 = F32(0.008362819199947856), F32(0.0013814700463418857)


@njit(inline="always", error_model="numpy")
def exp_f32(x: Any) -> Any:
    """e**x in float32 (module docstring)."""
    x = _EXP_HI if x > _EXP_HI else x          # NaN passes both clamps
    x = _EXP_LO if x < _EXP_LO else x
    xs = x if x == x else _ZERO                 # the exponent of NaN: any defined integer
    n = np.rint(xs * _LOG2E)
    r = fma(n, -_LN2_LO, fma(n, -_LN2_HI, x))
    q = fma(fma(fma(fma(_E4, r, _E3), r, _E2), r, _E1), r, _E0)
    p = _ONE + fma(r * r, q, r)
    k = np.int32(n)
    k1 = np.int32(k >> 1)
    k2 = np.int32(k - k1)
    return p * bits_f32(np.int32((k1 + 127) << 23)) * bits_f32(np.int32((k2 + 127) << 23))


# ---- log -----------------------------------------------------------------------------------------
_SQRT_HALF_BITS = 0x3F3504F3
# R(z) = z (L0 + L1 z + L2 z^2 + L3 z^3) ~ (log((1+s)/(1-s)) - 2s) / s, z = s^2 <= 0.0295
_L0, _L1 = F32(0.6666666646901365), F32(0.4000013829784578)
_L2, _L3 = F32(0.2855024641041384), F32(0.23331005470320543)
_TWO23 = F32(8388608.0)


@njit(inline="always", error_model="numpy")
def log_f32(x: Any) -> Any:
    """The natural logarithm in float32 (module docstring): NaN below 0, -inf at 0."""
    sub = x < F32(1.1754943508222875e-38)      # subnormal (or not positive): scale by 2**23
    xs = x * _TWO23 if sub else x
    ix = np.int32(f32_bits(xs) - _SQRT_HALF_BITS)
    k = np.int32((ix >> 23) - (23 if sub else 0))
    m = bits_f32(np.int32((ix & 0x007FFFFF) + _SQRT_HALF_BITS))
    f = m - _ONE
    s = f / (_TWO + f)
    z = s * s
    r = z * fma(fma(fma(_L3, z, _L2), z, _L1), z, _L0)
    hfsq = _HALF * f * f
    kf = F32(k)
    y = fma(kf, _LN2_HI, f - (hfsq - fma(s, hfsq + r, kf * _LN2_LO)))
    y = _INF if x == _INF else y
    y = -_INF if x == _ZERO else y
    return _NAN if (x < _ZERO or x != x) else y


# ---- tanh ----------------------------------------------------------------------------------------
# tanh(a) = a P(z) / Q(z), z = a^2, on [0, 9.0109]: P = 1 + P1 z + ... + P5 z^5, Q = 1 + Q1 z + ...
# + Q4 z^4 (a relative-error fit of tanh(a)/a on 6000 Chebyshev nodes, weights iterated towards
# minimax: error 1.3e-9, 0.02 ulp); from 9.0109 on tanh rounds to 1
_P1, _P2, _P3 = F32(0.1368032842874527), F32(0.0038688452914357185), F32(2.8017899239785038e-05)
_P4, _P5 = F32(3.061013131855361e-08), F32(-1.2222098333403153e-11)
_Q1, _Q2, _Q3 = F32(0.4701366126537323), F32(0.027247732505202293), F32(0.00039395433850586414)
_Q4 = F32(1.2880960866823443e-06)
_T_SAT = F32(9.0109)


@njit(inline="always", error_model="numpy")
def tanh_f32(x: Any) -> Any:
    """tanh in float32 (module docstring): one rational, no exp, no branch."""
    a = abs(x)
    z = a * a
    p = fma(fma(fma(fma(fma(_P5, z, _P4), z, _P3), z, _P2), z, _P1), z, _ONE)
    q = fma(fma(fma(fma(_Q4, z, _Q3), z, _Q2), z, _Q1), z, _ONE)
    y = _ONE if a > _T_SAT else (a * p) / q     # inf saturates; NaN fails the compare
    return math.copysign(y, x)


# tanh in float64: e = expm1(2a) without cancellation, tanh(a) = e / (e + 2). 2a = n ln 2 + r,
# |r| <= ln(2)/2, expm1(r) = r + r^2 S(r) (Taylor to r^13: truncation below 0.1 ulp), and
# expm1(2a) = 2**n expm1(r) + (2**n - 1), both terms exact for the n that matter
_LN2_HI64 = 0.6931471803691238      # 33 significant bits: n * _LN2_HI64 is exact for |n| < 2**20
_LN2_LO64 = 1.9082149292705877e-10
_INV_LN2_64 = 1.4426950408889634
_S = tuple(1.0 / math.factorial(k) for k in range(2, 14))   # 1/2!, ..., 1/13!
_S0, _S1, _S2, _S3, _S4, _S5, _S6, _S7, _S8, _S9, _S10, _S11 = _S
_T64_CLAMP = 20.0   # tanh(20) is 1 in float64 (it rounds to 1 from 19.06)


@njit(inline="always", error_model="numpy")
def tanh_f64(x: Any) -> Any:
    """tanh in float64 (module docstring), branch-free."""
    a = abs(x)
    a = _T64_CLAMP if a > _T64_CLAMP else a     # NaN passes
    t = a + a
    ts = t if t == t else 0.0                    # the exponent of NaN: any defined integer
    n = np.rint(ts * _INV_LN2_64)
    r = fma(n, -_LN2_LO64, fma(n, -_LN2_HI64, t))
    s = fma(fma(fma(fma(fma(fma(_S11, r, _S10), r, _S9), r, _S8), r, _S7), r, _S6), r, _S5)
    s = fma(fma(fma(fma(fma(s, r, _S4), r, _S3), r, _S2), r, _S1), r, _S0)
    em = fma(r * r, s, r)
    two_n = bits_f64(np.int64((np.int64(n) + 1023) << 52))
    e = fma(two_n, em, two_n - 1.0)
    return math.copysign(e / (e + 2.0), x)


# ---- NaN-propagating maximum / minimum (np.maximum, np.minimum) ---------------------------------

@njit(inline="always", error_model="numpy")
def maximum(a: Any, b: Any) -> Any:
    return a if (a >= b or a != a) else b


@njit(inline="always", error_model="numpy")
def minimum(a: Any, b: Any) -> Any:
    return a if (a <= b or a != a) else b


# ---- storage rounding ----------------------------------------------------------------------------

@njit(inline="always", error_model="numpy")
def round_bf16(x: Any) -> Any:
    """float32 -> the nearest bfloat16 (ties to even), as float32 (`lamina.ir.core.dtypes.round_bf16`)."""
    b = np.int64(f32_bits(x)) & 0xFFFFFFFF
    r = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return _NAN if x != x else bits_f32(np.int32(np.int64(r) - (r >> 31 << 32)))


_F16_DENORM_MAGIC = F32(0.5)   # bits (126 << 23): aligns f16 subnormals' 10 bits at the bottom


@njit(inline="always", error_model="numpy")
def f16_bits(x: Any) -> Any:
    """float32 -> the bits of the nearest float16 (ties to even), as NumPy's astype rounds."""
    b = np.int64(f32_bits(x)) & 0xFFFFFFFF
    sign = (b >> 16) & 0x8000
    f = b & 0x7FFFFFFF
    special = 0x7E00 if f > 0x7F800000 else 0x7C00            # NaN, or inf / overflow
    fl = bits_f32(np.int32(f)) + _F16_DENORM_MAGIC             # subnormal or zero: the FPU rounds
    sub = (np.int64(f32_bits(fl)) & 0xFFFFFFFF) - 0x3F000000
    normal = (f + ((15 - 127) << 23) + 0xFFF + ((f >> 13) & 1)) >> 13
    h = special if f >= 0x47800000 else (sub if f < (113 << 23) else normal)
    return np.uint16(h | sign)


_F16_SUB_SCALE = F32(2.0 ** -24)


@njit(inline="always", error_model="numpy")
def f16_value(h: Any) -> Any:
    """The float32 value of float16 bits `h` (exact)."""
    h = np.int64(h)
    sign = (h & 0x8000) << 16
    e = (h >> 10) & 0x1F
    m = h & 0x3FF
    normal = bits_f32(np.int32(((e + 112) << 23) | (m << 13)))
    special = bits_f32(np.int32(0x7F800000 | (m << 13)))
    sub = F32(m) * _F16_SUB_SCALE
    v = special if e == 0x1F else (sub if e == 0 else normal)
    return -v if sign else v


@njit(inline="always", error_model="numpy")
def round_f16(x: Any) -> Any:
    """float32 -> the nearest float16, as float32."""
    return f16_value(f16_bits(x))
