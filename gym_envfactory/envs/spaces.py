"""Gymnasium spaces for chat-message observations and assistant actions.

Observations are lists of OpenAI-format chat messages (``{"role": ..., "content": ...}``, tool
messages with ``tool_call_id`` and ``name``).  Actions are whatever :func:`gym_envfactory.envs.parsing
.parse_action` accepts.  Both are honest custom :class:`gymnasium.Space` subclasses: ``contains``
checks the structure, ``sample`` draws seeded examples.  Gymnasium's vector utilities batch custom
spaces as tuples (``gymnasium.vector.utils.batch_space`` registers ``Space``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from gym_envfactory.envs.parsing import ToolCall

__all__ = ["MessagesSpace", "AssistantActionSpace"]

_ROLES = frozenset({"system", "user", "assistant", "tool"})
_WORDS = ("ok", "the", "booking", "please", "confirm", "which", "date", "done", "thanks", "hotel")


class MessagesSpace(spaces.Space[list]):
    """A list of chat messages: dicts with ``role`` in {system, user, assistant, tool} and ``content``
    a string (tool messages also carry ``tool_call_id``)."""

    def __init__(self, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        """False: chat messages have no fixed-size array form (Gymnasium ``Space.is_np_flattenable``)."""
        return False

    def contains(self, x: Any) -> bool:
        """True for a list of mappings, each with a known ``role``, string ``content`` (if any) and, for
        tool messages, a string ``tool_call_id``."""
        if not isinstance(x, list):
            return False
        for m in x:
            if not isinstance(m, Mapping) or m.get("role") not in _ROLES:
                return False
            if not isinstance(m.get("content", ""), str):
                return False
            if m["role"] == "tool" and not isinstance(m.get("tool_call_id"), str):
                return False
        return True

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, str]]:
        """One or two user messages of four random words each (from the space's seeded RNG;
        ``mask`` and ``probability`` are ignored)."""
        n = int(self.np_random.integers(1, 3))
        return [
            {"role": "user", "content": " ".join(self.np_random.choice(_WORDS, size=4).tolist())}
            for _ in range(n)
        ]

    def __repr__(self) -> str:
        return "MessagesSpace()"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, MessagesSpace)

    def to_jsonable(self, sample_n: Iterable[list]) -> list:
        """A batch of message lists as JSON data (lists of the same message dicts)."""
        return [list(s) for s in sample_n]

    def from_jsonable(self, sample_n: list) -> list[list]:
        """The inverse of :meth:`to_jsonable`."""
        return [list(s) for s in sample_n]


class AssistantActionSpace(spaces.Space[Any]):
    """An assistant action: a string (raw model output), an OpenAI assistant message dict, a
    :class:`~gym_envfactory.envs.parsing.ToolCall`, or a list of ToolCall / ``{"name", "arguments"}`` dicts.

    ``sample()`` draws either a short text reply or a ``<tool_call>`` block for one of ``tool_names``
    with empty arguments (seeded; useful for smoke tests, not a sensible policy).
    """

    def __init__(self, tool_names: Sequence[str] = (), seed: int | np.random.Generator | None = None) -> None:
        super().__init__(shape=None, dtype=None, seed=seed)
        self.tool_names = tuple(tool_names)

    @property
    def is_np_flattenable(self) -> bool:
        """False: actions are text or structured calls, with no fixed-size array form."""
        return False

    def contains(self, x: Any) -> bool:
        """True for a string, a :class:`ToolCall`, an assistant message dict (or a ``{"name", ...}``
        call dict), or a list of ToolCalls / call dicts (``name`` or OpenAI ``function``)."""
        if isinstance(x, (str, ToolCall)):
            return True
        if isinstance(x, Mapping):
            return x.get("role", "assistant") == "assistant" or "name" in x
        if isinstance(x, (list, tuple)):
            return all(isinstance(c, ToolCall) or (isinstance(c, Mapping) and ("name" in c or "function" in c)) for c in x)
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A three-word reply or, half the time when the space has tools, a ``<tool_call>`` block for a
        random tool with empty arguments (seeded; ``mask`` and ``probability`` are ignored)."""
        if self.tool_names and self.np_random.random() < 0.5:
            name = self.tool_names[int(self.np_random.integers(len(self.tool_names)))]
            return f"<tool_call>{json.dumps({'name': name, 'arguments': {}})}</tool_call>"
        return " ".join(self.np_random.choice(_WORDS, size=3).tolist())

    def __repr__(self) -> str:
        return f"AssistantActionSpace({len(self.tool_names)} tools)"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, AssistantActionSpace) and other.tool_names == self.tool_names
