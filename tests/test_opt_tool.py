"""`lamina-opt` keeps the promises of the flags it lists (issue 10): every flag in `--help` works as in
mlir-opt / xdsl-opt, and `--verify-diagnostics` checks MLIR's `expected-*` annotations.

The general error rules (one diagnostic, exit 1, `-o` only on success) are in test_cli.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import lamina
import pytest
from lamina.cli import opt as opt_module
from lamina.cli.diagnostic_verifier import Diagnostic, check, parse_expectations
from lamina.ir.core.diagnostics import LaminaError, SourceLoc
from lamina.ir.text.source import parse_text, verify

OPT = Path(sys.executable).parent / "lamina-opt"
INVALID = Path(__file__).parent / "filecheck" / "invalid"

GOOD = """\
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = lamina.exp %x : tensor<4x8xf32>
  %1 = lamina.exp %x : tensor<4x8xf32>
  %2 = lamina.add %0, %1 : tensor<4x8xf32>
  %3 = lamina.gelu %2 {approximate = "tanh"} : tensor<4x8xf32>
  func.return %3 : tensor<4x8xf32>
}
"""
BAD = """\
func.func @g(%x: tensor<4x8xf32>, %w: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = lamina.matmul %x, %w : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}
"""
BAD_MESSAGE = "lamina.matmul: contracting dimensions differ: lhs (4, 8) has 8, rhs (4, 8) has 4"


def opt(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(OPT), *args], cwd=cwd, input=stdin, capture_output=True, text=True,
                          timeout=120)


def write(tmp: Path, name: str, text: str) -> str:
    (tmp / name).write_text(text)
    return name


# ---------------------------------------------------------------------------------------------
# the flags


FLAGS = {"-h", "--help", "-v", "--version", "-p", "--passes", "-o", "--output-file", "-t",
         "--target", "--split-input-file", "--verify-diagnostics", "--parsing-diagnostics",
         "--print-op-generic", "--print-debuginfo", "--explain", "--time-passes", "--mlir-timing",
         "--print-between-passes", "--mlir-print-ir-after-all", "--disable-verify",
         "--verify-each", "--list-passes", "--report", "--compare", "--timeline", "--cost-target"}


def test_help_lists_exactly_the_supported_flags(tmp_path: Path) -> None:
    res = opt("--help", cwd=tmp_path)
    assert res.returncode == 0
    options = res.stdout.split("options:")[1]
    listed = set(re.findall(r"(?<=[\s,])(--?[a-z][a-z-]*)", options))
    assert listed == FLAGS, listed ^ FLAGS


@pytest.mark.parametrize("flag", ["--syntax-highlight", "--shrink", "--frontend=mlir",
                                  "--allow-unregistered-dialect", "--no-implicit-module",
                                  "--print-no-properties"])
def test_xdsl_flags_that_did_nothing_are_gone(tmp_path: Path, flag: str) -> None:
    res = opt(flag, write(tmp_path, "ok.mlir", GOOD), cwd=tmp_path)
    assert res.returncode == 1
    assert res.stderr == f"lamina-opt: error: unrecognized arguments: {flag}\n"


@pytest.mark.parametrize("flag", ["-v", "--version"])
def test_version_names_lamina(tmp_path: Path, flag: str) -> None:
    res = opt(flag, cwd=tmp_path)
    assert res.returncode == 0
    assert res.stdout == f"lamina-opt {lamina.__version__} (Lamina), on xDSL {version('xdsl')}\n"


def test_target_offers_mlir_and_linalg_only(tmp_path: Path) -> None:
    name = write(tmp_path, "ok.mlir", GOOD)
    plain = opt(name, cwd=tmp_path)
    assert opt(name, "-t", "mlir", cwd=tmp_path).stdout == plain.stdout
    assert opt(name, "--target=mlir", cwd=tmp_path).stdout == plain.stdout
    for xdsl_target in ("llvm", "x86-asm", "riscv-asm", "wgsl", "csl"):
        res = opt(name, "-t", xdsl_target, cwd=tmp_path)
        assert res.returncode == 1 and res.stdout == ""
        assert res.stderr == (f"lamina-opt: error: argument -t/--target: invalid choice: "
                              f"'{xdsl_target}' (output targets: mlir, linalg)\n")


def test_empty_output_file_is_refused(tmp_path: Path) -> None:
    res = opt("-o", "", cwd=tmp_path, stdin=GOOD)
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == "lamina-opt: error: argument -o/--output-file: expected a file name, got ''\n"


def test_a_hardware_target_is_not_an_output_target(tmp_path: Path) -> None:
    res = opt("--target", "tiny", cwd=tmp_path, stdin=GOOD)
    assert res.returncode == 1
    assert res.stderr == (
        "lamina-opt: error: argument -t/--target: invalid choice: 'tiny' (output targets: mlir, linalg); "
        "'tiny' is a hardware target, which passes take as an option "
        "(-p 'assign-memory-tiers{target=tiny}') and lamina-run as --target\n")
    assert "arm-asm" not in res.stderr and "x86" not in res.stderr


ROW = re.compile(r"^  ([ \d]{2}\d\.\d{4}) \(([ \d]{2}\d\.\d)%\)  (.+)$")


def timing_rows(stderr: str) -> list[tuple[float, float, str]]:
    """The rows of MLIR's execution time report, checking its frame line by line."""
    lines = stderr.rstrip("\n").split("\n")
    start = lines.index("===" + "-" * 73 + "===")
    frame = lines[start:start + 6]
    assert frame[1] == " " * 25 + "... Execution time report ..."
    assert frame[2] == frame[0]
    assert re.fullmatch(r"  Total Execution Time: \d+\.\d{4} seconds", frame[3])
    assert frame[4:6] == ["", "  ----Wall Time----  ----Name----"]
    rows = []
    for line in lines[start + 6:]:
        m = ROW.match(line)
        assert m, line
        rows.append((float(m.group(1)), float(m.group(2)), m.group(3)))
    total = float(frame[3].split()[3])
    assert rows[-1] == (total, 100.0, "Total")
    assert abs(sum(r[0] for r in rows[:-1]) - total) <= 0.0001 * len(rows)
    return rows


