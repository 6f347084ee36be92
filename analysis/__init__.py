"""Analyses that passes and backends share: one of each.

The layer between the IR (`lamina.ir`) and its users: sizes of values, value names for messages,
graph helpers (union-find, topological order of a contracted graph), the fusion-group model, the
communication cost model and the static memory plan (`arena`). Passes and backends both read
these and neither imports the other; nothing here imports a pass or a backend (the import
contract in `make lint` / `make test`).
"""
