"""The compiled backend: the NumPy interpreter with every `lamina.fused` op compiled by numba."""
