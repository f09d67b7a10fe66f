"""Deprecated import path of the LLM-played user: every simulated user lives in :mod:`gym_envfactory.users`
(``LLMUser`` in ``users/llm.py``; docs/architecture.md, "Layers").  This module re-exports its names for
code written against ``gym_envfactory.generators.tasks.user`` and warns once on import."""

from __future__ import annotations

import warnings

from gym_envfactory.users.llm import *  # noqa: F403
from gym_envfactory.users.llm import __all__ as __all__

warnings.warn("gym_envfactory.generators.tasks.user moved to gym_envfactory.users", DeprecationWarning, stacklevel=2)
