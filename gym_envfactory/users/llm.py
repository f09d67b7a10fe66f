"""The LLM user simulator (arXiv 2605.18703, §3.4): a :data:`~gym_envfactory.users.UserSource` that
plays the user of a task (import name ``gym_envfactory.users.llm``; ``LLMUser`` is also importable from
:mod:`gym_envfactory.users`, which loads this module on first use).  Needs the LLM client's libraries
(:mod:`gym_envfactory.llm.client`: ``openai``, ``tenacity``, ``jsonschema``; ``pip install -e ".[llm]"``).

``EnvFactoryEnv`` asks its user source for the next user message at ``reset`` (``turn_index`` = the first
turn, empty conversation) and after every assistant reply that ends a turn (``turn_index`` = the next
turn).  :class:`LLMUser` answers with an LLM: it is given a persona, the task's turns as the user's
instructions, and the values the agent has to ask for (the answer of every clarification turn: the
next turn's scripted message).  It returns ``None`` to end the conversation: when the model says the
conversation is done, and always from ``max_turns`` on (so a simulator that never stops is bounded).
A model answer that is not valid JSON even after the LLM layer's repair round falls back to the task's
scripted message for that turn (counted in :attr:`LLMUser.stats`).

Usage::

    from gym_envfactory.llm import LLMConfig
    from gym_envfactory.users import LLMUser
    env = gym.make("envfactory/HotelBooking-v0", user=LLMUser(config=LLMConfig(model="m", base_url=URL)))

Seeding and caching come from the LLM layer: the request carries ``LLMConfig.seed`` and, with
``LLMConfig.cache_dir``, a replayed episode makes no HTTP request.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from gym_envfactory.environment.tasks import Task
from gym_envfactory.errors import LLMOutputError
from gym_envfactory.llm.client import LLMClient, LLMConfig, run

__all__ = ["LLMUser", "USER_SCHEMA", "USER_STAGE", "STAGE_MARK", "run_sync", "known_values"]

_T = TypeVar("_T")

#: First line of every QueryGen and user-simulator system prompt: ``QueryGen stage: <stage>``.
STAGE_MARK = "QueryGen stage: "
#: The accounting stage (and prompt stage) of the user simulator.
USER_STAGE = "user"

#: The JSON schema of one simulator reply: the next user message, and whether the conversation is over.
USER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"message": {"type": "string"}, "done": {"type": "boolean"}},
    "required": ["message", "done"],
}

_DEFAULT_PERSONA = "A polite, busy customer who writes short, natural messages and never mentions tools or ids it was not given."


def run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to completion from synchronous code, also when this thread already runs an event
    loop (then in a short-lived worker thread with its own loop).  Re-raises the coroutine's error."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run(coro)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="llm-user") as pool:
        return pool.submit(run, coro).result()


def known_values(task: Task) -> list[dict[str, Any]]:
    """What the user knows that the agent must ask for: one entry per clarification turn,
    ``{"turn": i, "answer": <the next turn's scripted message>}`` (docs/authoring.md: the next turn's
    user message supplies the missing value).  Also reads ``task.provenance["clarifications"]`` when
    QueryGen stored the withheld argument there (``{"turn", "argument", "value", "answer"}``)."""
    out: list[dict[str, Any]] = []
    stored = {c.get("turn"): c for c in task.provenance.get("clarifications", []) if isinstance(c, dict)}
    for i, turn in enumerate(task.turns):
        if turn.clarification and i + 1 < len(task.turns):
            entry: dict[str, Any] = {"turn": i, "answer": task.turns[i + 1].user}
            extra = stored.get(i)
            if extra:
                entry.update({k: extra[k] for k in ("argument", "value") if k in extra})
            out.append(entry)
    return out


def _transcript(conversation: list[dict[str, Any]], limit: int = 6000) -> str:
    """The conversation as the user sees it: user and assistant text only (tool traffic hidden)."""
    lines = []
    for m in conversation:
        role = m.get("role")
        text = m.get("content") or ""
        if role in ("user", "assistant") and isinstance(text, str) and text.strip():
            lines.append(f"{'USER' if role == 'user' else 'ASSISTANT'}: {text.strip()}")
    out = "\n".join(lines)
    return out[-limit:]


def user_messages(task: Task, conversation: list[dict[str, Any]], turn_index: int,
                  persona: str | None) -> list[dict[str, Any]]:
    """The chat messages of one simulator request (system prompt + one user prompt)."""
    profile = task.provenance.get("user_profile") if isinstance(task.provenance, dict) else None
    who = persona or (json.dumps(profile, ensure_ascii=False) if profile else _DEFAULT_PERSONA)
    script = []
    for i, t in enumerate(task.turns):
        tag = " (leave out the detail the assistant must ask for)" if t.clarification else ""
        script.append(f"{i}. {t.user}{tag}")
    asks = known_values(task)
    system = (
        f"{STAGE_MARK}{USER_STAGE}\n"
        "You play the USER in a conversation with an AI assistant that acts through tools. Stay in character.\n"
        f"Persona: {who}\n"
        "Your requests, one per turn, in order (say them in your own words, keep every value exactly):\n"
        + "\n".join(script) + "\n"
        + ("Details you know and give only when the assistant asks for them:\n"
           + "\n".join(f"- at turn {a['turn']}: {a['answer']}" for a in asks) + "\n" if asks else "")
        + "Reply with JSON only: {\"message\": <your next message>, \"done\": <true when everything you wanted "
        "is done and you would end the conversation>}."
    )
    prompt = (f"Conversation so far:\n{_transcript(conversation) or '(none yet)'}\n\n"
              f"Write your message for turn {turn_index}.")
    return [{"role": "system", "content": system}, {"role": "user", "content": prompt}]


class LLMUser:
    """An LLM-played user for episodes (a ``UserSource``: ``user(conversation, task, turn_index) -> str | None``).

    Args:
        config: how to reach the model (:class:`LLMConfig`); or give ``client``.
        client: an :class:`LLMClient` to share (its cache and accounting; stage ``"user"``).
        persona: who the user is; default: ``task.provenance["user_profile"]`` (QueryGen writes one), else a
            generic polite customer.
        max_turns: hard cap: from this turn index on the simulator returns ``None`` without asking the model
            (>= 1).
        stop_on_done: end the conversation (``None``) when the model answers ``"done": true``.  The first
            turn never ends the conversation (the env would fall back to the scripted message anyway).

    Attributes:
        stats: counters ``{"requests", "fallbacks", "done", "capped"}`` over every call.

    Raises (from :meth:`__call__` / :meth:`respond`):
        LLMRequestError: the endpoint failed on every retry (a bad answer is never an error: it falls
            back to the scripted message).
        ValueError: ``max_turns < 1`` or neither ``config`` nor ``client``.
    """

    def __init__(self, config: LLMConfig | None = None, *, client: LLMClient | None = None,
                 persona: str | None = None, max_turns: int = 12, stop_on_done: bool = True) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if client is None:
            if config is None:
                raise ValueError("LLMUser needs config= (an LLMConfig) or client= (an LLMClient)")
            client = LLMClient(config)
        self.client = client
        self.persona = persona
        self.max_turns = max_turns
        self.stop_on_done = stop_on_done
        self.stats = {"requests": 0, "fallbacks": 0, "done": 0, "capped": 0}
        self._lock = threading.Lock()

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    async def respond(self, conversation: list[dict[str, Any]], task: Task, turn_index: int) -> str | None:
        """The next user message for ``turn_index`` of ``task`` given ``conversation`` (OpenAI-format
        messages), or ``None`` to end the conversation (see the class)."""
        if turn_index >= self.max_turns:
            self._count("capped")
            return None
        self._count("requests")
        messages = user_messages(task, conversation, turn_index, self.persona)
        scripted = task.turns[turn_index].user if turn_index < len(task.turns) else None
        try:
            reply = await self.client.chat(messages, stage=USER_STAGE, json_schema=USER_SCHEMA)
        except LLMOutputError:
            self._count("fallbacks")
            return scripted
        data = reply.data or {}
        message = str(data.get("message") or "").strip()
        if data.get("done") and self.stop_on_done and turn_index > 0:
            self._count("done")
            return None
        if not message:
            self._count("fallbacks")
            return scripted
        return message

    def __call__(self, conversation: list[dict[str, Any]], task: Task, turn_index: int) -> str | None:
        """Synchronous :meth:`respond` (what ``EnvFactoryEnv`` calls); safe inside a running event loop."""
        conv = [dict(m) for m in conversation]

        async def once() -> str | None:
            try:
                return await self.respond(conv, task, turn_index)
            finally:
                await self.client.aclose()

        return run_sync(once())
