"""End-to-end tests of the installed `lamina-opt` and `lamina-run` console scripts.

Every error path must end in one diagnostic on stderr (`file:line:col: error: ...` when there is a
source position, followed by the source line and a caret, as mlir-opt prints it; `error: ...` or
`prog: error: ...` otherwise), exit code 1, no traceback, and no output file written or clobbered
(`-o`, `--outputs`, `--stats-json`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from lamina.backends.compare import TOLERANCES, compare

BIN = Path(sys.executable).parent
OPT = BIN / "lamina-opt"
RUN = BIN / "lamina-run"

GOOD = (
    "func.func @f(%x: tensor<4x8xf32>, %g: tensor<8xf32>) -> tensor<4x8xf32> {\n"
    "  %0 = lamina.layernorm %x scale %g {axis = -1 : i64, eps = 1.000000e-05 : f64} : "
    "(tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>\n"
    '  %1 = lamina.gelu %0 {approximate = "tanh"} : tensor<4x8xf32>\n'
    "  %2 = lamina.dropout %1 {rate = 1.000000e-01 : f64, seed = 42 : i64} : tensor<4x8xf32>\n"
    "  func.return %2 : tensor<4x8xf32>\n"
    "}\n"
)

# Dead code and a common subexpression: `-p cse,dce` removes two ops without changing results.
CSE = """\
func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %0 = lamina.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %1 = lamina.exp %0 : tensor<4x8xf32>
  %2 = lamina.exp %0 : tensor<4x8xf32>
  %3 = lamina.add %1, %2 : tensor<4x8xf32>
  %4 = lamina.tanh %x : tensor<4x8xf32>
  %5 = lamina.reduce_sum %3 {axes = array<i64: 1>, keepdims = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %6 = lamina.sub %3, %5 : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  func.return %6 : tensor<4x8xf32>
}
"""

TWO = """\
func.func @a(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = lamina.neg %x : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
func.func @b(%x: tensor<4xf32>, %n: tensor<4xi32>) -> (tensor<4xf32>, tensor<2x2xi32>) {
  %0 = lamina.neg %x : tensor<4xf32>
  %1 = lamina.reshape %n : (tensor<4xi32>) -> tensor<2x2xi32>
  func.return %0, %1 : tensor<4xf32>, tensor<2x2xi32>
}
"""

PARSE_ERROR = """\
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = lamina.neg %x : tensor<4xf32>
  %1 = lamina.neg %0 tensor<4xf32>
  func.return %1 : tensor<4xf32>
}
"""

UNKNOWN_OP = """\
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = lamina.negg %x : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
"""

UNDEFINED = """\
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = lamina.neg %x : tensor<4xf32>
  %1 = lamina.add %0, %y : tensor<4xf32>
  func.return %1 : tensor<4xf32>
}
"""

USE_BEFORE_DEF = """\
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = lamina.neg %1 : tensor<4xf32>
  %1 = lamina.neg %x : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
"""

VERIFY_ERROR = """\
func.func @f(%x: tensor<4x8xf32>, %w: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = lamina.neg %x : tensor<4x8xf32>
  %1 = lamina.matmul %0, %w : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %1 : tensor<4x8xf32>
}
"""
VERIFY_MESSAGE = "lamina.matmul: contracting dimensions differ: lhs (4, 8) has 8, rhs (4, 8) has 4"


class Result(subprocess.CompletedProcess[str]):
    """A finished tool run, with what its diagnostics' source echoes are checked against."""

    def __init__(self, args: list[str], returncode: int, stdout: str, stderr: str, cwd: Path,
                 stdin: str | None) -> None:
        super().__init__(args, returncode, stdout, stderr)
        self.cwd = cwd
        self.stdin_text = stdin


def tool(exe: Path, *args: str, cwd: Path, stdin: str | bytes | None = None) -> Result:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    res = subprocess.run([str(exe), *args], cwd=cwd, input=data, capture_output=True,
                         timeout=120)
    return Result(res.args, res.returncode, res.stdout.decode(),
                  res.stderr.decode(errors="replace"), cwd,
                  stdin.decode(errors="replace") if isinstance(stdin, bytes) else stdin)


def opt(*args: str, cwd: Path, stdin: str | bytes | None = None) -> Result:
    return tool(OPT, *args, cwd=cwd, stdin=stdin)


def run(*args: str, cwd: Path, stdin: str | bytes | None = None) -> Result:
    return tool(RUN, *args, cwd=cwd, stdin=stdin)


_POSITIONED = re.compile(r"^(.+):(\d+):(\d+): (error|note): ")


