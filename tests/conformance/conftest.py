"""The backend parametrisation of the conformance suite (DESIGN §5).

Every backend must pass the same tests: same episodes, same rewards, same typed errors as the
in-process reference.  Only the in-process backend exists so far; the container issue adds
``subprocess``, ``docker`` and ``url`` here.
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import pytest

import gym_envfactory  # noqa: F401  (registers the catalog)

BACKENDS = ["inprocess"]


def _inprocess(env_id: str, **kwargs: Any) -> gym.Env:
    return gym.make(env_id, **kwargs)


FACTORIES: dict[str, Callable[..., gym.Env]] = {"inprocess": _inprocess}


@pytest.fixture(params=BACKENDS)
def make_env(request) -> Callable[..., gym.Env]:
    """``make_env(env_id, **gym_kwargs) -> env`` on the parametrised backend; envs are closed after."""
    made: list[gym.Env] = []

    def factory(env_id: str, **kwargs: Any) -> gym.Env:
        env = FACTORIES[request.param](env_id, **kwargs)
        made.append(env)
        return env

    yield factory
    for e in made:
        e.close()
