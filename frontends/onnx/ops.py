"""Every ONNX op the importer maps: the converter modules, loaded, and their table.

The converters live by kind (`ops_shape`: shapes and data movement, `ops_math`: elementwise,
logic, casts, constants, `ops_nn`: contractions, normalizations, reductions, losses,
`ops_attention`: Attention, `ops_compose`: ops spelled with several rows) and register
in one table; importing this module loads them all. `mapped()` lists the op types,
`folded_only()` those accepted only on values known while importing.
"""

from __future__ import annotations

from lamina.frontends.onnx import ops_attention, ops_compose, ops_math, ops_nn, ops_shape
from lamina.frontends.onnx.ops_math import FOLD_ONLY
from lamina.frontends.onnx.ops_shape import TABLE

MODULES = (ops_shape, ops_math, ops_nn, ops_attention, ops_compose)


def mapped() -> list[str]:
    """The ONNX op types imported wherever they occur, sorted."""
    return sorted(set(TABLE) - set(FOLD_ONLY))


def folded_only() -> list[str]:
    """The ONNX op types imported only on integer values known while importing (the shape
    arithmetic of exporters and function bodies), sorted: at run time they are refused."""
    return sorted(FOLD_ONLY)


__all__ = ["MODULES", "TABLE", "folded_only", "mapped"]
