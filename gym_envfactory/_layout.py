"""Source-checkout layout: ``gym_envfactory.generators``, ``.training`` and ``.ui`` (docs/architecture.md, "Layers").

A wheel installs the repository's ``generators/`` and ``training/`` folders inside the package (see
``pyproject.toml``, force-include), so nothing generic lands in site-packages.  In a source checkout or
an editable install those folders stay at the repository root; this finder maps the same import names
onto them, so code and tests import ``gym_envfactory.generators`` either way.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

_PACKAGE_DIR = Path(__file__).resolve().parent
_ROOT = _PACKAGE_DIR.parent
MAPPED = ("generators", "training", "ui")


class _CheckoutFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        head, _, name = fullname.rpartition(".")
        if head != "gym_envfactory" or name not in MAPPED:
            return None
        folder = _ROOT / name
        init = folder / "__init__.py"
        if (_PACKAGE_DIR / name).exists() or not init.is_file():
            return None  # installed from a wheel, or no such folder
        return importlib.util.spec_from_file_location(fullname, init, submodule_search_locations=[str(folder)])


def install() -> None:
    """Append the checkout finder to ``sys.meta_path`` (once), in a source checkout only (a
    ``pyproject.toml`` next to the package); a wheel install leaves the import system unchanged."""
    if (_ROOT / "pyproject.toml").is_file() and not any(isinstance(f, _CheckoutFinder) for f in sys.meta_path):
        sys.meta_path.append(_CheckoutFinder())
