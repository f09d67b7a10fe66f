"""Rollouts on a Ray cluster (https://docs.ray.io, "Actors"): many episodes in parallel, on one machine
or many, with the gym's own sessions and reward.

- :class:`RolloutWorker` (a Ray actor) holds one :class:`~gym_envfactory.EnvFactoryEnv` and plays
  episodes with a policy; its sessions live in the worker process (``backend="inprocess"``) or on an
  environment server (``backend="url"``).
- :class:`EnvServer` (a Ray actor) runs ``envfactory serve`` for some environments and tells its URL,
  so environment servers are scheduled by Ray like any other resource.
- :func:`run_rollouts` spreads task ids over workers and gathers the trajectories (the dicts
  ``envfactory rollout --out`` writes), in task order.

Policies travel to workers as a name (``oracle``, ``noisy``, ``random``, ``openai`` with their
keywords, :func:`gym_envfactory.rollout.policies.make_policy`) or as a zero-argument factory Ray can
pickle (e.g. a class whose ``act`` queries your inference server).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ray

from gym_envfactory import EnvFactoryEnv
from gym_envfactory.backends.subprocess import start_server_process
from gym_envfactory.rollout.policies import Policy, make_policy
from gym_envfactory.rollout.runner import run_episode

__all__ = ["RolloutWorker", "EnvServer", "make_workers", "run_rollouts"]

PolicySpec = str | Callable[[], Policy]


def _policy(spec: PolicySpec, kwargs: Mapping[str, Any]) -> Policy:
    return make_policy(spec, **dict(kwargs)) if isinstance(spec, str) else spec()


@ray.remote
class RolloutWorker:
    """One env and one policy in a Ray worker process.

    Args:
        env_id: gym id or environment name.
        policy: a policy name or a zero-argument factory returning a :class:`Policy`.
        policy_kwargs: keywords of :func:`make_policy` (``seed``, ``noise``, ``model``, ``base_url``).
        env_kwargs: keywords of :class:`EnvFactoryEnv` (``backend``, ``url``, ``token``, ``reward`` ...).
    """

    def __init__(self, env_id: str, policy: PolicySpec = "oracle", policy_kwargs: Mapping[str, Any] | None = None,
                 env_kwargs: Mapping[str, Any] | None = None) -> None:
        import gym_envfactory  # noqa: F401 - registers the catalog in the worker process

        self.env = EnvFactoryEnv(env_id, **dict(env_kwargs or {}))
        self.policy = _policy(policy, policy_kwargs or {})

    def run(self, task_ids: Sequence[str], seed: int = 0) -> list[dict[str, Any]]:
        """Play one episode per task id; returns their trajectories (``EpisodeResult.to_json()``)."""
        return [run_episode(self.env, self.policy, task_id=t, seed=seed + i).to_json()
                for i, t in enumerate(task_ids)]

    def close(self) -> None:
        """Close the env (and release its backend)."""
        self.env.close()


@ray.remote
class EnvServer:
    """``envfactory serve`` for ``envs`` on the actor's node (loopback), stopped with the actor."""

    def __init__(self, envs: Sequence[str], token: str | None = None, timeout: float = 60.0) -> None:
        self.url, self._stop = start_server_process(list(envs), token, timeout)

    def address(self) -> str:
        """The server's URL (``backend="url"`` in workers on the same node)."""
        return self.url

    def stop(self) -> None:
        """Stop the server process."""
        self._stop()


def make_workers(env_id: str, num_workers: int, *, policy: PolicySpec = "oracle",
                 policy_kwargs: Mapping[str, Any] | None = None,
                 env_kwargs: Mapping[str, Any] | None = None) -> list[Any]:
    """``num_workers`` :class:`RolloutWorker` actor handles, to reuse across :func:`run_rollouts` calls
    (a training loop keeps them for the whole run).  Raises ValueError when ``num_workers < 1``."""
    if num_workers < 1:
        raise ValueError("num_workers must be >= 1")
    return [RolloutWorker.remote(env_id, policy, policy_kwargs, env_kwargs)  # type: ignore[attr-defined]
            for _ in range(num_workers)]


def run_rollouts(env_id: str, task_ids: Sequence[str], *, policy: PolicySpec = "oracle",
                 policy_kwargs: Mapping[str, Any] | None = None, env_kwargs: Mapping[str, Any] | None = None,
                 num_workers: int = 2, seed: int = 0, workers: Sequence[Any] | None = None) -> list[dict[str, Any]]:
    """Play ``task_ids`` on Ray (``ray.init`` first, or Ray starts a local cluster); returns the
    trajectories in task order.  With ``workers`` (from :func:`make_workers`) those actors play and stay
    alive; otherwise ``num_workers`` actors are started for this call and stopped after it.

    Raises:
        ValueError: ``num_workers < 1``.  Ray's ``RayActorError``/``RayTaskError``: a worker failed (the
            original exception is chained).
    """
    own = workers is None
    if workers is None:
        workers = make_workers(env_id, min(num_workers, max(1, len(task_ids))) if num_workers >= 1 else num_workers,
                               policy=policy, policy_kwargs=policy_kwargs, env_kwargs=env_kwargs)
    shards = [list(task_ids[i::len(workers)]) for i in range(len(workers))]
    try:
        results = ray.get([w.run.remote(s, seed + i * 100_000) for i, (w, s) in enumerate(zip(workers, shards, strict=True))])
    finally:
        if own:
            ray.get([w.close.remote() for w in workers])
            for w in workers:
                ray.kill(w)
    out: list[dict[str, Any] | None] = [None] * len(task_ids)
    for i, shard in enumerate(results):
        for j, traj in enumerate(shard):
            out[i + j * len(workers)] = traj
    return [t for t in out if t is not None]
