"""Deprecated import path: :mod:`gym_envfactory.training.export.sft` (training data export lives in
``training/export/``; docs/architecture.md, "Layers").  Re-exports its names; the package warns on import."""

from __future__ import annotations

from gym_envfactory.training.export.sft import *  # noqa: F403
from gym_envfactory.training.export.sft import __all__ as __all__
