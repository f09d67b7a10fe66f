"""Issue 28, part 4: the real skyrl-gym builds our text environment from its registry
(`skyrl_gym.make`) and plays whole episodes with the rewards `envfactory rollout` gives for the same
actions.  Runs in `.venv-skyrl` (`make test-skyrl`); not collected where skyrl-gym is not installed."""

from __future__ import annotations

import pytest
import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv

from gym_envfactory.training.skyrl import EnvFactoryTextEnv, SkyRLRowError, register_environments
from tests.training.episodes_helper import as_text, reference

CASES = [("hotel-003", "oracle"), ("hotel-003", "wrong"), ("hotel-002", "noisy"), ("hotel-001", "oracle")]


@pytest.fixture(scope="module", autouse=True)
def registered():
    register_environments()


def test_registered_ids_make_base_text_envs():
    assert {"envfactory", "envfactory/HotelBooking"} <= set(skyrl_gym.registry)
    env = skyrl_gym.make("envfactory/HotelBooking", extras={"task_id": "hotel-001"})
    assert isinstance(env, BaseTextEnv) and isinstance(env, EnvFactoryTextEnv)
    prompt, meta = env.init([{"role": "user", "content": "ignored"}])
    assert meta["task_id"] == "hotel-001" and prompt[0]["role"] == "system"
    assert "list_hotel_destinations" in prompt[0]["content"]  # the tool schemas travel in the prompt
    assert register_environments() == []  # a second call registers nothing
    with pytest.raises(SkyRLRowError, match="names no environment"):
        skyrl_gym.make("envfactory", extras={"task_id": "hotel-001"})


@pytest.mark.parametrize(("task_id", "policy"), CASES)
def test_episode_reward_equals_rollout(task_id, policy):
    ref, actions = reference("HotelBooking", task_id, policy)
    # the row as `envfactory export rl` writes it, through the generic id
    row = {"extra_info": {"env": "envfactory/HotelBooking-v0", "reset_options": {"task_id": task_id}}}
    env = skyrl_gym.make("envfactory", env_config={"env_kwargs": {}}, extras=row)
    try:
        env.init(row.get("prompt"))
        total, turns = 0.0, []
        for a in actions:
            out = env.step(as_text(a))
            total += out["reward"]
            if "turn_reward_components" in out["metadata"]:
                turns.append(out["metadata"]["turn_reward_components"])
            if not out["done"]:
                assert out["observations"] and all(m["role"] in ("user", "system") for m in out["observations"])
        assert out["done"] is True and out["observations"] == []
    finally:
        env.close()
    assert total == pytest.approx(ref.reward)
    comps = out["metadata"]["reward_components"]
    for k in ("reward", "r_traj", "r_state", "r_output", "p_len"):
        assert comps[k] == ref.components[k], k
    assert [t["r_traj"] for t in turns] == [t["r_traj"] for t in ref.components["turns"]]
    assert env.get_metrics()["reward"] == pytest.approx(ref.reward)
    if policy == "oracle":
        assert total == pytest.approx(1.0)
    if policy == "wrong":
        assert total < 1.0 and comps["p_len"] >= 1
