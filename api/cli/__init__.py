"""Lamina's command-line tools: `lamina-opt` (`opt`), `lamina-run` (`run`), `lamina-import`
(`importer`); `entry.guarded` is how a tool ends (one diagnostic and exit 1, never a traceback).

The top layer: each tool may use the IR, the analyses, the passes and the backends; nothing below
imports from here (the import contract in `make lint` / `make test` checks it).
"""
