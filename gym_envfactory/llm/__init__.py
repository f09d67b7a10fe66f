"""Calling LLMs: the client, its errors and a scripted OpenAI-compatible server for tests, in one place.

- :mod:`.client`: :class:`LLMClient` / :class:`LLMConfig` / :class:`LLMReply`, an async client for any
  OpenAI-compatible chat-completions endpoint with retries, structured output (one repair round), an
  on-disk response cache, per-stage accounting and a concurrency cap.  Needs ``openai``, ``tenacity``
  and ``jsonschema`` (extra ``llm``; ``gen`` and ``synthesis`` include them).
- the errors :class:`~gym_envfactory.errors.LLMError`, :class:`~gym_envfactory.errors.LLMRequestError`
  and :class:`~gym_envfactory.errors.LLMOutputError`: members of the runtime's one error family, defined
  in :mod:`gym_envfactory.errors` and re-exported here (catching them imports no LLM library).
- :mod:`.testing`: :class:`~gym_envfactory.llm.testing.ScriptedChatServer` (answers from a script or a
  recording, over real HTTP) and :class:`~gym_envfactory.llm.testing.RecordingProxy` (records a real
  endpoint's answers); standard library only.  ``gym_envfactory.testing`` re-exports them.

``import gym_envfactory`` does not import this package, and importing this package imports none of the
LLM libraries: the client's names (``LLMClient``, ``LLMConfig``, ``LLMReply``, ``extract_json``,
``cache_key``, ``completion_problem``, ``run``) load :mod:`.client` on first access (PEP 562).  Design:
docs/architecture.md, "Layers".
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gym_envfactory.errors import LLMError, LLMOutputError, LLMRequestError

if TYPE_CHECKING:
    from gym_envfactory.llm.client import (
        LLMClient,
        LLMConfig,
        LLMReply,
        cache_key,
        completion_problem,
        extract_json,
        run,
    )

__all__ = [
    "LLMClient",
    "LLMConfig",
    "LLMReply",
    "LLMError",
    "LLMRequestError",
    "LLMOutputError",
    "extract_json",
    "cache_key",
    "completion_problem",
    "run",
]

_CLIENT_NAMES = frozenset({"LLMClient", "LLMConfig", "LLMReply", "extract_json", "cache_key", "completion_problem",
                           "run"})


def __getattr__(name: str) -> Any:
    """The client's names, imported from :mod:`.client` on first use (it needs the LLM libraries).

    Raises:
        AttributeError: ``name`` is not one of this package's names.
        ImportError: the client's libraries (``openai``, ``tenacity``, ``jsonschema``) are not installed.
    """
    if name in _CLIENT_NAMES:
        value = getattr(importlib.import_module("gym_envfactory.llm.client"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
