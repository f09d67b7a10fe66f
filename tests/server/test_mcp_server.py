"""The MCP endpoint, driven by the official ``mcp`` SDK client: streamable HTTP against a real server
process (``envfactory serve --announce``) and stdio (``envfactory serve <Env> --transport stdio``).

Checks: only the environment's agent tools are listed (never the control plane), calls succeed, typed
errors come back as ``isError`` results, each MCP session owns an isolated environment session that is
closed with it, ``X-Envfactory-Session`` binds a client to a control-plane session, and the bearer token
guards ``/mcp``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import types
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("mcp")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import anyio  # noqa: E402
import httpx2  # noqa: E402
import pytest
from mcp.client import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS  # noqa: E402

from gym_envfactory.environment.catalog import get_environment
from gym_envfactory.errors import CapacityError
from gym_envfactory.server.manager import SessionManager
from gym_envfactory.server.mcp_server import SESSION_HEADER

ENV = "HotelBooking"
CONTROL_PLANE = {"create", "reset", "snapshot", "restore", "fork", "state", "close", "score", "info", "action_log",
                 "stats", "catalog", "ping", "call", "record_invalid"}
NEW_CARD = {"guest_id": "G-001", "brand": "mastercard", "last4": "7777", "expiry": "2030-01"}
TOKEN = "test-token-5f2c"


# ---------------------------------------------------------------------------------------------- helpers
def _start_server(extra_env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    env = {k: v for k, v in os.environ.items() if k != "ENVFACTORY_TOKEN"}
    env.update(extra_env or {})
    proc = subprocess.Popen([sys.executable, "-m", "gym_envfactory.cli", "serve", ENV, "--port", "0", "--announce"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(120)  # a liveness bound: a loaded 2-core machine starts a server in tens of seconds
    if not line or not line[0].strip():
        proc.kill()
        raise RuntimeError("the server did not announce its address")
    return proc, json.loads(line[0])["listening"]


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:  # pragma: no cover
        proc.kill()


def _rpc(base: str, method: str, token: str | None = None, **params: Any) -> Any:
    req = urllib.request.Request(f"{base}/v1/rpc", method="POST", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode())
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=10) as resp:
        body = json.loads(resp.read())
    assert "error" not in body, body
    return body["result"]


def _http_client(url: str, headers: dict[str, str], **kw: Any) -> tuple[Client, httpx2.AsyncClient]:
    hc = httpx2.AsyncClient(headers=headers, timeout=30)
    return Client(streamable_http_client(url, http_client=hc), **kw), hc


def _text(result: Any) -> Any:
    assert len(result.content) == 1 and result.content[0].type == "text"
    return json.loads(result.content[0].text)


def _cards(profile: dict[str, Any]) -> set[str]:
    methods = profile["payment_methods"]
    items = methods.values() if isinstance(methods, dict) else methods
    return {m["last4"] for m in items}


def _wait_sessions(base: str, want: int, timeout: float = 5.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        n = _rpc(base, "stats")["sessions"]
        if n == want or time.monotonic() > deadline:
            return n
        time.sleep(0.05)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    proc, base = _start_server()
    try:
        yield base
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def token_server() -> Iterator[str]:
    proc, base = _start_server({"ENVFACTORY_TOKEN": TOKEN})
    try:
        yield base
    finally:
        _stop(proc)


# ---------------------------------------------------------------------------------------------- (a) HTTP
def test_http_lists_only_agent_tools_and_calls(server: str) -> None:
    spec = get_environment(ENV)

    async def main() -> None:
        for path in (f"/mcp/{ENV}", "/mcp"):  # /mcp too: this server serves exactly one environment
            async with Client(server + path) as client:
                # unbound clients get the handshake era: a real MCP session to own the episode
                assert client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
                listed = (await client.list_tools()).tools
                names = [t.name for t in listed]
                assert len(names) == 15 and set(names) == set(spec.tools)
                assert not CONTROL_PLANE & set(names)
                for t in listed:
                    want = spec.tools[t.name].mcp_schema()
                    assert t.description == want["description"]
                    assert t.input_schema == want["inputSchema"]
                    assert t.annotations is not None
                    assert t.annotations.read_only_hint == want["annotations"]["readOnlyHint"]
                    assert t.output_schema is not None and t.output_schema["type"] == "object"

                ok = await client.call_tool("list_hotel_destinations", {})
                assert not ok.is_error
                cities = _text(ok)
                assert {c["name"] for c in cities} >= {"Kyoto", "Lisbon", "Montreal", "Vienna"}
                assert ok.structured_content == {"result": cities}  # array output wrapped on 2025-era wires

                profile = await client.call_tool("get_guest_profile", {"guest_id": "G-001"})
                assert not profile.is_error and _text(profile)["name"] == "Ada Lovelace"
                assert profile.structured_content == _text(profile)

                bad = await client.call_tool("get_guest_profile", {"guest_id": 5})
                assert bad.is_error
                err = _text(bad)["error"]
                assert err["type"] == "invalid_arguments" and err["details"][0]["field"] == "guest_id"

                unknown = await client.call_tool("create", {"env": ENV})  # the control plane is not a tool
                assert unknown.is_error and _text(unknown)["error"]["type"] == "unknown_tool"

                missing = await client.call_tool("get_guest_profile", {"guest_id": "G-999"})
                assert missing.is_error and _text(missing)["error"]["type"] == "tool_error"

    anyio.run(main)


# ---------------------------------------------------------------------------------------------- (b) isolation
def test_http_two_clients_are_isolated_and_sessions_close_with_them(server: str) -> None:
    before = _rpc(server, "stats")["sessions"]

    async def main() -> None:
        async with Client(f"{server}/mcp/{ENV}") as a, Client(f"{server}/mcp/{ENV}") as b:
            added = await a.call_tool("add_guest_payment_method", NEW_CARD)
            assert not added.is_error, added
            seen_b = _text(await b.call_tool("get_guest_profile", {"guest_id": "G-001"}))
            seen_a = _text(await a.call_tool("get_guest_profile", {"guest_id": "G-001"}))
            assert "7777" in _cards(seen_a)
            assert "7777" not in _cards(seen_b)
            # b's own write stays in b
            other = {**NEW_CARD, "last4": "8888"}
            assert not (await b.call_tool("add_guest_payment_method", other)).is_error
            assert "8888" not in _cards(_text(await a.call_tool("get_guest_profile", {"guest_id": "G-001"})))
            assert _rpc(server, "stats")["sessions"] == before + 2

        # a fresh MCP session starts from the default initial state again
        async with Client(f"{server}/mcp/{ENV}") as c:
            fresh = _text(await c.call_tool("get_guest_profile", {"guest_id": "G-001"}))
            assert not {"7777", "8888"} & _cards(fresh)

    anyio.run(main)
    assert _wait_sessions(server, before) == before  # closing an MCP session closes its env session


# ---------------------------------------------------------------------------------------------- (c) binding
@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_http_binds_to_control_plane_session(server: str, mode: str) -> None:
    created = _rpc(server, "create", env=ENV, task_id="hotel-001")
    sid = created["session_id"]
    assert created["envs"] == [ENV]

    async def main() -> None:
        client, hc = _http_client(f"{server}/mcp/{ENV}", {SESSION_HEADER: sid}, mode=mode)
        async with hc, client:
            # a bound client needs no MCP session, so the sessionless 2026-07-28 era is fine too
            assert client.protocol_version == (MODERN_PROTOCOL_VERSIONS[-1] if mode == "auto" else
                                               HANDSHAKE_PROTOCOL_VERSIONS[-1])
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == set(get_environment(ENV).tools)
            res = await client.call_tool("add_guest_payment_method", NEW_CARD)
            assert not res.is_error, res

    anyio.run(main)
    state = _rpc(server, "state", session_id=sid)  # the bound session outlives the MCP session
    assert "7777" in _cards(state["guests"]["G-001"])
    log = _rpc(server, "action_log", session_id=sid)
    assert [r["name"] for r in log] == ["add_guest_payment_method"]
    assert _rpc(server, "close", session_id=sid) is True


def test_http_bound_session_is_scored_by_the_control_plane(server: str) -> None:
    """A harness that drives the agent over MCP only gets the gym's reward from `score` (issue 8 part 6):
    the oracle's calls through MCP earn 1.0, a wrong write in another bound session earns less."""
    task = next(t for t in get_environment(ENV).tasks
                if len(t.turns) == 1 and t.n_ground_truth_calls and any(c.name.startswith(("create", "add", "cancel"))
                                                                       for c in t.turns[0].ground_truth))
    good = _rpc(server, "create", env=ENV, task_id=task.task_id)["session_id"]
    bad = _rpc(server, "create", env=ENV, task_id=task.task_id)["session_id"]

    async def main() -> None:
        for sid, calls in ((good, task.turns[0].ground_truth), (bad, [])):
            client, hc = _http_client(f"{server}/mcp/{ENV}", {SESSION_HEADER: sid}, mode="legacy")
            async with hc, client:
                for c in calls:
                    assert not (await client.call_tool(c.name, c.arguments)).is_error
                if sid == bad:
                    assert not (await client.call_tool("add_guest_payment_method", NEW_CARD)).is_error

    anyio.run(main)
    scored = _rpc(server, "score", session_id=good)
    assert scored["reward"] == 1.0 and scored["state_diff"] == []
    wrong = _rpc(server, "score", session_id=bad)
    assert wrong["reward"] < 1.0 and wrong["r_state"] == 0.0 and wrong["state_diff"]
    for sid in (good, bad):
        _rpc(server, "close", session_id=sid)


