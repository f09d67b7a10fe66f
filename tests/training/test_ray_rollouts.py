"""Rollouts on a local Ray cluster: the same trajectories and rewards as in-process, with sessions in
the workers or on an environment server run as a Ray actor."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")  # in the test extras: this runs in CI

from gym_envfactory import EnvFactoryEnv  # noqa: E402
from gym_envfactory.rollout.policies import NoisyPolicy, OraclePolicy  # noqa: E402
from gym_envfactory.rollout.runner import run_episode  # noqa: E402
from gym_envfactory.training.ray_rollouts import EnvServer, run_rollouts  # noqa: E402

ENV = "envfactory/HotelBooking-v0"


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    yield
    ray.shutdown()


def test_oracle_rollouts_on_ray_equal_in_process(local_ray):
    env = EnvFactoryEnv(ENV)
    ids = env.tasks.ids()[:6]
    local = [run_episode(env, OraclePolicy(), task_id=t).to_json() for t in ids]
    remote = run_rollouts(ENV, ids, policy="oracle", num_workers=2)
    assert [r["task_id"] for r in remote] == ids
    assert [r["reward"] for r in remote] == [r["reward"] for r in local] == [1.0] * len(ids)
    assert [r["messages"] for r in remote] == [r["messages"] for r in local]
    assert all(r["tools"] for r in remote)


def test_policy_factory_and_noisy_rewards_are_reproducible(local_ray):
    ids = EnvFactoryEnv(ENV).tasks.ids()[:4]
    a = run_rollouts(ENV, ids, policy=lambda: NoisyPolicy(p=0.5, seed=3), num_workers=2)
    b = run_rollouts(ENV, ids, policy=lambda: NoisyPolicy(p=0.5, seed=3), num_workers=2)
    assert [x["reward"] for x in a] == [x["reward"] for x in b]
    assert any(x["perturbations"] for x in a)


def test_workers_reach_an_environment_server_run_as_a_ray_actor(local_ray):
    server = EnvServer.remote(["HotelBooking", "TeamCalendar"], token="t0ken")
    try:
        url = ray.get(server.address.remote())
        ids = EnvFactoryEnv(ENV).tasks.ids()[:3]
        out = run_rollouts(ENV, ids, num_workers=1, env_kwargs={"backend": "url", "url": url, "token": "t0ken"})
        assert [r["reward"] for r in out] == [1.0] * len(ids)
    finally:
        ray.get(server.stop.remote())
        ray.kill(server)


def test_bad_worker_count_is_refused():
    with pytest.raises(ValueError):
        run_rollouts(ENV, ["x"], num_workers=0)
