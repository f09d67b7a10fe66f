"""The openai policy against a local scripted OpenAI-compatible server over real HTTP."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.errors import PolicyError
from gym_envfactory.rollout.policies import OpenAIPolicy
from gym_envfactory.rollout.runner import run_episode
from gym_envfactory.testing import ScriptedChatServer


def call(name, **args):
    return {"type": "function", "function": {"name": name, "arguments": args}}


SCRIPT = [
    {"content": None, "tool_calls": [call("borrow_book", book_id="B2", member="bob", days=7)]},
    {"content": "Emma is booked for bob."},
    {"content": "", "tool_calls": [call("return_book", loan_id="L-0001"), call("borrow_book", book_id="B1", member="ada")]},
    {"content": "Returned and lent Dune to ada."},
]


def test_openai_policy_episode_over_http(library, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "sk-test")
    with ScriptedChatServer(SCRIPT, model="m1") as server:
        policy = OpenAIPolicy(model="m1", base_url=server.base_url, api_key_env="TEST_LLM_KEY", max_retries=0)
        env = EnvFactoryEnv("Library", task_id="borrow-return")
        result = run_episode(env, policy)
    assert result.reward == 1.0 and result.terminated
    assert len(server.requests) == 4
    first = server.requests[0]
    assert first["model"] == "m1" and first["messages"][1] == {"role": "user", "content": "Borrow Emma for bob for 7 days."}
    assert {t["function"]["name"] for t in first["tools"]} >= {"borrow_book", "return_book"}
    third = server.requests[2]["messages"]
    tool_msg = [m for m in third if m["role"] == "tool"][0]
    assert "name" not in tool_msg and json.loads(tool_msg["content"])["loan_id"] == "L-0001"
    assert third[2]["tool_calls"][0]["function"]["name"] == "borrow_book"
    assert policy.usage["requests"] == 4 and policy.usage["prompt_tokens"] > 0


def test_openai_policy_server_error_is_policy_error(library):
    with ScriptedChatServer([{"status": 500, "message": "overloaded"}] * 3) as server:
        policy = OpenAIPolicy(model="m", base_url=server.base_url, max_retries=1, timeout=5)
        env = EnvFactoryEnv("Library", task_id="borrow-dune")
        with pytest.raises(PolicyError, match="overloaded|500"):
            run_episode(env, policy)
    assert len(server.requests) == 2  # one retry


def test_cli_rollout_openai_policy(library, tmp_path):
    from gym_envfactory.cli import app

    out = tmp_path / "traj.jsonl"
    with ScriptedChatServer(SCRIPT) as server:
        res = CliRunner().invoke(app, ["rollout", "Library", "--policy", "openai", "--model", "m", "--base-url", server.base_url,
                                       "--episodes", "1", "--seed", "0", "--split", "test", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "borrow-return" in res.output and "1.00" in res.output
    rec = json.loads(out.read_text())
    assert rec["task_id"] == "borrow-return" and rec["reward"] == 1.0 and rec["policy"] == "openai"
