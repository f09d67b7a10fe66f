"""The /openenv/<Env> endpoint under hostile input (review of issue 28): request bodies and frames are
capped at the server's ``max_body_bytes`` (413, as ``/v1/rpc``), huge values are never echoed whole,
HTTP MCP sessions expire after the server's ttl when no WebSocket is attached and count against a
per-client cap, and JSON nested past the parser's depth is OpenEnv's error, not a 500 or a dropped
connection.  Through Starlette's test client, without the openenv package; the clock is injected."""

from __future__ import annotations

import json
from types import SimpleNamespace

from starlette.applications import Starlette
from starlette.testclient import TestClient

from gym_envfactory.server.manager import SessionManager
from gym_envfactory.training.openenv import openenv_app, openenv_routes

BASE = "/openenv/HotelBooking"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def rpc(c: TestClient, method: str, headers: dict[str, str] | None = None, **params) -> dict:
    r = c.post(f"{BASE}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


def test_bodies_and_frames_over_max_body_bytes_are_refused():
    c = TestClient(openenv_app(["HotelBooking"], max_body_bytes=1024))
    big = json.dumps({"task_id": "hotel-001", "episode_id": "x" * 2000}).encode()
    r = c.post(f"{BASE}/reset", content=big)
    assert r.status_code == 413 and r.json() == {"detail": "request body over 1024 bytes"}
    r = c.post(f"{BASE}/mcp", content=b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "pad": "' + b"x" * 2000 + b'"}')
    assert r.status_code == 413 and r.json()["error"]["code"] == -32600 and "over 1024 bytes" in r.json()["error"]["message"]
    assert c.post(f"{BASE}/reset", json={"task_id": "hotel-001"}).status_code == 200  # under the cap: answered
    with c.websocket_connect(f"{BASE}/ws") as ws:
        ws.send_text(json.dumps({"type": "reset", "data": {"episode_id": "x" * 2000}}))
        frame = json.loads(ws.receive_text())
        assert frame["type"] == "error" and frame["data"]["message"] == "frame over 1024 bytes"
        ws.send_text(json.dumps({"type": "reset", "data": {"task_id": "hotel-001"}}))
        assert json.loads(ws.receive_text())["type"] == "observation"  # the session lives on


def test_the_serve_mount_takes_the_servers_body_cap():
    config = SimpleNamespace(host="127.0.0.1", allowed_origins=[], token=None, max_sessions=8, ttl_s=900.0,
                             max_body_bytes=512)
    routes, hook = openenv_routes(SessionManager(["HotelBooking"]), config)
    with TestClient(Starlette(routes=routes, lifespan=hook), base_url="http://127.0.0.1") as c:
        assert c.post(f"{BASE}/reset", content=b" " * 600 + b"{}").status_code == 413
        assert c.post(f"{BASE}/reset", json={"task_id": "hotel-001"}).status_code == 200


def test_huge_values_are_not_echoed_whole():
    c = TestClient(openenv_app(["HotelBooking"]))
    huge = "y" * 100_000
    for r in (c.post(f"{BASE}/reset", json={"seed": huge}), c.post(f"{BASE}/reset", json={huge: 1}),
              c.post(f"{BASE}/reset", json={"task_id": huge})):
        assert r.status_code == 422 and len(r.text) < 3000, r.text[:300]
    for method, params in ((huge, {}), ("tools/list", {"session_id": huge})):
        r = c.post(f"{BASE}/mcp", json={"jsonrpc": "2.0", "id": huge, "method": method, "params": params})
        assert r.json()["error"]["code"] in (-32601, -32602) and len(r.text) < 3000
    with c.websocket_connect(f"{BASE}/ws") as ws:
        ws.send_text(json.dumps({"type": huge}))
        frame = json.loads(ws.receive_text())
        assert frame["data"]["code"] == "UNKNOWN_TYPE" and len(frame["data"]["message"]) < 3000


def test_idle_http_mcp_sessions_expire_unless_a_websocket_is_attached():
    clock = Clock()
    c = TestClient(openenv_app(["HotelBooking"], max_episodes=2, ttl_s=10.0, clock=clock))
    first = rpc(c, "openenv/session/create")["result"]["session_id"]
    second = rpc(c, "openenv/session/create")["result"]["session_id"]
    assert rpc(c, "openenv/session/create")["error"]["code"] == -32000  # at capacity: two sessions never closed
    with c.websocket_connect(f"{BASE}/ws?session_id={first}") as ws:
        clock.now += 11
        third = rpc(c, "openenv/session/create")["result"]["session_id"]  # the idle one expired, making room
        assert "Unknown session_id" in rpc(c, "tools/list", session_id=second)["error"]["message"]
        assert "tools" in rpc(c, "tools/list", session_id=first)["result"]  # attached: kept
        ws.send_text(json.dumps({"type": "reset", "data": {"task_id": "hotel-001"}}))
        assert json.loads(ws.receive_text())["type"] == "observation"
    clock.now += 5
    assert "tools" in rpc(c, "tools/list", session_id=third)["result"]  # a request naming a session uses it
    clock.now += 6  # 11 s after the WebSocket left, 6 s after the last request on the third
    assert "Unknown session_id" in rpc(c, "tools/list", session_id=first)["error"]["message"]
    assert "tools" in rpc(c, "tools/list", session_id=third)["result"]
    # a WebSocket and POST /reset get the room back too
    assert c.post(f"{BASE}/reset", json={"task_id": "hotel-001"}).status_code == 200


def test_without_a_ttl_sessions_stay_until_closed():
    clock = Clock()
    c = TestClient(openenv_app(["HotelBooking"], max_episodes=2, clock=clock))
    sid = rpc(c, "openenv/session/create")["result"]["session_id"]
    clock.now += 1e9
    assert "tools" in rpc(c, "tools/list", session_id=sid)["result"]


def test_http_mcp_sessions_count_against_a_per_client_cap():
    c = TestClient(openenv_app(["HotelBooking"], max_episodes=8, max_sessions_per_client=1))
    a = {"X-Envfactory-Client": "alice"}
    sid = rpc(c, "openenv/session/create", headers=a)["result"]["session_id"]
    refused = rpc(c, "openenv/session/create", headers=a)["error"]
    assert refused["code"] == -32000 and "'alice' holds 1" in refused["message"]
    assert "result" in rpc(c, "openenv/session/create", headers={"X-Envfactory-Client": "bob"})
    assert rpc(c, "openenv/session/close", headers=a, session_id=sid)["result"]["closed"] is True
    assert "result" in rpc(c, "openenv/session/create", headers=a)
    bad = rpc(c, "openenv/session/create", headers={"X-Envfactory-Client": "no spaces allowed"})["error"]
    assert bad["code"] == -32600


def test_deep_nesting_and_non_string_session_ids_are_openenv_errors():
    c = TestClient(openenv_app(["HotelBooking"]), raise_server_exceptions=False)
    deep = b"[" * 100_000 + b"]" * 100_000
    r = c.post(f"{BASE}/mcp", content=deep)
    assert r.status_code == 200 and r.json()["error"]["code"] == -32700
    r = c.post(f"{BASE}/reset", content=deep)
    assert r.status_code == 422 and "not valid JSON" in r.json()["detail"]
    with c.websocket_connect(f"{BASE}/ws") as ws:
        ws.send_text(deep.decode())
        frame = json.loads(ws.receive_text())
        assert frame["type"] == "error" and frame["data"]["code"] == "INVALID_JSON"
        ws.send_text(json.dumps({"type": "reset", "data": {"task_id": "hotel-001"}}))
        assert json.loads(ws.receive_text())["type"] == "observation"  # the connection lives on
    for sid in (["x"], {"a": 1}, 7):
        for method in ("tools/call", "tools/list", "openenv/session/close"):
            r = c.post(f"{BASE}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method,
                                            "params": {"session_id": sid, "name": "search_hotels"}})
            assert r.status_code == 200 and r.json()["error"]["code"] == -32602, r.text