def test_http_unknown_bound_session_is_a_clear_error(server: str) -> None:
    async def main() -> None:
        client, hc = _http_client(f"{server}/mcp/{ENV}", {SESSION_HEADER: "no-such-session"}, mode="legacy")
        async with hc, client:
            with pytest.raises(MCPError, match="no live session"):
                await client.call_tool("list_hotel_destinations", {})

    anyio.run(main)


def test_http_sessionless_era_without_binding_is_refused_clearly(server: str) -> None:
    async def main() -> None:
        async with Client(f"{server}/mcp/{ENV}", mode=MODERN_PROTOCOL_VERSIONS[-1]) as client:
            assert len((await client.list_tools()).tools) == 15
            with pytest.raises(MCPError, match=SESSION_HEADER):
                await client.call_tool("list_hotel_destinations", {})

    anyio.run(main)


# ---------------------------------------------------------------------------------------------- (d) stdio
def test_stdio_lists_and_calls() -> None:
    env = {k: v for k, v in os.environ.items() if k != "ENVFACTORY_TOKEN"}
    params = StdioServerParameters(command=sys.executable, env=env,
                                   args=["-m", "gym_envfactory.cli", "serve", ENV, "--transport", "stdio"])

    async def main() -> None:
        async with Client(params) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == set(get_environment(ENV).tools)
            assert not (await client.call_tool("add_guest_payment_method", NEW_CARD)).is_error
            profile = _text(await client.call_tool("get_guest_profile", {"guest_id": "G-001"}))
            assert "7777" in _cards(profile)  # one session for the stdio connection
            bad = await client.call_tool("add_guest_payment_method", {**NEW_CARD, "last4": "12"})
            assert bad.is_error and _text(bad)["error"]["type"] == "invalid_arguments"

    anyio.run(main)


