"""The TRL adapter: every tool becomes a typed, documented method whose schema transformers renders
(the function TRL uses), rows of `envfactory export rl` load their episodes, the oracle's calls through
the methods earn reward 1.0, and instances stay isolated."""

from __future__ import annotations

import inspect
import json
import re

import pytest

get_json_schema = pytest.importorskip("transformers.utils").get_json_schema  # in the test extras

from gym_envfactory import get_environment  # noqa: E402
from gym_envfactory.training.export.rl import rl_rows  # noqa: E402
from gym_envfactory.training.trl import environment_class  # noqa: E402

ENV = "envfactory/HotelBooking-v0"


def _tool_methods(cls):
    return {n: f for n, f in inspect.getmembers(cls, predicate=inspect.isfunction)
            if not n.startswith("_") and n not in ("reset", "get_reward")}


@pytest.mark.parametrize("env_name", ["HotelBooking", "TeamCalendar", "PersonalFinance"])
def test_every_tool_is_a_method_transformers_can_render(env_name):
    cls = environment_class(env_name)
    spec = get_environment(env_name)
    methods = _tool_methods(cls)
    assert set(methods) == set(spec.tools)
    for name, fn in methods.items():
        schema = get_json_schema(fn)["function"]
        tool = spec.tools[name]
        assert schema["name"] == name
        assert set(schema["parameters"]["properties"]) == set(tool.input_schema.get("properties", {}))
        assert set(schema["parameters"].get("required", [])) == set(tool.input_schema.get("required", []))


def test_export_rows_load_their_episodes_and_the_oracle_earns_one():
    cls = environment_class(ENV)
    rows = rl_rows(["HotelBooking"], per="turn")[:12]
    for row in rows:
        env = cls()
        assert env.reset(**row) is None
        assert env.env.messages == row["prompt"]
        gt = json.loads(row["reward_model"]["ground_truth"])["turns"]
        for call in gt[0]["calls"]:
            out = getattr(env, call["name"])(**call["arguments"])
            assert "error" not in json.loads(out) or isinstance(json.loads(out), list)
        assert env.get_reward() == 1.0, row["extra_info"]["task_id"]


def test_instances_are_isolated_and_bad_calls_are_observations():
    cls = environment_class(ENV)
    a, b = cls(), cls()
    tid = get_environment("HotelBooking").tasks.ids()[0]
    a.reset(task_id=tid)
    b.reset(task_id=tid)
    out = json.loads(a.get_hotel_details(hotel_id="H-NOPE"))
    assert out["error"]["type"] == "tool_error"
    assert a.env.session.state() == b.env.session.state()
    assert 0.0 <= a.get_reward() < 1.0
    assert json.loads(a.get_hotel_details(hotel_id="H-101"))["error"]["type"] == "episode_over"


@pytest.mark.parametrize("bad", ["__init__", "_call", "env_id", "env_kwargs", "reset", "get_reward", "env",
                                 "last_info", "__class__", "not-an-identifier", "class", "1tool"])
def test_a_tool_named_like_a_member_or_not_an_identifier_is_refused_by_name(monkeypatch, bad):
    """Issue 25, item 8: a tool name that would replace a member of the generated class (``__init__``,
    ``_call``, ``env_id``, any attribute of the base class), start with an underscore or not be a Python
    identifier is refused when the class is built, with the tool named, as a typed error."""
    import dataclasses

    from gym_envfactory.errors import SpecError
    from gym_envfactory.training import trl

    real = get_environment("HotelBooking")
    first = next(iter(real.tools.values()))
    renamed = dataclasses.replace(first, name=bad)

    class Fake:
        name, description = real.name, real.description
        tools = {**real.tools, bad: renamed}

    monkeypatch.setattr(trl, "get_environment", lambda env_id: Fake)
    with pytest.raises(SpecError, match=re.escape(f"tool {json.dumps(bad)}")):
        environment_class("HotelBooking")


def test_component_reward_functions_hand_trl_each_component_with_the_papers_weights():
    """Issue 28 part 5: R_traj, R_state, R_output and P_len as separate TRL reward functions (GDPO-style
    ``normalize_then_sum``), read from the rollout's ``envfactory_components``; their weighted sum is the
    scalar's linear part."""
    from gym_envfactory.envs.env import EnvFactoryEnv
    from gym_envfactory.rollout.policies import NoisyPolicy, OraclePolicy
    from gym_envfactory.rollout.runner import run_episode
    from gym_envfactory.training.trl import COMPONENT_KEYS, component_reward_functions

    env = EnvFactoryEnv("HotelBooking")
    try:
        played = [run_episode(env, OraclePolicy(), task_id="hotel-001")]
        played += [run_episode(env, NoisyPolicy(seed=s), task_id="hotel-003") for s in range(6)]
    finally:
        env.close()
    components = [p.components for p in played]
    fns, weights = component_reward_functions({"alpha": 0.7, "gamma": 0.1})
    assert [f.__name__ for f in fns] == [f"envfactory_{k}" for k in COMPONENT_KEYS]
    assert weights == [0.7, pytest.approx(0.3), 0.0, -0.1]
    values = {k: f([None] * len(played), envfactory_components=components) for k, f in zip(COMPONENT_KEYS, fns, strict=True)}
    assert all(f([None, None]) == [None, None] for f in fns)  # not from the rollout function: unscored
    for i, c in enumerate(components):
        assert values["r_traj"][i] == c["r_traj"] and values["r_state"][i] == c["r_state"]
        assert values["p_len"][i] == c["p_len"]
    assert values["r_traj"][0] == 1.0 and values["p_len"][0] == 0
    assert len({tuple(v) for v in zip(*values.values(), strict=True)}) > 1  # the noisy episodes differ in some component
    # with the config that scored them (alpha 0.5), the linear part is the scalar wherever nothing is vacuous,
    # the penalty is under its cap and nothing is clipped
    _, w5 = component_reward_functions()
    checked = 0
    for p, c in zip(played, components, strict=True):
        if None in (c["r_traj"], c["r_state"]) or 0.05 * c["p_len"] >= 0.5:
            continue
        linear = w5[0] * c["r_traj"] + w5[1] * c["r_state"] + w5[3] * c["p_len"]
        if 0.0 <= linear <= 1.0:
            assert p.reward == pytest.approx(linear)
            checked += 1
    assert checked >= 2
