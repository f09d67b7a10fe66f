"""Hostile model actions and inputs: they are observations, never exceptions or hangs; nothing mutable is
shared between sessions; malformed snapshots and reset options are refused; reward matching edge cases."""

from __future__ import annotations

import json
import time

import gymnasium as gym
import pytest

import gym_envfactory  # noqa: F401
from gym_envfactory import Session, ToolCall, get_environment
from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.errors import SnapshotError
from gym_envfactory.reward import RewardConfig, match_calls

HOSTILE = [
    "<tool_call>" + "[" * 100_000 + "</tool_call>",
    "[" * 100_000,
    '{"name":"search_hotels","arguments":{"guests":' + "1" * 5000 + "}}",
    {"role": "assistant", "tool_calls": 5},
    {"role": "assistant", "tool_calls": True},
    {"role": "assistant", "tool_calls": "x" * 1000},
    {"role": "assistant", "content": 5},
    {"role": "assistant", "content": {"a": 1}},
    {"role": "assistant", "content": [{"text": 5}]},
    ToolCall("list_hotel_destinations", None),  # type: ignore[arg-type]
    ToolCall("list_hotel_destinations", [1, 2]),  # type: ignore[arg-type]
    {"name": "list_hotel_destinations", "arguments": {"country": {1, 2}}},
    {"name": "list_hotel_destinations", "arguments": {"country": b"x"}},
    {"role": "assistant", "tool_calls": [{"id": [1], "function": {"name": "list_hotel_destinations", "arguments": "{}"}}]},
    '<tool_call>{"name":"cancel_hotel_booking","arguments":{"booking_id":"BK-0002","reason":"\\ud83d oops"}}</tool_call>',
    "```" + " " * 20_000 + "x",
    "```json" + "\n" * 20_000 + ".",
    '<tool_call>{"name":"' + "</tool_call>" * 20_000,
    None, b"\x80\x81", 3.5, object(),
]


@pytest.mark.parametrize("action", HOSTILE, ids=lambda a: type(a).__name__ + ":" + repr(a)[:30])
def test_hostile_actions_are_observations(action):
    env = gym.make("envfactory/HotelBooking-v0", disable_env_checker=True)
    env.reset(options={"task_id": "hotel-004"})
    t0 = time.monotonic()
    obs, r, term, trunc, info = env.step(action)
    assert time.monotonic() - t0 < 5
    assert env.unwrapped.observation_space.contains(obs)
    json.dumps(obs).encode("utf-8")  # storable
    if not (term or trunc):  # junk text is a (bad) reply that ends the turn; otherwise end it now
        *_, info = env.step("Done.")
    json.dumps(info["score"]).encode("utf-8")  # the episode can still be scored
    env.unwrapped.session.snapshot()


def test_lone_surrogate_never_reaches_the_state():
    env = EnvFactoryEnv("HotelBooking", task_id="hotel-004")
    env.reset()
    _, _, _, _, info = env.step('<tool_call>{"name":"cancel_hotel_booking","arguments":{"booking_id":"BK-0002","reason":"\\ud83d"}}</tool_call>')
    assert info["errors"][0]["type"] == "parse_error" and "Unicode" in info["errors"][0]["message"]
    s = Session(get_environment("HotelBooking"), check_writes=True)
    r = s.call("cancel_hotel_booking", {"booking_id": "BK-0002", "reason": "\ud83d"})
    assert r.error_type == "invalid_arguments"
    s.snapshot()


def test_session_call_hostile_arguments():
    s = Session(get_environment("HotelBooking"))
    for args in ['{"a":' + "[" * 100_000 + "}", b"\x80{}", {"city": "Vienna", "amenities": "[" * 100_000}, {"city": {1}}]:
        r = s.call("search_hotels", args)
        assert r.error_type == "invalid_arguments", r
    s.snapshot()


def test_non_finite_numbers_are_invalid_arguments():
    s = Session(get_environment("PersonalFinance"))
    for bad in (float("nan"), float("inf"), "NaN", "Infinity"):
        tool = next(t for t in s.tools.values() if "amount" in t.input_schema.get("properties", {}))
        args = {"amount": bad}
        r = s.call(tool.name, args)
        assert r.error_type == "invalid_arguments"
    with pytest.raises(ValueError):
        RewardConfig(gamma=float("nan"))
    with pytest.raises(ValueError):
        RewardConfig(penalty_cap=float("inf"))


def test_nothing_mutable_is_shared():
    env = gym.make("envfactory/HotelBooking-v0")
    _, info = env.reset(options={"task_id": "hotel-001"})
    info["tools"][0]["function"]["parameters"]["properties"].clear()
    assert get_environment("HotelBooking").tools["list_hotel_destinations"].input_schema["properties"]
    args = {"country": "Austria"}
    s = Session(get_environment("HotelBooking"))
    s.call("list_hotel_destinations", args)
    args["country"] = "changed"
    assert s.action_log[0].raw_arguments == {"country": "Austria"}
    f = s.fork()
    s.action_log[0].result.content.append("X")
    assert "X" not in f.action_log[0].result.content
    obs, *_ = env.step([ToolCall("list_hotel_destinations", {})])
    obs[0]["content"] = "tampered"
    assert env.unwrapped.messages[-1]["content"] != "tampered"


def test_restore_rejects_malformed_snapshots_and_changes_nothing():
    s = Session(get_environment("HotelBooking"))
    s.call("cancel_hotel_booking", {"booking_id": "BK-0002"})
    before, log = s.state_bytes(), [r.to_dict() for r in s.action_log]
    good = json.loads(Session(get_environment("HotelBooking")).snapshot())
    for bad in [{**good, "log": [{"index": 0}]}, {**good, "log": [{"index": 0, "name": "x", "raw_arguments": {}, "result": {"zzz": 1}}]},
                {**good, "envs": []}, {**good, "log": "x"}, {"envs": good["envs"]}]:
        with pytest.raises(SnapshotError):
            s.restore(json.dumps(bad).encode())
        assert s.state_bytes() == before and [r.to_dict() for r in s.action_log] == log


def test_matching_is_maximum_with_different_masks():
    pred = [("f", {"e": 1, "r": "x"}), ("f", {"e": 1, "r": "o"})]
    gt = [("f", {"e": 1, "r": "s"}, ["r"]), ("f", {"e": 1, "r": "x"}, [])]
    assert sorted(match_calls(pred, gt)) == [0, 1]


def test_reset_options_validation():
    env = EnvFactoryEnv("HotelBooking")
    with pytest.raises(KeyError):
        env.reset(options={"task_id": ""})
    with pytest.raises(TypeError):
        env.reset(options=[1])


def test_async_vector_env_without_shared_memory():
    vec = gym.make_vec("envfactory/HotelBooking-v0", num_envs=2, vectorization_mode="async",
                       vector_kwargs={"shared_memory": False}, task_id="hotel-001")
    try:
        obs, _ = vec.reset(seed=0)
        assert len(obs) == 2
        _, rew, term, _, _ = vec.step(['<tool_call>{"name": "list_hotel_destinations", "arguments": {}}</tool_call>', "Done."])
        assert list(term) == [False, True]
    finally:
        vec.close()
