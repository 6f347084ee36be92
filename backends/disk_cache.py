"""The directory backends cache compiled code under, across processes: one rule for all of them.

`LAMINA_CACHE_DIR`, else `$XDG_CACHE_HOME/lamina`, else `~/.cache/lamina`. Each backend keeps its
own subdirectory, named by its compiler and version (`kernels-numba<version>/`,
`iree<version>/`); deleting the directory only costs recompilation. It lives among the modules
every backend shares because the backends are independent of each other (pyproject.toml's
import contract), so the compiled backend's cache (which imports numba) is no place for it.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The directory compiled kernels and modules are cached under (see the module docstring)."""
    env = os.environ.get("LAMINA_CACHE_DIR", "").strip()
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "lamina"
