"""The LLM client (gym_envfactory.llm) and the record/replay test server, all over real HTTP
against local ScriptedChatServer / RecordingProxy instances (no network, no model).

Covers: the on-disk cache (a re-run makes zero requests; a run killed mid-way resumes without repeating
paid requests), retries (500/429/timeouts retried, 400 not), the JSON repair round, per-stage token
accounting, the concurrency cap, tool calls, and record → replay.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai")
pytest.importorskip("tenacity")

from gym_envfactory.llm import (  # noqa: E402
    LLMClient,
    LLMConfig,
    LLMOutputError,
    LLMReply,
    LLMRequestError,
    cache_key,
    extract_json,
    run,
)
from gym_envfactory.llm.testing import RecordingProxy, ScriptedChatServer, request_sha  # noqa: E402

SCHEMA = {
    "type": "object",
    "required": ["name", "count"],
    "properties": {"name": {"type": "string"}, "count": {"type": "integer", "minimum": 0}},
    "additionalProperties": False,
}


def _client(server: Any, **kw: Any) -> LLMClient:
    backoff = kw.pop("backoff_s", 0.001)
    return LLMClient(LLMConfig(model="m1", base_url=server.base_url, **kw), backoff_s=backoff)


def _user(text: str) -> list[dict]:
    return [{"role": "system", "content": "You write environments."}, {"role": "user", "content": text}]


def _echo(body: dict) -> dict:
    return {"content": "answer to " + body["messages"][-1]["content"]}


# ------------------------------------------------------------------------------------------- basics
def test_chat_sends_config_and_returns_reply() -> None:
    with ScriptedChatServer([{"content": "hello"}]) as server:
        client = _client(server, temperature=0.3, seed=7, max_tokens=99)
        reply = run(client.chat(_user("hi"), stage="code"))
    assert isinstance(reply, LLMReply)
    assert reply.text == "hello" and reply.data is None and reply.cached is False and reply.tool_calls is None
    body = server.requests[0]
    assert body["model"] == "m1" and body["temperature"] == 0.3 and body["seed"] == 7 and body["max_tokens"] == 99
    assert body["messages"] == _user("hi") and "tools" not in body and "response_format" not in body
    assert reply.usage["prompt_tokens"] > 0 and reply.usage["total_tokens"] == (
        reply.usage["prompt_tokens"] + reply.usage["completion_tokens"])


def test_tool_calls_come_back_in_wire_format() -> None:
    tools = [{"type": "function", "function": {"name": "get_book", "description": "Get a book.",
                                               "parameters": {"type": "object",
                                                              "properties": {"book_id": {"type": "string"}}}}}]
    script = [{"tool_calls": [{"function": {"name": "get_book", "arguments": {"book_id": "B1"}}}]}]
    with ScriptedChatServer(script) as server:
        reply = run(_client(server).chat(_user("find B1"), stage="agent", tools=tools))
    assert server.requests[0]["tools"] == tools
    assert reply.text == "" and reply.finish_reason == "tool_calls" and reply.tool_calls is not None
    (call,) = reply.tool_calls
    assert call["type"] == "function" and call["function"]["name"] == "get_book"
    assert json.loads(call["function"]["arguments"]) == {"book_id": "B1"}


def test_structured_output_option_sends_response_format() -> None:
    with ScriptedChatServer([{"content": '{"name": "a", "count": 1}'}]) as server:
        reply = run(_client(server, structured_output=True).chat(_user("x"), stage="plan", json_schema=SCHEMA))
    fmt = server.requests[0]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] == SCHEMA
    assert reply.data == {"name": "a", "count": 1}


def test_structured_output_json_object_is_the_llama_cpp_form() -> None:
    # llama-cpp-python's server refuses type "json_schema" (HTTP 500) and takes {"type": "json_object", "schema"}
    with ScriptedChatServer([{"content": '{"name": "a", "count": 1}'}]) as server:
        reply = run(_client(server, structured_output="json_object").chat(_user("x"), stage="plan", json_schema=SCHEMA))
    assert server.requests[0]["response_format"] == {"type": "json_object", "schema": SCHEMA}
    assert reply.data == {"name": "a", "count": 1}


def test_api_key_comes_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    with ScriptedChatServer([{"content": "a"}, {"content": "b"}]) as server:
        monkeypatch.setenv("MY_KEY_VAR", "sk-test-123")
        client = LLMClient(LLMConfig(model="m1", base_url=server.base_url, api_key_env="MY_KEY_VAR"))

        async def main() -> None:
            await client.chat(_user("a"), stage="s")
            seen.append(client._state().client.api_key)
            monkeypatch.delenv("MY_KEY_VAR")
            other = LLMClient(LLMConfig(model="m1", base_url=server.base_url, api_key_env="MY_KEY_VAR"))
            await other.chat(_user("b"), stage="s")
            seen.append(other._state().client.api_key)

        run(main())
    assert seen == ["sk-test-123", "EMPTY"]


# ------------------------------------------------------------------------------------------- cache
def test_second_run_replays_from_cache_with_zero_requests(tmp_path: Path) -> None:
    prompts = ["write the state model", "write the tools", "write the tests"]

    async def pipeline(client: LLMClient) -> list[LLMReply]:
        out = [await client.chat(_user(p), stage="code") for p in prompts[:2]]
        out.append(await client.chat(_user(prompts[2]), stage="tests", json_schema={"type": "object"}))
        return out

    with ScriptedChatServer(lambda b: {"content": json.dumps({"echo": b["messages"][-1]["content"]})}) as first:
        client1 = _client(first, cache_dir=tmp_path / "cache")
        replies1 = run(pipeline(client1))
    assert len(first.requests) == 3 and not any(r.cached for r in replies1)
    assert client1.usage_by_stage["code"]["requests"] == 2 and client1.usage_by_stage["code"]["cached_hits"] == 0
    assert not list((tmp_path / "cache").rglob("*.tmp"))  # atomic writes leave no temporaries

    with ScriptedChatServer([]) as second:  # an empty script: any request would fail
        client2 = _client(second, cache_dir=tmp_path / "cache")
        replies2 = run(pipeline(client2))
    assert second.requests == []
    assert [r.text for r in replies2] == [r.text for r in replies1]
    assert replies2[2].data == {"echo": prompts[2]} and all(r.cached for r in replies2)
    assert [r.usage for r in replies2] == [r.usage for r in replies1]  # as recorded
    code = client2.usage_by_stage["code"]
    assert code == {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "cached_hits": 2,
                    "repairs": 0, "retries": 0}
    assert client2.total_usage["cached_hits"] == 3 and client2.total_usage["prompt_tokens"] == 0


def test_cache_key_ignores_endpoint_but_not_request(tmp_path: Path) -> None:
    cfg = LLMConfig(model="m1", base_url="http://a/v1")
    same = LLMConfig(model="m1", base_url="http://b/v1", timeout_s=3, max_concurrency=9)
    key = cache_key(cfg, _user("x"), json_schema=None, tools=None, repair_round=0)
    assert key == cache_key(same, _user("x"), json_schema=None, tools=None, repair_round=0)
    different = [
        cache_key(LLMConfig(model="m2"), _user("x"), json_schema=None, tools=None, repair_round=0),
        cache_key(LLMConfig(model="m1", seed=1), _user("x"), json_schema=None, tools=None, repair_round=0),
        cache_key(LLMConfig(model="m1", temperature=0.5), _user("x"), json_schema=None, tools=None, repair_round=0),
        cache_key(LLMConfig(model="m1", max_tokens=10), _user("x"), json_schema=None, tools=None, repair_round=0),
        cache_key(cfg, _user("y"), json_schema=None, tools=None, repair_round=0),
        cache_key(cfg, _user("x"), json_schema=SCHEMA, tools=None, repair_round=0),
        cache_key(cfg, _user("x"), json_schema=None, tools=[{"type": "function"}], repair_round=0),
        cache_key(cfg, _user("x"), json_schema=None, tools=None, repair_round=1),
    ]
    assert key not in different and len(set(different)) == len(different)


def test_a_different_model_or_prompt_misses_the_cache(tmp_path: Path) -> None:
    with ScriptedChatServer(_echo) as server:
        run(_client(server, cache_dir=tmp_path).chat(_user("a"), stage="s"))
        other_model = LLMClient(LLMConfig(model="m2", base_url=server.base_url, cache_dir=tmp_path))
        run(other_model.chat(_user("a"), stage="s"))
        run(_client(server, cache_dir=tmp_path).chat(_user("b"), stage="s"))
        run(_client(server, cache_dir=tmp_path).chat(_user("a"), stage="s"))  # hit
    assert [r["model"] for r in server.requests] == ["m1", "m2", "m1"]


def test_unreadable_cache_entry_is_paid_again(tmp_path: Path) -> None:
    with ScriptedChatServer(_echo) as server:
        run(_client(server, cache_dir=tmp_path).chat(_user("a"), stage="s"))
        (entry,) = [p for p in tmp_path.rglob("*.json")]
        entry.write_text("{torn", encoding="utf-8")
        reply = run(_client(server, cache_dir=tmp_path).chat(_user("a"), stage="s"))
    assert len(server.requests) == 2 and reply.cached is False and reply.text == "answer to a"
    assert json.loads(entry.read_text())["choices"][0]["message"]["content"] == "answer to a"


@pytest.mark.parametrize("bad", [{}, {"choices": []}, {"choices": "x"}, {"choices": [{}]}, {"choices": ["x"]},
                                 {"choices": [{"message": None}]}, {"choices": [{"message": {"content": 3}}]},
                                 {"choices": [{"message": {"content": None}}]}, [1, 2],
                                 {"choices": [{"message": {"content": "x", "tool_calls": "y"}}]}])
def test_malformed_cache_entry_is_a_miss_not_a_crash_or_an_empty_replay(tmp_path: Path, bad: Any,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    with ScriptedChatServer(_echo) as server:
        run(_client(server, cache_dir=tmp_path).chat(_user("a"), stage="s"))
        (entry,) = [p for p in tmp_path.rglob("*.json")]
        entry.write_text(json.dumps(bad), encoding="utf-8")
        reply = run(_client(server, cache_dir=tmp_path).chat(_user("a"), stage="s"))
    assert len(server.requests) == 2 and reply.cached is False and reply.text == "answer to a"
    assert json.loads(entry.read_text())["choices"][0]["message"]["content"] == "answer to a"
    assert "malformed cache entry" in caplog.text


def test_non_integer_usage_in_a_cache_entry_counts_zero(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with ScriptedChatServer(_echo) as server:
        run(_client(server, cache_dir=tmp_path).chat(_user("a"), stage="s"))
        (entry,) = [p for p in tmp_path.rglob("*.json")]
        data = json.loads(entry.read_text())
        data["usage"] = {"prompt_tokens": "lots", "completion_tokens": -3}
        entry.write_text(json.dumps(data), encoding="utf-8")
        client = _client(server, cache_dir=tmp_path)
        reply = run(client.chat(_user("a"), stage="s"))
    assert len(server.requests) == 1 and reply.cached is True and reply.text == "answer to a"
    assert reply.usage == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    assert "not a token count" in caplog.text


def test_live_answer_without_a_message_is_a_request_error() -> None:
    with ScriptedChatServer(lambda body: {"choices": [{"finish_reason": "stop"}]}) as server:
        with pytest.raises(LLMRequestError, match="not a chat completion"):
            run(_client(server, max_retries=0).chat(_user("a"), stage="s"))


def test_identical_concurrent_requests_are_paid_once(tmp_path: Path) -> None:
    def slow(body: dict) -> dict:
        time.sleep(0.2)
        return _echo(body)

    with ScriptedChatServer(slow) as server:
        client = _client(server, cache_dir=tmp_path)

        async def main() -> list[LLMReply]:
            return await asyncio.gather(*(client.chat(_user("same"), stage="s") for _ in range(4)))

        replies = run(main())
    assert len(server.requests) == 1
    assert sorted(r.cached for r in replies) == [False, True, True, True]
    assert client.usage_by_stage["s"]["requests"] == 1 and client.usage_by_stage["s"]["cached_hits"] == 3


_KILLED_RUN = textwrap.dedent("""
    import sys
    from gym_envfactory.llm import LLMClient, LLMConfig, run

    base_url, cache_dir = sys.argv[1], sys.argv[2]
    client = LLMClient(LLMConfig(model="m1", base_url=base_url, cache_dir=cache_dir, timeout_s=60))

    async def main():
        for i in range(4):
            await client.chat([{"role": "user", "content": f"step {i}"}], stage="code")

    run(main())
