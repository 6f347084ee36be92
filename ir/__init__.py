"""Lamina's IR: the `lamina` dialect, op table and formulas, shape and sharding rules, types."""
