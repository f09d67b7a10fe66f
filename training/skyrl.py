"""SkyRL-gym text environments over the catalog (issue 28, part 4; ``pip install -e ".[skyrl]"``).

SkyRL (``skyrl-gym``) trains on *text environments*: a class derived from
``skyrl_gym.envs.base_text_env.BaseTextEnv``, built by ``skyrl_gym.make(env_class, env_config=...,
extras=row)`` for each dataset row, with ``init(prompt) -> (prompt, metadata)`` and
``step(action: str) -> BaseTextEnvStepOutput`` (``observations`` as chat messages, ``reward``, ``done``,
``metadata``).  :class:`EnvFactoryTextEnv` is that class over one
:class:`~gym_envfactory.EnvFactoryEnv` episode (its own session): the model's text goes to
:meth:`EnvFactoryEnv.step` as generated (``<tool_call>{json}</tool_call>`` blocks, or a plain reply that
ends the user turn), the tool results come back as a user message of ``<tool_response>`` blocks
(:func:`~gym_envfactory.rollout.policies.prompt_messages`: chat templates without a tool role render
it), then the next user turn; the step reward is the gym's (``reward_mode="episode"``: the episode reward
at the last step, 0.0 before, so the sum over steps is the episode reward).

:func:`register_environments` registers ``envfactory`` (the environment named by the row) and
``envfactory/<Name>`` for every catalog environment in SkyRL's registry::

    import skyrl_gym
    from gym_envfactory.training.skyrl import register_environments
    register_environments()
    env = skyrl_gym.make("envfactory/HotelBooking", extras={"task_id": "hotel-001"})

A row (``extras``) selects the episode with ``task_id`` (plus ``start_turn``/``end_turn``) at its top
level, under ``extra_info`` or as ``extra_info.reset_options`` (the rows ``envfactory export rl``
writes); ``env`` there (a name or gym id) picks the environment for ``envfactory``.  ``env_config``
(a mapping; SkyRL passes its ``environment.skyrl_gym.<env_class>`` config) may hold ``env`` and the
:class:`EnvFactoryEnv` keyword arguments under ``env_kwargs`` (``reward``, ``max_steps`` ...).

``metadata`` of every step (part 5): ``turn``, ``turn_ended``, ``errors``, ``turn_reward_components``
when a user turn ended (R_traj, R_state, R_output, P_len of the turn) and, at the end,
``reward_components`` (the episode's) and ``score``.  The ``prompt`` SkyRL passes to :meth:`init` is
replaced by the episode's own opening (system prompt with the tool schemas, first user message).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from gym_envfactory import EnvFactoryEnv, get_environment, list_environments
from gym_envfactory.errors import EnvFactoryError
from gym_envfactory.rollout.policies import prompt_messages
from gym_envfactory.training.openenv import turn_reward_components

__all__ = ["EnvFactoryTextEnv", "register_environments", "SKYRL_ID", "reset_options"]

#: The SkyRL id of the class that plays the environment its row names.
SKYRL_ID = "envfactory"
_OPTION_KEYS = ("task_id", "start_turn", "end_turn", "split")


class SkyRLRowError(EnvFactoryError, ValueError):
    """A SkyRL row or env_config that names no environment, or an unknown field type."""


def reset_options(extras: Mapping[str, Any]) -> dict[str, Any]:
    """The :meth:`EnvFactoryEnv.reset` options a SkyRL row asks for: ``extra_info.reset_options``
    (``envfactory export rl`` rows), else ``task_id``/``start_turn``/``end_turn``/``split`` at the top level
    or under ``extra_info``; ``{}`` (a task drawn by the env's seeded RNG) when there are none."""
    info = extras.get("extra_info") or {}
    if isinstance(info, Mapping) and isinstance(info.get("reset_options"), Mapping):
        return dict(info["reset_options"])
    out: dict[str, Any] = {}
    for source in (info if isinstance(info, Mapping) else {}, extras):
        out.update({k: source[k] for k in _OPTION_KEYS if source.get(k) is not None})
    return out


class EnvFactoryTextEnv(BaseTextEnv):
    """One gym_envfactory episode as a SkyRL text environment (see the module doc).

    Args:
        env_config: SkyRL's environment config (a mapping, or ``None``): ``env`` (name or gym id) and
            ``env_kwargs`` (keyword arguments of :class:`EnvFactoryEnv`).
        extras: the dataset row: ``env`` / ``extra_info.env`` and the episode (:func:`reset_options`).
        env: the environment (set by :func:`register_environments` for ``envfactory/<Name>``).

    Raises:
        SkyRLRowError: no environment named anywhere.  UnknownEnvironmentError: no such environment.
        UnknownTaskError: (from :meth:`init`) no such task.
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None, env: str | None = None) -> None:
        super().__init__()
        config = dict(env_config or {})
        extras = dict(extras or {})
        info = extras.get("extra_info") if isinstance(extras.get("extra_info"), Mapping) else {}
        name = env or extras.get("env") or (info or {}).get("env") or config.get("env")
        if not name:
            raise SkyRLRowError(f"{SKYRL_ID}: the row names no environment: give extras['env'] (or extra_info.env), "
                                f"env_config['env'], or use the id {SKYRL_ID}/<Name>")
        spec = get_environment(str(name))
        self.env = EnvFactoryEnv(spec, **dict(config.get("env_kwargs") or {}))
        self.options = reset_options(extras)
        self.seed = extras.get("seed")
        self.max_turns = self.env.limits.max_steps
        self.tools: list[dict[str, Any]] = []
        self.last_info: dict[str, Any] = {}

    def init(self, prompt: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Start the row's episode; returns its opening messages (tool schemas in the system message)
        and ``{"task_id", "turn", "n_turns", "tools"}``.  ``prompt`` (the row's) is not used."""
        messages, info = self.env.reset(seed=self.seed, options=self.options or None)
        self.tools = list(info["tools"])
        self.turns = 0
        return prompt_messages(messages, self.tools), {"task_id": info["task_id"], "turn": info["turn"],
                                                       "n_turns": info["n_turns"], "tools": self.tools}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Run the model's text as one assistant action; see the module doc for what comes back."""
        self.turns += 1
        messages, reward, terminated, truncated, info = self.env.step(action)
        done = bool(terminated or truncated)
        metadata: dict[str, Any] = {"task_id": info["task_id"], "turn": info["turn"], "turn_ended": info["turn_ended"],
                                    "errors": info["errors"]}
        if "turn_score" in info:
            metadata["turn_reward_components"] = turn_reward_components(info["turn_score"])
        if done:
            metadata["reward_components"] = info["reward_components"]
            metadata["score"] = info["score"]
            metadata["terminated"], metadata["truncated"] = bool(terminated), bool(truncated)
        self.last_info = metadata
        observations = [] if done else prompt_messages(messages, [])
        return BaseTextEnvStepOutput(observations=observations, reward=float(reward), done=done, metadata=metadata)

    def get_metrics(self) -> dict[str, Any]:
        """The episode's reward components once it ended (SkyRL averages numeric metrics), else ``{}``."""
        comps = self.last_info.get("reward_components") or {}
        return {k: v for k, v in comps.items() if isinstance(v, int | float)}

    def close(self) -> None:
        """Close the episode's environment and session."""
        self.env.close()


def _make(env: str | None = None, **kwargs: Any) -> EnvFactoryTextEnv:
    return EnvFactoryTextEnv(env=env, **kwargs)


def register_environments(envs: list[str] | None = None) -> list[str]:
    """Register :data:`SKYRL_ID` and ``envfactory/<Name>`` for ``envs`` (default: every catalog
    environment) in ``skyrl_gym``'s registry; ids already there are left alone.  Returns the ids
    registered by this call."""
    import skyrl_gym

    done = []
    ids = {SKYRL_ID: None} | {f"{SKYRL_ID}/{n}": n for n in (envs if envs is not None else list_environments())}
    for sid, name in ids.items():
        if sid in skyrl_gym.registry:
            continue
        skyrl_gym.register(id=sid, entry_point=_make, kwargs={} if name is None else {"env": name})
        done.append(sid)
    return done
