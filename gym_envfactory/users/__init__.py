"""Simulated users: who writes an episode's user messages (docs/architecture.md, "The Gymnasium contract").

A *user source* is any callable ``user(conversation, task, turn_index) -> str | None``: ``conversation``
is the episode's messages so far (OpenAI format, a list the source must not keep), ``task`` the
:class:`~gym_envfactory.environment.tasks.Task` being played and ``turn_index`` the 0-based turn whose
user message is wanted; it returns that message, or ``None`` to end the episode.  ``EnvFactoryEnv`` asks
its source at ``reset`` (empty conversation) and after every assistant reply that ends a turn
(``gym.make(..., user=...)``; default :func:`scripted_user`).

Here, all of them:

- :data:`UserSource`: the type of a user source;
- :func:`scripted_user`: the task's own scripted message for each turn (the default);
- :func:`replayed_user`: serves recorded user messages in order (replaying a trajectory);
- :func:`import_user`: a user source named ``"module:function"`` (trainer configs such as VeRL's);
- :class:`~gym_envfactory.users.llm.LLMUser` (in :mod:`.llm`, loaded on first access of ``LLMUser``):
  an LLM plays the user (arXiv 2605.18703, §3.4); needs the LLM client's libraries.

This package is light (the standard library and :mod:`gym_envfactory.environment.tasks`); the Gymnasium
layer imports it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from gym_envfactory.environment.tasks import Task

if TYPE_CHECKING:
    from gym_envfactory.users.llm import LLMUser

__all__ = ["UserSource", "scripted_user", "replayed_user", "import_user", "LLMUser"]

#: ``user_source(conversation, task, turn_index) -> next user message, or None to end the episode``.
UserSource = Callable[[list[dict[str, Any]], Task, int], "str | None"]


def scripted_user(conversation: list[dict[str, Any]], task: Task, turn_index: int) -> str | None:
    """The default user source: the task's scripted user message for ``turn_index`` (``task.turns[i].user``),
    or ``None`` past the task's last turn."""
    return task.turns[turn_index].user if turn_index < len(task.turns) else None


def replayed_user(messages: Iterable[str]) -> UserSource:
    """A user source that serves ``messages`` in order, one per request, whatever the task and turn, then
    ``None`` (the episode ends).  For replaying a recorded trajectory's user messages through a fresh
    episode (QueryGen's verified trajectories do).  Each returned source has its own position."""
    served = iter(list(messages))

    def user(conversation: list[dict[str, Any]], task: Task, turn_index: int) -> str | None:
        return next(served, None)

    return user


def import_user(path: str) -> UserSource:
    """The user source named by ``path``, ``"package.module:attribute"`` (a function, or any callable
    such as an ``LLMUser`` instance built at module level).

    Raises:
        ValueError: ``path`` is not of the form ``"module:attribute"``.
        ImportError: the module cannot be imported.
        AttributeError: the module has no such attribute.
        TypeError: the attribute is not callable.
    """
    module, _, name = path.partition(":")
    if not module or not name:
        raise ValueError(f"a user source is named 'module:function', got {path!r}")
    source = getattr(importlib.import_module(module), name)
    if not callable(source):
        raise TypeError(f"{path!r} is not callable (a user source is user(conversation, task, turn_index))")
    user: UserSource = source
    return user


def __getattr__(name: str) -> Any:
    """``LLMUser``, imported from :mod:`.llm` on first use (it needs the LLM client's libraries).

    Raises:
        AttributeError: ``name`` is not one of this package's names.
        ImportError: ``openai``, ``tenacity`` or ``jsonschema`` is not installed.
    """
    if name == "LLMUser":
        value = importlib.import_module("gym_envfactory.users.llm").LLMUser
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
