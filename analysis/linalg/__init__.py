"""Export to upstream MLIR: a single-device Lamina module as func + tensor + linalg + arith + math.

`lamina.analysis.linalg.export.export_module` is the entry; `lamina.analysis.linalg.namespace`
is the array namespace the op table's formulas run on to produce it. It lives in `analysis`
because both `lamina-opt -t linalg` and a backend that compiles the export (IREE) need it, and
backends never import passes.
"""
