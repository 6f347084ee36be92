"""Tests of the program generator itself (`strategies.programs`).

Generated programs must parse and verify, print and re-parse to identical text in the custom and
the generic form, and run on the NumPy interpreter with finite outputs; every family must really
occur; `random_program_text` must make large valid programs quickly; every value a run computes
must lie in the range the generator tracked for it; the generators must name no ops themselves.
"""

from __future__ import annotations

import ast
import re
import time
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.backends.interface import find_entry
from lamina.backends.numpy.runner import make_call, run_function
from lamina.ir.ops.opbase import LaminaOp
from lamina.ir.ops.optable import OPS
from lamina.ir.text.source import parse_text, verify
from strategies import examples
from strategies.programs import (
    FLOATS,
    KNOWN_FAMILIES,
    GeneratedProgram,
    programs,
    random_program,
    random_program_text,
)
from xdsl.dialects.builtin import TensorType
from xdsl.ir import SSAValue
from xdsl.printer import Printer


def _print(module, generic: bool = False) -> str:
    out = StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(module)
    return out.getvalue()


def check_program(p: GeneratedProgram) -> None:
    module = parse_text(p.text)
    verify(module)
    func = find_entry(module, "main")
    n = sum(isinstance(op, LaminaOp) for op in func.body.block.ops)
    assert n == p.n_ops
    arg_types = []
    for t in func.function_type.inputs.data:
        assert isinstance(t, TensorType)
        arg_types.append((tuple(t.get_shape()), str(t.element_type)))
    assert arg_types == [(s, d) for s, d in p.arg_types]
    # custom form round trip
    printed = _print(module)
    again = parse_text(printed)
    verify(again)
    assert _print(again) == printed
    # generic form round trip
    generic = _print(module, generic=True)
    from_generic = parse_text(generic)
    verify(from_generic)
    assert _print(from_generic) == printed
    # runs with finite outputs
    assert len(p.inputs) == len(p.arg_types)
    for a, (shape, _) in zip(p.inputs, p.arg_types, strict=True):
        assert a.shape == shape
        if a.dtype.kind == "f":
            assert np.isfinite(a).all()
    res = run_function(func, p.inputs)
    assert len(res.outputs) == len(func.function_type.outputs.data)
    for o in res.outputs:
        if o.dtype.kind == "f":
            assert np.isfinite(o).all(), p.text


@settings(max_examples=examples(30))
@given(programs())
def test_default_programs_are_valid(p: GeneratedProgram) -> None:
    check_program(p)


@settings(max_examples=examples(20))
@given(programs(dtypes=FLOATS, max_ops=20))
def test_mixed_dtype_programs_are_valid(p: GeneratedProgram) -> None:
    check_program(p)


@pytest.mark.parametrize("family", KNOWN_FAMILIES)
@settings(max_examples=examples(10))
@given(data=st.data())
def test_single_family_programs_are_valid(family: str, data) -> None:
    dtypes = data.draw(st.sampled_from(
        [("f32",), ("f16",), ("bf16",), ("f64",), FLOATS]))
    p = data.draw(programs(families=(family,), dtypes=dtypes, max_ops=8))
    check_program(p)


@settings(max_examples=examples(20))
@given(programs(max_rank=1, max_dim=2, max_outputs=1, min_ops=3, max_ops=6))
def test_small_shape_programs_are_valid(p: GeneratedProgram) -> None:
    check_program(p)
    assert p.text.count("func.return") == 1


@settings(max_examples=examples(10))
@given(programs(max_rank=0))
def test_rank0_programs_are_valid(p: GeneratedProgram) -> None:
    check_program(p)


def test_results_include_last_value() -> None:
    for seed in range(20):
        text = random_program_text(seed, 10)
        lines = text.splitlines()
        last_name = lines[-3].split("=")[0].strip()
        ret = lines[-2]
        names = ret.split(":")[0].replace("func.return", "").split(",")
        assert last_name in [n.strip() for n in names]
        assert 1 <= len(names) <= 3


