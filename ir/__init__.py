"""Lamina's IR: the `lamina` dialect, its op table, shape rules, NumPy semantics and diagnostics."""
