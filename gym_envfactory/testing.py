"""Test helpers for code that talks to LLM endpoints, offline: the names of :mod:`gym_envfactory.llm.testing`.

``ScriptedChatServer`` (an OpenAI-compatible chat-completions server over real HTTP that answers from a
script, a responder or a recording), ``RecordingProxy`` (records a real endpoint's answers for replay),
``ScriptExhausted`` and ``request_sha``.  They live with the LLM client in :mod:`gym_envfactory.llm`; this
module keeps the documented import path (README, "LLM endpoints in tests").  Standard library only.
"""

from __future__ import annotations

from gym_envfactory.llm.testing import RecordingProxy, ScriptedChatServer, ScriptExhausted, request_sha

__all__ = ["ScriptedChatServer", "ScriptExhausted", "RecordingProxy", "request_sha"]
