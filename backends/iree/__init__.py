"""The IREE backend: Lamina functions exported to upstream MLIR and compiled by IREE to native code."""
