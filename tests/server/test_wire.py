"""The wire does not stall (issue 24, part 4): ``envfactory serve`` negotiates no permessage-deflate
(compressing a large answer would run on the event loop, holding every other client's frames), the
remote client does not ask for it, and a ``state`` answer is the JSON the session serialised once,
spliced into the response as it is."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from gym_envfactory.server import SessionManager
from gym_envfactory.server.fastproto import dispatch_frame

pytest.importorskip("uvicorn")
websockets_sync = pytest.importorskip("websockets.sync.client")


@contextlib.contextmanager
def _served() -> Iterator[str]:
    """``envfactory serve HotelBooking`` with a token; its URL, stopped afterwards."""
    p, url = _serve()
    try:
        yield url
    finally:
        p.terminate()
        p.wait(timeout=10)
        for f in (p.stdout, p.stderr):
            if f is not None:
                f.close()


def _serve() -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "ENVFACTORY_TOKEN": "wire-test"}
    p = subprocess.Popen([sys.executable, "-m", "gym_envfactory.cli", "serve", "HotelBooking", "--port", "0",
                          "--announce"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line.startswith("{"), p.stderr.read() if p.stderr else ""
    return p, json.loads(line)["listening"]


def test_serve_refuses_permessage_deflate_even_when_a_client_offers_it():
    with _served() as url:
        with websockets_sync.connect(url.replace("http", "ws", 1) + "/v1/ws", compression="deflate",
                                     additional_headers={"Authorization": "Bearer wire-test"},
                                     open_timeout=30) as conn:
            assert "permessage-deflate" in (conn.request.headers.get("Sec-WebSocket-Extensions") or "")  # offered
            assert conn.response.headers.get("Sec-WebSocket-Extensions") is None  # and not accepted
            conn.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
            assert json.loads(conn.recv(timeout=30))["id"] == 1


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


def _rpc(conn, payload):
    conn.send(json.dumps(payload))
    return json.loads(conn.recv(timeout=60))


@pytest.mark.parametrize("split", [False, True])
def test_a_large_batch_comes_in_one_frame_unless_the_client_takes_split_answers(split):
    from gym_envfactory.protocol import SPLIT_HEADER
    from gym_envfactory.server import fastproto

    headers = {"Authorization": "Bearer wire-test", **({SPLIT_HEADER: "1"} if split else {})}
    with _served() as url:
        with websockets_sync.connect(url.replace("http", "ws", 1) + "/v1/ws", additional_headers=headers,
                                     open_timeout=30, max_size=None) as conn:
            sid = _rpc(conn, {"jsonrpc": "2.0", "id": 0, "method": "create",
                              "params": {"env": "HotelBooking", "initial_state": "large"}})["result"]["session_id"]
            n = 12  # ~280 KB each: well over SPLIT_BYTES in all
            conn.send(json.dumps([{"jsonrpc": "2.0", "id": i, "method": "state", "params": {"session_id": sid}}
                                  for i in range(n)]))
            frames = []
            got: list = []
            while len(got) < n:
                frame = json.loads(conn.recv(timeout=60))
                assert isinstance(frame, list)  # every frame of a batch's answers is an array
                frames.append(len(json.dumps(frame)))
                got += frame
            assert [r["id"] for r in got] == list(range(n)) and all("result" in r for r in got)
            if split:
                assert len(frames) > 1 and max(frames) <= fastproto.SPLIT_BYTES + 400_000
            else:
                assert len(frames) == 1


def test_the_remote_client_assembles_a_split_answer_by_id():
    from gym_envfactory.backends.remote import SessionClient

    with _served() as url:
        c = SessionClient(url, token="wire-test", timeout=60)
        try:
            sid = c.request("create", env="HotelBooking", initial_state="large")["session_id"]
            states = c.batch([("state", {"session_id": sid})] * 12 + [("info", {"session_id": "nope"})])
            assert all(s == states[0] for s in states[:12]) and len(states[0]["hotels"]) > 100
            assert getattr(states[12], "code", None) == -32001  # the failed one keeps its slot
        finally:
            c.close()
