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


async def _open(http: Any, headers: dict[str, str] | None = None) -> dict[str, str]:
    """An initialised handshake-era MCP session's request headers."""
    r = await initialize(http, headers)
    assert r.status_code == 200, r.text
    h = {**ACCEPT, **(headers or {}), "Mcp-Session-Id": r.headers["mcp-session-id"], "MCP-Protocol-Version": PV}
    await http.post(f"/mcp/{ENV}", headers=h, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    return h


async def _call(http: Any, h: dict[str, str], id_: int, city: str) -> Any:
    r = await http.post(f"/mcp/{ENV}", headers=h, json={"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {
        "name": "search_hotels", "arguments": {"city": city}}})
    assert r.status_code == 200, r.text
    return json.loads(r.text)


def test_mcp_tool_calls_are_admitted_like_the_fast_protocols():
    """An MCP ``tools/call`` counts against its session's action-log cap and the memory budget, as a fast
    protocol ``call`` does: before, each call's arguments (and a tool error echoing them) were kept in the
    log uncounted, so one MCP session grew the server's memory without bound (3 MiB a call, no refusal)."""
    m = SessionManager([ENV], max_log_bytes=1 * MiB)

    async def test(http: Any) -> None:
        h = await _open(http, {protocol.CLIENT_HEADER: "greedy"})
        big = "x" * (300 * 1024)
        answers = [await _call(http, h, i, big) for i in range(1, 5)]  # the first via the SDK, the rest fast
        assert all("result" in a for a in answers[:1])
        refused = [a for a in answers if "error" in a]
        assert refused, "a session's log grew past max_log_bytes through MCP"
        error = refused[0]["error"]
        assert error["code"] == protocol.ERR_MEMORY and error["data"]["scope"] == "memory"
        assert "open a new one" in error["message"]  # MCP has no reset: what to do instead
        ms = next(iter(m.sessions.values()))
        logged = len(ms.session.action_log)
        assert logged == len(answers) - len(refused)  # a refused call is not logged
        # admitted while under the cap; the last admitted call's result may take it a call beyond
        assert 0 < ms.log_held < 2 * m.max_log_bytes and m.admission.reserved >= ms.log_held
        # small calls of a bystander's session still run
        other = await _open(http, {protocol.CLIENT_HEADER: "bystander"})
        assert "result" in await _call(http, other, 1, "Lisbon")
    served(m, test)


def test_mcp_tool_calls_are_refused_beyond_the_memory_budget():
    rss = 100 * MiB
    adm = Admission(MemoryBudget(rss + 4 * MiB, "test budget", 0), rss=lambda: rss, trim=lambda: None)
    m = SessionManager([ENV], memory_budget=adm)

    async def test(http: Any) -> None:
        h = await _open(http)
        answers = [await _call(http, h, i, "y" * (400 * 1024)) for i in range(1, 12)]
        refused = [a for a in answers if "error" in a]
        assert refused and all(a["error"]["code"] == protocol.ERR_MEMORY for a in refused)
        assert adm.reserved <= adm.budget.allowed
    served(m, test)


def test_an_mcp_session_serves_only_the_client_that_opened_it():
    """A client that learns another's ``Mcp-Session-Id`` cannot call tools on its episode (either path),
    open its stream or end it: -32005, HTTP 403, and the owner's session and log are untouched."""
    token = "t0k"
    m = SessionManager([ENV])

    def cred(name: str) -> dict[str, str]:
        return {protocol.CLIENT_HEADER: name, **protocol.bearer_authorization(protocol.client_key(token, name))}

    async def test(http: Any) -> None:
        alice = await _open(http, cred("alice"))
        assert "result" in await _call(http, alice, 1, "Lisbon")  # alice's own call, the SDK path
        assert "result" in await _call(http, alice, 2, "Lisbon")  # and the fast path
        ms = next(iter(m.sessions.values()))
        assert ms.owner == "alice" and len(ms.session.action_log) == 2
        session = {k: v for k, v in alice.items() if k not in (protocol.CLIENT_HEADER, "Authorization")}
        bearer = protocol.bearer_authorization(token)
        # another client with its own credential; the operator's token naming alice without her key (anonymous)
        for thief in (cred("mallory"), {**bearer, protocol.CLIENT_HEADER: "alice"}, bearer):
            stolen = {**session, **thief}
            for _ in range(2):
                r = await http.post(f"/mcp/{ENV}", headers=stolen, json={"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                                                                         "params": {"name": "search_hotels",
                                                                                    "arguments": {"city": "Paris"}}})
                assert r.status_code == 403 and json.loads(r.text)["error"]["code"] == protocol.ERR_OWNERSHIP
            assert (await http.delete(f"/mcp/{ENV}", headers=stolen)).status_code == 403
        assert len(ms.session.action_log) == 2 and ms.session_id in m.sessions
        assert "result" in await _call(http, alice, 3, "Lisbon")  # still alice's
    served(m, test, token=token)


def test_a_large_mcp_request_is_refused_before_it_is_parsed_while_others_hold_the_room():
    """The MCP endpoint shares the server's frame gate (``FrameGate``): concurrent 3.9 MB ``tools/call`` bodies
    of nested empty lists were each parsed at once (690 MiB resident on a 512 MiB budget, six of them)."""
    from gym_envfactory.server.app import FRAME_FACTOR, frame_gate

    adm = Admission(MemoryBudget(400 * MiB, "test budget", 0), rss=lambda: 50 * MiB, trim=lambda: None)
    m = SessionManager([ENV], memory_budget=adm)  # room for 100 MiB of large frames: bodies of ~2 MiB

    async def test(http: Any) -> None:
        h = await _open(http)
        gate = frame_gate(m)
        gate.held = gate.cap()  # another large frame is running
        big = "[" + ",".join(["[]"] * (gate.cap() // FRAME_FACTOR // 3 + 10)) + "]"
        body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "search_hotels", "arguments": {"city": "Lisbon", "x": json.loads(big)}}})
        r = await http.post(f"/mcp/{ENV}", headers=h, content=body)
        assert r.status_code == 503 and json.loads(r.text)["error"]["code"] == protocol.ERR_MEMORY
        assert m.sessions == {} or all(not ms.session.action_log for ms in m.sessions.values())  # nothing ran
        assert "result" in await _call(http, h, 8, "Lisbon")  # small requests are served meanwhile
        gate.held = 0
        r = await http.post(f"/mcp/{ENV}", headers=h, content=body)
        assert r.status_code == 200 and gate.held == 0
    served(m, test)
