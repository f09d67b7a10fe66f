"""Issue 28, "Done when": skyrl-gym plays an EnvGen-generated and an imported environment
(tests/training/built_envs.py) through EnvFactoryTextEnv, with the rewards `run_episode` gives for the
same actions (oracle and a wrong attempt)."""

from __future__ import annotations

import pytest
import skyrl_gym

from gym_envfactory.environment.catalog import forget_environment
from gym_envfactory.training.skyrl import register_environments
from tests.training.built_envs import GENERATED, IMPORTED, build_generated, build_imported
from tests.training.episodes_helper import as_text, reference

TRUSTED = {"backend": "inprocess", "trust": True}


@pytest.fixture(scope="module", autouse=True)
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("built")
    names = [build_generated(out), build_imported(out)]
    ids = register_environments(names)
    yield
    for n in names:
        forget_environment(n)
    for sid in ids:
        skyrl_gym.envs.registration.deregister(sid)


@pytest.mark.parametrize("case", [GENERATED, IMPORTED], ids=["generated", "imported"])
@pytest.mark.parametrize("policy", ["oracle", "wrong"])
def test_built_environment_episode_reward_equals_rollout(case, policy):
    name, task_id = case
    ref, actions = reference(name, task_id, policy, **TRUSTED)
    env = skyrl_gym.make(f"envfactory/{name}", env_config={"env_kwargs": TRUSTED}, extras={"task_id": task_id})
    try:
        env.init(None)
        total = 0.0
        for a in actions:
            out = env.step(as_text(a))
            total += out["reward"]
        assert out["done"]
    finally:
        env.close()
    assert total == pytest.approx(ref.reward)
    comps = out["metadata"]["reward_components"]
    assert {k: comps[k] for k in ("r_traj", "r_state", "r_output", "p_len")} == \
        {k: ref.components[k] for k in ("r_traj", "r_state", "r_output", "p_len")}
    assert (total == pytest.approx(1.0)) == (policy == "oracle")
