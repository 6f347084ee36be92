"""Pass pipelines and pass options (`lamina.passes.pipeline`): every bad option is one diagnostic in
Lamina's words, for every pass.

Regression tests for the fuzz roots of issue 10: xDSL's wording leaking (`Provided arguments
["max_group"] not found`, underscores for dashes, no suggestion), `max-group-size=true` taken as
the integer 1, integer values over 4,300 digits raising Python's ValueError, an unquoted
`target=my.toml` refused as "Unknown token", and empty option values.
"""

from __future__ import annotations

import dataclasses
import difflib
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from lamina.ir.core.diagnostics import LaminaError
from lamina.passes.assign_memory_tiers import AssignMemoryTiers
from lamina.passes.explain import option_fields
from lamina.passes.fuse_elementwise import FuseElementwise
from lamina.passes.insert_collectives import InsertCollectives
from lamina.passes.pipeline import build_pipeline, parse_pipeline_spec
from lamina.passes.registry import available_passes

REGISTRY = {name: factory() for name, factory in available_passes().items()}
WITH_OPTIONS = sorted(n for n, cls in REGISTRY.items() if option_fields(cls))
WITHOUT_OPTIONS = sorted(n for n, cls in REGISTRY.items() if not option_fields(cls))


def error_of(spec: str) -> str:
    with pytest.raises(LaminaError) as e:
        build_pipeline(spec)
    assert e.value.loc is None and not e.value.notes
    return e.value.message


def typed_options(kind: type) -> list[tuple[str, str]]:
    """(pass, option) for every option of type `kind` of every registered pass."""
    out = []
    for name, cls in REGISTRY.items():
        hints = typing.get_type_hints(cls)
        out += [(name, dash) for dash, f in option_fields(cls).items() if hints[f.name] is kind]
    return sorted(out)


def test_every_pass_is_covered() -> None:
    assert "fuse-elementwise" in WITH_OPTIONS and "cse" in WITHOUT_OPTIONS
    assert typed_options(int) and typed_options(bool) and typed_options(str)
    assert typed_options(float)


@pytest.mark.parametrize("name", WITH_OPTIONS)
def test_unknown_option_lists_the_options_with_dashes(name: str) -> None:
    fields = option_fields(REGISTRY[name])
    message = error_of(f"{name}{{zzzz=1}}")
    listing = ", ".join(fields)
    assert message.startswith(f"unknown option 'zzzz' for {name}; options: "), message
    for dash in fields:
        assert f"{dash} (" in message
    assert "_" not in message.split("options: ")[1], message
    assert "Provided arguments" not in message and "did you mean" not in message, listing


@pytest.mark.parametrize("name", WITH_OPTIONS)
def test_misspelled_option_suggests_the_right_one(name: str) -> None:
    fields = option_fields(REGISTRY[name])
    for dash, f in fields.items():
        for wrong in (dash[:-1], f.name) if "_" in f.name else (dash[:-1],):
            message = error_of(f"{name}{{{wrong}=1}}")
            # `beta` is as close to beta1 as to beta2: either is the right suggestion
            ratio = {d: difflib.SequenceMatcher(None, wrong, d).ratio() for d in fields}
            right = [d for d in fields if ratio[d] == ratio[dash]] if "_" not in wrong else [dash]
            assert any(message.startswith(f"unknown option '{wrong}' for {name} (did you mean "
                                          f"'{d}'?); options: ") for d in right), message


def test_unknown_option_exact_message() -> None:
    assert error_of("fuse-elementwise{max-group=8}") == (
        "unknown option 'max-group' for fuse-elementwise (did you mean 'max-group-size'?); "
        "options: max-group-size (an integer, default 256), reduction-fusion (true or false, "
        "default true), target (a string, default \"\"), explain (true or false, default false)")


@pytest.mark.parametrize("name", WITHOUT_OPTIONS)
def test_pass_without_options(name: str) -> None:
    assert error_of(f"{name}{{foo=1}}") == f"unknown option 'foo' for {name}; {name} takes no options"
    assert build_pipeline(f"{name}{{}}")  # an empty option list is fine


@pytest.mark.parametrize("name, option", typed_options(int))
def test_integer_options_refuse_bools_floats_and_words(name: str, option: str) -> None:
    for value in ("true", "false", "1.5", "1e9", "0x10", "3,4", "ten"):
        assert error_of(f"{name}{{{option}={value}}}") == \
            f"option '{option}' for {name} expects an integer, got '{value}'"


@pytest.mark.parametrize("name, option", typed_options(float))
def test_float_options_refuse_bools_words_and_non_finite(name: str, option: str) -> None:
    for value in ("true", "1e", "nan", "inf", "-inf", "0x10", "1,5", "ten", "1e999"):
        assert error_of(f"{name}{{{option}={value}}}") == \
            f"option '{option}' for {name} expects a finite number (like 1e-3 or 0.9), got '{value}'"


def test_max_group_size_true_is_not_one() -> None:
    assert error_of("fuse-elementwise{max-group-size=true}") == \
        "option 'max-group-size' for fuse-elementwise expects an integer, got 'true'"


@pytest.mark.parametrize("name, option", typed_options(bool))
def test_bool_options_take_true_or_false(name: str, option: str) -> None:
    for value in ("1", "0", "yes", "True"):
        assert error_of(f"{name}{{{option}={value}}}") == \
            f"option '{option}' for {name} expects true or false, got '{value}'"
    field = option_fields(REGISTRY[name])[option].name
    for written, value in ((f"{option}=true", True), (f"{option}=false", False), (option, True)):
        (p,) = build_pipeline(f"{name}{{{written}}}")
        assert getattr(p, field) is value


