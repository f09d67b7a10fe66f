"""The conformance suite (tests/conformance) on backend="docker": same tasks, same rewards, same
typed errors as in-process.  One container per configuration, shared by the suite's envs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import pytest

from tests.conformance.test_conformance import (  # noqa: F401  (collected here with the docker fixture)
    PROBE,
    PROBE_CATALOG,
    probe_env_id,
    test_a_failed_call_never_changes_state,
    test_noisy_and_random_match_reference,
    test_oracle_scores_one_on_every_task,
    test_typed_errors_match_reference,
)


@pytest.fixture
def make_env(docker_images) -> Iterator[Callable[..., gym.Env]]:
    made: list[gym.Env] = []

    def factory(env_id: str, **kwargs: Any) -> gym.Env:
        if PROBE in env_id:  # the suite's test-only package: served from its folder by the runtime image
            kwargs.setdefault("backend_options", {"catalog_dir": str(PROBE_CATALOG)})
        env = gym.make(env_id, backend="docker", **kwargs)
        made.append(env)
        return env

    yield factory
    for e in made:
        e.close()
