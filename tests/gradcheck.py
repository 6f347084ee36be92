"""Shared helpers of the gradient tests: derive, run, compare with stated tolerances per dtype.

Tolerances. A derived gradient G (Lamina, element type D) is compared with the float64 gradient R
of PyTorch's autograd on the same inputs, relative to s = max(max |R|, 1):

    f64:        |G - R| <= 1e-9 s
    f32, f16, bf16: |G - R| <= rtol[D] s + 4 |T - R|,  rtol = 1e-5 (f32), 2e-3 (f16), 1.6e-2 (bf16)

where T is PyTorch's own gradient computed in D, and R computes D in float64 (other element types
of the program, such as a cast to bf16 inside an f32 program, keep their own rounding). The second term is the program's conditioning as
PyTorch meets it: a float32 layernorm of nearly constant rows carries 5e-4 of rounding in its
gradient in both frameworks, and a derived gradient may not be more than 4 times worse than
PyTorch's. Measured on the random programs of the property tests (`tests/strategies`): f64 at most
1e-12 s; f32 at most 20x PyTorch's error where that is below 4e-9 s (so within the floor), and
equal to it elsewhere; f16 and bf16 within 1.0x-1.2x of PyTorch's where errors are large.

A gradient that is zero by cancellation (a key bias under softmax, which is invariant to a shift
of its row: the sample GPT-2 block's `b_k`) is the difference of terms as large as the loss's
other gradients, so in a low-precision type it is rounding noise of their size, not of its own:
where max |R| is below rtol[D] S, S the largest reference gradient of the same loss, the scale s
is S, the scale of the terms that cancel. (Measured on `gpt2_block_parallel` with a sum-of-squares loss: S = 3.1e7, R for
b_k below 1, PyTorch's float32 error 1.14 and Lamina's 4.75 to 4.97 depending on BLAS's thread
count: 1.5e-7 of S.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import lamina
import numpy as np
import torch_ref
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import run_function
from lamina.ir.builder import Builder, is_float_value
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.core.shapes import info_of
from lamina.ir.mesh.placement import COMPUTE_TIERS, tier_of
from lamina.ir.ops.opbase import tensor_info
from xdsl.dialects.builtin import FunctionType, ModuleOp
from xdsl.dialects.func import FuncOp, ReturnOp

RTOL = {"f64": 1e-9, "f32": 1e-5, "f16": 2e-3, "bf16": 1.6e-2}
TORCH_FACTOR = 4.0


@dataclass
class Check:
    """One gradient's comparison: its error, the allowed error, and the scale."""

    err: float
    allowed: float
    scale: float

    @property
    def ok(self) -> bool:
        return self.err <= self.allowed


def check_gradient(got: np.ndarray, ref: np.ndarray | None, own: np.ndarray | None,
                   dtype: str, loss_scale: float = 0.0) -> Check:
    """`got` (Lamina) against `ref` (float64 autograd; None: no path, so zeros) and `own`
    (autograd in `dtype`), by the module docstring's rule; `loss_scale` is the largest reference
    gradient of the same loss, the scale of a gradient that cancels to zero."""
    g = np.asarray(got, dtype=np.float64)
    r = np.zeros_like(g) if ref is None else np.asarray(ref, dtype=np.float64)
    scale = max(float(np.abs(r).max(initial=0.0)), 1.0)
    if dtype != "f64" and scale < RTOL[dtype] * loss_scale:
        scale = loss_scale   # zero by cancellation: see the module docstring
    err = float(np.abs(g - r).max(initial=0.0))
    allowed = RTOL[dtype] * scale
    if dtype != "f64":
        t = np.zeros_like(g) if own is None else np.asarray(own, dtype=np.float64)
        allowed += TORCH_FACTOR * float(np.abs(t - r).max(initial=0.0))
    return Check(err, allowed, scale)


def derive(text: str, pipeline: str, name: str = "<test>") -> ModuleOp:
    """Parse, run `pipeline`, and check the result verifies and reads back identically."""
    module = lamina.parse(text, name)
    lamina.apply(module, pipeline)
    printed = lamina.to_text(module)
    again = lamina.parse(printed, name)
    assert lamina.to_text(again) == printed
    generic = lamina.parse(lamina.to_text(module, generic=True), name)
    assert lamina.to_text(generic) == printed
    return module


def float_dtype(func: FuncOp) -> str:
    """The element type of the function's first float argument."""
    for t in func.function_type.inputs.data:
        d = tensor_info(t).dtype
        if d in RTOL:
            return d
    return "f64"


