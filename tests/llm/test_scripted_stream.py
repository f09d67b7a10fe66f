"""The scripted chat server answers ``"stream": true`` as server-sent chunks (issue 28: verifiers' interception
server relays every model call as a stream); the chunks add up to the completion it serves unstreamed."""

from __future__ import annotations

import json
import urllib.request

from gym_envfactory.testing import ScriptedChatServer


def post(url, body):
    req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.headers.get("Content-Type"), r.read().decode()


def test_a_streamed_reply_reassembles_to_the_unstreamed_one():
    reply = {"content": "Booking it.", "tool_calls": [
        {"type": "function", "function": {"name": "book", "arguments": {"room": "R1", "nights": 2}}}]}
    with ScriptedChatServer([reply, reply]) as server:
        _, plain = post(server.base_url, {"model": "m", "messages": []})
        kind, streamed = post(server.base_url, {"model": "m", "messages": [], "stream": True})
    whole = json.loads(plain)["choices"][0]
    assert kind == "text/event-stream"
    events = [e.removeprefix("data: ") for e in streamed.strip().split("\n\n")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    deltas = [ch["delta"] for c in chunks for ch in c["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == whole["message"]["content"]
    calls = [tc for d in deltas for tc in d.get("tool_calls", [])]
    assert [tc["function"] for tc in calls] == [tc["function"] for tc in whole["message"]["tool_calls"]]
    finish = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch["finish_reason"]]
    assert finish == ["tool_calls"] and chunks[-1]["usage"] == json.loads(plain)["usage"]
