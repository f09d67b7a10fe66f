"""The reference the protocol adapters are held to (issue 28): an episode played in process by
``run_episode`` (what ``envfactory rollout`` runs), with the policy's actions recorded so a client of
another protocol can send exactly the same ones."""

from __future__ import annotations

import json
from typing import Any

import gym_envfactory  # noqa: F401 - registers the gym ids
from gym_envfactory import EnvFactoryEnv, ToolCall
from gym_envfactory.rollout.policies import NoisyPolicy, OraclePolicy, Policy
from gym_envfactory.rollout.runner import EpisodeResult, run_episode


class Recording(Policy):
    """Wraps a policy and keeps every action it takes."""

    def __init__(self, inner: Policy) -> None:
        super().__init__()
        self.inner, self.actions = inner, []  # type: ignore[var-annotated]
        self.name = inner.name

    def begin(self, env: EnvFactoryEnv) -> None:
        super().begin(env)
        self.inner.begin(env)
        self.actions = []

    def act(self, env: EnvFactoryEnv) -> Any:
        action = self.inner.act(env)
        self.actions.append(action)
        return action


class WrongPolicy(OraclePolicy):
    """A wrong attempt: each turn's first ground-truth call, one call to an unknown tool, then the reply."""

    name = "wrong"

    def _plan(self, env: EnvFactoryEnv, turn: int) -> list[Any]:
        plan = super()._plan(env, turn)
        calls = [a for a in plan if isinstance(a, ToolCall)]
        return calls[:1] + [ToolCall("no_such_tool", {})] + [plan[-1]]


def reference(env_name: str, task_id: str, policy: str, seed: int = 0, **env_kwargs: Any) -> tuple[EpisodeResult, list[Any]]:
    """Play ``task_id`` with ``policy`` (``oracle``, ``noisy``, ``wrong``) on ``EnvFactoryEnv(env_name,
    **env_kwargs)``; return the result and the recorded actions (:class:`ToolCall` or text)."""
    inner: Policy = {"oracle": OraclePolicy(), "noisy": NoisyPolicy(p=0.9, seed=seed), "wrong": WrongPolicy()}[policy]
    rec = Recording(inner)
    env = EnvFactoryEnv(env_name, **env_kwargs)
    try:
        return run_episode(env, rec, task_id=task_id, seed=seed), rec.actions
    finally:
        env.close()


def as_text(action: Any) -> str:
    """An action as model text (a Hermes ``<tool_call>`` block for a call)."""
    if isinstance(action, ToolCall):
        return "<tool_call>" + json.dumps({"name": action.name, "arguments": action.arguments}) + "</tool_call>"
    return str(action)
