"""Every pass output reads back: for random programs, every pass and every README pipeline, the
printed output parses to a module that prints identically (custom and generic form) and runs to
the same outputs; and for random pass orders every prefix's output verifies.

These are the properties that make a printer or pass bug impossible to miss: a pass that leaves
IR the parser cannot read (a constant printing its value's type instead of its result type), or
IR that uses a value after its `lamina.free` (fusion after annotate-lifetimes), fails here on a
small shrunk program.
"""

from __future__ import annotations

import io

import lamina
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.backends.compare import compare
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import run_function
from lamina.ir.core.dtypes import tensor_dtype
from lamina.ir.text.source import make_context, parse_text, verify
from lamina.passes.pipeline import build_pipeline, run_pipeline
from strategies import examples
from strategies.programs import programs
from xdsl.dialects.builtin import ModuleOp
from xdsl.printer import Printer

# every Lamina pass alone, and the pipelines the README shows
PIPELINES = [
    "cse", "canonicalize", "fuse-elementwise", "annotate-lifetimes",
    "assign-memory-tiers{target=tiny}",
    "fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=tiny}",
    "annotate-lifetimes,fuse-elementwise",
    "fuse-elementwise{max-group-size=256 reduction-fusion=true}",
]
# passes a random order draws from (placement passes need placed inputs: tested in test_spmd)
ORDERABLE = ["cse", "canonicalize", "fuse-elementwise", "annotate-lifetimes",
             "assign-memory-tiers{target=h100-node}"]


def _text(module: ModuleOp, generic: bool = False) -> str:
    out = io.StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(module)
    return out.getvalue()


def _reads_back(module: ModuleOp, where: str) -> ModuleOp:
    printed = _text(module)
    again = parse_text(printed, where)
    verify(again)
    assert _text(again) == printed, where
    generic = _text(module, generic=True)
    from_generic = parse_text(generic, where)
    verify(from_generic)
    assert _text(from_generic) == printed, where
    return again


def _same_outputs(a: ModuleOp, b: ModuleOp, inputs: list[np.ndarray], where: str) -> None:
    fa, fb = find_entry(a, None), find_entry(b, None)
    ra, rb = run_function(fa, inputs), run_function(fb, inputs)
    for i, (x, y, t) in enumerate(zip(rb.outputs, ra.outputs, fa.function_type.outputs.data,
                                      strict=True)):
        d = compare(f"out{i}", tensor_dtype(t), x, y)
        assert d.ok, f"{where}: {d.line()}"


@settings(max_examples=examples(20))
@given(prog=programs(min_ops=2, max_ops=12, dtypes=("f32", "bf16")),
       pipeline=st.sampled_from(PIPELINES))
def test_every_pipeline_output_reads_back_and_runs_the_same(prog, pipeline: str) -> None:
    ctx = make_context()
    module = parse_text(prog.text, "p.mlir", ctx)
    verify(module)
    reference = module.clone()
    try:
        run_pipeline(ctx, module, build_pipeline(pipeline))
    except lamina.LaminaError as e:   # a plan that cannot fit a target is a diagnostic, not a bug
        assert "no assignment fits" in e.message, e.message
        return
    again = _reads_back(module, f"after {pipeline}")
    _same_outputs(reference, again, prog.inputs, pipeline)


@settings(max_examples=examples(20))
@given(prog=programs(min_ops=2, max_ops=12),
       order=st.lists(st.sampled_from(ORDERABLE), min_size=1, max_size=5))
def test_random_pass_orders_verify_after_every_prefix(prog, order: list[str]) -> None:
    """Each pass either keeps the IR valid (it is verified after each pass of the pipeline) or
    the pipeline refuses with a diagnostic; never invalid IR, never an internal error."""
    ctx = make_context()
    module = parse_text(prog.text, "p.mlir", ctx)
    verify(module)
    reference = module.clone()
    for k, name in enumerate(order):
        try:
            run_pipeline(ctx, module, build_pipeline(name))
        except lamina.LaminaError as e:
            assert "internal error" not in e.message and "after pass" not in e.message, \
                f"{' -> '.join(order[:k + 1])}: {e.message}"
            return
        _reads_back(module, " -> ".join(order[:k + 1]))
    _same_outputs(reference, module, prog.inputs, " -> ".join(order))