def test_time_passes_prints_mlirs_report(tmp_path: Path) -> None:
    name = write(tmp_path, "ok.mlir", GOOD)
    res = opt(name, "-p", "cse,fuse-elementwise", "--time-passes", cwd=tmp_path)
    assert res.returncode == 0
    assert res.stdout == opt(name, "-p", "cse,fuse-elementwise", cwd=tmp_path).stdout
    names = [r[2] for r in timing_rows(res.stderr)]
    assert names == ["Parser", "Verifier", "cse", "Verifier", "fuse-elementwise", "Verifier",
                     "Output", "Rest", "Total"]
    assert res.stderr.startswith("===")  # nothing else on stderr

    # chunks accumulate into the same rows; --mlir-timing is the same flag
    split = write(tmp_path, "split.mlir", GOOD + "// -----\n" + GOOD)
    res = opt(split, "--split-input-file", "-p", "cse", "--mlir-timing", cwd=tmp_path)
    assert res.returncode == 0
    assert [r[2] for r in timing_rows(res.stderr)] == ["Parser", "Verifier", "cse", "Verifier",
                                                       "Output", "Rest", "Total"]


def test_time_passes_still_reports_after_an_error(tmp_path: Path) -> None:
    res = opt(write(tmp_path, "bad.mlir", BAD), "--time-passes", cwd=tmp_path)
    assert res.returncode == 1
    assert res.stderr.startswith(f"bad.mlir:2:3: error: {BAD_MESSAGE}\n")
    assert [r[2] for r in timing_rows(res.stderr)] == ["Parser", "Verifier", "Rest", "Total"]


@pytest.mark.parametrize("flag", ["--disable-verify", "--verify-each=false"])
def test_disable_verify_skips_verifying_pass_outputs(tmp_path: Path, flag: str) -> None:
    name = write(tmp_path, "ok.mlir", GOOD)
    res = opt(name, "-p", "cse,dce", "--time-passes", flag, cwd=tmp_path)
    assert res.returncode == 0
    assert [r[2] for r in timing_rows(res.stderr)] == ["Parser", "Verifier", "cse", "dce",
                                                       "Output", "Rest", "Total"]
    # the input is still verified (mlir-opt's --verify-each=false)
    res = opt(write(tmp_path, "bad.mlir", BAD), "-p", "cse", flag, cwd=tmp_path)
    assert res.returncode == 1 and res.stderr.startswith(f"bad.mlir:2:3: error: {BAD_MESSAGE}")