""")


def test_killed_run_resumes_without_repeating_paid_requests(tmp_path: Path) -> None:
    """A real kill: the child process is SIGKILLed while its third request is in flight; the resumed run
    pays for requests 3 and 4 only."""
    arrived, release = threading.Event(), threading.Event()

    def responder(body: dict) -> dict:
        if body["messages"][-1]["content"] == "step 2":
            arrived.set()
            release.wait(20)
        return _echo(body)

    script = tmp_path / "killed_run.py"
    script.write_text(_KILLED_RUN, encoding="utf-8")
    cache = tmp_path / "cache"
    with ScriptedChatServer(responder) as first:
        proc = subprocess.Popen([sys.executable, str(script), first.base_url, str(cache)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        try:
            assert arrived.wait(60), proc.stderr.read().decode() if proc.poll() is not None else "no third request"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        finally:
            release.set()
            if proc.poll() is None:  # pragma: no cover
                proc.kill()
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert [r["messages"][-1]["content"] for r in first.requests] == ["step 0", "step 1", "step 2"]
    assert len(list(cache.rglob("*.json"))) == 2  # steps 0 and 1 were paid and cached

    with ScriptedChatServer(_echo) as second:
        client = _client(second, cache_dir=cache)

        async def main() -> list[LLMReply]:
            return [await client.chat([{"role": "user", "content": f"step {i}"}], stage="code") for i in range(4)]

        replies = run(main())
    assert [r["messages"][-1]["content"] for r in second.requests] == ["step 2", "step 3"]
    assert [r.cached for r in replies] == [True, True, False, False]
    assert [r.text for r in replies] == [f"answer to step {i}" for i in range(4)]
    usage = client.usage_by_stage["code"]
    assert usage["requests"] == 2 and usage["cached_hits"] == 2
    assert usage["prompt_tokens"] == replies[2].usage["prompt_tokens"] + replies[3].usage["prompt_tokens"]


# ------------------------------------------------------------------------------------------- retries
def test_retries_server_error_then_succeeds() -> None:
    with ScriptedChatServer([{"status": 500, "message": "boom"}, {"status": 503}, {"content": "ok"}]) as server:
        client = _client(server)
        reply = run(client.chat(_user("x"), stage="code"))
    assert reply.text == "ok" and len(server.requests) == 3
    assert client.usage_by_stage["code"]["retries"] == 2 and client.usage_by_stage["code"]["requests"] == 1


def test_retries_rate_limit_with_backoff() -> None:
    with ScriptedChatServer([{"status": 429}, {"content": "ok"}]) as server:
        client = _client(server, backoff_s=0.3)
        started = time.monotonic()
        reply = run(client.chat(_user("x"), stage="code"))
        waited = time.monotonic() - started
    assert reply.text == "ok" and len(server.requests) == 2 and waited >= 0.3


def test_retries_timeouts() -> None:
    calls = []

    def responder(body: dict) -> dict:
        calls.append(1)
        if len(calls) == 1:
            time.sleep(1.5)  # longer than the client's timeout
        return {"content": "late but fine"}

    with ScriptedChatServer(responder) as server:
        client = _client(server, timeout_s=0.4)
        reply = run(client.chat(_user("x"), stage="code"))
    assert reply.text == "late but fine" and len(server.requests) == 2
    assert client.usage_by_stage["code"]["retries"] == 1


def test_bad_request_is_not_retried() -> None:
    with ScriptedChatServer([{"status": 400, "message": "context too long"}, {"content": "never"}]) as server:
        with pytest.raises(LLMRequestError) as info:
            run(_client(server).chat(_user("x"), stage="code"))
    assert len(server.requests) == 1
    assert info.value.status == 400 and info.value.attempts == 1 and info.value.stage == "code"
    assert "context too long" in str(info.value) and "not retried" in str(info.value)


def test_retries_are_bounded() -> None:
    with ScriptedChatServer([{"status": 502}] * 10) as server:
        with pytest.raises(LLMRequestError) as info:
            run(_client(server, max_retries=2).chat(_user("x"), stage="code"))
    assert len(server.requests) == 3 and info.value.status == 502 and info.value.attempts == 3


def test_unreachable_endpoint_raises_after_retries() -> None:
    server = ScriptedChatServer([])  # bound, never started... then closed: nothing listens on the port
    base = server.base_url
    server._httpd.server_close()
    client = LLMClient(LLMConfig(model="m1", base_url=base, max_retries=1, timeout_s=2), backoff_s=0.001)
    with pytest.raises(LLMRequestError) as info:
        run(client.chat(_user("x"), stage="code"))
    assert info.value.status is None and info.value.attempts == 2 and "base_url" in str(info.value)


# ------------------------------------------------------------------------------------------- JSON
def test_extract_json_tolerates_fences_and_prose() -> None:
    assert extract_json('{"a": 1}') == {"a": 1}
    assert extract_json('Sure! Here it is:\n```json\n{"a": [1, 2]}\n```\nAnything else?') == {"a": [1, 2]}
    assert extract_json("```\n[1, 2]\n```") == [1, 2]
    assert extract_json('The plan: {"a": {"b": "}"}} -- done') == {"a": {"b": "}"}}
    with pytest.raises(ValueError, match="empty"):
        extract_json("  ")
    with pytest.raises(ValueError, match="no JSON value"):
        extract_json("I cannot do that.")


def test_valid_json_with_leading_prose_needs_no_repair() -> None:
    with ScriptedChatServer([{"content": 'Here you go:\n```json\n{"name": "a", "count": 3}\n```'}]) as server:
        client = _client(server)
        reply = run(client.chat(_user("x"), stage="plan", json_schema=SCHEMA))
    assert reply.data == {"name": "a", "count": 3} and not reply.repaired and len(server.requests) == 1
    assert client.usage_by_stage["plan"]["repairs"] == 0


def test_repair_round_fixes_invalid_json() -> None:
    script = [{"content": 'Here: {"name": "a", "count": -1}'}, {"content": '{"name": "a", "count": 1}'}]
    with ScriptedChatServer(script) as server:
        client = _client(server)
        reply = run(client.chat(_user("make it"), stage="plan", json_schema=SCHEMA))
    assert reply.data == {"name": "a", "count": 1} and reply.repaired and reply.text == '{"name": "a", "count": 1}'
    assert len(server.requests) == 2
    repair = server.requests[1]["messages"]
    assert repair[:2] == _user("make it")
    assert repair[2] == {"role": "assistant", "content": 'Here: {"name": "a", "count": -1}'}
    assert repair[3]["role"] == "user" and "count" in repair[3]["content"] and "minimum" in repair[3]["content"]
    assert "JSON only" in repair[3]["content"]
    stage = client.usage_by_stage["plan"]
    assert stage["repairs"] == 1 and stage["requests"] == 2
    assert reply.usage["prompt_tokens"] == stage["prompt_tokens"]  # both rounds summed


def test_repair_round_fixes_unparseable_answer() -> None:
    script = [{"content": "I think the name is a and the count is 2."}, {"content": '{"name": "a", "count": 2}'}]
    with ScriptedChatServer(script) as server:
        reply = run(_client(server).chat(_user("x"), stage="plan", json_schema=SCHEMA))
    assert reply.data == {"name": "a", "count": 2}
    assert "no JSON value" in server.requests[1]["messages"][-1]["content"]


def test_still_invalid_after_repair_raises_output_error() -> None:
    script = [{"content": "not json"}, {"content": '{"name": 5}'}, {"content": '{"name": "a", "count": 1}'}]
    with ScriptedChatServer(script) as server:
        client = _client(server)
        with pytest.raises(LLMOutputError) as info:
            run(client.chat(_user("x"), stage="plan", json_schema=SCHEMA))
    assert len(server.requests) == 2  # exactly one repair round
    err = info.value
    assert err.raw == '{"name": 5}' and err.first_raw == "not json" and err.stage == "plan"
    assert "count" in err.error or "string" in err.error
    assert client.usage_by_stage["plan"]["repairs"] == 1


def test_repair_rounds_are_cached_too(tmp_path: Path) -> None:
    script = [{"content": "nope"}, {"content": '{"name": "a", "count": 1}'}]
    with ScriptedChatServer(script) as server:
        run(_client(server, cache_dir=tmp_path).chat(_user("x"), stage="plan", json_schema=SCHEMA))
    with ScriptedChatServer([]) as empty:
        client = _client(empty, cache_dir=tmp_path)
        reply = run(client.chat(_user("x"), stage="plan", json_schema=SCHEMA))
    assert empty.requests == [] and reply.cached and reply.data == {"name": "a", "count": 1}
    assert client.usage_by_stage["plan"] == {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0,
                                             "cached_hits": 2, "repairs": 1, "retries": 0}


def test_invalid_schema_is_refused_before_any_request() -> None:
    with ScriptedChatServer([{"content": "{}"}]) as server:
        with pytest.raises(ValueError, match="not a valid JSON Schema"):
            run(_client(server).chat(_user("x"), stage="plan", json_schema={"type": "objekt"}))
    assert server.requests == []


# ------------------------------------------------------------------------------------------- accounting
def test_token_accounting_per_stage_and_progress() -> None:
    events: list[dict] = []
    with ScriptedChatServer(_echo) as server:
        client = LLMClient(LLMConfig(model="m1", base_url=server.base_url), progress=events.append)

        async def main() -> dict[str, list[LLMReply]]:
            code = [await client.chat(_user(f"code {i}" * (i + 1)), stage="code") for i in range(3)]
            tests = [await client.chat(_user("tests, please"), stage="tests")]
            return {"code": code, "tests": tests}

        replies = run(main())
    by_stage = client.usage_by_stage
    assert set(by_stage) == {"code", "tests"}
    for stage, rs in replies.items():
        assert by_stage[stage]["prompt_tokens"] == sum(r.usage["prompt_tokens"] for r in rs)
        assert by_stage[stage]["completion_tokens"] == sum(r.usage["completion_tokens"] for r in rs)
        assert by_stage[stage]["requests"] == len(rs)
    assert by_stage["code"]["prompt_tokens"] > by_stage["tests"]["prompt_tokens"] > 0
    total = client.total_usage
    assert total["requests"] == 4
    assert total["prompt_tokens"] == by_stage["code"]["prompt_tokens"] + by_stage["tests"]["prompt_tokens"]
    assert [e["stage"] for e in events] == ["code", "code", "code", "tests"]
    assert all(e["cached"] is False and e["completion_tokens"] > 0 for e in events)
    by_stage["code"]["requests"] = 99  # a copy: the client's books are not writable from outside
    assert client.usage_by_stage["code"]["requests"] == 3


# ------------------------------------------------------------------------------------------- concurrency
@pytest.mark.parametrize("cap", [1, 3])
def test_concurrency_cap_is_respected(cap: int) -> None:
    lock = threading.Lock()
    state = {"now": 0, "max": 0}

    def responder(body: dict) -> dict:
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.15)
        with lock:
            state["now"] -= 1
        return _echo(body)

    with ScriptedChatServer(responder) as server:
        client = _client(server, max_concurrency=cap)

        async def main() -> list[LLMReply]:
            return await asyncio.gather(*(client.chat(_user(f"job {i}"), stage="code") for i in range(8)))

        replies = run(main())
    assert len(server.requests) == 8 and len({r.text for r in replies}) == 8
    assert state["max"] == cap  # never more in flight than the cap, and the cap is used


# ------------------------------------------------------------------------------------------- record / replay
def test_record_then_replay_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "recorded" / "run.jsonl"
    tools = [{"type": "function", "function": {"name": "get_book", "parameters": {"type": "object"}}}]
    upstream_script: list[dict[str, Any]] = [
        {"content": "first answer"},
        {"status": 503},  # an upstream error: passed through, retried by the client, not recorded
        {"tool_calls": [{"function": {"name": "get_book", "arguments": {"book_id": "B2"}}}]},
        {"content": '{"name": "n", "count": 4}'},
    ]

    async def session(client: LLMClient) -> list[LLMReply]:
        return [await client.chat(_user("one"), stage="a"),
                await client.chat(_user("two"), stage="a", tools=tools),
                await client.chat(_user("three"), stage="b", json_schema=SCHEMA)]

    with ScriptedChatServer(upstream_script, model="upstream-model") as upstream:
        with RecordingProxy(upstream.base_url, out, keep_requests=True) as proxy:
            recorded = run(session(_client(proxy)))
    assert len(upstream.requests) == 4 and len(proxy.requests) == 4 and proxy.recorded == 3
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 3
    assert [e["request_sha"] for e in lines] == [request_sha(e["request"]) for e in lines]
    assert lines[0]["reply"]["choices"][0]["message"]["content"] == "first answer"

    with ScriptedChatServer.from_file(out) as replay:
        replayed = run(session(_client(replay)))
    assert len(replay.requests) == 3
    for a, b in zip(recorded, replayed, strict=True):
        assert (a.text, a.data, a.tool_calls, a.usage) == (b.text, b.data, b.tool_calls, b.usage)
    assert replayed[1].tool_calls is not None and replayed[1].tool_calls[0]["function"]["name"] == "get_book"

    # matched by request hash, not by order
    with ScriptedChatServer.from_file(out) as replay:
        client = _client(replay)
        assert run(client.chat(_user("three"), stage="b", json_schema=SCHEMA)).data == {"name": "n", "count": 4}
        assert run(client.chat(_user("one"), stage="a")).text == "first answer"
        with pytest.raises(LLMRequestError, match="no recorded reply"):  # never recorded
            run(_client(replay, max_retries=0).chat(_user("four"), stage="a"))


def test_recording_proxy_forwards_the_key_and_reports_unreachable_upstream(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    dead = ScriptedChatServer([])
    dead_url = dead.base_url
    dead._httpd.server_close()
    with RecordingProxy(dead_url, tmp_path / "x.jsonl") as proxy:
        with pytest.raises(LLMRequestError) as info:
            run(_client(proxy, max_retries=0).chat(_user("x"), stage="a"))
    assert info.value.status == 502 and "unreachable" in str(info.value)
    assert not (tmp_path / "x.jsonl").exists() or (tmp_path / "x.jsonl").read_text() == ""


def test_from_file_plain_list_in_order_and_bad_files(tmp_path: Path) -> None:
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps([{"content": "one"}, {"content": "two"}]))
    with ScriptedChatServer.from_file(plain) as server:
        client = _client(server)
        assert run(client.chat(_user("b"), stage="s")).text == "one"
        assert run(client.chat(_user("a"), stage="s")).text == "two"
    unhashed = tmp_path / "unhashed.jsonl"
    unhashed.write_text(json.dumps({"reply": {"content": "in order"}}) + "\n")
    with ScriptedChatServer.from_file(unhashed) as server:
        assert run(_client(server).chat(_user("anything"), stage="s")).text == "in order"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"reply": {"content": "ok"}}\n{"nope": 1}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2"):
        ScriptedChatServer.from_file(bad)


def test_replays_a_committed_recording() -> None:
    """fixtures/recorded_chat.jsonl was captured with RecordingProxy; replaying it needs the same requests
    (so it also pins the request shape this layer sends: model, messages, temperature, seed, tools)."""
    schema = {"type": "object", "required": ["class_name", "tools"],
              "properties": {"class_name": {"type": "string"}, "tools": {"type": "array", "items": {"type": "string"}}}}
    tools = [{"type": "function", "function": {
        "name": "add_item", "description": "Add a to-do item.",
        "parameters": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}}}]
    with ScriptedChatServer.from_file(Path(__file__).resolve().parents[1] / "fixtures" / "recorded_chat.jsonl") as server:
        client = LLMClient(LLMConfig(model="recorded-model", base_url=server.base_url, max_retries=0))

        async def main() -> tuple[LLMReply, LLMReply]:
            plan = await client.chat([{"role": "user", "content": "Plan a to-do list environment as JSON."}],
                                     stage="plan", json_schema=schema)
            act = await client.chat([{"role": "user", "content": "Add 'buy milk' to my list."}],
                                    stage="agent", tools=tools)
            return plan, act

        plan, act = run(main())
    assert plan.data == {"class_name": "TodoList", "tools": ["add_item", "complete_item"]}
    assert plan.usage == {"prompt_tokens": 10, "completion_tokens": 32, "total_tokens": 42}
    assert act.tool_calls == [{"id": "call_1", "type": "function",
                               "function": {"name": "add_item", "arguments": '{"title": "buy milk"}'}}]
    assert client.usage_by_stage["agent"]["completion_tokens"] == 43
