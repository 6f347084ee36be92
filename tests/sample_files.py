"""The shipped `samples/*.mlir`, split into the programs and the deliberately invalid ones.

A sample that shows an error (the README tour's `samples/bad.mlir`) carries MLIR's
`// expected-error` annotation for it, which `lamina-opt --verify-diagnostics` checks; every test
that loads, runs or transforms all samples takes `VALID`, and `INVALID` is tested for its error.
"""

from __future__ import annotations

import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALL = sorted(glob.glob(os.path.join(ROOT, "samples", "*.mlir")))


def _invalid(path: str) -> bool:
    with open(path, encoding="utf-8") as f:
        return "// expected-error" in f.read()


INVALID = [p for p in ALL if _invalid(p)]
VALID = [p for p in ALL if p not in INVALID]