def test_disable_verify_calls_no_verifier_after_passes(tmp_path: Path, monkeypatch,
                                                       capsys) -> None:
    import lamina.passes.pipeline as pipeline

    calls: list[int] = []

    def counting(module):
        calls.append(1)
        verify(module)

    monkeypatch.setattr(pipeline, "verify", counting)
    path = str(tmp_path / write(tmp_path, "ok.mlir", GOOD))
    assert opt_module.main([path, "-p", "cse,dce,cse"]) == 0
    assert len(calls) == 3
    assert opt_module.main([path, "-p", "cse,dce,cse", "--disable-verify"]) == 0
    assert len(calls) == 3
    capsys.readouterr()


@pytest.mark.parametrize("flag", ["--print-between-passes", "--mlir-print-ir-after-all"])
def test_print_ir_after_each_pass(tmp_path: Path, flag: str) -> None:
    name = write(tmp_path, "ok.mlir", GOOD)
    res = opt(name, "-p", "cse,fuse-elementwise", flag, cwd=tmp_path)
    assert res.returncode == 0
    header = re.compile(r"^// -----// IR Dump After (\w+) \(([\w-]+)\) //----- //$", re.M)
    assert header.findall(res.stderr) == [("CommonSubexpressionElimination", "cse"),
                                          ("FuseElementwise", "fuse-elementwise")]
    dumps = header.split(res.stderr)[1:]
    after_cse, after_fuse = dumps[2].strip("\n") + "\n", dumps[5].strip("\n") + "\n"
    assert after_cse == opt(name, "-p", "cse", cwd=tmp_path).stdout
    assert after_fuse == res.stdout  # the last dump is the output
    assert "lamina.fused" in after_fuse and "lamina.fused" not in after_cse
    generic = opt(name, "-p", "cse", flag, "--print-op-generic", cwd=tmp_path)
    assert '"builtin.module"() ({' in generic.stderr


# ---------------------------------------------------------------------------------------------
# --verify-diagnostics


