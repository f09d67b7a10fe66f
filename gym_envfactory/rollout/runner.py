"""Rollouts: run a policy through episodes and collect trajectories with every reward component.

Used by ``envfactory rollout`` and by tests; trainers use the Gymnasium env directly.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.errors import PolicyError, UnknownTaskError
from gym_envfactory.rollout.policies import Policy

__all__ = ["EpisodeResult", "run_episode", "episode_task_ids", "write_trajectories"]


@dataclass
class EpisodeResult:
    """One finished episode: its task, messages (the trajectory), reward components and notes.

    ``error`` is set when the policy failed mid-episode (an endpoint's failed request): the episode was
    not finished and not scored (``reward`` 0.0, ``components`` empty), ``messages`` hold it so far.
    """

    task_id: str
    env: str
    policy: str
    seed: int | None
    reward: float
    components: dict[str, Any]
    messages: list[dict[str, Any]]
    steps: int
    terminated: bool
    truncated: bool
    perturbations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of every field (one line of ``envfactory rollout --out``), messages last;
        ``error`` only on a failed episode."""
        out: dict[str, Any] = {
            "task_id": self.task_id,
            "env": self.env,
            "policy": self.policy,
            "seed": self.seed,
            "reward": self.reward,
            "components": self.components,
            "steps": self.steps,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "perturbations": self.perturbations,
            "errors": self.errors,
            "tools": self.tools,
        }
        if self.error is not None:
            out["error"] = self.error
        out["messages"] = self.messages
        return out


def run_episode(env: EnvFactoryEnv, policy: Policy, *, task_id: str | None = None, seed: int | None = None,
                keep_policy_errors: bool = False) -> EpisodeResult:
    """Reset ``env`` (to ``task_id`` if given), let ``policy`` act until the episode ends, return the
    result.  Errors the model caused (tool errors, parse errors) are collected, not raised.

    Raises:
        PolicyError: the policy failed (an endpoint's request), unless ``keep_policy_errors``: then the
            episode so far comes back unscored with ``error`` set (see :class:`EpisodeResult`).
    """
    obs, info = env.reset(seed=seed, options={"task_id": task_id} if task_id else None)
    policy.begin(env)
    errors: list[str] = []
    terminated = truncated = False
    reward = 0.0
    step_info: dict[str, Any] = {}
    failure: str | None = None
    while not (terminated or truncated):
        try:
            action = policy.act(env)
        except PolicyError as exc:
            if not keep_policy_errors:
                raise
            failure = str(exc)
            reward = 0.0
            step_info = {}
            break
        obs, r, terminated, truncated, step_info = env.step(action)
        reward += r
        errors += [f"{e['type']}: {e['name']}" for e in step_info.get("errors", [])]
    assert env.task is not None
    return EpisodeResult(
        task_id=env.task.task_id,
        env=env.environment.name,
        policy=policy.name,
        seed=seed,
        reward=reward,
        components=step_info.get("score", {}),
        messages=list(env.messages),
        steps=env.steps,
        terminated=terminated,
        truncated=truncated,
        perturbations=list(policy.perturbations),
        errors=errors,
        tools=env.opening_tools,  # turn 0's; tools a later turn adds are in a system note of messages
        error=failure,
    )


def episode_task_ids(env: EnvFactoryEnv, episodes: int | None, seed: int, split: str | None = None,
                     task_ids: Sequence[str] | None = None) -> list[str]:
    """Task ids for a run: every task once in file order when ``episodes`` is ``None``, else
    ``episodes`` ids cycling through a seeded shuffle.  ``task_ids``: only these tasks (each once, in the
    order given, before ``episodes`` applies).

    Raises:
        UnknownTaskError: a ``task_ids`` entry is not a task of ``env`` (of ``split``, when given).
    """
    ids = env.tasks.ids(split)
    if task_ids:
        known = set(ids)
        unknown = [t for t in task_ids if t not in known]
        if unknown:
            where = f" in split {split!r}" if split else ""
            shown = ", ".join(ids[:12]) + (f", ... ({len(ids)} in all)" if len(ids) > 12 else "")
            raise UnknownTaskError(f"{env.environment.name} has no task {', '.join(map(repr, unknown))}{where}; "
                                   f"its tasks: {shown or 'none'}")
        ids = list(dict.fromkeys(task_ids))
    if episodes is None:
        return ids
    order = list(ids)
    random.Random(seed).shuffle(order)
    return [order[i % len(order)] for i in range(episodes)] if order else []


def write_trajectories(path: str | Path, results: Iterable[EpisodeResult]) -> int:
    """Write results as JSON Lines; returns the count."""
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for r in results:
            fh.write(json.dumps(r.to_json(), ensure_ascii=False) + "\n")
            n += 1
    return n
