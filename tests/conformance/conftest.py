"""The backend parametrisation of the conformance suite (docs/architecture.md, "Backends").

Every backend must pass the same tests: same episodes, same rewards, same typed errors as the
in-process reference.  ``inprocess`` runs sessions in the test process; ``subprocess`` starts a local
server process (shared by the envs of the test session); ``isolated`` the same server in a child with no
inherited environment, an empty home, limits and no network (the default for untrusted packages); ``url`` talks to a server started here with
a token, as a remote catalog would be used.  ``docker`` is added by tests/docker/ when Docker runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import pytest

import gym_envfactory  # noqa: F401  (registers the catalog)

BACKENDS = ["inprocess", "subprocess", "isolated", "url"]
TOKEN = "conformance-token"


@pytest.fixture(scope="session")
def url_server():
    """An `envfactory serve --all` process with a token, for the url backend (the catalog and the
    suite's probe_catalog/)."""
    from tests.conformance.test_conformance import PROBE_CATALOG

    catalogs = os.pathsep.join(p for p in (str(PROBE_CATALOG), os.environ.get("ENVFACTORY_CATALOG")) if p)
    env = {**os.environ, "ENVFACTORY_TOKEN": TOKEN, "ENVFACTORY_CATALOG": catalogs}
    proc = subprocess.Popen([sys.executable, "-m", "gym_envfactory.cli", "serve", "--all", "--port", "0", "--announce"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    assert line.startswith("{"), proc.stderr.read()
    yield json.loads(line)["listening"]
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(params=BACKENDS)
def make_env(request) -> Iterator[Callable[..., gym.Env]]:
    """``make_env(env_id, **gym_kwargs) -> env`` on the parametrised backend; envs are closed after."""
    made: list[gym.Env] = []
    extra: dict[str, Any] = {"backend": request.param}
    if request.param == "url":
        extra.update(url=request.getfixturevalue("url_server"), token=TOKEN)

    def factory(env_id: str, **kwargs: Any) -> gym.Env:
        env = gym.make(env_id, **{**extra, **kwargs})
        made.append(env)
        return env

    yield factory
    for e in made:
        e.close()
