"""The wire does not stall (issue 24, part 4): ``envfactory serve`` negotiates no permessage-deflate
(compressing a large answer would run on the event loop, holding every other client's frames), the
remote client does not ask for it, and a ``state`` answer is the JSON the session serialised once,
spliced into the response as it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gym_envfactory.server import SessionManager
from gym_envfactory.server.fastproto import dispatch_frame

pytest.importorskip("uvicorn")
websockets_sync = pytest.importorskip("websockets.sync.client")


def _serve() -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "ENVFACTORY_TOKEN": "wire-test"}
    p = subprocess.Popen([sys.executable, "-m", "gym_envfactory.cli", "serve", "HotelBooking", "--port", "0",
                          "--announce"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line.startswith("{"), p.stderr.read() if p.stderr else ""
    return p, json.loads(line)["listening"]


def test_serve_refuses_permessage_deflate_even_when_a_client_offers_it():
    p, url = _serve()
    try:
        with websockets_sync.connect(url.replace("http", "ws", 1) + "/v1/ws", compression="deflate",
                                     additional_headers={"Authorization": "Bearer wire-test"},
                                     open_timeout=30) as conn:
            assert "permessage-deflate" in (conn.request.headers.get("Sec-WebSocket-Extensions") or "")  # offered
            assert conn.response.headers.get("Sec-WebSocket-Extensions") is None  # and not accepted
            conn.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
            assert json.loads(conn.recv(timeout=30))["id"] == 1
    finally:
        p.terminate()
        p.wait(timeout=10)
        for f in (p.stdout, p.stderr):
            if f is not None:
                f.close()


def test_the_remote_client_asks_for_no_compression():
    from gym_envfactory.backends.remote import AsyncSessionClient

    seen: dict[str, object] = {}

    def fake_connect(url, **settings):
        seen.update(settings)
        raise OSError("not connecting in this test")

    import gym_envfactory.backends.remote as remote

    mod = remote.require_websockets()
    real = mod.connect
    mod.connect = fake_connect
    try:
        import asyncio

        with pytest.raises(Exception):
            asyncio.run(AsyncSessionClient("ws://127.0.0.1:9/v1/ws", timeout=1).connect())
    finally:
        mod.connect = real
    assert "compression" in seen and seen["compression"] is None


def test_a_state_answer_is_the_sessions_json_spliced_once():
    m = SessionManager()
    (created,) = json.loads(dispatch_frame(m, json.dumps([{"jsonrpc": "2.0", "id": 1, "method": "create",
                                                           "params": {"env": "HotelBooking"}}])))
    sid = created["result"]["session_id"]
    frame = [{"jsonrpc": "2.0", "id": "s\u00e9", "method": "state", "params": {"session_id": sid}},
             {"jsonrpc": "2.0", "id": 3, "method": "state", "params": {"session_id": "nope"}}]
    out = dispatch_frame(m, json.dumps(frame))
    first, second = json.loads(out)
    assert first == {"jsonrpc": "2.0", "id": "s\u00e9", "result": m.sessions[sid].session.state()}
    assert second["error"]["code"] == -32001
    assert m.sessions[sid].session.state_json().decode() in out  # spliced as serialised, not re-encoded
    one = json.loads(dispatch_frame(m, json.dumps(frame[0])))  # a lone request: the same splice
    assert one["result"] == first["result"]
