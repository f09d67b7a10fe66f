"""GRPO groups: ``k`` isolated rollouts of one task from one reset (DeepSeekMath §4.1; paper §3.5)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, cast, overload

import gymnasium as gym

from gym_envfactory.envs.env import EnvFactoryEnv


class RolloutGroup:
    """``k`` rollouts of one task from one reset (GRPO, DeepSeekMath §4.1): every member starts from a
    fork of the same session.  ``step(actions)`` steps every unfinished member.

    A sequence of its member envs: ``len(group)``, ``group[i]`` (member 0 is the env that was reset, the
    others its forks), ``for env in group``.  Close the group rather than its members one by one: the
    first member owns the backend its forks share (docs/architecture.md, "Backends").
    """

    def __init__(self, envs: list[EnvFactoryEnv], observation: list[dict[str, Any]], info: dict[str, Any]) -> None:
        self.envs = envs
        self.observation = observation
        self.info = info
        self.rewards: list[float] = [0.0] * len(envs)
        self.finished: list[bool] = [False] * len(envs)

    def __len__(self) -> int:
        return len(self.envs)

    @overload
    def __getitem__(self, index: int) -> EnvFactoryEnv: ...

    @overload
    def __getitem__(self, index: slice) -> list[EnvFactoryEnv]: ...

    def __getitem__(self, index: int | slice) -> EnvFactoryEnv | list[EnvFactoryEnv]:
        """Member ``index`` (an int, negative counts from the end) or a list of members (a slice).
        Raises IndexError."""
        return self.envs[index]

    def __iter__(self) -> Iterator[EnvFactoryEnv]:
        """The member envs in order (member 0 first)."""
        return iter(self.envs)

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
        """Close every member: the forks first, then member 0, which releases the backend they share.

        A member whose remote connection is already gone (member 0 was closed, by the caller who passed
        it to :func:`make_group`, before the group) is closed locally only: asking a closed client to
        close its session would hand a request to a stopped event loop, leaving the coroutine never
        awaited and the call waiting for the client's timeout.  Idempotent."""
        for e in reversed(self.envs):  # forks first: the base env owns the backend they share
            client = getattr(e.session, "client", None)  # RemoteSession: the connection it talks over
            if client is not None and not getattr(client, "alive", True):
                e.session = None  # the server side went with the connection: nothing left to close there
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
