"""Issue 14 item 0: the openai policy against real OpenAI-compatible servers (llama-cpp-python, vLLM,
SGLang), checked over real HTTP against :class:`ScriptedChatServer` (request bodies as sent), and a
replay of an exchange recorded through :class:`RecordingProxy`.

The recorded fixture (``tests/fixtures/openai_prompt_exchange.jsonl``) is a ScriptedChatServer's
exchange recorded through the proxy, not a real model's; re-record it with
``python tests/rollout/test_openai_policy_servers.py --record`` after a deliberate change of the request format.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.errors import PolicyError
from gym_envfactory.rollout.policies import OpenAIPolicy
from gym_envfactory.rollout.runner import run_episode
from gym_envfactory.testing import RecordingProxy, ScriptedChatServer

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "openai_prompt_exchange.jsonl"
SYSTEM = "You are the library's assistant."  # fixed, so the recorded request hashes do not follow the default prompt


def call(name, **args):
    return {"type": "function", "function": {"name": name, "arguments": args}}


NATIVE_SCRIPT = [
    {"content": None, "tool_calls": [call("borrow_book", book_id="B2", member="bob", days=7)]},
    {"content": "Emma is booked for bob."},
    {"content": "", "tool_calls": [call("return_book", loan_id="L-0001"), call("borrow_book", book_id="B1", member="ada")]},
    {"content": "Returned and lent Dune to ada."},
]

PROMPT_SCRIPT = [
    {"content": 'Borrowing it.\n<tool_call>\n{"name": "borrow_book", "arguments": {"book_id": "B1", "member": "ada"}}\n</tool_call>'},
    {"content": "Done: loan L-0001."},
]


def test_native_requests_carry_tool_choice_max_tokens_and_empty_content(library):
    with ScriptedChatServer(NATIVE_SCRIPT) as server:
        policy = OpenAIPolicy(model="m", base_url=server.base_url, max_retries=0, max_tokens=256)
        result = run_episode(EnvFactoryEnv("Library", task_id="borrow-return"), policy)
    assert result.reward == 1.0
    assert len(server.requests) == 4
    for body in server.requests:
        assert body["tool_choice"] == "auto" and body["tools"]  # llama.cpp drops the tools without it
        assert body["max_tokens"] == 256
        for m in body["messages"]:
            if m["role"] == "assistant" and m.get("tool_calls"):
                assert m["content"] == ""  # never null: llama-cpp-python answers 500 to it
            assert "raw" not in m and "parsed_tool_calls" not in m
    assistant = [m for m in server.requests[1]["messages"] if m["role"] == "assistant"]
    assert assistant and "content" in assistant[0] and assistant[0]["content"] == ""


def test_max_tokens_is_always_sent_and_checked(library):
    with ScriptedChatServer([{"content": "L-0001"}]) as server:
        policy = OpenAIPolicy(model="m", base_url=server.base_url, max_retries=0)
        run_episode(EnvFactoryEnv("Library", task_id="borrow-dune"), policy)
    assert server.requests[0]["max_tokens"] == 1024
    with pytest.raises(ValueError, match="max_tokens"):
        OpenAIPolicy(model="m", base_url="http://127.0.0.1:9/v1", max_tokens=None)
    with pytest.raises(ValueError, match="tool_format"):
        OpenAIPolicy(model="m", base_url="http://127.0.0.1:9/v1", tool_format="xml")


def test_prompt_mode_puts_tools_in_the_system_message_and_runs_tool_call_text(library):
    with ScriptedChatServer(PROMPT_SCRIPT) as server:
        policy = OpenAIPolicy(model="m", base_url=server.base_url, max_retries=0, tool_format="prompt")
        env = EnvFactoryEnv("Library", task_id="borrow-dune", system_prompt=SYSTEM)
        result = run_episode(env, policy)
    assert result.reward == 1.0 and result.terminated
    first = server.requests[0]
    assert "tools" not in first and "tool_choice" not in first
    system = first["messages"][0]
    assert system["role"] == "system" and system["content"].startswith(SYSTEM)
    assert "<tools>" in system["content"] and "<tool_call>" in system["content"]
    listed = [json.loads(line) for line in system["content"].split("<tools>\n")[1].split("\n</tools>")[0].splitlines()]
    assert {t["function"]["name"] for t in listed} == {t["function"]["name"] for t in env.tools}
    second = server.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert all(set(m) == {"role", "content"} for m in second)
    assert second[2]["content"] == PROMPT_SCRIPT[0]["content"]  # the model's text as generated
    assert second[3]["content"].startswith("<tool_response>\n") and "L-0001" in second[3]["content"]
    tool_msgs = [m for m in result.messages if m["role"] == "tool"]
    assert len(tool_msgs) == 1 and json.loads(tool_msgs[0]["content"])["loan_id"] == "L-0001"


def test_prompt_mode_from_the_cli(library, tmp_path):
    from gym_envfactory.cli import app

    out = tmp_path / "t.jsonl"
    with ScriptedChatServer(PROMPT_SCRIPT) as server:
        res = CliRunner().invoke(app, ["rollout", "Library", "--policy", "openai", "--model", "m", "--base-url",
                                       server.base_url, "--tool-format", "prompt", "--max-tokens", "64",
                                       "--episodes", "1", "--seed", "3", "--out", str(out)])  # seed 3: borrow-dune
        bodies = list(server.requests)
    assert res.exit_code == 0, res.output
    rec = json.loads(out.read_text())
    assert rec["task_id"] == "borrow-dune" and rec["reward"] == 1.0 and "error" not in rec
    assert len(bodies) == 2 and all("tools" not in b and b["max_tokens"] == 64 for b in bodies)
    assert "<tools>" in bodies[0]["messages"][0]["content"]


def test_400_reports_the_endpoints_own_message(library):
    msg = "'tool_choice' of 'auto' requires --enable-auto-tool-choice"
    with ScriptedChatServer([{"status": 400, "message": msg}]) as server:
        policy = OpenAIPolicy(model="m", base_url=server.base_url, max_retries=0)
        with pytest.raises(PolicyError) as info:
            run_episode(EnvFactoryEnv("Library", task_id="borrow-dune"), policy)
    text = str(info.value)
    assert msg in text and "HTTP 400" in text and "is the server running" not in text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connection_refused_keeps_the_hint(library):
    policy = OpenAIPolicy(model="m", base_url=f"http://127.0.0.1:{_free_port()}/v1", max_retries=0, timeout=5)
    with pytest.raises(PolicyError, match="is the server running"):
        run_episode(EnvFactoryEnv("Library", task_id="borrow-dune"), policy)


def test_cli_400_shows_the_server_message_not_the_hint(library, tmp_path):
    from gym_envfactory.cli import app

    out = tmp_path / "t.jsonl"
    with ScriptedChatServer([{"status": 400, "message": "model has no chat template"}]) as server:
        res = CliRunner().invoke(app, ["rollout", "Library", "--policy", "openai", "--model", "m", "--base-url",
                                       server.base_url, "--episodes", "1", "--out", str(out)])
    assert res.exit_code == 2
    assert "model has no chat template" in res.output and "is the server running" not in res.output
    rec = json.loads(out.read_text())
    assert "model has no chat template" in rec["error"]


def test_mid_run_500_keeps_earlier_episodes_in_out(library, tmp_path):
    """Every task once, in file order; the third (ask-first) meets a 500 on each try."""
    from gym_envfactory.cli import app

    def responder(body):
        first_user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if first_user == "Please lend a book to ada.":
            return {"status": 500, "message": "llama_decode failed: KV cache is full"}
        return {"content": "Nothing to do."}

    out = tmp_path / "t.jsonl"
    with ScriptedChatServer(responder) as server:
        res = CliRunner().invoke(app, ["rollout", "Library", "--policy", "openai", "--model", "m", "--base-url",
                                       server.base_url, "--timeout", "10", "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "KV cache is full" in res.output and "is the server running" not in res.output
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["task_id"] for r in recs] == ["borrow-dune", "borrow-return", "ask-first", "extend", "lookup"]
    assert [("error" in r) for r in recs] == [False, False, True, False, False]
    failed = recs[2]
    assert "HTTP 500" in failed["error"] and failed["reward"] == 0.0 and failed["components"] == {}
    assert failed["messages"][1]["content"] == "Please lend a book to ada."
    assert all(r["terminated"] for r in recs if "error" not in r)
    assert "wrote 5 trajectories" in res.output and "1 failed" in res.output


def test_connection_refused_stops_after_three_episodes_and_still_writes(library, tmp_path):
    from gym_envfactory.cli import app

    out = tmp_path / "t.jsonl"
    res = CliRunner().invoke(app, ["rollout", "Library", "--policy", "openai", "--model", "m", "--base-url",
                                   f"http://127.0.0.1:{_free_port()}/v1", "--timeout", "2", "--out", str(out)])
    assert res.exit_code == 2
    assert "is the server running" in res.output and "3 episodes in a row" in res.output
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recs) == 3 and all("is the server running" in r["error"] for r in recs)


def _record(path: Path) -> None:
    """Record PROMPT_SCRIPT's exchange (a scripted server, not a real model) through RecordingProxy."""
    path.unlink(missing_ok=True)
    with ScriptedChatServer(PROMPT_SCRIPT) as upstream, RecordingProxy(upstream.base_url, path) as proxy:
        policy = OpenAIPolicy(model="m", base_url=proxy.base_url, max_retries=0, tool_format="prompt")
        result = run_episode(EnvFactoryEnv("Library", task_id="borrow-dune", system_prompt=SYSTEM), policy)
    assert result.reward == 1.0 and proxy.recorded == 2


