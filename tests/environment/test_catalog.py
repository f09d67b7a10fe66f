"""The shipped catalog: the issue's requirements on every environment, checked by execution."""

from __future__ import annotations

import json
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import gym_envfactory  # noqa: F401
from gym_envfactory import Session, get_environment, list_environments
from gym_envfactory.environment.states import task_environments, task_initial_state
from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.envs.parsing import ToolCall
from gym_envfactory.rollout.policies import NoisyPolicy, RandomPolicy
from gym_envfactory.rollout.runner import run_episode
from gym_envfactory.validation import validate_environment
from tests.shipped import SHIPPED

CATALOG = SHIPPED


def count_records(obj) -> int:
    """Records = entries of id-keyed collections (dicts of objects), nested ones included."""
    n = 0
    if isinstance(obj, dict):
        for v in obj.values():
            if isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()):
                n += len(v) + sum(count_records(x) for x in v.values())
            elif isinstance(v, dict):
                n += count_records(v)
    return n


def test_catalog_is_registered():
    assert set(CATALOG) <= set(list_environments())
    for name in CATALOG:
        assert f"envfactory/{name}-v0" in gym.registry


@pytest.mark.parametrize("name", CATALOG)
def test_requirements(name):
    spec = get_environment(name)
    writes = [t for t in spec.tools.values() if not t.read_only]
    assert len(spec.tools) >= 10 and len(writes) >= 4
    assert all(t.description and len(t.description) > 40 for t in spec.tools.values())
    tasks = list(spec.tasks)
    assert len(tasks) >= 25
    assert sum(t.multi_turn for t in tasks) * 3 >= len(tasks)
    assert all(2 <= len(t.turns) <= 5 for t in tasks if t.multi_turn)
    assert sum(any(tt.clarification for tt in t.turns) for t in tasks) >= 3
    assert {"train", "test"} <= {t.split for t in tasks}
    assert {"small", "large"} <= set(spec.initial_state_names())
    large = json.loads(spec.initial_state_json("large"))
    assert 900 <= count_records(large) <= 2000
    assert count_records(json.loads(spec.initial_state_json("small"))) < 200
    assert any(t.initial_state == "large" or (isinstance(t.initial_state, dict) and t.initial_state.get("name") == "large") for t in tasks)


@pytest.mark.parametrize("name", CATALOG)
def test_validation_scenarios_and_every_ground_truth_replay(name):
    report = validate_environment(get_environment(name))
    assert report.passed, report.failures()
    assert report.n_tasks == len(get_environment(name).tasks)
    assert {s.level for s in report.scenarios} >= {"simple", "error"}


def test_tool_names_are_unique_across_the_catalog():
    seen: dict[str, str] = {}
    for name in CATALOG:
        for tool in get_environment(name).tools:
            assert tool not in seen, f"{tool} in {seen.get(tool)} and {name}"
            seen[tool] = name


def test_a_task_spanning_two_environments():
    spec = get_environment("HotelBooking")
    composite = [t for t in spec.tasks if len(t.envs) > 1]
    assert composite
    env = EnvFactoryEnv("HotelBooking", task_id=composite[0].task_id)
    obs, info = env.reset()
    assert info["envs"] == ["HotelBooking", "TeamCalendar"]
    names = {t["function"]["name"] for t in info["tools"]}
    assert {"create_hotel_booking", "set_out_of_office"} <= names
    state = env.session.state()
    assert set(state) == {"HotelBooking", "TeamCalendar"}
    # a write in one environment leaves the other untouched
    env.step([ToolCall("find_person", {"query": "Priya"})])
    assert env.session.state() == state


@pytest.mark.parametrize("name", CATALOG)
def test_check_env(name):
    env = gym.make(f"envfactory/{name}-v0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)


@pytest.mark.parametrize("name", CATALOG)
def test_noisy_scores_below_oracle_and_random_never_crashes(name):
    env = EnvFactoryEnv(name)
    noisy = [run_episode(env, NoisyPolicy(p=0.5, seed=i), task_id=t) for i, t in enumerate(env.tasks.ids())]
    assert sum(r.reward for r in noisy) / len(noisy) < 0.97
    assert any(r.reward < 1.0 and r.perturbations for r in noisy)
    rand = [run_episode(env, RandomPolicy(seed=i), task_id=t) for i, t in enumerate(env.tasks.ids()[:15])]
    assert all("internal_error" not in " ".join(r.errors) for r in rand + noisy)
    assert sum(r.reward for r in rand) / len(rand) < 0.6


def test_free_text_fields_do_not_affect_state_equivalence():
    spec = get_environment("HotelBooking")
    task = next(t for t in spec.tasks if any("cancel_hotel_booking" == c.name and "reason" in c.masked_arguments
                                             for turn in t.turns for c in turn.ground_truth))
    env = EnvFactoryEnv("HotelBooking", task_id=task.task_id)
    env.reset()
    for turn in task.turns:
        calls = [ToolCall(c.name, {**c.arguments, **({"reason": "some other wording"} if "reason" in c.masked_arguments else {})})
                 for c in turn.ground_truth]
        if calls:
            env.step(calls)
        *_, info = env.step("done")
    assert info["score"]["r_state"] == 1.0 and info["score"]["r_traj"] == 1.0


@pytest.mark.parametrize("name", CATALOG)
def test_large_state_sessions_fork_and_stay_isolated(name):
    spec = get_environment(name)
    s = Session(spec, "large")
    forks = s.fork_many(8)
    task = next(t for t in spec.tasks if len(t.envs) == 1 and any(not spec.tools[c.name].read_only for tt in t.turns for c in tt.ground_truth))
    f = Session.from_states(task_environments(spec, task), task_initial_state(spec, task))
    for turn in task.turns:
        for c in turn.ground_truth:
            assert f.call(c.name, c.arguments).ok
    assert all(x.state_bytes() == s.state_bytes() for x in forks)


@pytest.mark.parametrize("name", CATALOG)
def test_system_prompt_states_the_date_of_the_episode_clock(name):
    """Issue 14: dated tasks rarely give the year ("December 10 to 13"); the system prompt gives the date
    of the episode's own clock (the state's ``now``), for every task and for a turn window."""
    from datetime import datetime

    env = EnvFactoryEnv(name)
    try:
        for task in env.tasks:
            obs, _ = env.reset(options={"task_id": task.task_id})
            state = env.session.state()
            clock = state["now"] if "now" in state else state[name]["now"]  # a task spanning environments
            now = datetime.fromisoformat(clock)
            assert f"Today is {now:%A} {now.date().isoformat()}; the time is {now:%H:%M}" in obs[0]["content"], \
                (task.task_id, obs[0]["content"])
        multi = next(t for t in env.tasks if len(t.turns) > 1)
        obs, _ = env.reset(options={"task_id": multi.task_id, "start_turn": 1})
        assert "Today is " in obs[0]["content"] and obs[0]["role"] == "system"
    finally:
        env.close()
