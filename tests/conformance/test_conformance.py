"""Conformance: each backend reproduces the in-process reference episode for episode."""

from __future__ import annotations

import json
import os
from pathlib import Path

import gymnasium as gym
import pytest

from gym_envfactory.environment.catalog import forget_environment, register_catalog
from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.envs.parsing import ToolCall
from gym_envfactory.rollout.policies import NoisyPolicy, OraclePolicy, RandomPolicy
from tests.shipped import SHIPPED

CATALOG = SHIPPED

#: Test-only packages every backend serves besides the catalog (README.md there); the url server gets
#: them through ENVFACTORY_CATALOG (conftest.py), the docker backend as its catalog_dir.
PROBE_CATALOG = Path(__file__).resolve().parent / "probe_catalog"
PROBE = "AtomicProbe"


def play(env, policy, task_id, seed=0):
    """Drive ``env`` (any backend, gym API only) with ``policy``; return rewards, messages, info."""
    obs, info = env.reset(seed=seed, options={"task_id": task_id})
    policy.begin(env.unwrapped)
    total, steps, last = 0.0, 0, {}
    transcript = [obs]
    done = False
    while not done:
        obs, r, term, trunc, last = env.step(policy.act(env.unwrapped))
        transcript.append(obs)
        total += r
        steps += 1
        done = term or trunc
    return total, transcript, last


def reference(env_name, policy, task_id, seed=0):
    return play(EnvFactoryEnv(env_name), policy, task_id, seed)


@pytest.mark.parametrize("env_name", CATALOG)
def test_oracle_scores_one_on_every_task(make_env, env_name):
    env = make_env(f"envfactory/{env_name}-v0")
    ids = env.unwrapped.tasks.ids()
    assert len(ids) >= 25
    for tid in ids:
        total, _, info = play(env, OraclePolicy(), tid)
        assert total == 1.0, (tid, info.get("score"))


@pytest.mark.parametrize("env_name", CATALOG)
def test_noisy_and_random_match_reference(make_env, env_name):
    env = make_env(f"envfactory/{env_name}-v0")
    ids = env.unwrapped.tasks.ids()[:8]
    for i, tid in enumerate(ids):
        for mk in (lambda i=i: NoisyPolicy(p=0.5, seed=i), lambda i=i: RandomPolicy(seed=i)):
            got = play(env, mk(), tid, seed=i)
            ref = reference(env_name, mk(), tid, seed=i)
            assert got[0] == ref[0] and got[1] == ref[1], tid
            assert got[2]["score"] == ref[2]["score"]


@pytest.mark.parametrize("env_name", CATALOG)
def test_typed_errors_match_reference(make_env, env_name):
    env = make_env(f"envfactory/{env_name}-v0")
    tid = env.unwrapped.tasks.ids()[0]
    tool = next(iter(env.unwrapped.environment.tools))
    actions = [
        "<tool_call>{not json</tool_call>",
        [ToolCall("no_such_tool", {})],
        [ToolCall(tool, {"definitely_not_a_parameter": 1})],
        {"role": "assistant", "content": None, "tool_calls": [{"id": "x", "type": "function", "function": {"name": tool, "arguments": "[1]"}}]},
    ]
    env.reset(options={"task_id": tid})
    kinds = []
    for a in actions:
        obs, r, term, trunc, info = env.step(a)
        kinds.append([e["type"] for e in info["errors"]])
        assert all(json.loads(m["content"])["error"]["type"] for m in obs if m["role"] == "tool")
    assert kinds == [["parse_error"], ["unknown_tool"], ["invalid_arguments"], ["parse_error"]]


@pytest.fixture
def probe_env_id(monkeypatch):
    """The gym id of the AtomicProbe package, findable in this process (and by servers it starts) for
    the duration of one test."""
    current = os.environ.get("ENVFACTORY_CATALOG")
    monkeypatch.setenv("ENVFACTORY_CATALOG", os.pathsep.join(p for p in (str(PROBE_CATALOG), current) if p))
    register_catalog()
    env_id = f"envfactory/{PROBE}-v0"
    yield env_id
    forget_environment(PROBE)
    gym.registry.pop(env_id, None)


def test_a_failed_call_never_changes_state(make_env, probe_env_id):
    """Tools that fail after writing (domain error, crash, result failing its type, a write the state
    model refuses): the state and the earlier log stay exactly as before the call on every backend, the
    failure is logged, and the next call works from the old state."""
    env = make_env(probe_env_id)
    env.reset(options={"task_id": "probe-001"})
    session = env.unwrapped.session
    assert session.call("add_note", {"key": "a", "text": "one"}).ok
    want, earlier = session.state(), [r.to_dict() for r in session.action_log]
    failures = [("add_note_then_refuse", "tool_error", "refused"),
                ("add_note_then_crash", "internal_error", "internal_error"),
                ("add_note_bad_result", "internal_error", "invalid_result"),
                ("add_note_bad_write", "internal_error", "invalid_state")]
    errors = {}
    for name, etype, code in failures:
        r = session.call(name, {"key": "b"})
        assert (r.ok, r.error_type, r.error_code) == (False, etype, code), r
        assert session.state() == want, name
        errors[name] = r.error
    assert "result: Input should be a valid integer" in errors["add_note_bad_result"]
    assert "ProbeDB.counter: Input should be a valid integer" in errors["add_note_bad_write"]
    log = session.action_log
    assert [x.to_dict() for x in log[:len(earlier)]] == earlier
    assert [(x.name, x.result.ok) for x in log[len(earlier):]] == [(n, False) for n, _, _ in failures]
    assert session.call("add_note", {"key": "b", "text": "two"}).content == {"counter": want["counter"] + 1, "key": "b"}
    assert session.state()["notes"] == {**want["notes"], "b": "two"}
