"""Every ATen overload the torch importer maps: the converter modules, loaded, and their table.

The converters live by kind (`aten_elementwise`, `aten_nn`, `aten_layout`, `aten_conv`) and register in
`lamina.frontends.torch.table.TABLE`; importing this module loads them all, so `TABLE` here is
complete. `mapped()` lists the overloads (the README's list is checked against it).
"""

from __future__ import annotations

from lamina.frontends.torch import aten_conv, aten_elementwise, aten_layout, aten_nn
from lamina.frontends.torch.table import TABLE

MODULES = (aten_elementwise, aten_layout, aten_nn, aten_conv)


def mapped() -> list[str]:
    """The ATen overloads with a converter, sorted (`aten.add.Tensor`, ...)."""
    return sorted(TABLE)


__all__ = ["MODULES", "TABLE", "mapped"]