# each family's characteristic ops/features, as they appear in the text
FAMILY_MARKERS = {
    "elementwise": [r"lamina\.(neg|abs|exp|log|tanh|sin|cos|sigmoid|relu|gelu|erf|sqrt|rsqrt|"
                    r"reciprocal) ",
                    r"lamina\.cast "],
    "broadcast": [r"lamina\.(add|sub|mul|div|max|min|pow) %\w+, %\w+ : \(tensor<(\d+x)*\w+>, "
                  r"tensor<(\d+x)*\w+>\)", r"lamina\.broadcast_in_dim "],
    "reduction": [r"lamina\.reduce_sum .*keepdims = true", r"lamina\.reduce_mean ",
                  r"lamina\.reduce_max .*keepdims = false", r"lamina\.cumsum .*exclusive = true"],
    "composite": [r"lamina\.layernorm %\w+ scale %\w+ bias", r"lamina\.layernorm %\w+ \{",
                  r"lamina\.rmsnorm %\w+ scale", r"lamina\.rmsnorm %\w+ [:{]",
                  r"lamina\.softmax "],
    "matmul": [r"lamina\.matmul %\w+, %\w+ : \(tensor<\d+x\d+x\d+x"],
    "layout": [r"lamina\.transpose ", r"lamina\.reshape ", r"lamina\.slice .*strides",
               r"lamina\.slice ", r"lamina\.concat %\w+, %\w+", r"lamina\.pad .*value = "],
    "dropout": [r"lamina\.dropout %\w+ seed %", r"lamina\.dropout %\w+ \{rate = [^}]*seed ="],
    "constant": [r"lamina\.constant dense<\[", r"lamina\.constant dense<[-\d]"],
    "select": [r"lamina\.select ", r"lamina\.(eq|ne|lt|le|gt|ge) %\w+, %\w+ : .*i(32|64|1)>"],
    "indexing": [r"lamina\.iota \{dim = -?\d+ : i64\} : \(\) -> tensor<[\dx]*i(32|64)>",
                 r"lamina\.iota .*-> tensor<[\dx]*(f16|bf16|f32|f64)>",
                 r"lamina\.gather %\w+, %\w+ \{axis = -\d+"],
    # the opt-in motifs: a layout op between elementwise ops, GPT-2's QKV split (slice, reshape
    # into heads, transpose, and the next part sliced from the same value), a concat of
    # elementwise results; a matmul whose result takes a bias add, a mask multiply, a residual
    "layout_between": [r"(%\d+) = lamina\.(neg|abs|exp|log|tanh|sigmoid|relu|gelu|erf|sqrt|rsqrt|"
                       r"reciprocal) .*\n  (%\d+) = lamina\.transpose \1 .*\n  %\d+ = lamina\.\w+ "
                       r"(\3,|%\w+, \3 )",
                       r"lamina\.slice (%\d+) .*\n.*lamina\.reshape .*\n.*lamina\.transpose .*\n"
                       r".*lamina\.slice \1 ",
                       r"(%\d+) = lamina\.\w+ .*\n  (%\d+) = lamina\.\w+ .*\n  %\d+ = "
                       r"lamina\.concat \1, \2 "],
    "epilogue": [r"(%\d+) = lamina\.matmul .*\n  %\d+ = lamina\.add \1, ",
                 r"(%\d+) = lamina\.cast %\d+ : \(tensor<[\dx]*i1>\) .*\n  %\d+ = lamina\.mul "
                 r"%\d+, \1 ",
                 r"= lamina\.matmul (%arg\d+), .*\n(  .*\n)*  %\d+ = lamina\.add \1, "],
}


def test_every_family_occurs_over_fixed_seeds() -> None:
    # 80 programs of 25 ops: enough to meet every row of the table (48 of them) at least once
    texts = [random_program_text(seed, 25, dtypes=FLOATS) for seed in range(80)]
    for family in KNOWN_FAMILIES:
        only = [random_program_text(seed, 12, families=(family,)) for seed in range(40)]
        for marker in FAMILY_MARKERS[family]:
            assert any(re.search(marker, t) for t in texts + only), (family, marker)
    # all ops of the table appear, and args of rank 0 / operand broadcasting of rank 0 occur
    allt = "\n".join(texts)
    for name in OPS:
        assert f"lamina.{name} " in allt, name
    assert re.search(r"tensor<(f16|bf16|f32|f64)>", allt)
    # values are used several times (DAG, not a chain)
    uses = re.findall(r"(%\d+)[,\s]", "\n".join(line.split("=", 1)[-1]
                                                  for line in texts[0].splitlines()))
    assert max(uses.count(u) for u in set(uses)) >= 2


