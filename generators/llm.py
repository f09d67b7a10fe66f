"""Deprecated import path of the LLM client: it lives in :mod:`gym_envfactory.llm` (``client.py``) with its
test server, and its errors in :mod:`gym_envfactory.errors` (docs/architecture.md, "Layers").  This module
re-exports them for code written against ``gym_envfactory.generators.llm`` and warns once on import."""

from __future__ import annotations

import warnings

from gym_envfactory.errors import LLMError, LLMOutputError, LLMRequestError
from gym_envfactory.llm.client import *  # noqa: F403
from gym_envfactory.llm.client import __all__ as _client_all

__all__ = [*_client_all, "LLMError", "LLMOutputError", "LLMRequestError"]

warnings.warn("gym_envfactory.generators.llm moved to gym_envfactory.llm", DeprecationWarning, stacklevel=2)
