"""Comparing two runs' outputs: tolerances by element type, and a per-output report.

An element agrees when |a - b| <= atol + rtol * scale, where `scale` is the largest finite |b| in
the whole output; NaN must stand where the reference has NaN and infinities must
match. rtol and atol are set by the output's element type. The `scale` term is there because
rewrites that reorder float math (fusion, sharded reductions summing partial results) make errors
relative to the magnitude of the terms summed, not of the result: an element of a matmul output
that cancels to nearly zero carries the rounding error of its large terms. Rewrites that only move
data must match exactly and their tests compare with `exact=True`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TOLERANCES: dict[str, tuple[float, float]] = {
    # dtype: (rtol, atol)
    "f64": (1e-10, 1e-12),
    "f32": (2e-5, 2e-6),
    "f16": (1e-2, 1e-3),
    "bf16": (2e-2, 1e-2),
    "i1": (0.0, 0.0),
    "i32": (0.0, 0.0),
    "i64": (0.0, 0.0),
}


@dataclass
class OutputDiff:
    name: str
    shape: tuple[int, ...]
    dtype: str
    max_abs_err: float
    max_rel_err: float
    rtol: float
    atol: float
    ok: bool
    reason: str = ""
    nan: int = 0   # elements NaN on both sides
    inf: int = 0   # elements the same infinity on both sides

    @property
    def nonfinite(self) -> bool:
        """Whether the sides agree only because some elements are NaN or inf on both."""
        return self.ok and (self.nan > 0 or self.inf > 0)

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "max_abs_err": self.max_abs_err, "max_rel_err": self.max_rel_err,
                "rtol": self.rtol, "atol": self.atol, "ok": self.ok, "nan": self.nan,
                "inf": self.inf}

    def line(self, allow_nonfinite: bool = False) -> str:
        """The report line; an agreement on NaN or inf says `NONFINITE` (`ok` when allowed) and
        counts them."""
        status = "MISMATCH" if not self.ok else \
            "NONFINITE" if self.nonfinite and not allow_nonfinite else "ok"
        text = (f"{self.name}: {status} shape {list(self.shape)} {self.dtype} max abs err "
                f"{self.max_abs_err:.3g} max rel err {self.max_rel_err:.3g} (rtol {self.rtol:g}, "
                f"atol {self.atol:g})")
        if self.nonfinite:
            allowed = " (allowed)" if allow_nonfinite else ""
            return text + f": {self.nan} NaN, {self.inf} inf on both sides{allowed}"
        return text + (f": {self.reason}" if self.reason else "")


def compare(name: str, dtype: str, got: np.ndarray, ref: np.ndarray,
            exact: bool = False) -> OutputDiff:
    rtol, atol = (0.0, 0.0) if exact else TOLERANCES[dtype]
    shape = tuple(ref.shape)
    if got.shape != ref.shape:
        return OutputDiff(name, shape, dtype, float("inf"), float("inf"), rtol, atol, False,
                          f"shape {list(got.shape)} differs from reference {list(ref.shape)}")
    if got.dtype.kind in "biu" or ref.dtype.kind in "biu":
        bad = int(np.count_nonzero(got != ref))
        err = float(bad > 0)
        return OutputDiff(name, shape, dtype, err, err, rtol, atol, bad == 0,
                          f"{bad} elements differ" if bad else "")
    g = got.astype(np.float64)
    r = ref.astype(np.float64)
    nan_g, nan_r = np.isnan(g), np.isnan(r)
    if not np.array_equal(nan_g, nan_r):
        n = int(np.count_nonzero(nan_g != nan_r))
        return OutputDiff(name, shape, dtype, float("nan"), float("nan"), rtol, atol, False,
                          f"NaN in {n} places where the reference has none (or vice versa)")
    finite = ~nan_r & np.isfinite(r) & np.isfinite(g)
    inf_mismatch = int(np.count_nonzero((~finite & ~nan_r) & (g != r)))
    with np.errstate(all="ignore"):
        diff = np.abs(g[finite] - r[finite])
        max_abs = float(diff.max()) if diff.size else 0.0
        rf = np.abs(r[finite])
        scale = float(rf.max()) if rf.size else 0.0
        # relative to the output's scale: the figure the tolerance bounds (see module docstring)
        max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
        within = bool(np.all(diff <= atol + rtol * scale))
    ok = within and inf_mismatch == 0
    reason = "" if ok else (f"{inf_mismatch} infinities differ" if inf_mismatch else
                            "error exceeds tolerance")
    return OutputDiff(name, shape, dtype, max_abs, max_rel, rtol, atol, ok, reason,
                      int(np.count_nonzero(nan_r)), int(np.count_nonzero(np.isinf(r) & (g == r))))
