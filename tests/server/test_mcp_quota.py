"""MCP transport sessions count against their client and the memory budget (issue 25, finding 10).

Every handshake-era ``Mcp-Session-Id`` holds the SDK's transport, streams and server task (~20 KiB) before
and besides the environment session it may own; without a bound, one client could open them until the
server ran out of memory.  The endpoint admits each one first (``SessionManager.admit_mcp_session``):
at most ``max_mcp_sessions_per_client`` per client (refused with -32002, HTTP 429, ``data.scope ==
"client"``), each reserving ``MCP_SESSION_BYTES`` (refused with -32006, HTTP 503, beyond the budget), and
gives the room back when the session ends.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio  # noqa: E402
import httpx2  # noqa: E402

from gym_envfactory import protocol  # noqa: E402
from gym_envfactory.errors import CapacityError, MemoryBudgetError  # noqa: E402
from gym_envfactory.server.admission import MCP_SESSION_BYTES, Admission, MemoryBudget  # noqa: E402
from gym_envfactory.server.app import ServerConfig, build_app  # noqa: E402
from gym_envfactory.server.manager import SessionManager  # noqa: E402
from gym_envfactory.server.mcp_server import mcp_routes  # noqa: E402

ENV = "HotelBooking"
PV = "2025-11-25"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": PV, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
MiB = 1024 * 1024


def served(manager: SessionManager, test: Any, token: str | None = None) -> None:
    async def main() -> None:
        config = ServerConfig(envs=[ENV], token=token)
        routes, lifespan = mcp_routes(manager, config)
        app = build_app(manager, config, extra_routes=routes)
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1:8765") as http:
            async with lifespan(app):
                await test(http)
        manager.worker.stop()
    anyio.run(main)


async def initialize(http: Any, headers: dict[str, str] | None = None) -> Any:
    return await http.post(f"/mcp/{ENV}", headers={**ACCEPT, **(headers or {})}, json=INIT)


def test_one_client_cannot_open_mcp_sessions_beyond_its_cap():
    m = SessionManager([ENV], max_mcp_sessions_per_client=2)

    async def test(http: Any) -> None:
        greedy = {protocol.CLIENT_HEADER: "greedy"}
        opened = []
        for _ in range(2):
            r = await initialize(http, greedy)
            assert r.status_code == 200, r.text
            opened.append(r.headers["mcp-session-id"])
        reserved = m.admission.reserved
        for _ in range(3):  # refused, typed, and nothing counted or made
            r = await initialize(http, greedy)
            assert r.status_code == 429 and "mcp-session-id" not in r.headers
            error = json.loads(r.text)["error"]
            assert error["code"] == protocol.ERR_CAPACITY and error["data"] == {"scope": "client", "limit": 2}
            assert "MCP session" in error["message"]
        assert m.mcp_owned == {"greedy": 2} and m.admission.reserved == reserved
        # other clients are unaffected
        for other in ({protocol.CLIENT_HEADER: "other"}, {}):
            assert (await initialize(http, other)).status_code == 200
        assert m.mcp_owned == {"greedy": 2, "other": 1, protocol.ANONYMOUS_CLIENT: 1}
        assert m.stats()["mcp_sessions"] == 4
        # an ended session gives its room back
        r = await http.delete(f"/mcp/{ENV}", headers={**ACCEPT, **greedy, "MCP-Protocol-Version": PV,
                                                        "Mcp-Session-Id": opened[0]})
        assert r.status_code < 300 and m.mcp_owned["greedy"] == 1
        assert (await initialize(http, greedy)).status_code == 200
        # a request that opens nothing (the SDK refuses it) keeps no room either
        r = await http.post(f"/mcp/{ENV}", headers={**ACCEPT, **{protocol.CLIENT_HEADER: "late"}},
                            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert r.status_code >= 400 and "late" not in m.mcp_owned
    served(m, test)


def test_made_up_names_share_the_anonymous_mcp_quota_on_a_server_with_a_token():
    token = "t0k"
    m = SessionManager([ENV], max_mcp_sessions_per_client=1)

    async def test(http: Any) -> None:
        bearer = protocol.bearer_authorization(token)
        assert (await initialize(http, {**bearer, protocol.CLIENT_HEADER: "made-up-1"})).status_code == 200
        r = await initialize(http, {**bearer, protocol.CLIENT_HEADER: "made-up-2"})
        assert r.status_code == 429 and json.loads(r.text)["error"]["data"]["scope"] == "client"
        proven = {**bearer, protocol.CLIENT_HEADER: "honest",
                  protocol.CLIENT_KEY_HEADER: protocol.client_key(token, "honest")}
        assert (await initialize(http, proven)).status_code == 200
        assert m.mcp_owned == {protocol.ANONYMOUS_CLIENT: 1, "honest": 1}
    served(m, test, token=token)


def test_mcp_sessions_are_admitted_against_the_memory_budget():
    rss = 100 * MiB
    adm = Admission(MemoryBudget(rss + 3 * MCP_SESSION_BYTES, "test budget", 0), rss=lambda: rss, trim=lambda: None)
    m = SessionManager([ENV], memory_budget=adm)

    async def test(http: Any) -> None:
        for _ in range(3):
            assert (await initialize(http)).status_code == 200
        assert adm.reserved == 3 * MCP_SESSION_BYTES
        r = await initialize(http, {protocol.CLIENT_HEADER: "someone"})
        assert r.status_code == 503
        error = json.loads(r.text)["error"]
        assert error["code"] == protocol.ERR_MEMORY and error["data"]["scope"] == "memory"
        assert "someone" not in m.mcp_owned
    served(m, test)


def test_admit_mcp_session_caps_the_server_and_releases():
    m = SessionManager([ENV], max_sessions=3, max_mcp_sessions_per_client=2)
    m.admit_mcp_session("a")
    m.admit_mcp_session("a")
    with pytest.raises(CapacityError) as ei:
        m.admit_mcp_session("a")
    assert ei.value.scope == "client" and ei.value.limit == 2 and not isinstance(ei.value, MemoryBudgetError)
    m.admit_mcp_session("b")
    with pytest.raises(CapacityError) as ei:
        m.admit_mcp_session("c")
    assert ei.value.scope == "server" and ei.value.limit == 3
    assert m.admission.reserved == 3 * MCP_SESSION_BYTES
    for client in ("a", "a", "b", "b"):  # one too many: ignored
        m.release_mcp_session(client)
    assert m.mcp_owned == {} and m.admission.reserved == 0
    assert SessionManager([ENV], max_sessions=10).max_mcp_sessions_per_client == 5
