"""The vocabulary every other part of `lamina.ir` speaks: element types (`dtypes`), tensor shapes
and their rules (`shapes`), literal syntax (`literals`) and diagnostics (`diagnostics`).

Attribute kinds of the hand-written ops (`attrs`) live here too.

The lowest layer of `lamina.ir` (pyproject.toml's layers contract): it imports no other
sub-package, so any of them can use it.
"""
