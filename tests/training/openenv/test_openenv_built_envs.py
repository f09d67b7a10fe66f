"""Issue 28, "Done when": OpenEnv's GenericEnvClient plays an EnvGen-generated and an imported
environment (tests/training/built_envs.py) on the OpenEnv endpoint, with the rewards `run_episode`
gives for the same actions (oracle and a wrong attempt)."""

from __future__ import annotations

import pytest
from openenv.core.generic_client import GenericEnvClient

from gym_envfactory import ToolCall
from gym_envfactory.environment.catalog import forget_environment
from gym_envfactory.training.openenv import openenv_app
from tests.server.test_openenv_wire import running
from tests.training.built_envs import GENERATED, IMPORTED, build_generated, build_imported
from tests.training.episodes_helper import reference

TRUSTED = {"backend": "inprocess", "trust": True}  # what envfactory serve's OpenEnv mounts run


@pytest.fixture(scope="module")
def base_url(tmp_path_factory):
    out = tmp_path_factory.mktemp("built")
    names = [build_generated(out), build_imported(out)]
    try:
        with running(openenv_app(names, **TRUSTED)) as where:
            yield f"http://{where}/openenv"
    finally:
        for n in names:
            forget_environment(n)


@pytest.mark.parametrize("case", [GENERATED, IMPORTED], ids=["generated", "imported"])
@pytest.mark.parametrize("policy", ["oracle", "wrong"])
def test_built_environment_episode_reward_equals_rollout(base_url, case, policy):
    name, task_id = case
    ref, actions = reference(name, task_id, policy, **TRUSTED)
    with GenericEnvClient(base_url=f"{base_url}/{name}").sync() as env:
        env.reset(task_id=task_id)
        total = 0.0
        for a in actions:
            action = ({"type": "call_tool", "tool_name": a.name, "arguments": a.arguments} if isinstance(a, ToolCall)
                      else {"type": "message", "content": a})
            result = env.step(action)
            total += result.reward
        assert result.done
    assert total == pytest.approx(ref.reward)
    comps = result.observation["reward_components"]
    assert {k: comps[k] for k in ("r_traj", "r_state", "r_output", "p_len")} == \
        {k: ref.components[k] for k in ("r_traj", "r_state", "r_output", "p_len")}
    assert (total == pytest.approx(1.0)) == (policy == "oracle")
