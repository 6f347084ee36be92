"""`benchmarks/bench_import.py`'s arguments: the documented quick command (`--layers 2 --dim 256
--vocab 1000`) used to die in torch because `--heads` defaulted to 12, which does not divide 256."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def bench() -> ModuleType:
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("bench_import", ROOT / "benchmarks/bench_import.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_import"] = module
    spec.loader.exec_module(module)
    return module


def test_heads_default_divides_the_width() -> None:
    b = bench()
    assert b.default_heads(768) == 12          # GPT-2 small, as before
    assert b.default_heads(256) == 4           # the documented quick command
    for dim in (1, 7, 96, 100, 250, 1000, 4096):
        assert dim % b.default_heads(dim) == 0


def test_the_documented_quick_command_is_in_the_readme() -> None:
    readme = (ROOT / "benchmarks/README.md").read_text()
    assert "bench_import.py --layers 2 --dim 256 --vocab 1000" in readme


def test_heads_that_do_not_divide_the_width_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    b = bench()
    with pytest.raises(SystemExit) as info:
        b.main(["--dim", "256", "--heads", "5"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == ("bench_import.py: error: --heads 5 does not divide --dim 256 "
                                    "into equal heads")
    assert "Traceback" not in err


def test_a_tiny_llama_row_is_measured_in_a_fresh_process(capsys: pytest.CaptureFixture[str]) -> None:
    """The Llama row's route (a child process per run, its JSON read back) at a tiny size; the
    imported weights are the model's own memory, not copies (what keeps the 1.1B row's peak
    near 1x its weights)."""
    pytest.importorskip("transformers")
    b = bench()
    assert b.main(["--llama", "--llama-layers", "1", "--llama-hidden", "128", "--llama-vocab",
                   "500", "--tokens", "16", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert "1 layers, hidden 128, MLP 352, 2 heads (1 key/value), vocabulary 500" in out
    row = next(line for line in out.splitlines() if line.startswith("| torch.export (ATen) |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    export_s, import_s = (float(c.split()[0]) for c in cells[1:3])
    assert export_s > 0 and import_s > 0 and int(cells[4]) > 50
    assert cells[5].split("x")[0].replace(".", "").isdigit()
    assert "all of it in torch's tensors' memory" in out


def test_a_llama_width_that_is_not_whole_heads_is_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    b = bench()
    with pytest.raises(SystemExit) as info:
        b.main(["--llama", "--llama-hidden", "100"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == ("bench_import.py: error: --llama-hidden must be a multiple "
                                    "of 64 (the head size), got 100")
