"""Lamina's IR, in sub-packages by concern, each importing only those below it (README "Layout",
pyproject.toml's "ir by concern" contract): the builders and `text` (the text format) on top,
`ops` (the op table and the dialect's classes), `buffers` (memory ops, step updates), `mesh`
(placement, sharding rules, collectives, targets) beside `autodiff` (VJP rules), and `core`
(element types, shapes, literals, diagnostics) at the bottom."""
