"""GRPO groups (``make_group``, ``RolloutGroup``; docs/architecture.md, "The Gymnasium contract"): a
group is a sequence of its envs, and closing a url-backed group leaves no coroutine unawaited."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import warnings

import pytest

from gym_envfactory import make_group
from gym_envfactory.envs.env import EnvFactoryEnv
from tests.conftest import CATALOG_SERVER_TOKEN as TOKEN


def test_rollout_group_is_a_sequence_of_its_envs(library):
    g = make_group("Library", k=3, options={"task_id": "borrow-dune"})
    try:
        assert len(g) == 3
        assert g[0] is g.envs[0] and g[-1] is g.envs[2] and g[1:] == g.envs[1:]
        assert list(g) == g.envs and [e for e in g] == g.envs
        assert all(isinstance(e, EnvFactoryEnv) for e in g)
        with pytest.raises(IndexError):
            g[3]
        assert len({id(e) for e in g}) == 3 and len({id(e.session) for e in g}) == 3
    finally:
        g.close()


CLOSE_SCRIPT = """
import sys, time
import gymnasium as gym
from gym_envfactory import make_group

url, token, order = sys.argv[1:4]
env = gym.make("envfactory/HotelBooking-v0", backend="url", url=url, token=token, timeout=2)
g = make_group(env.unwrapped, k=3)
g.step(['<tool_call>{"name": "list_hotel_destinations", "arguments": {}}</tool_call>'] * 3)
t0 = time.monotonic()
if order == "env-first":
    env.close()  # the caller's env, which owns the backend the forks share, closed before the group
if order == "members-forward":
    for member in g:  # member 0 owns the connection: the forks' closes find it gone
        member.close()
g.close()
print(f"closed in {time.monotonic() - t0:.2f} s")
"""


@pytest.mark.parametrize("order", ["env-first", "group-only", "members-forward"])
def test_closing_a_url_group_leaves_no_coroutine_unawaited(catalog_server, order):
    """With warnings as errors, in a fresh interpreter (an unawaited coroutine is reported when its
    event loop is collected, at exit at the latest).  The env handed to make_group owns the backend its
    forks share; closing it first used to stop the connection's event loop under the forks, whose close
    then scheduled a request on it that never ran ("coroutine 'AsyncSessionClient.request' was never
    awaited") after waiting the client's timeout plus 5 s per fork."""
    env = {k: v for k, v in os.environ.items() if k != "ENVFACTORY_TOKEN"}
    r = subprocess.run([sys.executable, "-W", "error", "-c", CLOSE_SCRIPT, catalog_server, TOKEN, order],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert "never awaited" not in r.stderr, r.stderr
    assert "closed in" in r.stdout and float(r.stdout.split("closed in ")[1].split()[0]) < 2, r.stdout


def test_closing_a_url_group_normally(catalog_server, monkeypatch):
    unraisable: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append(f"{u.exc_type.__name__}: {u.exc_value}"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = make_group("envfactory/HotelBooking-v0", k=4, backend="url", url=catalog_server, token=TOKEN, timeout=2)
        sids = [e.session.session_id for e in g]
        g.close()
        g.close()  # idempotent
        gc.collect()
    assert len(set(sids)) == 4 and all(e.session is None for e in g)
    assert not [u for u in unraisable if "never awaited" in u], unraisable

