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