# ---------------------------------------------------------------------------------------------- (e) token
def test_http_token_guards_mcp(token_server: str) -> None:
    url = f"{token_server}/mcp/{ENV}"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    for auth in (None, "Bearer wrong"):
        req = urllib.request.Request(url, method="POST", data=json.dumps(init).encode(),
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json, text/event-stream"})
        if auth:
            req.add_header("Authorization", auth)
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=10)
        assert info.value.code == 401

    async def main() -> None:
        statuses: list[int] = []

        async def record(response: httpx2.Response) -> None:
            statuses.append(response.status_code)

        hc = httpx2.AsyncClient(timeout=30, event_hooks={"response": [record]})
        async with hc:
            with pytest.raises(Exception):  # noqa: B017 - the SDK reports the refusal as a generic MCPError
                async with Client(streamable_http_client(url, http_client=hc)):
                    pass
        assert statuses and set(statuses) == {401}

        client, hc = _http_client(url, {"Authorization": f"Bearer {TOKEN}"})
        async with hc, client:
            assert len((await client.list_tools()).tools) == 15
            assert not (await client.call_tool("list_hotel_destinations", {})).is_error

    anyio.run(main)


class _Headers(dict):
    def get(self, k, d=None):
        return super().get(k.lower(), d)


def test_mcp_connection_sessions_count_against_their_clients_quota():
    from mcp.shared.exceptions import MCPError

    from gym_envfactory.server.mcp_server import EnvMCPServer

    m = SessionManager(["HotelBooking"], max_sessions=10, max_sessions_per_client=2)
    srv = EnvMCPServer(m, "HotelBooking")
    refused = 0
    for _ in range(5):  # legacy-handshake MCP connections, all from one client
        conn = types.SimpleNamespace(state={}, exit_stack=contextlib.ExitStack())
        ctx = types.SimpleNamespace(protocol_version="2025-06-18", session=types.SimpleNamespace(_connection=conn),
                                    request=types.SimpleNamespace(headers=_Headers({"x-envfactory-client": "mallory"})))
        try:
            srv._session(ctx, create=True)
        except MCPError:
            refused += 1
    assert refused == 3 and {ms.owner for ms in m.sessions.values()} == {"mallory"}
    assert m.create("HotelBooking", client="alice").owner == "alice"  # others are not locked out
    with pytest.raises(CapacityError):
        m.create("HotelBooking", client="mallory")

