"""GRPO groups: ``k`` isolated rollouts of one task from one reset (DeepSeekMath §4.1; paper §3.5)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, cast, overload

import gymnasium as gym

from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.errors import EnvFactoryError, RequestTooLargeError


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
        """Step member ``i`` with ``actions[i]`` (``None`` for finished members); returns each member's
        ``env.step`` result (``None`` for finished ones), in member order.

        Members on one remote connection (subprocess, isolated, url, docker backends) get what their
        steps will ask of the server in one frame first (:meth:`_prefetch`), so a group step costs one
        round trip instead of one per call (issue 24, part 3); each member's episode is its own either
        way.  If a member raises, the others' steps still happen and count, and the first error (in
        member order) is raised after them, carrying every member's result (``None`` for the failed and
        finished ones) as ``exc.group_step_results``: do not step those members again with the same actions.

        Raises:
            ValueError: ``len(actions)`` is not the group's size.
            ResetNeeded, BackendUnavailableError: as ``EnvFactoryEnv.step``.
        """
        if len(actions) != len(self.envs):
            raise ValueError(f"expected {len(self.envs)} actions, got {len(actions)}")
        live = [i for i in range(len(self.envs)) if not self.finished[i]]
        if len(live) > 1:
            self._prefetch(live, actions)
        results: dict[int, Any] = {}
        errors: dict[int, BaseException] = {}
        for i in live:
            try:
                results[i] = self.envs[i].step(actions[i])
            except Exception as exc:  # the others' steps still happen and count
                errors[i] = exc
        out: list[Any] = [None] * len(self.envs)
        for i, res in results.items():
            self.rewards[i] += res[1]
            self.finished[i] = res[2] or res[3]
            out[i] = res
        if errors:
            first = errors[min(errors)]
            first.group_step_results = out  # type: ignore[attr-defined]
            raise first
        return out

    def _prefetch(self, live: list[int], actions: Sequence[Any]) -> None:
        """Send what the live members' steps will ask of one shared remote connection in one frame (their
        tool calls, and the digest of a turn they end; ``EnvFactoryEnv.plan_requests``) and hand each
        member's session its answers, so the steps that follow make no round trip (issue 24, part 3).
        Members whose requests cannot be known in advance, or on another connection, step as usual.  A
        lost connection leaves nothing kept (the steps then meet the error themselves)."""
        client = None
        batch: list[tuple[str, dict[str, Any]]] = []
        owners: list[tuple[Any, int, int]] = []
        for i in live:
            env = self.envs[i]
            session: Any = env.session
            if not hasattr(session, "prefetch_requests"):
                continue
            if client is None:
                client = session.client
            elif session.client is not client:
                continue
            plan = env.plan_requests(actions[i])
            # one call at most: a batch answers each request on its own, so a refused call would not stop
            # the member's later ones, which its step would then never record (review finding)
            if plan is None or len(plan[0]) > 1:
                continue
            reqs = session.prefetch_requests(*plan)
            owners.append((session, len(batch), len(reqs)))
            batch += reqs
        if client is None or len(owners) < 2:
            return
        try:
            answers = client.batch(batch)
        except RequestTooLargeError:  # refused before sending: nothing ran, the steps ask one by one
            return
        except EnvFactoryError as exc:  # lost, or no answer in time: every step meets the error, none resends
            answers = [exc] * len(batch)
        for session, start, n in owners:
            session.prefetched(batch[start:start + n], answers[start:start + n])

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
    base._copies_next = k - 1  # a remote backend makes the members with the session: one round trip
    try:
        obs, info = base.reset(seed=seed, options=options)
    finally:
        base._copies_next = 0
    members = [base] + base.fork_many(k - 1)
    return RolloutGroup(members, obs, info)