def test_recording_proxy_records_an_exchange(library, tmp_path):
    path = tmp_path / "rec.jsonl"
    _record(path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 2 and all(len(e["request_sha"]) == 64 and e["reply"]["choices"] for e in lines)


def test_replay_of_the_recorded_fixture(library):
    """The fixture's replies are keyed by request hash: a replay answers only requests identical to the
    recorded ones (tools in the system prompt, max_tokens, the model's text as history)."""
    with ScriptedChatServer.from_file(FIXTURE) as server:
        policy = OpenAIPolicy(model="m", base_url=server.base_url, max_retries=0, tool_format="prompt")
        result = run_episode(EnvFactoryEnv("Library", task_id="borrow-dune", system_prompt=SYSTEM), policy)
    assert not server.errors, f"{server.errors} (re-record: python tests/rollout/test_openai_policy_servers.py --record)"
    assert result.reward == 1.0 and len(server.requests) == 2


if __name__ == "__main__" and "--record" in sys.argv:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.conftest import make_library

    make_library()
    FIXTURE.parent.mkdir(exist_ok=True)
    _record(FIXTURE)
    print(f"recorded {FIXTURE}")


def _completion(message):
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


HOSTILE_TOOL_CALLS = [
    [{"id": "c1", "type": "custom", "custom": {"name": "borrow_book", "input": "{}"}}],
    [{"id": "c1", "type": "function", "function": None}],
    [{"id": None, "type": "function", "function": {"name": None, "arguments": {"book_id": "B1"}}}],
]


@pytest.mark.parametrize("tool_format", ["native", "prompt"])
@pytest.mark.parametrize("calls", HOSTILE_TOOL_CALLS, ids=["custom", "function-null", "name-null"])
def test_malformed_tool_calls_from_the_endpoint_are_observations(library, calls, tool_format):
    """A tool call of another type, without a function or a name is the model's malformed action: the
    env records an invalid call and the episode goes on (never an AttributeError)."""
    seen = []

    def script(body):
        seen.append(body)
        if len(seen) == 1:
            return _completion({"role": "assistant", "content": None, "tool_calls": calls})
        return _completion({"role": "assistant", "content": "I give up."})

    with ScriptedChatServer(script) as server:
        policy = OpenAIPolicy(model="m", base_url=server.base_url, max_retries=0, tool_format=tool_format)
        result = run_episode(EnvFactoryEnv("Library", task_id="borrow-return"), policy)
    assert result.error is None and result.components["invalid"] >= 1


@pytest.mark.parametrize("message", [None, {"role": "assistant", "content": "x", "tool_calls": {"not": "a list"}}],
                         ids=["message-null", "tool-calls-dict"])
def test_an_answer_without_a_usable_message_is_a_policy_error_and_rollout_keeps_the_rest(library, message, tmp_path):
    from gym_envfactory.cli import app

    out = tmp_path / "t.jsonl"
    with ScriptedChatServer(lambda body: _completion(message)) as server:
        r = CliRunner().invoke(app, ["rollout", "Library", "--policy", "openai", "--model", "m",
                                     "--base-url", server.base_url, "--episodes", "2", "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 2 and all("error" in x for x in lines)
