"""GRPO groups: ``k`` isolated rollouts of one task from one reset (DeepSeekMath §4.1; paper §3.5)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import gymnasium as gym

from gym_envfactory.envs.env import EnvFactoryEnv


class RolloutGroup:
    """``k`` rollouts of one task from one reset (GRPO, DeepSeekMath §4.1): every member starts from a
    fork of the same session.  ``step(actions)`` steps every unfinished member."""

    def __init__(self, envs: list[EnvFactoryEnv], observation: list[dict[str, Any]], info: dict[str, Any]) -> None:
        self.envs = envs
        self.observation = observation
        self.info = info
        self.rewards: list[float] = [0.0] * len(envs)
        self.finished: list[bool] = [False] * len(envs)

    def __len__(self) -> int:
        return len(self.envs)

    def step(self, actions: Sequence[Any]) -> list[tuple[list[dict[str, Any]], float, bool, bool, dict[str, Any]] | None]:
        """Step member ``i`` with ``actions[i]`` (``None`` for finished members)."""
        if len(actions) != len(self.envs):
            raise ValueError(f"expected {len(self.envs)} actions, got {len(actions)}")
        out: list[Any] = []
        for i, (env, a) in enumerate(zip(self.envs, actions, strict=True)):
            if self.finished[i]:
                out.append(None)
                continue
            res = env.step(a)
            self.rewards[i] += res[1]
            self.finished[i] = res[2] or res[3]
            out.append(res)
        return out

    @property
    def done(self) -> bool:
        """True once every member has terminated or been truncated."""
        return all(self.finished)

    def close(self) -> None:
        """Close every member (the original env releases the backend; forks never do)."""
        for e in reversed(self.envs):  # forks first: the base env owns the backend they share
            e.close()


def make_group(env: str | EnvFactoryEnv, k: int, *, seed: int | None = None, options: dict[str, Any] | None = None,
               **make_kwargs: Any) -> RolloutGroup:
    """Reset one env and fork it ``k`` times: ``k`` isolated rollouts of the same task.

    ``env`` is a gym id (``"envfactory/HotelBooking-v0"``), an environment name, or an env instance.
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    if isinstance(env, EnvFactoryEnv):
        base = env
    elif isinstance(env, str) and "/" in env:
        base = cast(EnvFactoryEnv, gym.make(env, **make_kwargs).unwrapped)  # an envfactory/ id makes one
    else:
        base = EnvFactoryEnv(env, **make_kwargs)
    obs, info = base.reset(seed=seed, options=options)
    members = [base] + base.fork_many(k - 1)
    return RolloutGroup(members, obs, info)
