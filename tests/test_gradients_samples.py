"""Derived gradients of every sample function against torch.autograd.

Every function of `samples/*.mlir` whose arguments hold fewer than 300k elements, twice where it
has a scalar result: with each such result as the loss, and with the sum of squares of all its
float results (so the functions without a scalar loss are covered too: attention, the GPT-2 block,
layout, dtypes, ...). Differentiated wrt every float argument; an argument the diagnostic refuses
must also have no autograd path (the zero_offload sample's tier moves pass the gradient through).
A function whose loss is reached through collectives (the hand-placed data-parallel step) is
refused with the diagnostic that says to derive first.
Tolerances: `gradcheck`.
"""

from __future__ import annotations

import os

import lamina
import numpy as np
import pytest
import torch_ref
from gradcheck import autograd_checks, derive_all, float_dtype, with_sum_of_squares
from lamina.backends.inputs import random_inputs
from lamina.backends.interface import find_entry, functions
from lamina.ir.builder import is_float_value
from lamina.ir.core.diagnostics import LaminaError
from lamina.ir.mesh.collectives import PlacementOp
from lamina.ir.ops.opbase import tensor_info
from sample_files import VALID

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_ELEMENTS = 300_000


def _cases() -> list[tuple[str, str, int | None]]:
    """(sample, function, loss result or None for the sum of squares)."""
    out = []
    for path in VALID:
        for f in functions(lamina.load(path)):
            infos = [tensor_info(t) for t in f.function_type.inputs.data]
            if sum(int(np.prod(i.shape)) for i in infos) >= MAX_ELEMENTS:
                continue
            name = os.path.basename(path)
            out.append((name, f.sym_name.data, None))
            ret = f.body.block.last_op
            assert ret is not None
            out += [(name, f.sym_name.data, k) for k, v in enumerate(ret.operands)
                    if is_float_value(v) and tensor_info(v.type).shape == ()]
    return out


CASES = _cases()


def test_cases_include_the_scalar_losses() -> None:
    scalar = {(s, f) for s, f, k in CASES if k is not None}
    assert {("mlp_training_forward.mlir", "mlp_training_loss"),
            ("mlp_training_offload.mlir", "mlp_training_step"),
            ("zero_offload_step.mlir", "zero_offload_step")} <= scalar
    assert ("gpt2_block.mlir", "gpt2_block", None) in CASES


@pytest.mark.parametrize("sample, entry, loss", CASES,
                         ids=[f"{s}:{f}:{'sumsq' if k is None else k}" for s, f, k in CASES])
def test_sample_gradients_match_autograd(sample: str, entry: str, loss: int | None) -> None:
    module = lamina.load(os.path.join(ROOT, "samples", sample))
    if loss is None:
        assert with_sum_of_squares(module, entry)
    text = lamina.to_text(module)
    func = find_entry(lamina.parse(text), entry)
    inputs = random_inputs(func, 0)
    for k, a in enumerate(func.body.block.args):  # second moments are a valid state: v >= 0
        if (a.name_hint or "").startswith("v") and inputs[k].dtype.kind == "f":
            inputs[k] = np.abs(inputs[k])
    on_path = any(isinstance(op, PlacementOp) for op in func.walk())
    try:
        got = derive_all(text, entry, loss or 0, name=sample)
    except LaminaError as e:
        assert on_path and "lamina.all_reduce has no VJP" in e.message, e.message
        return
    assert not on_path, "a collective on the way to the loss must be refused"
    dtype = float_dtype(func)
    for i in got.blocked:
        _, ref = torch_ref.gradients(func, inputs, [i], loss or 0, upcast=dtype)
        assert ref[0] is None, f"%{func.body.block.args[i].name_hint} was refused, but autograd " \
            "finds a path"
    if got.module is None:
        return
    for i, c in autograd_checks(got.module, entry, inputs, got.wrt, loss or 0):
        assert c.ok, f"{sample} @{entry} d/d arg{i}: error {c.err:.3g} > {c.allowed:.3g}"