def vd(tmp: Path, text: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return opt(write(tmp, "v.mlir", text), "--split-input-file", "--verify-diagnostics", *extra,
               cwd=tmp)


USE_BEFORE_DEF = """\
func.func @u(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = lamina.exp %1 : tensor<4xf32>
  %1 = lamina.exp %a : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
"""


def test_every_annotation_form_matches(tmp_path: Path) -> None:
    text = "\n// -----\n".join([
        # on the same line, with and without a column
        "func.func @a(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
        "  %0 = lamina.exp %x tensor<4xf32>  // expected-error {{Expected ':'}}\n}\n",
        "func.func @a(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
        "  %0 = lamina.exp %x tensor<4xf32>  // expected-error @:22 {{Expected ':'}}\n}\n",
        # @+N with a column; @-N with -re
        f"// expected-error @+2:3 {{{{{BAD_MESSAGE}}}}}\n{BAD}",
        f"{BAD}// expected-error-re @-3 {{{{contracting dimensions differ: lhs {{{{\\(4, 8\\)}}}} "
        "has {{[0-9]+}}, rhs}}\n",
        # @above / @below on consecutive annotation lines, and a note at its own line
        "func.func @u(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
        "  %0 = lamina.exp %1 : tensor<4xf32>\n"
        "  // expected-error @above:3 {{does not dominate this use}}\n"
        "  // expected-note @below:3 {{operand #0 defined here}}\n"
        "  %1 = lamina.exp %a : tensor<4xf32>\n"
        "  func.return %0 : tensor<4xf32>\n}\n",
        GOOD,
    ])
    res = vd(tmp_path, text)
    assert (res.returncode, res.stderr) == (0, "")
    chunks = res.stdout.split("// -----\n")
    assert chunks[:5] == [""] * 5 and "lamina.gelu" in chunks[5]


def test_unmatched_annotation_and_unexpected_error(tmp_path: Path) -> None:
    text = (f"// expected-error @+3 {{{{{BAD_MESSAGE}}}}}\n{BAD}"  # one line too far
            "// -----\n"
            "func.func @k(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
            "  func.return %x : tensor<4xf32>  // expected-error {{never produced}}\n}\n")
    res = vd(tmp_path, text, "-o", "out.mlir")
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr == (
        f"v.mlir:3:3: error: unexpected error: {BAD_MESSAGE}\n"
        "  %0 = lamina.matmul %x, %w : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>\n"
        "  ^\n"
        f'v.mlir:1:4: error: expected error "{BAD_MESSAGE}" was not produced\n'
        f"// expected-error @+3 {{{{{BAD_MESSAGE}}}}}\n"
        "   ^\n"
        'v.mlir:8:38: error: expected error "never produced" was not produced\n'
        "  func.return %x : tensor<4xf32>  // expected-error {{never produced}}\n"
        + " " * 37 + "^\n")
    assert not (tmp_path / "out.mlir").exists()


def test_near_misses_are_one_error_each(tmp_path: Path) -> None:
    text = (f"// expected-error @+2:4 {{{{{BAD_MESSAGE}}}}}\n{BAD}"
            "// -----\n"
            "func.func @u(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
            "  // expected-error @+1 {{does not dominate}}\n"
            "  %0 = lamina.exp %1 : tensor<4xf32>\n"
            "  // expected-warning @+1 {{operand #0 defined here}}\n"
            "  %1 = lamina.exp %a : tensor<4xf32>\n"
            "  func.return %0 : tensor<4xf32>\n}\n")
    res = vd(tmp_path, text)
    assert res.returncode == 1
    heads = res.stderr.splitlines()[::3]
    assert heads == [
        f'v.mlir:1:4: error: expected error "{BAD_MESSAGE}" at column 4 was produced at column 3',
        "v.mlir:10:6: error: 'note' diagnostic emitted when expecting a 'warning'"]


def test_malformed_annotations_are_errors(tmp_path: Path) -> None:
    for bad in ("// expected-error@+1 {missing braces}", "// expected-error @ {{no line}}",
                "// expected-error @+1 {{unterminated", "// expected-error @unknown:3 {{x}}",
                "// expected-note @+1x {{junk}}"):
        res = vd(tmp_path, f"{bad}\n{GOOD}")
        assert res.returncode == 1, bad
        assert res.stderr.split("\n")[0] == (
            "v.mlir:1:4: error: malformed annotation; the form is "
            "expected-error [@+N|@-N|@above|@below|@unknown][:COL] {{message}}"), bad
    res = vd(tmp_path, f"// expected-error-re @+1 {{{{a {{{{(}}}} b}}}}\n{GOOD}")
    assert res.stderr.startswith("v.mlir:1:4: error: invalid regex: ")
    # prose that merely mentions an annotation is not one
    res = vd(tmp_path, f"// an expected-error annotation pins a message\n{GOOD}")
    assert (res.returncode, res.stderr) == (0, "")


def test_chunks_are_checked_independently(tmp_path: Path) -> None:
    # an annotation cannot reach across `// -----` into the next chunk
    text = f"{GOOD}// expected-error @+3 {{{{{BAD_MESSAGE}}}}}\n// -----\n{BAD}"
    res = vd(tmp_path, text)
    assert res.returncode == 1
    assert res.stderr.splitlines()[::3] == [  # chunk by chunk
        f'v.mlir:8:4: error: expected error "{BAD_MESSAGE}" was not produced',
        f"v.mlir:11:3: error: unexpected error: {BAD_MESSAGE}"]
    # the same file checked whole: the annotation matches (one diagnostic satisfies one annotation)
    res = opt("v.mlir", "--verify-diagnostics", cwd=tmp_path)
    assert (res.returncode, res.stderr) == (0, "")


def test_errors_without_a_position_match_unknown(tmp_path: Path) -> None:
    text = "// expected-error @unknown {{cannot read target 'nope.toml'}}\n" + GOOD
    res = vd(tmp_path, text, "-p", "assign-memory-tiers{target=nope.toml}")
    assert (res.returncode, res.stderr) == (0, "")
    res = vd(tmp_path, GOOD, "-p", "assign-memory-tiers{target=nope.toml}")
    assert res.returncode == 1
    assert res.stderr == "error: unexpected error: cannot read target 'nope.toml': No such file " \
                         "or directory\n"


def test_output_written_only_when_every_chunk_agrees(tmp_path: Path) -> None:
    text = f"{GOOD}// -----\n// expected-error @+2 {{{{{BAD_MESSAGE}}}}}\n{BAD}"
    res = vd(tmp_path, text, "-o", "out.mlir")
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    # the chunk with the expected error prints nothing; the marker still separates the chunks
    good = opt(write(tmp_path, "ok.mlir", GOOD), cwd=tmp_path).stdout
    assert (tmp_path / "out.mlir").read_text() == good + "// -----\n"


def test_check_handles_every_kind() -> None:
    """The matcher on its own: warnings and remarks match like errors (Lamina's passes emit
    none today, so this is checked below the CLI)."""
    text = ("x  // expected-warning {{slow}}\ny  // expected-remark @-1 {{fused}}\n"
            "z  // expected-error @unknown {{global}}")
    exps, problems = parse_expectations(text, "k.mlir")
    assert problems == []
    produced = [Diagnostic("warning", SourceLoc("k.mlir", 1, 1), "rather slow op"),
                Diagnostic("remark", SourceLoc("k.mlir", 1, 5), "fused 3 ops"),
                Diagnostic("error", None, "a global problem")]
    assert check(produced, exps, "k.mlir") == []
    exps, _ = parse_expectations(text, "k.mlir")
    failures = check([Diagnostic("error", SourceLoc("k.mlir", 1, 1), "rather slow op"),
                      Diagnostic("warning", SourceLoc("other.mlir", 1, 1), "slow")], exps, "k.mlir")
    assert [f.message for f in failures] == [
        "'error' diagnostic emitted when expecting a 'warning'",
        "unexpected warning: slow",
        'expected remark "fused" was not produced',
        'expected error "global" was not produced']


# ---------------------------------------------------------------------------------------------
# the converted lit suite


def test_invalid_suite_pins_whole_messages_lines_and_columns() -> None:
    """tests/filecheck/invalid/ was converted from FileCheck lines pinning
    `FILE:LINE:COL: error: MESSAGE` under --match-full-lines to expected-* annotations. MLIR's
    annotations match a substring; so that no case got weaker, every diagnostic produced there
    must equal its annotation's text exactly, with the line and the column."""
    count = 0
    for path in sorted(INVALID.glob("*.mlir")):
        text = path.read_text()
        assert "// RUN: lamina-opt %s --split-input-file --verify-diagnostics\n" in text
        for chunk, offset in opt_module.split_chunks(text):
            exps, problems = parse_expectations(chunk, path.name, offset)
            assert problems == [] and exps, (path.name, offset)
            try:
                verify(parse_text(chunk, path.name, line_offset=offset))
                raise AssertionError(f"{path.name}: chunk after line {offset} is valid")
            except LaminaError as e:
                produced = [(e.loc, e.message, "error"),
                            *((n.loc, n.message, "note") for n in e.notes)]
            assert len(produced) == len(exps), (path.name, offset)
            for (loc, message, kind), exp in zip(produced, exps, strict=True):
                assert loc is not None and exp.col is not None and exp.regex is None
                assert (exp.kind, exp.line, exp.col, exp.text) == \
                    (kind, loc.line, loc.col, message), (path.name, offset)
            count += 1
    assert count >= 161


def test_list_passes_describes_every_registered_pass_and_option() -> None:
    from lamina.passes.explain import option_fields
    from lamina.passes.registry import available_passes

    res = subprocess.run([str(OPT), "--list-passes"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    blocks: dict[str, list[str]] = {}
    for line in res.stdout.splitlines():
        if line.startswith("    "):
            blocks[list(blocks)[-1]].append(line.split()[0])
        else:
            name, _, summary = line.partition(": ")
            assert summary.strip(), f"{name} has no summary"
            blocks[name] = []
    registry = available_passes()
    assert list(blocks) == list(registry)
    for name, options in blocks.items():
        fields = option_fields(registry[name]())
        assert [o.partition("=")[0] for o in options] == list(fields), name
    assert "    max-group-size=256" in res.stdout and "bucket-bytes=26214400" in res.stdout
    assert "--list-passes" in subprocess.run([str(OPT), "--help"], capture_output=True,
                                             text=True, timeout=120).stdout