def echo_of(res: subprocess.CompletedProcess[str], line: str) -> list[str]:
    """The source line and caret that must follow diagnostic `line` (mlir-opt's layout); none
    when it has no position. The sources in these tests have no tabs and no long lines."""
    m = _POSITIONED.match(line)
    if m is None:
        return []
    assert isinstance(res, Result), "run the tool with tool() to check a positioned diagnostic"
    file, row, col = m.group(1), int(m.group(2)), int(m.group(3))
    if file == "<stdin>":
        assert res.stdin_text is not None
        text = res.stdin_text
    else:
        text = (res.cwd / file).read_text()
    return [text.split("\n")[row - 1], " " * (col - 1) + "^"]


def assert_error(res: subprocess.CompletedProcess[str], message: str,
                 loc: str | None = None) -> str:
    """Exit 1, no traceback, exactly one diagnostic on stderr: a first line containing
    `message` (at `loc`), then, if it is positioned, the source line and a caret under the
    column, then only notes in the same layout. Returns the first line."""
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.rstrip("\n").split("\n")
    line = lines[0]
    if loc is not None:
        assert line.startswith(f"{loc}: error: "), line
    assert message in line, line
    rest = lines[1:]
    echo = echo_of(res, line)
    assert rest[:len(echo)] == echo, res.stderr
    rest = rest[len(echo):]
    while rest:  # notes, each with its own echo
        assert _POSITIONED.match(rest[0]) and ": note: " in rest[0], res.stderr
        echo = echo_of(res, rest[0])
        assert rest[1:1 + len(echo)] == echo, res.stderr
        rest = rest[1 + len(echo):]
    return line


def write(tmp: Path, name: str, text: str | bytes) -> Path:
    p = tmp / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


def no_temp_files(tmp: Path) -> None:
    assert not [p.name for p in tmp.iterdir() if p.name.startswith(".lamina-")]


# ---------------------------------------------------------------------------------------------
# lamina-opt


def test_opt_success_round_trips(tmp_path: Path) -> None:
    write(tmp_path, "ok.mlir", GOOD)
    res = opt("ok.mlir", cwd=tmp_path)
    assert res.returncode == 0 and res.stderr == ""
    assert res.stdout.startswith("builtin.module {\n")
    assert "lamina.gelu %0 {approximate = \"tanh\"} : tensor<4x8xf32>" in res.stdout
    again = opt("-", cwd=tmp_path, stdin=res.stdout)
    assert again.returncode == 0 and again.stdout == res.stdout


def test_opt_help_exits_0(tmp_path: Path) -> None:
    res = opt("-h", cwd=tmp_path)
    assert res.returncode == 0 and "usage: lamina-opt" in res.stdout


def test_opt_missing_file(tmp_path: Path) -> None:
    res = opt("nope.mlir", cwd=tmp_path)
    assert res.stderr.strip() == "error: cannot read 'nope.mlir': No such file or directory"
    assert_error(res, "cannot read")