@pytest.mark.parametrize("digits", [20, 4300, 4301, 5000, 100_000])
def test_huge_integers_are_a_diagnostic(digits: int) -> None:
    assert error_of(f"fuse-elementwise{{max-group-size={'9' * digits}}}") == \
        f"option 'max-group-size' for fuse-elementwise expects a 64-bit integer, got a " \
        f"{digits}-digit number"


def test_integer_range_is_64_bits() -> None:
    (p,) = build_pipeline(f"assign-memory-tiers{{hbm-capacity={2 ** 63 - 1}}}")
    assert isinstance(p, AssignMemoryTiers) and p.hbm_capacity == 2 ** 63 - 1
    assert error_of(f"assign-memory-tiers{{hbm-capacity={2 ** 63}}}") == \
        f"option 'hbm-capacity' for assign-memory-tiers expects a 64-bit integer, got {2 ** 63}"
    (p,) = build_pipeline("fuse-elementwise{max-group-size=+7}")
    assert isinstance(p, FuseElementwise) and p.max_group_size == 7


@pytest.mark.parametrize("written, value", [
    ("target=my.toml", "my.toml"),
    ("target=../targets/my-node_2.toml", "../targets/my-node_2.toml"),
    ("target=/abs/path/t.toml", "/abs/path/t.toml"),
    ('target="dir with space/t.toml"', "dir with space/t.toml"),
    ("target='a{b}.toml'", "a{b}.toml"),
    (r'target="q\"uote.toml"', 'q"uote.toml'),
    ("target=tiny", "tiny"),
])
def test_unquoted_and_quoted_paths(written: str, value: str) -> None:
    for name in ("assign-memory-tiers", "insert-collectives"):
        (p,) = build_pipeline(f"{name}{{{written} explain=true}}")
        assert isinstance(p, AssignMemoryTiers | InsertCollectives)
        assert p.target == value and p.explain is True


def test_unquoted_target_file_runs_end_to_end(tmp_path: Path) -> None:
    import lamina.ir.mesh.target as target_module

    shutil.copy(Path(target_module.__file__).parent / "targets" / "tiny.toml", tmp_path / "my.toml")
    sample = Path(__file__).parents[1] / "samples" / "mlp_block.mlir"
    res = subprocess.run([str(Path(sys.executable).with_name("lamina-opt")), str(sample), "-p",
                          "annotate-lifetimes,assign-memory-tiers{target=my.toml}"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert "tier = " in res.stdout


@pytest.mark.parametrize("written", ["target=", 'target=""', "target=''", "target= solver=ilp"])
def test_empty_values_are_refused(written: str) -> None:
    assert error_of(f"assign-memory-tiers{{{written}}}") == \
        "option 'target' for assign-memory-tiers has an empty value (expected a string)"
    assert error_of("fuse-elementwise{max-group-size=}") == \
        "option 'max-group-size' for fuse-elementwise has an empty value (expected an integer)"


def test_option_needing_a_value_and_given_twice() -> None:
    assert error_of("assign-memory-tiers{target}") == \
        "option 'target' for assign-memory-tiers needs a value (target=...)"
    assert error_of("insert-collectives{target=tiny target=h100-node}") == \
        "option 'target' given twice for insert-collectives"


@pytest.mark.parametrize("spec, reason", [
    ("cse{", "column 4: the options of 'cse' have no closing '}'"),
    ("cse{a=1", "column 4: the options of 'cse' have no closing '}'"),
    ("cse,,dce", "column 5: expected a pass name"),
    ("cse,", "column 5: expected a pass name"),
    ("{", "column 1: expected a pass name"),
    ("cse dce", "column 5: expected ',' or the end after pass 'cse'"),
    ("fuse-elementwise{max-group-size=3,reduction-fusion=false}",
     "column 51: unexpected '=' in the value of option 'max-group-size' (separate options with "
     "spaces: {a=1 b=2}; quote a value that contains '=')"),
    ('assign-memory-tiers{target="t.toml}', "column 28: the value of option 'target' has no closing \""),
    ("assign-memory-tiers{target=a\"b}", "column 29: unexpected \" in the value of option 'target' "
     "(quote the whole value)"),
    ("cse{=1}", "column 5: expected an option name"),
    ("cse{a.b=1}", "column 6: expected a space or '}' after option 'a'"),
])
def test_syntax_errors_name_the_column(spec: str, reason: str) -> None:
    assert error_of(spec) == f"invalid pass pipeline '{spec}': {reason}"


def test_spaces_around_passes_and_empty_pipeline() -> None:
    assert [s.name for s in parse_pipeline_spec(" cse , dce ")] == ["cse", "dce"]
    assert build_pipeline("") == [] and build_pipeline("   ") == []


@pytest.mark.parametrize("spec, message", [
    ("fuse-elementwise{max-group-size=0}",
     "option 'max-group-size' for fuse-elementwise must be at least 1, got 0"),
    ("assign-memory-tiers{solver=magic}",
     "option 'solver' for assign-memory-tiers must be greedy or ilp, got 'magic'"),
])
def test_range_and_choice_rules(spec: str, message: str) -> None:
    assert error_of(spec) == message


def test_passes_built_in_python_obey_the_same_rules() -> None:
    with pytest.raises(LaminaError, match="option 'max-group-size' for fuse-elementwise expects "
                                          "an integer, got true"):
        FuseElementwise(max_group_size=True)
    with pytest.raises(LaminaError, match="option 'target' for assign-memory-tiers expects a "
                                          "string, got 3"):
        AssignMemoryTiers(target=3)  # type: ignore[arg-type]
    with pytest.raises(LaminaError, match="must be greedy or ilp"):
        AssignMemoryTiers(solver="magic")
    p = FuseElementwise(max_group_size=8)
    assert dataclasses.replace(p, explain=True).max_group_size == 8
