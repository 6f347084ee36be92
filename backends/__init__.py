"""Lamina's execution backends and the `lamina-run` driver."""
