"""Every backend `lamina-run --backend NAME` knows: one line each, imported only when chosen.

A backend whose optional dependencies are missing is still listed; choosing it is one diagnostic
saying what to install.
"""

from __future__ import annotations

import difflib
import importlib

from lamina.backends.interface import Backend
from lamina.ir.core.diagnostics import LaminaError

# name -> (module, class, the extra that installs its dependencies)
BACKENDS: dict[str, tuple[str, str, str | None]] = {
    "numpy": ("lamina.backends.numpy.backend", "NumpyBackend", None),
    "jax": ("lamina.backends.jax.backend", "JaxBackend", "jax"),
    "compiled": ("lamina.backends.compiled.backend", "CompiledBackend", "compiled"),
    "iree": ("lamina.backends.iree.backend", "IreeBackend", "iree"),
}


def backend_names() -> list[str]:
    return sorted(BACKENDS)


def get_backend(name: str) -> Backend:
    """An instance of the backend called `name`; LaminaError for an unknown or uninstallable one."""
    entry = BACKENDS.get(name)
    if entry is None:
        close = difflib.get_close_matches(name, BACKENDS, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise LaminaError(f"unknown backend '{name}'{hint}; backends: {', '.join(backend_names())}")
    module, cls, extra = entry
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        missing = e.name or str(e)
        how = f"pip install 'lamina[{extra}]'" if extra else "reinstall Lamina"
        raise LaminaError(f"backend '{name}' needs the Python package '{missing}', which is not "
                          f"installed: {how}") from None
    backend: Backend = getattr(mod, cls)()
    return backend
