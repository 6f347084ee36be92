"""Diagnostics as mlir-opt prints them (`lamina.ir.core.diagnostics`): `file:line:col: error: message`, the
source line, a caret under the column, then notes in the same layout; long lines and messages cut
to a window; both CLIs print this way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from lamina.ir.core import diagnostics
from lamina.ir.core.diagnostics import (
    ECHO_WIDTH,
    KEPT_SOURCES,
    MESSAGE_WIDTH,
    LaminaError,
    Note,
    SourceLoc,
    format_diagnostic,
    record_source,
    report,
    source_excerpt,
    source_line,
)
from lamina.ir.text.source import parse_text, verify

BIN = Path(sys.executable).parent
TEXT = "first line\n  %0 = lamina.exp %x tensor<4xf32>\n\tindented\x1bwith escape\nlast"


def loc(line: int, col: int, file: str = "d.mlir") -> SourceLoc:
    return SourceLoc(file, line, col)


def test_error_with_caret_and_located_note() -> None:
    record_source("d.mlir", TEXT)
    err = LaminaError("Expected ':'", loc(2, 22), (Note("value defined here", loc(1, 7)),
                                                   "a note without a position"))
    assert err.render(excerpts=True).split("\n") == [
        "d.mlir:2:22: error: Expected ':'",
        "  %0 = lamina.exp %x tensor<4xf32>",
        "                     ^",
        "d.mlir:1:7: note: value defined here",
        "first line",
        "      ^",
        "note: a note without a position"]
    # the compact form (str(), the Python API) keeps the first line exactly as before
    assert str(err).split("\n") == ["d.mlir:2:22: error: Expected ':'",
                                    "d.mlir:1:7: note: value defined here",
                                    "note: a note without a position"]


def test_tabs_are_expanded_and_control_characters_hidden() -> None:
    record_source("d.mlir", TEXT)
    # column 10 is the escape character, after a tab that displays as 8 columns
    assert source_excerpt(loc(3, 10)) == ["        indented?with escape", " " * 16 + "^"]


def test_column_past_the_end_and_unknown_sources() -> None:
    record_source("d.mlir", TEXT)
    assert source_excerpt(loc(4, 99)) == ["last", "    ^"]  # e.g. an error at the end of input
    assert source_excerpt(loc(9, 1)) == []                 # no such line
    assert source_excerpt(loc(1, 1, "never-parsed.mlir")) == []
    assert source_excerpt(loc(1, 0)) == []                 # no column
    assert format_diagnostic(loc(1, 1, "never-parsed.mlir"), "error", "m") == \
        ["never-parsed.mlir:1:1: error: m"]
    assert format_diagnostic(None, "error", "m") == ["error: m"]


@pytest.mark.parametrize("col", [1, 50, ECHO_WIDTH, 150_000, 299_990, 300_001])
def test_long_lines_echo_a_window_around_the_column(col: int) -> None:
    line = "".join(chr(ord("a") + i % 26) for i in range(300_000))
    record_source("long.mlir", f"x\n{line}\n")
    shown, caret = source_excerpt(loc(2, col, "long.mlir"))
    assert len(shown) <= ECHO_WIDTH + 6 and len(caret) <= ECHO_WIDTH + 4
    assert shown.startswith("...") == (col > ECHO_WIDTH // 2 + 1)
    assert shown.endswith("...") == (col < 300_000 - ECHO_WIDTH // 2)
    # the caret points at the same character as in the full line
    at = len(caret) - 1
    expected = line[col - 1] if col <= len(line) else None
    assert (shown[at] if at < len(shown) else None) == expected


def test_long_messages_are_cut() -> None:
    message = "values used but not defined: [" + ", ".join(f"%v{i}" for i in range(50_000)) + "]"
    (head,) = format_diagnostic(None, "error", message)
    assert len(head) < MESSAGE_WIDTH + 100
    assert head.startswith("error: values used but not defined: [%v0, %v1")
    assert head.endswith("%v49999]") and "characters cut" in head


def test_split_chunks_are_recorded_at_their_lines() -> None:
    record_source("s.mlir", "a\nb\n", 0)
    record_source("s.mlir", "\nc\nd\n", 2)
    assert [source_line("s.mlir", n) for n in (1, 2, 4, 5, 7)] == ["a", "b", "c", "d", None]
    record_source("s.mlir", "new\n", 0)  # a new parse of the file starts afresh
    assert source_line("s.mlir", 1) == "new" and source_line("s.mlir", 4) is None


def test_only_the_latest_sources_are_kept() -> None:
    for i in range(KEPT_SOURCES + 3):
        record_source(f"f{i}.mlir", f"text {i}")
    assert source_line("f0.mlir", 1) is None
    assert source_line(f"f{KEPT_SOURCES + 2}.mlir", 1) == f"text {KEPT_SOURCES + 2}"
    assert len(diagnostics._SOURCES) == KEPT_SOURCES


def test_parsing_records_the_text_and_dominance_errors_have_a_note(capsys) -> None:
    text = ("func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
            "  %0 = lamina.exp %1 : tensor<4xf32>\n"
            "  %1 = lamina.exp %a : tensor<4xf32>\n"
            "  func.return %0 : tensor<4xf32>\n}\n")
    with pytest.raises(LaminaError) as e:
        verify(parse_text(text, "dom.mlir"))
    assert report(e.value) == 1
    assert capsys.readouterr().err.split("\n") == [
        "dom.mlir:2:3: error: lamina.exp: operand #0 does not dominate this use",
        "  %0 = lamina.exp %1 : tensor<4xf32>",
        "  ^",
        "dom.mlir:3:3: note: operand #0 defined here",
        "  %1 = lamina.exp %a : tensor<4xf32>",
        "  ^",
        ""]


@pytest.mark.parametrize("tool", ["lamina-opt", "lamina-run"])
def test_both_tools_print_the_caret(tmp_path: Path, tool: str) -> None:
    (tmp_path / "p.mlir").write_text("func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
                                     "  %0 = lamina.neg %x tensor<4xf32>\n"
                                     "  func.return %0 : tensor<4xf32>\n}\n")
    res = subprocess.run([str(BIN / tool), "p.mlir"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr == ("p.mlir:2:22: error: Expected ':'\n"
                          "  %0 = lamina.neg %x tensor<4xf32>\n"
                          "                     ^\n")


def test_a_300kb_line_gives_a_short_error(tmp_path: Path) -> None:
    pad = " " * 300_000
    (tmp_path / "p.mlir").write_text("func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
                                     f"{pad}%0 = lamina.frob %x : tensor<4xf32>\n"
                                     "  func.return %0 : tensor<4xf32>\n}\n")
    res = subprocess.run([str(BIN / "lamina-opt"), "p.mlir"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 1
    head, shown, caret = res.stderr.rstrip("\n").split("\n")
    assert head == "p.mlir:2:300006: error: Operation lamina.frob is not registered"
    assert shown.startswith("...") and "%0 = lamina.frob %x" in shown
    assert shown[len(caret) - 1:].startswith("lamina.frob")
    assert len(res.stderr) < 400


def test_messages_naming_a_type_use_the_right_article() -> None:
    # "returned a int": the article is chosen by the word, wherever a type or kind is named
    from lamina.ir.core.diagnostics import with_article
    assert [with_article(w) for w in ("int", "float", "OrderedDict", "uint8", "list", "ellipsis",
                                      "USER_INPUT", "_Tensor")] == [
        "an int", "a float", "an OrderedDict", "a uint8", "a list", "an ellipsis",
        "a USER_INPUT", "a _Tensor"]
