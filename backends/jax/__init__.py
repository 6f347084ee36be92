"""The JAX backend: Lamina programs compiled by XLA, placed ones as one `jax.shard_map`."""