def test_opt_directory_is_unreadable(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    assert_error(opt("d", cwd=tmp_path), "error: cannot read 'd': Is a directory")


def test_opt_non_utf8(tmp_path: Path) -> None:
    write(tmp_path, "bad.mlir", b"func.func @f() {\xff\n")
    assert_error(opt("bad.mlir", cwd=tmp_path), "error: 'bad.mlir' is not UTF-8 text (byte 16)")


@pytest.mark.parametrize("text, loc, message", [
    (PARSE_ERROR, "p.mlir:3:22", "Expected ':'"),
    (UNKNOWN_OP, "p.mlir:2:8", "Operation lamina.negg is not registered"),
    (UNDEFINED, "p.mlir:3:23", "values used but not defined: [%y]"),
    (USE_BEFORE_DEF, "p.mlir:2:3", "lamina.neg: operand #0 does not dominate this use"),
    (VERIFY_ERROR, "p.mlir:3:3", VERIFY_MESSAGE),
], ids=["parse", "unknown-op", "undefined-value", "use-before-def", "verifier"])
def test_opt_source_errors_are_positioned(tmp_path: Path, text: str, loc: str,
                                          message: str) -> None:
    write(tmp_path, "p.mlir", text)
    res = opt("p.mlir", cwd=tmp_path)
    assert_error(res, message, loc)
    assert res.stdout == ""


def test_opt_stdin(tmp_path: Path) -> None:
    res = opt("-", cwd=tmp_path, stdin=GOOD)
    assert res.returncode == 0 and "lamina.layernorm" in res.stdout
    assert_error(opt("-", cwd=tmp_path, stdin=VERIFY_ERROR), VERIFY_MESSAGE, "<stdin>:3:3")
    assert_error(opt(cwd=tmp_path, stdin=PARSE_ERROR), "Expected ':'", "<stdin>:3:22")
    assert_error(opt("-", cwd=tmp_path, stdin=b"\xfe\xff"), "'<stdin>' is not UTF-8 text (byte 0)")


def test_opt_empty_input_is_empty_module(tmp_path: Path) -> None:
    res = opt("-", cwd=tmp_path, stdin="// nothing here\n")
    assert res.returncode == 0 and res.stdout == "builtin.module {\n}\n"


def test_opt_unknown_pass_did_you_mean(tmp_path: Path) -> None:
    write(tmp_path, "ok.mlir", GOOD)
    from lamina.passes.registry import available_passes

    assert_error(opt("-p", "cse,dcee", "ok.mlir", cwd=tmp_path),
                 "error: unknown pass 'dcee' (did you mean 'dce'?); available passes: "
                 + ", ".join(sorted(available_passes())))
    line = assert_error(opt("-p", "zzzz", "ok.mlir", cwd=tmp_path), "unknown pass 'zzzz'; ")
    assert "did you mean" not in line


def test_opt_bad_pass_option(tmp_path: Path) -> None:
    write(tmp_path, "ok.mlir", GOOD)
    res = opt("-p", "cse{foo=1}", "ok.mlir", cwd=tmp_path)
    assert res.stderr == "error: unknown option 'foo' for cse; cse takes no options\n"
    assert_error(res, "unknown option 'foo' for cse")
    res = opt("-p", "fuse-elementwise{max-group=8}", "ok.mlir", cwd=tmp_path)
    assert res.stderr == (
        "error: unknown option 'max-group' for fuse-elementwise (did you mean "
        "'max-group-size'?); options: max-group-size (an integer, default 256), "
        "reduction-fusion (true or false, default true), target (a string, default \"\"), "
        "explain (true or false, default false)\n")
    assert_error(res, "unknown option 'max-group'")


@pytest.mark.parametrize("spec, message", [
    ("fuse-elementwise{max-group-size=0}",
     "option 'max-group-size' for fuse-elementwise must be at least 1, got 0"),
    ("insert-collectives{bucket-bytes=-5}",
     "option 'bucket-bytes' for insert-collectives must be at least 0, got -5"),
    ("assign-memory-tiers{hbm-capacity=-1}",
     "option 'hbm-capacity' for assign-memory-tiers must be at least 0, got -1"),
    ("assign-memory-tiers{solver=magic}",
     "option 'solver' for assign-memory-tiers must be greedy or ilp, got 'magic'"),
    ("fuse-elementwise{max-group-size=true}",
     "option 'max-group-size' for fuse-elementwise expects an integer, got 'true'"),
])
def test_opt_option_values_are_checked_before_any_pass_runs(tmp_path: Path, spec: str,
                                                            message: str) -> None:
    write(tmp_path, "ok.mlir", GOOD)
    res = opt("-p", f"cse,{spec}", "ok.mlir", cwd=tmp_path)
    assert res.stderr == f"error: {message}\n"
    assert_error(res, message)


@pytest.mark.parametrize("spec", ["cse{", "cse{a=1", "cse,,dce", "{"])
def test_opt_malformed_pipeline(tmp_path: Path, spec: str) -> None:
    write(tmp_path, "ok.mlir", GOOD)
    assert_error(opt("-p", spec, "ok.mlir", cwd=tmp_path),
                 f"error: invalid pass pipeline '{spec}': ")


def test_opt_pipeline_runs(tmp_path: Path) -> None:
    write(tmp_path, "cse.mlir", CSE)
    res = opt("-p", "cse,dce", "cse.mlir", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("lamina.exp") == 1 and "lamina.tanh" not in res.stdout


def test_opt_unknown_flag_is_one_line(tmp_path: Path) -> None:
    write(tmp_path, "ok.mlir", GOOD)
    res = opt("--bogus", "ok.mlir", cwd=tmp_path)
    assert res.stderr == "lamina-opt: error: unrecognized arguments: --bogus\n"
    assert_error(res, "unrecognized arguments")
    assert "usage:" not in res.stderr
    assert_error(opt("-t", "nope", "ok.mlir", cwd=tmp_path),
                 "lamina-opt: error: argument -t/--target: invalid choice: 'nope'")


def split_file(tmp: Path, *chunks: str) -> tuple[Path, list[int]]:
    """Chunks joined by `// -----`; with the first line number of each chunk in the whole file."""
    text, starts, line = "", [], 1
    for i, c in enumerate(chunks):
        if i:
            text += "// -----\n"
            line += 1
        starts.append(line)
        text += c
        line += c.count("\n")
    return write(tmp, "split.mlir", text), starts


def test_opt_split_input_file_positions_are_whole_file(tmp_path: Path) -> None:
    _, starts = split_file(tmp_path, GOOD, VERIFY_ERROR, PARSE_ERROR)
    verify_line = starts[1] + 2
    res = opt("--split-input-file", "split.mlir", cwd=tmp_path)
    assert_error(res, VERIFY_MESSAGE, f"split.mlir:{verify_line}:3")
    assert res.stdout == ""  # nothing printed when the run fails

    # Errors found by the parser (not the verifier) in later chunks are also whole-file positions.
    for text, col, message in ((UNKNOWN_OP, 8, "Operation lamina.negg is not registered"),
                               (UNDEFINED, 23, "values used but not defined: [%y]"),
                               (PARSE_ERROR, 22, "Expected ':'")):
        _, starts = split_file(tmp_path, GOOD, GOOD, text)
        line = starts[2] + (1 if text is UNKNOWN_OP else 2)
        assert_error(opt("--split-input-file", "split.mlir", cwd=tmp_path), message,
                     f"split.mlir:{line}:{col}")


def test_opt_split_input_file_trailing_separator(tmp_path: Path) -> None:
    split_file(tmp_path, GOOD, "")
    res = opt("--split-input-file", "split.mlir", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.endswith("// -----\nbuiltin.module {\n}\n")


def test_opt_parsing_diagnostics(tmp_path: Path) -> None:
    """xdsl-opt's --parsing-diagnostics: a chunk that does not parse prints its diagnostic (with
    the source line and caret) on stdout in place of its module; the run goes on and exits 0.
    Verifier errors are not turned into output."""
    _, starts = split_file(tmp_path, GOOD, PARSE_ERROR, GOOD)
    res = opt("--split-input-file", "--parsing-diagnostics", "split.mlir", cwd=tmp_path)
    assert res.returncode == 0 and res.stderr == ""
    chunks = res.stdout.split("// -----\n")
    assert len(chunks) == 3
    assert "lamina.layernorm" in chunks[0] and "lamina.layernorm" in chunks[2]
    assert chunks[1] == (f"split.mlir:{starts[1] + 2}:22: error: Expected ':'\n"
                         "  %1 = lamina.neg %0 tensor<4xf32>\n"
                         + " " * 21 + "^\n")

    _, starts = split_file(tmp_path, GOOD, VERIFY_ERROR, PARSE_ERROR)
    res = opt("--split-input-file", "--parsing-diagnostics", "split.mlir", cwd=tmp_path)
    assert_error(res, VERIFY_MESSAGE, f"split.mlir:{starts[1] + 2}:3")
    assert res.stdout == ""


def test_opt_verify_diagnostics_without_annotations(tmp_path: Path) -> None:
    """Under MLIR's --verify-diagnostics, an error no annotation expects is reported as
    unexpected (exit 1), each chunk on its own; a pipeline error is not a diagnostic of the input
    and stays an ordinary error."""
    _, starts = split_file(tmp_path, GOOD, VERIFY_ERROR, PARSE_ERROR, USE_BEFORE_DEF)
    res = opt("--split-input-file", "--verify-diagnostics", "split.mlir", cwd=tmp_path)
    assert res.returncode == 1 and res.stdout == ""
    heads = [line for line in res.stderr.splitlines() if _POSITIONED.match(line)]
    assert heads == [
        f"split.mlir:{starts[1] + 2}:3: error: unexpected error: {VERIFY_MESSAGE}",
        f"split.mlir:{starts[2] + 2}:22: error: unexpected error: Expected ':'",
        f"split.mlir:{starts[3] + 1}:3: error: unexpected error: lamina.neg: operand #0 does not "
        "dominate this use",
        f"split.mlir:{starts[3] + 2}:3: error: unexpected note: operand #0 defined here"]
    assert len(res.stderr.splitlines()) == 3 * len(heads)  # each with its source line and caret

    write(tmp_path, "ok.mlir", GOOD)
    res = opt("--verify-diagnostics", "-p", "nope", "ok.mlir", cwd=tmp_path)
    assert_error(res, "unknown pass 'nope'")


def test_opt_output_written_only_on_success(tmp_path: Path) -> None:
    write(tmp_path, "ok.mlir", GOOD)
    write(tmp_path, "bad.mlir", VERIFY_ERROR)
    out = tmp_path / "out.mlir"

    # Failure does not create the file.
    assert_error(opt("bad.mlir", "-o", "out.mlir", cwd=tmp_path), VERIFY_MESSAGE, "bad.mlir:3:3")
    assert not out.exists()
    # A failure in a later chunk does not leave a partial file.
    split_file(tmp_path, GOOD, VERIFY_ERROR)
    assert_error(opt("--split-input-file", "split.mlir", "-o", "out.mlir", cwd=tmp_path),
                 VERIFY_MESSAGE)
    assert not out.exists()

    # Success writes it, and nothing goes to stdout.
    res = opt("ok.mlir", "-o", "out.mlir", cwd=tmp_path)
    assert res.returncode == 0 and res.stdout == "" and res.stderr == ""
    good = out.read_text()
    assert good == opt("ok.mlir", cwd=tmp_path).stdout
    assert out.stat().st_mode & 0o044  # a normal file, not mkstemp's 0600

    # A failing run keeps an existing file's old content, whatever the kind of failure.
    for args in (["bad.mlir"], ["-p", "nope", "ok.mlir"], ["missing.mlir"],
                 ["--split-input-file", "split.mlir"]):
        assert_error(opt(*args, "-o", "out.mlir", cwd=tmp_path), "error")
        assert out.read_text() == good
    no_temp_files(tmp_path)

    assert_error(opt("ok.mlir", "-o", "no/such/dir/out.mlir", cwd=tmp_path),
                 "error: cannot write 'no/such/dir/out.mlir': No such file or directory")


def test_opt_print_op_generic(tmp_path: Path) -> None:
    write(tmp_path, "ok.mlir", GOOD)
    res = opt("--print-op-generic", "ok.mlir", cwd=tmp_path)
    assert res.returncode == 0
    assert res.stdout.startswith('"builtin.module"() ({')
    assert '"lamina.gelu"(%0) <{approximate = "tanh"}>' in res.stdout \
        or '"lamina.gelu"(%0) {approximate = "tanh"}' in res.stdout
    # The generic form parses back to the same program.
    back = opt("-", cwd=tmp_path, stdin=res.stdout)
    assert back.returncode == 0 and back.stdout == opt("ok.mlir", cwd=tmp_path).stdout


def test_opt_print_debuginfo(tmp_path: Path) -> None:
    write(tmp_path, "ok.mlir", GOOD)
    res = opt("--print-debuginfo", "ok.mlir", cwd=tmp_path)
    assert res.returncode == 0
    assert 'lamina.layernorm' in res.stdout
    assert 'tensor<4x8xf32> loc("ok.mlir":2:3)' in res.stdout
    assert 'func.return %2 : tensor<4x8xf32> loc("ok.mlir":5:3)' in res.stdout
    assert '} loc("ok.mlir":1:1)' in res.stdout
    # Written locations survive a round trip (they are not replaced by the new file's positions).
    again = opt("--print-debuginfo", "-", cwd=tmp_path, stdin=res.stdout)
    assert again.returncode == 0 and 'loc("ok.mlir":5:3)' in again.stdout
    assert 'loc("<stdin>":2:3)' not in again.stdout


# ---------------------------------------------------------------------------------------------
# lamina-run


def outputs_absent(tmp: Path) -> None:
    assert not (tmp / "o.npz").exists()
    assert not (tmp / "s.json").exists()
    no_temp_files(tmp)


OUT_ARGS = ("--outputs", "o.npz", "--stats-json", "s.json")


def test_run_unknown_flag_is_one_line(tmp_path: Path) -> None:
    write(tmp_path, "ok.mlir", GOOD)
    res = run("ok.mlir", "--bogus", cwd=tmp_path)
    assert res.stderr == "lamina-run: error: unrecognized arguments: --bogus\n"
    assert_error(run("ok.mlir", "--seed", "x", cwd=tmp_path),
                 "lamina-run: error: argument --seed: invalid int value: 'x'")
    assert_error(run(cwd=tmp_path), "lamina-run: error: the following arguments are required: file")
    assert_error(run("ok.mlir", "--threads", "0", cwd=tmp_path),
                 "lamina-run: error: argument --threads: must be at least 1, got 0")


def test_run_threads_option_and_environment(tmp_path: Path) -> None:
    """--threads and LAMINA_FUSED_THREADS pick the tile-loop threads; a bad value is one error."""
    write(tmp_path, "ok.mlir", GOOD)
    res = run("ok.mlir", "-p", "fuse-elementwise", "--threads", "2", "--check", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    bad = subprocess.run([str(RUN), "ok.mlir", "-p", "fuse-elementwise"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "LAMINA_FUSED_THREADS": "two"})
    assert_error(bad, "error: LAMINA_FUSED_THREADS must be a positive integer, got 'two'")


@pytest.mark.parametrize("name, content, loc, message", [
    ("missing.mlir", None, None, "error: cannot read 'missing.mlir': No such file or directory"),
    ("bad.mlir", b"\x80", None, "error: 'bad.mlir' is not UTF-8 text (byte 0)"),
    ("p.mlir", PARSE_ERROR, "p.mlir:3:22", "Expected ':'"),
    ("p.mlir", UNDEFINED, "p.mlir:3:23", "values used but not defined: [%y]"),
    ("p.mlir", USE_BEFORE_DEF, "p.mlir:2:3", "operand #0 does not dominate this use"),
    ("p.mlir", VERIFY_ERROR, "p.mlir:3:3", VERIFY_MESSAGE),
], ids=["missing", "non-utf8", "parse", "undefined", "use-before-def", "verifier"])
def test_run_source_errors(tmp_path: Path, name: str, content: str | bytes | None,
                           loc: str | None, message: str) -> None:
    if content is not None:
        write(tmp_path, name, content)
    assert_error(run(name, *OUT_ARGS, cwd=tmp_path), message, loc)
    outputs_absent(tmp_path)


def test_run_stdin(tmp_path: Path) -> None:
    res = run("-", "--print-outputs", cwd=tmp_path, stdin=GOOD)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("out0: f32[4, 8] mean ")
    assert_error(run("-", cwd=tmp_path, stdin=VERIFY_ERROR), VERIFY_MESSAGE, "<stdin>:3:3")


def test_run_pass_errors(tmp_path: Path) -> None:
    write(tmp_path, "ok.mlir", GOOD)
    assert_error(run("ok.mlir", "-p", "csee", *OUT_ARGS, cwd=tmp_path),
                 "error: unknown pass 'csee' (did you mean 'cse'?)")
    assert_error(run("ok.mlir", "-p", "cse{", *OUT_ARGS, cwd=tmp_path),
                 "error: invalid pass pipeline 'cse{'")
    outputs_absent(tmp_path)


def test_run_entry(tmp_path: Path) -> None:
    write(tmp_path, "two.mlir", TWO)
    assert_error(run("two.mlir", *OUT_ARGS, cwd=tmp_path),
                 "error: the module has 2 functions (a, b); choose one with --entry")
    assert_error(run("two.mlir", "--entry", "c", *OUT_ARGS, cwd=tmp_path),
                 "error: no function named 'c' (functions: a, b)")
    outputs_absent(tmp_path)
    res = run("two.mlir", "--entry", "a", "--print-outputs", cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.startswith("out0: f32[4] ")


def save(tmp: Path, name: str, **arrays: object) -> str:
    np.savez(tmp / name, **arrays)  # type: ignore[arg-type]
    return name


X4 = np.arange(4, dtype=np.float32) - 1.5
N4 = np.arange(4, dtype=np.int32)


def test_run_inputs_errors(tmp_path: Path) -> None:
    write(tmp_path, "two.mlir", TWO)

    def bad(inputs: str, message: str, loc: str | None = None) -> None:
        res = run("two.mlir", "--entry", "b", "--inputs", inputs, *OUT_ARGS, cwd=tmp_path)
        assert_error(res, message, loc)
        outputs_absent(tmp_path)

    bad("none.npz", "error: cannot read inputs 'none.npz': no such file")
    write(tmp_path, "text.npz", "hello\n")
    bad("text.npz", "error: cannot read inputs 'text.npz': not an .npz archive")
    np.save(tmp_path / "arr.npy", X4)
    bad("arr.npy", "error: cannot read inputs 'arr.npy': not an .npz archive")
    (tmp_path / "dir.npz").mkdir()
    bad("dir.npz", "error: cannot read inputs 'dir.npz': ")

    # An object array is stored pickled inside the .npz; it must be refused, never unpickled.
    save(tmp_path, "pickled.npz", x=np.array([1, "a", None, 2.0], dtype=object), n=N4)
    with zipfile.ZipFile(tmp_path / "pickled.npz") as z:
        assert sorted(z.namelist()) == ["n.npy", "x.npy"]
    bad("pickled.npz", "error: cannot read inputs 'pickled.npz': Object arrays cannot be loaded "
        "when allow_pickle=False")

    bad(save(tmp_path, "missing.npz", x=X4),
        "error: missing.npz: no array for argument 'n' (expected key 'n' or 'arg1'; file has: x)")
    bad(save(tmp_path, "extra.npz", x=X4, n=N4, z=np.ones(1)),
        "error: extra.npz: arrays z match no argument of @b (arguments: x, n)")
    bad(save(tmp_path, "shape.npz", x=np.ones(5, np.float32), n=N4),
        "error: input 'x' has shape (5,), argument type is tensor<4xf32>", "two.mlir:5:1")
    bad(save(tmp_path, "kind.npz", x=X4, n=np.ones(4, np.float32)),
        "error: input 'n' has dtype float32, argument type is tensor<4xi32>", "two.mlir:5:1")
    bad(save(tmp_path, "kind2.npz", x=np.ones(4, np.complex64), n=N4),
        "error: input 'x' has dtype complex64, argument type is tensor<4xf32>", "two.mlir:5:1")


def load_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as d:
        return {k: d[k] for k in d.files}


def test_run_inputs_outputs_round_trip(tmp_path: Path) -> None:
    write(tmp_path, "two.mlir", TWO)
    by_name = save(tmp_path, "by_name.npz", x=X4, n=N4)
    by_pos = save(tmp_path, "by_pos.npz", arg0=X4, arg1=N4)
    widened = save(tmp_path, "wide.npz", x=X4.astype(np.float64), n=N4.astype(np.int64))
    results = []
    for i, inputs in enumerate((by_name, by_pos, by_name, widened)):
        res = run("two.mlir", "--entry", "b", "--inputs", inputs, "--outputs", f"o{i}.npz",
                  cwd=tmp_path)
        # float64 / int64 arrays are converted to f32 / i32, each with a note naming both types
        notes = "" if inputs != widened else (
            "note: wide.npz: array 'x' is float64; cast to f32, the element type of its argument "
            "(tensor<4xf32>)\n"
            "note: wide.npz: array 'n' is int64; cast to i32, the element type of its argument "
            "(tensor<4xi32>)\n")
        assert res.returncode == 0 and res.stderr == notes, res.stderr
        results.append(load_npz(tmp_path / f"o{i}.npz"))
    for r in results:
        assert sorted(r) == ["out0", "out1"]
        assert r["out0"].dtype == np.float32 and r["out1"].dtype == np.int32
        np.testing.assert_array_equal(r["out0"], -X4)
        np.testing.assert_array_equal(r["out1"], N4.reshape(2, 2))
    # The outputs of one run are the inputs of another (out0 -> arg0 of @a).
    save(tmp_path, "chain.npz", arg0=results[0]["out0"])
    res = run("two.mlir", "--entry", "a", "--inputs", "chain.npz", "--outputs", "back.npz",
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    np.testing.assert_array_equal(load_npz(tmp_path / "back.npz")["out0"], X4)
    no_temp_files(tmp_path)


def test_run_outputs_keep_old_file_on_failure(tmp_path: Path) -> None:
    write(tmp_path, "two.mlir", TWO)
    (tmp_path / "o.npz").write_bytes(b"old")
    (tmp_path / "s.json").write_text("old")
    res = run("two.mlir", "--entry", "b", "--inputs", save(tmp_path, "m.npz", x=X4), *OUT_ARGS,
              cwd=tmp_path)
    assert_error(res, "no array for argument 'n'")
    assert (tmp_path / "o.npz").read_bytes() == b"old"
    assert (tmp_path / "s.json").read_text() == "old"
    assert_error(run("two.mlir", "--entry", "a", "--outputs", "no/dir/o.npz", cwd=tmp_path),
                 "error: cannot write 'no/dir/o.npz': No such file or directory")
    no_temp_files(tmp_path)


def test_run_seed_determinism(tmp_path: Path) -> None:
    write(tmp_path, "ok.mlir", GOOD)

    def outputs(seed: int, name: str) -> np.ndarray:
        res = run("ok.mlir", "--seed", str(seed), "--outputs", name, cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        return load_npz(tmp_path / name)["out0"]

    a, b, c = outputs(1, "a.npz"), outputs(1, "b.npz"), outputs(2, "c.npz")
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.shape == (4, 8) and a.dtype == np.float32


def test_run_stats_json(tmp_path: Path) -> None:
    write(tmp_path, "two.mlir", TWO)
    res = run("two.mlir", "--entry", "b", "--stats-json", "s.json", cwd=tmp_path)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert [line.split(":")[0] for line in res.stdout.splitlines()] == ["out0", "out1"]
    stats = json.loads((tmp_path / "s.json").read_text())
    assert stats["entry"] == "b" and stats["pipeline"] == ""
    assert stats["ops_executed"] == 2 and stats["kernels"] == 1  # a reshape is a view
    assert stats["flops"] == 4.0
    assert stats["bytes_accessed"] == 2 * 16
    # x, n and neg's result are live together; x is freed before the reshape result exists.
    assert stats["peak_live_bytes"] == 3 * 16
    assert stats["outputs"] == [{"name": "out0", "shape": [4], "dtype": "f32"},
                                {"name": "out1", "shape": [2, 2], "dtype": "i32"}]
    assert "reference" not in stats

    res = run("two.mlir", "--entry", "a", "--stats-json", "-", cwd=tmp_path)
    assert res.returncode == 0 and json.loads(res.stdout)["ops_executed"] == 1
    assert res.stderr.startswith("out0: f32[4] mean ")   # stdout carries the JSON alone


def test_run_check_success(tmp_path: Path) -> None:
    write(tmp_path, "cse.mlir", CSE)
    res = run("cse.mlir", "-p", "cse,dce", "--check", "--stats-json", "s.json",
              "--outputs", "o.npz", cwd=tmp_path)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    summary, check = res.stdout.splitlines()
    assert summary.startswith("out0: f32[4, 8] mean ")
    assert check == ("check out0: ok shape [4, 8] f32 max abs err 0 max rel err 0 "
                     "(rtol 2e-05, atol 2e-06)")
    stats = json.loads((tmp_path / "s.json").read_text())
    assert stats["pipeline"] == "cse,dce"
    assert stats["ops_executed"] == 5 and stats["reference"]["ops_executed"] == 7
    assert stats["kernels"] < stats["reference"]["kernels"]
    assert stats["outputs"] == [{"name": "out0", "shape": [4, 8], "dtype": "f32",
                                 "max_abs_err": 0.0, "max_rel_err": 0.0, "rtol": 2e-05,
                                 "atol": 2e-06, "ok": True, "nan": 0, "inf": 0}]
    assert (tmp_path / "o.npz").exists()

    write(tmp_path, "two.mlir", TWO)
    res = run("two.mlir", "--entry", "b", "--check", cwd=tmp_path)
    assert res.returncode == 0
    assert res.stdout.splitlines()[2:] == [
        "check out0: ok shape [4] f32 max abs err 0 max rel err 0 (rtol 2e-05, atol 2e-06)",
        "check out1: ok shape [2, 2] i32 max abs err 0 max rel err 0 (rtol 0, atol 0)"]


# ---------------------------------------------------------------------------------------------
# The --check comparison (no pipeline changes results yet, so a failing check is tested here).


def test_compare_within_and_beyond_tolerance() -> None:
    ref = np.linspace(-2, 2, 16, dtype=np.float32)
    rtol, atol = TOLERANCES["f32"]
    ok = compare("out0", "f32", ref + np.float32(atol / 2), ref)
    assert ok.ok and ok.reason == "" and 0 < ok.max_abs_err <= atol
    bad = compare("out0", "f32", ref * np.float32(1.001), ref)
    assert not bad.ok and bad.reason == "error exceeds tolerance"
    assert bad.max_rel_err == pytest.approx(1e-3, rel=1e-3)
    assert bad.line().startswith("out0: MISMATCH shape [16] f32 max abs err ")
    assert bad.line().endswith(": error exceeds tolerance")
    assert bad.as_dict()["ok"] is False
    # exact=True: any difference fails.
    assert not compare("out0", "f32", ref + np.float32(atol / 2), ref, exact=True).ok
    assert compare("out0", "f32", ref.copy(), ref, exact=True).ok


def test_compare_nan_inf_shape_int() -> None:
    ref = np.array([1.0, np.nan, np.inf, -np.inf], np.float32)
    assert compare("o", "f32", ref.copy(), ref).ok
    nan = compare("o", "f32", np.array([np.nan, np.nan, np.inf, -np.inf], np.float32), ref)
    assert not nan.ok and "NaN in 1 places" in nan.reason
    inf = compare("o", "f32", np.array([1.0, np.nan, -np.inf, -np.inf], np.float32), ref)
    assert not inf.ok and inf.reason == "1 infinities differ"
    shape = compare("o", "f32", np.zeros(3, np.float32), ref)
    assert not shape.ok and shape.reason == "shape [3] differs from reference [4]"
    ints = compare("o", "i32", np.array([1, 2, 3]), np.array([1, 2, 4]))
    assert not ints.ok and ints.reason == "1 elements differ"
    assert compare("o", "i1", np.array([True, False]), np.array([True, False])).ok
    # Tolerance scales with the dtype: an f16-sized error passes f16 but fails f32.
    r = np.ones(4, np.float32)
    assert compare("o", "f16", r + 5e-3, r).ok and not compare("o", "f32", r + 5e-3, r).ok