def compare_with_torch(module: ModuleOp, fwd: str, inputs: Sequence[np.ndarray], wrt: list[int],
                       loss: int = 0, seed: np.ndarray | None = None) -> list[Check]:
    """Run `@{fwd}_grad` and compare each gradient with autograd on `@fwd` (seed: the cotangent
    argument of a non-scalar loss)."""
    f = find_entry(module, fwd)
    g = find_entry(module, f"{fwd}_grad")
    ins = list(inputs) + ([seed] if seed is not None else [])
    got = run_function(g, ins).outputs
    dtype = float_dtype(f)
    _, ref = torch_ref.gradients(f, inputs, wrt, loss, seed, upcast=dtype)
    own = ref if dtype == "f64" else torch_ref.gradients(f, inputs, wrt, loss, seed)[1]
    loss_scale = max((float(np.abs(np.asarray(r, dtype=np.float64)).max(initial=0.0))
                      for r in ref if r is not None), default=0.0)
    return [check_gradient(a, r, o, tensor_info(f.body.block.args[i].type).dtype, loss_scale)
            for a, r, o, i in zip(got[1:], ref, own, wrt, strict=True)]


def with_sum_of_squares(module: ModuleOp, entry: str | None = None) -> bool:
    """Make function `entry` (default: the only one) return sum(r * r) over its float results in
    compute tiers, as one scalar in the first one's element type; False when there is none."""
    func = find_entry(module, entry)
    ret = func.body.block.last_op
    assert isinstance(ret, ReturnOp)
    b = Builder.before_op(ret)
    total = None
    for v in ret.operands:
        if not is_float_value(v) or tier_of(v.type) not in (None, *COMPUTE_TIERS):
            continue  # (a result in host memory would need a move first)
        s = b.reduce_sum(b.mul(v, v), list(range(info_of(v).rank)))
        total = s if total is None else b.add(total, b.cast(s, info_of(total).dtype))
    if total is None:
        return False
    ret.operands = [total]
    func.function_type = FunctionType.from_lists([a.type for a in func.body.block.args],
                                                 [total.type])
    return True


def float_args(func: FuncOp) -> list[int]:
    return [i for i, a in enumerate(func.body.block.args) if is_float_value(a)]


def autograd_checks(module: ModuleOp, fwd: str, inputs: Sequence[np.ndarray], wrt: list[int],
                    loss: int = 0) -> list[tuple[int, Check]]:
    """(argument, check) for each gradient of `@{fwd}_grad` against autograd on `@fwd`."""
    return list(zip(wrt, compare_with_torch(module, fwd, inputs, wrt, loss), strict=True))


@dataclass
class Derived:
    """A derivation wrt every float argument but those the diagnostic refused (`blocked`)."""

    module: ModuleOp | None      # None when every argument was refused
    wrt: list[int]
    blocked: list[int]


def derive_all(text: str, entry: str, loss: int = 0, name: str = "<test>") -> Derived:
    """derive-backward of `@entry` wrt each float argument; an argument the diagnostic names
    ("depends on %a only through ...") is recorded and left out, and the derivation repeated."""
    func = find_entry(lamina.parse(text, name), entry)
    names = [a.name_hint or f"arg{i}" for i, a in enumerate(func.body.block.args)]
    wrt, blocked = float_args(func), []
    while wrt:
        option = ",".join(names[i] for i in wrt)
        try:
            return Derived(derive(text, f"derive-backward{{func={entry} loss={loss} wrt={option}}}",
                                  name), wrt, blocked)
        except LaminaError as e:
            named = [i for i in wrt if f"depends on %{names[i]} only through" in e.message]
            if not named:
                raise
            blocked.append(named[0])
            wrt = [i for i in wrt if i != named[0]]
    return Derived(None, [], blocked)


def optimizer_step(text: str, options: str) -> tuple[Derived, FuncOp] | None:
    """A random program's training step: `@main` derived wrt every float argument it can be
    (`derive_all`), then `append-optimizer{options}`; None for a program without a sum of squares
    to train on or with no argument left to derive (what the random-step tests skip)."""
    module = lamina.parse(text)
    if not with_sum_of_squares(module):
        return None
    got = derive_all(lamina.to_text(module), "main", name="gen.mlir")
    if got.module is None:
        return None
    step = find_entry(derive(lamina.to_text(got.module), f"append-optimizer{{{options}}}",
                             "gen.mlir"), "main_step")
    return got, step
