"""The NumPy interpreter backend."""