def test_random_programs_run_finite_over_seeds() -> None:
    for seed in range(30):
        check_program(random_program(seed, 30, dtypes=FLOATS))


def test_random_program_text_is_deterministic() -> None:
    assert random_program_text(5, 100) == random_program_text(5, 100)
    assert random_program_text(5, 100) != random_program_text(6, 100)


def test_large_random_program_parses_and_verifies() -> None:
    text = random_program_text(1, 2000, dtypes=FLOATS)
    module = parse_text(text)
    verify(module)
    func = find_entry(module, None)
    assert sum(isinstance(op, LaminaOp) for op in func.body.block.ops) == 2000


def test_generation_is_fast_and_linear() -> None:
    t0 = time.perf_counter()
    random_program_text(3, 5000)
    t1 = time.perf_counter()
    text = random_program_text(3, 20000)
    t2 = time.perf_counter()
    assert text.count(" = lamina.") == 20000
    # lenient bounds: the machine is shared; quadratic generation would take minutes here
    assert t2 - t1 < 20.0
    assert (t2 - t1) < 10 * (t1 - t0) + 2.0   # 4x the ops: linear is ~4x, quadratic ~16x


def _values_outside_ranges(p: GeneratedProgram, rel: float) -> list[str]:
    """Evaluate `p` op by op with each row's formula on float64 values (no rounding to the storage
    types: the rules bound the real functions, so narrow types' rounding is left out) and list
    each op whose result leaves the interval the generator tracked for it by more than `rel`
    relative to the interval's size."""
    func = find_entry(parse_text(p.text), "main")
    inputs = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in p.inputs]
    env: dict[SSAValue, np.ndarray] = dict(zip(func.body.block.args, inputs, strict=True))
    ops = [op for op in func.body.block.ops if isinstance(op, LaminaOp)]
    assert len(ops) == len(p.ranges)
    bad = []
    for op, (lo, hi) in zip(ops, p.ranges, strict=True):
        args = [None if v is None else env[v] for v in op.operand_slots()]
        with np.errstate(all="ignore"):
            out = np.asarray(op.info.formula(np, args, make_call(op)))
        y = out.astype(np.float64)
        env[op.results[0]] = y if out.dtype.kind == "f" else out
        tol = rel * max(1.0, abs(lo), abs(hi))
        if y.size and not (lo - tol <= y.min() and y.max() <= hi + tol):
            bad.append(f"{op.name}: [{y.min()}, {y.max()}] outside [{lo}, {hi}]")
    return bad


@settings(max_examples=examples(20))
@given(programs(dtypes=("f64",), max_ops=20))
def test_values_stay_in_the_tracked_ranges(p: GeneratedProgram) -> None:
    """The rows' interval rules as the generator applies them are sound on real values: every
    value of a program lies in the range the generator tracked (the end-to-end check of
    `lamina.ir.ops.intervals`, reductions, normalizations and layout rules included)."""
    assert not _values_outside_ranges(p, 1e-5), p.text


def test_values_stay_in_the_tracked_ranges_over_seeds() -> None:
    for seed in range(30):
        p = random_program(seed, 40, dtypes=FLOATS)
        assert not _values_outside_ranges(p, 1e-5), p.text


def _string_tokens(path: Path) -> set[str]:
    """Identifier-like words in the file's string literals (f-string parts included), docstrings
    left out: what would name an op if the file kept its own op list."""
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}
    words: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            words.update(re.findall(r"[A-Za-z_]\w*", node.value))
    return words


@pytest.mark.parametrize("path", [Path(__file__).parent / "strategies" / "programs.py",
                                  Path(__file__).parent / "strategies" / "motifs.py",
                                  Path(__file__).parent.parent / "benchmarks" /
                                  "bench_foundation.py"], ids=lambda p: p.name)
def test_generators_name_no_ops(path: Path) -> None:
    """The program generators take their ops from the table (by facts, or typed classes' INFO):
    an op name in a string literal there is a second op list that goes stale. Family names that
    happen to be op names too (select, constant, ...) are allowed."""
    named = {w for w in _string_tokens(path) if w in OPS and w not in KNOWN_FAMILIES}
    assert not named, f"{path.name} names ops in strings: {sorted(named)}"
