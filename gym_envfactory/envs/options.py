"""Typed option groups of :class:`~gym_envfactory.envs.env.EnvFactoryEnv` (docs/architecture.md, "The
Gymnasium contract").

``EnvFactoryEnv.__init__`` takes its settings either as the flat ``gym.make`` keywords (``max_steps=8``,
``split="test"``, ...) or grouped in these frozen dataclasses (``limits=EpisodeLimits(max_steps=8)``,
``selection=TaskSelection(split="test")``, ``prompt=PromptOptions(...)``,
``backend=BackendOptions(...)``); both spellings give the same env, with the same defaults.  The reward
has its own, :class:`~gym_envfactory.reward.RewardConfig`.  A group's object and one of its flat keywords
together are a ``ValueError`` (:func:`fill`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gym_envfactory.backends import Backend
from gym_envfactory.users import UserSource

__all__ = ["TaskSelection", "EpisodeLimits", "PromptOptions", "BackendOptions", "fill"]


@dataclass(frozen=True)
class TaskSelection:
    """Which tasks ``reset`` plays: always ``task_id`` when set (``reset`` options may still override
    it), else one drawn with the env's seeded RNG from ``split`` (``None``: every split) restricted to
    ``task_ids`` (``None``: no restriction; kept as a tuple)."""

    task_id: str | None = None
    split: str | None = None
    task_ids: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if self.task_ids is not None and not isinstance(self.task_ids, tuple):
            object.__setattr__(self, "task_ids", tuple(self.task_ids))


@dataclass(frozen=True)
class EpisodeLimits:
    """Step and call limits of an episode (docs/architecture.md, "The Gymnasium contract"; docs/reward.md,
    "P_len"): ``max_steps`` assistant actions per episode and ``max_steps_per_turn`` per user turn before
    truncation; ``max_calls_per_step`` parallel calls executed per action (more are invalid calls);
    ``max_invalid_calls_per_step`` / ``max_invalid_calls_per_episode``: calls not executed that are
    recorded one by one (the rest summarised, each still counted in ``P_len``).

    Raises:
        ValueError: a step or call limit below 1, or an invalid-call bound below 0.
    """

    max_steps: int = 32
    max_steps_per_turn: int = 16
    max_calls_per_step: int = 16
    max_invalid_calls_per_step: int = 16
    max_invalid_calls_per_episode: int = 128

    def __post_init__(self) -> None:
        if self.max_steps < 1 or self.max_steps_per_turn < 1 or self.max_calls_per_step < 1:
            raise ValueError("step and call limits must be >= 1")
        if self.max_invalid_calls_per_step < 0 or self.max_invalid_calls_per_episode < 0:
            raise ValueError("max_invalid_calls_per_step and max_invalid_calls_per_episode must be >= 0")


@dataclass(frozen=True)
class PromptOptions:
    """What the conversation looks like: ``system_prompt`` overrides the default (``{description}`` and
    ``{clock}`` filled in); ``user`` is the user source (``None``: the task's scripted messages,
    :func:`~gym_envfactory.users.scripted_user`); ``history`` is ``"parsed"`` (assistant messages as parsed
    calls) or ``"raw"`` (the text exactly as generated, for token-faithful training).

    Raises:
        ValueError: ``history`` is neither ``"parsed"`` nor ``"raw"``.
    """

    system_prompt: str | None = None
    user: UserSource | None = None
    history: str = "parsed"

    def __post_init__(self) -> None:
        if self.history not in ("parsed", "raw"):
            raise ValueError(f"history must be 'parsed' or 'raw', got {self.history!r}")


@dataclass(frozen=True)
class BackendOptions:
    """Where sessions live (docs/architecture.md, "Backends"): ``backend`` a registered name
    (``"inprocess"``, ``"subprocess"``, ``"isolated"``, ``"docker"``, ``"url"``, ...) or a
    :class:`~gym_envfactory.backends.Backend`; ``None`` (the default): by trust, ``"inprocess"`` for
    trusted packages and ``"isolated"`` for untrusted ones (provenance ``generated``/``imported``) unless
    ``trust`` (:func:`~gym_envfactory.backends.resolve_backend`); ``trust=True`` also lets an untrusted
    package run on ``"inprocess"`` when asked, which is otherwise refused; ``url`` and ``token`` (default ``$ENVFACTORY_TOKEN``) for a
    server; ``options`` the backend's own (docker: ``image``, ``mem_limit`` ...); ``timeout`` seconds a
    remote backend may take to start and to answer each request (``None``: the backend's default, 60).

    Raises:
        ValueError: ``timeout`` given both here and in ``options`` with different values.
    """

    backend: str | Backend | None = None
    url: str | None = None
    token: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    timeout: float | None = None
    trust: bool = False

    def __post_init__(self) -> None:
        self.backend_kwargs()  # fail early on a timeout given twice

    def backend_kwargs(self) -> dict[str, Any]:
        """``options`` with ``timeout`` folded in: the keywords of
        :func:`~gym_envfactory.backends.acquire_backend` besides ``envs``, ``url`` and ``token``."""
        out = dict(self.options or {})
        if self.timeout is not None:
            if "timeout" in out and out["timeout"] != self.timeout:
                raise ValueError("give timeout= or backend_options={'timeout': ...}, not both")
            out["timeout"] = self.timeout
        return out


_G = TypeVar("_G", TaskSelection, EpisodeLimits, PromptOptions, BackendOptions)


def fill(cls: type[_G], given: _G | None, keyword: str, *, spelled: Mapping[str, str] | None = None,
         **flat: Any) -> _G:
    """The option group ``cls``: ``given`` as is, else one built from the flat keywords that were given
    (``None`` means "not given": the group's default).  ``spelled`` maps a field to the keyword the user
    wrote for it, where the two differ (``options`` is ``backend_options=``), for error messages.

    Raises:
        TypeError: ``given`` is not a ``cls``.
        ValueError: ``given`` and a flat keyword of the same group together, or a bad value (the group's own).
    """
    set_ = {k: v for k, v in flat.items() if v is not None}
    if given is None:
        return cls(**set_)
    if not isinstance(given, cls):
        raise TypeError(f"{keyword} must be a {cls.__name__}, got {type(given).__name__}")
    if set_:
        names = ", ".join(f"{(spelled or {}).get(k, k)}=" for k in set_)
        raise ValueError(f"give {keyword}={cls.__name__}(...) or {names}, not both")
    return given

