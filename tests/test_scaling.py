"""Every pass and the verifier do work linear (or n log n) in the program, checked by counting
work instead of timing it (timings on a shared machine say nothing).

The count is every line executed in Lamina's own modules plus every call into any other module
(xDSL's walks and list helpers), under `sys.settrace`, while one stage runs on a generated program
of n = 200 ops and of 8n ops. Linear work grows 8x, quadratic 64x; a stage fails above 8^1.2 =
12.1x (main before the scaling fixes: fuse-elementwise 17x, assign-memory-tiers 23x with
lifetimes and 43x without; after: all 7.7-8.4x). `benchmarks/bench_scaling.py` measures the same stages in seconds."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

import lamina
import pytest
from lamina.ir.text.source import make_context, parse_text, verify
from lamina.passes.pipeline import build_pipeline
from strategies.programs import random_program_text
from xdsl.dialects.builtin import ModuleOp

if TYPE_CHECKING:
    from _typeshed import TraceFunction

ROOT = os.path.dirname(os.path.abspath(lamina.__file__))
SMALL = 200
FACTOR = 8
LIMIT = FACTOR ** 1.2


def count_work(fn: Callable[[], object]) -> int:
    """Lines run in Lamina's modules plus calls into others while `fn` runs."""
    count = 0

    def local(frame: FrameType, event: str, arg: object) -> TraceFunction:
        nonlocal count
        if event == "line":
            count += 1
        return local

    def calls(frame: FrameType, event: str, arg: object) -> TraceFunction | None:
        nonlocal count
        count += 1
        return local if frame.f_code.co_filename.startswith(ROOT) else None

    old = sys.gettrace()
    sys.settrace(calls)
    try:
        fn()
    finally:
        sys.settrace(old)
    return count


def _module(n: int, before: str) -> ModuleOp:
    ctx = make_context()
    m = parse_text(random_program_text(7, n, max_rank=2, max_dim=8), "gen.mlir", ctx)
    for p in build_pipeline(before):
        p.apply(ctx, m)
    return m


def _pass(spec: str) -> Callable[[ModuleOp], object]:
    def run(m: ModuleOp) -> None:
        ctx = make_context()
        for p in build_pipeline(spec):
            p.apply(ctx, m)
    return run


STAGES: dict[str, tuple[str, Callable[[ModuleOp], object]]] = {
    "verify": ("", verify),
    "verify (with frees)": ("annotate-lifetimes", verify),
    "fuse-elementwise": ("", _pass("fuse-elementwise")),
    "fuse-elementwise (with frees)": ("annotate-lifetimes", _pass("fuse-elementwise")),
    "annotate-lifetimes": ("", _pass("annotate-lifetimes")),
    "assign-memory-tiers": ("annotate-lifetimes", _pass("assign-memory-tiers{target=h100-node}")),
    "assign-memory-tiers (no lifetimes)": ("", _pass("assign-memory-tiers{target=h100-node}")),
}


@pytest.mark.parametrize("stage", list(STAGES))
def test_work_grows_linearly(stage: str) -> None:
    before, run = STAGES[stage]
    small, large = _module(SMALL, before), _module(FACTOR * SMALL, before)
    a = count_work(lambda: run(small))
    b = count_work(lambda: run(large))
    assert b / a <= LIMIT, f"{stage}: {a} -> {b} units of work for {FACTOR}x the ops ({b / a:.1f}x)"
