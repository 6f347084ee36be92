"""Every ONNX op the importer maps: the converter modules, loaded, and their table.

The converters live by kind (`ops_shape`: shapes and data movement, `ops_math`: elementwise,
logic, casts, constants, `ops_nn`: contractions, normalizations, reductions, losses) and register
in one table; importing this module loads them all. `mapped()` lists the op types.
"""

from __future__ import annotations

from lamina.frontends.onnx import ops_math, ops_nn, ops_shape
from lamina.frontends.onnx.ops_shape import TABLE

MODULES = (ops_shape, ops_math, ops_nn)


def mapped() -> list[str]:
    """The ONNX op types with a converter, sorted."""
    return sorted(TABLE)


__all__ = ["MODULES", "TABLE", "mapped"]
