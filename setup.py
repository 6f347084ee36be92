"""Package discovery for Lamina's layout (the metadata is in pyproject.toml).

The code lives in top-level folders that install as one import namespace: `api/` is the package
`lamina` itself (version, Python API, command-line tools), and every other code folder is
`lamina.<folder>`. Every sub-package found under them is included, so a new code folder is one
entry in CODE_FOLDERS and a new sub-package needs no entry at all (a test builds the wheel and
compares its modules with the tree).
"""

from __future__ import annotations

import os

from setuptools import setup

# folder -> package; the only list of code folders in the project
CODE_FOLDERS = {
    "api": "lamina",
    "ir": "lamina.ir",
    "analysis": "lamina.analysis",
    "passes": "lamina.passes",
    "backends": "lamina.backends",
    "frontends": "lamina.frontends",
}


def _packages() -> tuple[list[str], dict[str, str]]:
    here = os.path.dirname(os.path.abspath(__file__))
    packages: list[str] = []
    package_dir: dict[str, str] = {}
    for folder, package in CODE_FOLDERS.items():
        root = os.path.join(here, folder)
        if not os.path.isfile(os.path.join(root, "__init__.py")):
            continue
        package_dir[package] = folder
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_")))
            if "__init__.py" in filenames:
                rel = os.path.relpath(dirpath, root)
                packages.append(package if rel == "." else package + "." + rel.replace(os.sep, "."))
    return packages, package_dir


if __name__ == "__main__":   # setuptools' build backend runs this file as __main__
    PACKAGES, PACKAGE_DIR = _packages()
    setup(packages=PACKAGES, package_dir=PACKAGE_DIR,
          package_data={"lamina": ["py.typed"], "lamina.ir.mesh.targets": ["*.toml"]})
