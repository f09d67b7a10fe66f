"""Deprecated import path of the training data exporters, which moved to :mod:`gym_envfactory.training.export`
(``envfactory export rl|sft`` is unchanged).  ``rl``, ``sft``, ``episodes`` and ``cli`` re-export the new
modules' names for code written against ``gym_envfactory.generators.export``; importing warns once.  The one
import from the generators into ``training/`` the contracts allow (``ignore_imports`` in pyproject.toml)."""

from __future__ import annotations

import warnings

warnings.warn("gym_envfactory.generators.export moved to gym_envfactory.training.export", DeprecationWarning,
              stacklevel=2)
