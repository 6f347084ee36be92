"""What `lamina-run` (and `lamina-opt -o`) print and write: issue 10's lamina-run side.

Each test here failed on main: a summary per output, stdout that is pure data when it carries data,
the function list of a multi-function module, a partially placed program that runs, the files of a
run written all together or not at all (never renamed over a FIFO, a device or a link), every
destination checked up front with a message that names it (never the temporary file), empty flag
values refused, every `--memory-plot` failure a diagnostic, and `| head` exiting quietly.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from lamina.cli.outputs import BROKEN_PIPE_EXIT, StagedOutputs
from lamina.ir.core.diagnostics import LaminaError
from test_cli import GOOD, OPT, RUN, TWO, VERIFY_ERROR, assert_error, no_temp_files, opt, run, write

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"

# a partially placed program: only %x and %w are placed, as samples/mlp_megatron.mlir does
PARTLY_PLACED = """\
lamina.mesh @m [data = 2, model = 2]
func.func @mm(%x: tensor<8x4xf32, #lamina.place<@m, [[data], []]>>, %w: tensor<4x6xf32, #lamina.place<@m, [[], [model]]>>, %b: tensor<6xf32>) -> tensor<8x6xf32> {
  %h = lamina.matmul %x, %w : (tensor<8x4xf32, #lamina.place<@m, [[data], []]>>, tensor<4x6xf32, #lamina.place<@m, [[], [model]]>>) -> tensor<8x6xf32>
  %y = lamina.add %h, %b : (tensor<8x6xf32>, tensor<6xf32>) -> tensor<8x6xf32>
  func.return %y : tensor<8x6xf32>
}
"""


# ---- what a run prints ----------------------------------------------------------------------


def test_a_run_prints_one_summary_line_per_output(tmp_path: Path) -> None:
    write(tmp_path, "two.mlir", TWO)
    res = run("two.mlir", "--entry", "b", cwd=tmp_path)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("out0: f32[4] mean ") and " zeros 0" in lines[0]
    assert lines[1] == "out1: i32[2, 2] nonzero 4"   # random i32 inputs in [0, 1000), reshaped


def test_print_outputs_adds_the_values(tmp_path: Path) -> None:
    write(tmp_path, "two.mlir", TWO)
    np_inputs = tmp_path / "in.npz"
    import numpy as np

    np.savez(np_inputs, x=np.array([1, 2, 3, 4], np.float32), n=np.array([1, 0, 3, 4], np.int32))
    res = run("two.mlir", "--entry", "b", "--inputs", "in.npz", "--print-outputs", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "out0: f32[4] mean -2.5 std 1.11803 min -4 max -1 zeros 0",
        "[-1., -2., -3., -4.]",
        "out1: i32[2, 2] nonzero 3",
        "[[1, 0],", " [3, 4]]"]


def test_stdout_carries_only_the_json_when_it_carries_the_json(tmp_path: Path) -> None:
    """`--check --stats-json -` printed the check lines ahead of the JSON: no parser could read
    it. The summary and check lines now go to stderr whenever stdout carries data."""
    write(tmp_path, "two.mlir", TWO)
    res = run("two.mlir", "--entry", "b", "--check", "--print-outputs", "--stats-json", "-",
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    stats = json.loads(res.stdout)
    assert [o["ok"] for o in stats["outputs"]] == [True, True]
    err = res.stderr.splitlines()
    assert err[0].startswith("out0: f32[4] mean ")
    assert [line for line in err if line.startswith("check ")] == [
        "check out0: ok shape [4] f32 max abs err 0 max rel err 0 (rtol 2e-05, atol 2e-06)",
        "check out1: ok shape [2, 2] i32 max abs err 0 max rel err 0 (rtol 0, atol 0)"]
    # also when it is --outputs that goes to stdout (binary .npz)
    res = subprocess.run([str(RUN), "two.mlir", "--entry", "a", "--outputs", "-"], cwd=tmp_path,
                         capture_output=True, timeout=120)
    assert res.returncode == 0 and res.stdout[:2] == b"PK", res.stderr
    assert res.stderr.decode().startswith("out0: f32[4] mean ")


def test_multi_function_module_lists_signatures(tmp_path: Path) -> None:
    write(tmp_path, "two.mlir", TWO)
    res = run("two.mlir", cwd=tmp_path)
    assert_error(res, "error: the module has 2 functions (a, b); choose one with --entry")
    notes = [line for line in res.stderr.splitlines() if ": note: " in line]
    assert notes == [
        "two.mlir:1:1: note: @a(%x: tensor<4xf32>) -> tensor<4xf32>",
        "two.mlir:5:1: note: @b(%x: tensor<4xf32>, %n: tensor<4xi32>) -> (tensor<4xf32>, "
        "tensor<2x2xi32>)"]


def test_empty_module_says_there_is_no_function(tmp_path: Path) -> None:
    write(tmp_path, "empty.mlir", "// nothing here\n")
    res = run("empty.mlir", cwd=tmp_path)
    # the module as a whole is at the start of its file
    assert_error(res, "error: the module has no function to run", "empty.mlir:1:1")
    assert "--entry" not in res.stderr


def test_partially_placed_program_runs_on_one_device_with_a_note(tmp_path: Path) -> None:
    """The README promises any program runs, before or after any pass: a program with only its
    inputs placed runs on one device, placements ignored, and one note line says so."""
    write(tmp_path, "mm.mlir", PARTLY_PLACED)
    res = run("mm.mlir", "--check", "--stats-json", "s.json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ("note: @mm is only partly placed (%h = lamina.matmul is not placed "
                          "while its operands are, at mm.mlir:3:3): it ran on one device with its "
                          "placements ignored; run -p propagate-sharding to run it on its mesh\n")
    assert res.stdout.splitlines()[1].startswith("check y: ok ")
    stats = json.loads((tmp_path / "s.json").read_text())
    assert "devices" not in stats
    # whole arrays: x 128 B, w 96 B, b 24 B, h and y 192 B each
    assert stats["peak_bytes"]["hbm"] == 128 + 96 + 24 + 192 + 192
    # after propagate-sharding it runs on the 4 devices of its mesh, without the note
    res = run("mm.mlir", "-p", "propagate-sharding,insert-collectives", "--stats-json", "-",
              cwd=tmp_path)
    assert res.returncode == 0 and "note:" not in res.stderr, res.stderr
    assert json.loads(res.stdout)["devices"] == 4


# ---- broken pipes ----------------------------------------------------------------------------


def _closed_pipe_run(*argv: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """Run a tool whose stdout is a pipe nobody reads (the reader is closed before it starts),
    as `tool | head` is once head has exited."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run(list(argv), stdout=w, stderr=subprocess.PIPE, cwd=cwd, timeout=120)
    finally:
        os.close(w)


@pytest.mark.parametrize("tool", ["run", "opt"])
def test_broken_pipe_exits_quietly(tmp_path: Path, tool: str) -> None:
    write(tmp_path, "ok.mlir", GOOD)
    args = [str(RUN), "ok.mlir", "--print-outputs"] if tool == "run" else [str(OPT), "ok.mlir"]
    res = _closed_pipe_run(*args, cwd=tmp_path)
    assert res.stderr == b""
    assert res.returncode == BROKEN_PIPE_EXIT


# ---- files: checked up front, written together ------------------------------------------------


@pytest.mark.parametrize("flag", ["--outputs", "--write-inputs", "--stats-json", "--memory-plot",
                                  "--target", "--inputs", "--entry", "--backend"])
def test_empty_flag_values_are_refused(tmp_path: Path, flag: str) -> None:
    write(tmp_path, "ok.mlir", GOOD)
    res = run("ok.mlir", flag, "", cwd=tmp_path)
    assert_error(res, f"lamina-run: error: argument {flag}: expected a value, got ''")
    assert res.stdout == ""


def test_empty_pipeline_stays_valid(tmp_path: Path) -> None:
    write(tmp_path, "ok.mlir", GOOD)
    assert run("ok.mlir", "-p", "", cwd=tmp_path).returncode == 0


def test_negative_seed_is_refused(tmp_path: Path) -> None:
    write(tmp_path, "ok.mlir", GOOD)
    assert_error(run("ok.mlir", "--seed", "-1", cwd=tmp_path),
                 "lamina-run: error: argument --seed: must be non-negative, got -1")


def test_destinations_checked_before_running(tmp_path: Path) -> None:
    """A destination that can never be written is refused before the program runs, naming it
    (never a temporary file), and no file of the run is written."""
    write(tmp_path, "ok.mlir", GOOD)
    (tmp_path / "s.json").write_text("old")
    long_name = "x" * 300 + ".npz"
    for args, message in [
        (["--outputs", long_name], f"error: cannot write '{long_name}': File name too long"),
        (["--outputs", "no/dir/o.npz"], "error: cannot write 'no/dir/o.npz': No such file or "
         "directory"),
        (["--write-inputs", "."], "error: cannot write '.': Is a directory"),
        (["--outputs", "s.json"], "lamina-run: error: --outputs and --stats-json both write "
         "'s.json'"),
        (["--outputs", "-", "--write-inputs", "-"], "lamina-run: error: --outputs and "
         "--write-inputs both write stdout"),
    ]:
        res = run("ok.mlir", "--stats-json", "s.json", *args, cwd=tmp_path)
        assert_error(res, message)
        assert ".lamina-" not in res.stderr
        assert (tmp_path / "s.json").read_text() == "old"
    no_temp_files(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.mlir", "s.json"]


def test_lamina_opt_checks_its_destination_before_any_work(tmp_path: Path) -> None:
    """main parsed, verified and ran the pipeline, then failed on `-o` (here the program's own
    error would have come first, hiding the bad destination until it was fixed)."""
    write(tmp_path, "bad.mlir", VERIFY_ERROR)
    for dest, why in [("no/dir/out.mlir", "No such file or directory"), (".", "Is a directory"),
                      ("y" * 300, "File name too long")]:
        assert_error(opt("bad.mlir", "-p", "cse", "-o", dest, cwd=tmp_path),
                     f"error: cannot write '{dest}': {why}")
    no_temp_files(tmp_path)


def test_a_failing_output_leaves_no_other_output_behind(tmp_path: Path) -> None:
    """main wrote --memory-plot and --stats-json, then failed on --outputs: the first two were
    left behind (overwriting older files). Now nothing is written unless everything is."""
    write(tmp_path, "ok.mlir", GOOD)
    (tmp_path / "s.json").write_text("old")
    res = run("ok.mlir", "--memory-plot", "m.png", "--stats-json", "s.json", "--outputs",
              "missing/o.npz", cwd=tmp_path)
    assert_error(res, "error: cannot write 'missing/o.npz': No such file or directory")
    assert not (tmp_path / "m.png").exists()
    assert (tmp_path / "s.json").read_text() == "old"
    no_temp_files(tmp_path)


def test_staged_outputs_commit_together_or_not_at_all(tmp_path: Path) -> None:
    """In-process: a file whose writer fails after another was staged leaves both destinations
    as they were; a rename that fails at commit names the destination, not the temporary."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text("old a")

    def fail(f: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(LaminaError, match=r"cannot write '.*b\.json': No space left on device"):
        with StagedOutputs() as out:
            out.add_text(str(a), "new a")
            out.add(str(b), fail)
            out.commit()
    assert a.read_text() == "old a" and not b.exists()
    no_temp_files(tmp_path)

    with pytest.raises(LaminaError) as e:
        with StagedOutputs() as out:
            out.add_text(str(b), "new b")
            b.mkdir()   # the destination became a directory after it was staged
            out.commit()
    assert e.value.message == f"cannot write '{b}': Is a directory"
    no_temp_files(tmp_path)

    with StagedOutputs() as out:
        out.add_text(str(a), "new a")
        out.add_npz(str(tmp_path / "c.npz"), {})
        out.commit()
    assert a.read_text() == "new a" and (tmp_path / "c.npz").exists()
    no_temp_files(tmp_path)


def test_fifo_is_written_in_place_not_replaced(tmp_path: Path) -> None:
    write(tmp_path, "ok.mlir", GOOD)
    fifo = tmp_path / "stats.fifo"
    os.mkfifo(fifo)
    # the read end is open (without blocking) before the run, so the tool's write never waits;
    # the JSON is far smaller than a pipe's buffer
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        res = run("ok.mlir", "--stats-json", "stats.fifo", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)          # still a FIFO, not a file
        got = os.read(fd, 1 << 16)
    finally:
        os.close(fd)
    assert json.loads(got)["entry"] == "f"
    no_temp_files(tmp_path)


def test_symlink_is_written_through_and_kept(tmp_path: Path) -> None:
    write(tmp_path, "ok.mlir", GOOD)
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "stats.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    res = run("ok.mlir", "--stats-json", "link.json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text())["entry"] == "f"
    # lamina-opt -o goes through the same staging
    res = opt("ok.mlir", "-o", "link.json", cwd=tmp_path)
    assert res.returncode == 0 and link.is_symlink(), res.stderr
    assert target.read_text().startswith("builtin.module")
    no_temp_files(tmp_path)
    no_temp_files(tmp_path / "real")


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a device node needs root")
def test_device_node_is_written_in_place_not_replaced(tmp_path: Path) -> None:
    """As root, renaming over /dev/null turns it into a regular file. Checked on a node of the
    same device made in the test's folder, so a regression cannot break the machine's
    /dev/null."""
    write(tmp_path, "ok.mlir", GOOD)
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    for res in (run("ok.mlir", "--stats-json", str(null), "--outputs", str(null) + "x",
                    cwd=tmp_path),
                opt("ok.mlir", "-o", str(null), cwd=tmp_path)):
        assert res.returncode == 0, res.stderr
        assert stat.S_ISCHR(os.lstat(null).st_mode)
    no_temp_files(tmp_path)


# ---- --memory-plot ----------------------------------------------------------------------------

EMPTY_TENSORS = """\
func.func @nothing(%x: tensor<0x4xf32>) -> tensor<0x4xf32> {
  %0 = lamina.neg %x : tensor<0x4xf32>
  func.return %0 : tensor<0x4xf32>
}
"""


def test_memory_plot_failures_are_diagnostics(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    write(tmp_path, "ok.mlir", GOOD)
    (tmp_path / "plots").mkdir()
    for path, message in [
        ("missing/m.png", "error: cannot write 'missing/m.png': No such file or directory"),
        ("m.xyz", "error: --memory-plot: cannot write 'm.xyz': unknown image format 'xyz' "
         "(formats: "),
        ("plots", "error: cannot write 'plots': Is a directory"),
    ]:
        res = run("ok.mlir", "--memory-plot", path, "--stats-json", "s.json", cwd=tmp_path)
        assert_error(res, message)
        assert not (tmp_path / "s.json").exists()
    assert not (tmp_path / "plots.png").exists()   # main wrote DIR.png for a directory
    assert list((tmp_path / "plots").iterdir()) == []
    no_temp_files(tmp_path)


def test_memory_plot_of_a_program_that_holds_nothing(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    write(tmp_path, "empty.mlir", EMPTY_TENSORS)
    res = run("empty.mlir", "--memory-plot", "m.svg", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "m.svg").read_text().lstrip().startswith("<?xml")
    # the format follows the extension; none means PNG, written to exactly the name given
    res = run("empty.mlir", "--memory-plot", "plot", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "plot").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "plot.png").exists()


# ---- the fused kernel's working set -----------------------------------------------------------

LN_GELU = """\
func.func @f(%x: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %n = lamina.layernorm %x {axis = -1 : i64, eps = 1.0e-05 : f64} : tensor<1024x1024xf32>
  %g = lamina.gelu %n {approximate = "tanh"} : tensor<1024x1024xf32>
  %e = lamina.exp %g : tensor<1024x1024xf32>
  %y = lamina.dropout %e {rate = 0.1 : f64, seed = 42 : i64} : tensor<1024x1024xf32>
  func.return %y : tensor<1024x1024xf32>
}
"""


def test_fused_kernel_without_target_reports_its_tile_working_set() -> None:
    """Without a target, main charged a fused kernel all its intermediates to "sram" (512 MiB for
    the seed example). Now it is what the executor allocated: a tile's buffers and scratch, which
    follow the tile size, not the tensor size, and do not depend on the thread count."""
    import lamina

    module = lamina.parse(LN_GELU)
    lamina.apply(module, "fuse-elementwise")
    x = lamina.inputs(module)
    intermediates = 3 * 1024 * 1024 * 4          # n, g, e
    sram = {}
    for tile_bytes, threads in [(None, 1), (None, 2), (64 * 1024, 1)]:
        got = lamina.run(module, x, tile_bytes=tile_bytes, threads=threads)
        sram[tile_bytes, threads] = got.stats["peak_bytes"]["sram"]
    assert 0 < sram[None, 1] <= intermediates // 4, sram
    assert sram[None, 2] == sram[None, 1]
    assert 0 < sram[64 * 1024, 1] < sram[None, 1]
    # with a target, the planner's model: the intermediates, at most the target's SRAM
    planned = lamina.run(module, x, target="h100-node").stats["peak_bytes"]["sram"]
    assert planned == min(intermediates, int(30.1e6)) == intermediates


def test_fused_seed_example_reports_megabytes_not_512_mib(tmp_path: Path) -> None:
    res = subprocess.run([str(RUN), str(SAMPLES / "layernorm_gelu_dropout.mlir"), "--entry",
                          "ln_gelu_dropout", "-p", "fuse-elementwise", "--stats-json", "-"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    sram = json.loads(res.stdout)["peak_bytes"]["sram"]
    assert 0 < sram < 16 * 2**20, sram
