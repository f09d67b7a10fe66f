"""Server memory across rounds (issue 10 part 9) and the worker's collector policy (part 3).

Counts, not RSS: after rounds of sessions created, used and closed over every transport (fast protocol over
WebSocket, closed explicitly and on disconnect; forks; MCP sessions, owned and over the fast path), the
server's tables hold nothing per session and no per-session object survives.  The idle worker gives free
heap memory back to the system (what kept RSS after close at its peak) and runs full collector passes only
when idle, so young passes stay small (bench/bench_server.py measures RSS per round and the pauses).
"""

from __future__ import annotations

import gc
import json
import time
from collections import Counter
from typing import Any, cast

import pytest

pytest.importorskip("starlette")
pytest.importorskip("mcp")

from starlette.testclient import TestClient  # noqa: E402

from gym_envfactory.server.app import ServerConfig, build_app  # noqa: E402
from gym_envfactory.server.fastproto import Caller, FrameJob  # noqa: E402
from gym_envfactory.server.manager import ManagedSession, SessionManager  # noqa: E402
from gym_envfactory.server.mcp_server import mcp_routes  # noqa: E402
from gym_envfactory.server.worker import Worker, heap_free_bytes  # noqa: E402
from gym_envfactory.session import Session  # noqa: E402

ENV = "HotelBooking"
PV = "2025-11-25"
MCP = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
PER_SESSION_TYPES = (ManagedSession, Session, Caller, FrameJob)


def _per_session_objects() -> Counter[str]:
    gc.collect()
    return Counter(type(o).__name__ for o in gc.get_objects() if isinstance(o, PER_SESSION_TYPES)
                   or type(o).__name__ == "_FastEntry")


def _rpc(ws: Any, method: str, id_: int = 1, **params: Any) -> Any:
    ws.send_text(json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}))
    reply = json.loads(ws.receive_text())
    assert "result" in reply, reply
    return reply["result"]


def _mcp_round(client: TestClient) -> None:
    r = client.post(f"/mcp/{ENV}", headers=MCP, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": PV, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    h = {**MCP, "MCP-Protocol-Version": PV, "Mcp-Session-Id": r.headers["mcp-session-id"]}
    assert client.post(f"/mcp/{ENV}", headers=h, json={"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
    for i in range(3):  # the first through the SDK, the others on the fast path
        r = client.post(f"/mcp/{ENV}", headers=h, json={"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                                                         "params": {"name": "list_hotel_destinations", "arguments": {}}})
        assert r.status_code == 200 and not r.json()["result"]["isError"]
    assert client.delete(f"/mcp/{ENV}", headers=h).status_code == 200


def test_no_per_session_objects_left_after_rounds() -> None:
    manager = SessionManager([ENV])
    config = ServerConfig(envs=[ENV])
    routes, lifespan = mcp_routes(manager, config)
    app = build_app(manager, config, extra_routes=routes, lifespan_hooks=[lifespan])
    srv = cast(Any, routes[0].endpoint).app.srv
    before = _per_session_objects()
    with TestClient(app, base_url="http://127.0.0.1:8765") as client:
        for _ in range(3):
            with client.websocket_connect("ws://127.0.0.1:8765/v1/ws?client=kept") as ws:  # closes its sessions explicitly
                sid = _rpc(ws, "create", env=ENV, initial_state="large")["session_id"]
                forks = _rpc(ws, "fork", session_id=sid, k=4)
                for s in [sid, *forks]:
                    assert _rpc(ws, "call", session_id=s, name="list_hotel_destinations", arguments={})["ok"]
                for s in [sid, *forks]:
                    assert _rpc(ws, "close", session_id=s) is True
            with client.websocket_connect("ws://127.0.0.1:8765/v1/ws?client=dropped&close_on_disconnect=1") as ws:  # drops them
                sid = _rpc(ws, "create", env=ENV)["session_id"]
                _rpc(ws, "fork", session_id=sid, k=3)
                _rpc(ws, "call", session_id=sid, name="get_guest_profile", arguments={"guest_id": "G-001"})
            _mcp_round(client)
            deadline = time.monotonic() + 10
            while (manager.sessions or srv.fast) and time.monotonic() < deadline:
                time.sleep(0.02)  # the disconnect's close and the MCP session's teardown run asynchronously
            assert manager.sessions == {} and manager.owned == {} and srv.fast == {}
            assert manager.worker.queued() == 0
            left = _per_session_objects() - before
            assert not left, f"per-session objects survive a round: {dict(left)}"
        assert srv.fast_calls == 6  # the MCP rounds went over the fast path too
    manager.worker.stop()


def test_idle_worker_gives_free_heap_back() -> None:
    async def main() -> None:
        w = Worker(trim_free_bytes=0, trim_interval_s=0.0)
        blobs = await w.run(lambda: [bytes(2048) for _ in range(20_000)])
        del blobs[::2]  # free every other block: holes malloc keeps
        await w.run(lambda: None)
        deadline = time.monotonic() + 5
        while heap_free_bytes() is not None and w.trims == 0 and time.monotonic() < deadline:
            await w.run(lambda: None)
        if heap_free_bytes() is None:  # not glibc: nothing to release, and nothing is tried
            assert w.trims == 0
        else:
            assert w.trims >= 1
        w.stop()

    import asyncio

    asyncio.run(main())


def test_idle_worker_runs_full_passes_only_when_quiet() -> None:
    async def main() -> None:
        w = Worker(trim_free_bytes=None, trim_interval_s=0.0)
        w.quiet = lambda: False
        gc.collect(1)  # a middle pass: objects promoted since the last full pass
        await w.run(lambda: None)
        await w.run(lambda: None)
        assert w.full_passes == 0  # sessions live: no full pass (fewer than FULL_PASS_AFTER middle passes)
        w.quiet = lambda: True
        gc.collect(1)
        deadline = time.monotonic() + 5
        while w.full_passes == 0 and time.monotonic() < deadline:
            await w.run(lambda: None)
        assert w.full_passes >= 1
        w.stop()

    import asyncio

    asyncio.run(main())
