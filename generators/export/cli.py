"""Deprecated import path: :mod:`gym_envfactory.training.export.cli` (training data export lives in
``training/export/``; docs/architecture.md, "Layers").  Re-exports its names; the package warns on import."""

from __future__ import annotations

from gym_envfactory.training.export.cli import *  # noqa: F403
from gym_envfactory.training.export.cli import __all__ as __all__
