"""Lamina's passes and the `lamina-opt` driver."""
