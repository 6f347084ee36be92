"""The NumPy interpreter backend."""

from lamina.backends.numpy import attention as _attention  # noqa: E402,F401  ("attention" kind)
from lamina.backends.numpy import fused as _fused  # noqa: E402,F401  (registers lamina.fused)
from lamina.backends.numpy import memory as _memory  # noqa: E402,F401  (registers move/free)
from lamina.backends.numpy import spmd as _spmd  # noqa: E402,F401  (registers the collectives)
