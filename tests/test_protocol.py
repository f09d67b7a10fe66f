"""The wire protocol's one home (``gym_envfactory/protocol.py``) and the server's middleware
(``server/middleware.py``): the server and the clients agree on every error code, header and the
announcement; one bearer check guards the control plane and the MCP endpoint alike; each middleware does
its one check (docs/architecture.md, "Backends").
"""

from __future__ import annotations

import json
import secrets
import tokenize
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")

from starlette.applications import Starlette  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import PlainTextResponse, Response  # noqa: E402
from starlette.routing import Route, WebSocketRoute  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402
from starlette.websockets import WebSocket, WebSocketDisconnect  # noqa: E402

from gym_envfactory import protocol  # noqa: E402
from gym_envfactory.backends.remote import process_client_id, remote_error  # noqa: E402
from gym_envfactory.errors import (  # noqa: E402
    BackendError,
    BadRequestError,
    CapacityError,
    MemoryBudgetError,
    RemoteError,
)
from gym_envfactory.server import fastproto  # noqa: E402
from gym_envfactory.server.app import ServerConfig, build_app  # noqa: E402
from gym_envfactory.server.fastproto import Caller, dispatch_frame  # noqa: E402
from gym_envfactory.server.manager import SessionManager, client_from_header  # noqa: E402
from gym_envfactory.server.middleware import BearerAuthMiddleware, OriginHostGuardMiddleware  # noqa: E402

ENV = "HotelBooking"
ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------ error codes
def test_every_error_code_has_one_value_and_the_server_uses_the_protocols():
    codes = dict(protocol.ERROR_CODES)
    assert len(set(codes.values())) == len(codes), "two names share a code"
    # JSON-RPC 2.0 §5.1
    assert (protocol.ERR_PARSE, protocol.ERR_INVALID_REQUEST, protocol.ERR_METHOD, protocol.ERR_PARAMS,
            protocol.ERR_INTERNAL) == (-32700, -32600, -32601, -32602, -32603)
    # application codes in the server-defined range of §5.1
    for name in ("unknown_session", "capacity", "bad_request", "unauthorized", "ownership", "memory"):
        assert -32099 <= codes[name] <= -32000, name
    for name in dir(protocol):
        if name.startswith("ERR_"):
            assert getattr(fastproto, name) == getattr(protocol, name), name
            assert getattr(protocol, name) in codes.values(), f"{name} is missing from ERROR_CODES"


def _error_code_literals(path: Path) -> list[str]:
    """``-32xxx`` numbers in ``path``'s code (not in its strings or comments)."""
    found, prev = [], None
    with path.open("rb") as f:
        for tok in tokenize.tokenize(f.readline):
            if (tok.type == tokenize.NUMBER and prev is not None and prev.string == "-"
                    and tok.string.isdigit() and 32000 <= int(tok.string) <= 32768):
                found.append(f"-{tok.string} (line {tok.start[0]})")
            prev = tok
    return found


def test_no_module_but_the_protocol_spells_an_error_code():
    """The literals lived on both sides before; a code written out anywhere else can drift."""
    runtime = ROOT / "gym_envfactory"
    paths = [p for folder in ("server", "backends", "containers") for p in (runtime / folder).glob("*.py")]
    assert len(paths) > 10
    for path in paths:
        found = _error_code_literals(path)
        assert not found, f"{path.name} spells error code(s) {found}: use gym_envfactory.protocol"
    assert len(_error_code_literals(runtime / "protocol.py")) >= 11  # the check can see a code


def _frame(manager: SessionManager, method: str, client: str = "a", **params: Any) -> dict[str, Any]:
    out = dispatch_frame(manager, json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
                         caller=Caller(client))
    assert out is not None
    return json.loads(out)


def test_client_reads_each_server_refusal_as_the_same_typed_error():
    manager = SessionManager([ENV], max_sessions=1, max_sessions_per_client=1)
    try:
        sid = _frame(manager, "create", env=ENV)["result"]["session_id"]
        cap = _frame(manager, "create", env=ENV)["error"]
        assert cap["code"] == protocol.ERR_CAPACITY
        exc = remote_error(cap)
        assert isinstance(exc, CapacityError) and not isinstance(exc, MemoryBudgetError) and exc.limit == 1

        unknown = _frame(manager, "state", session_id="0" * 32)["error"]
        exc = remote_error(unknown)
        assert isinstance(exc, RemoteError) and exc.code == protocol.ERR_UNKNOWN_SESSION

        other = _frame(manager, "state", client="b", session_id=sid)["error"]
        exc = remote_error(other)
        assert isinstance(exc, RemoteError) and exc.code == protocol.ERR_OWNERSHIP

        bad = _frame(manager, "nope")["error"]
        assert remote_error(bad).code == protocol.ERR_METHOD
    finally:
        manager.close_all()
        manager.worker.stop()


def test_client_reads_a_memory_refusal_as_memory_budget_error():
    err = {"code": protocol.ERR_MEMORY, "message": "over", "data": {"scope": "memory", "limit": 100, "estimate": 70,
                                                                      "used": 50, "headroom": 15}}
    exc = remote_error(err)
    assert isinstance(exc, MemoryBudgetError) and exc.estimate == 70 and exc.used == 50 and exc.headroom == 15


def test_rpc_http_status_follows_the_protocol_table():
    client = TestClient(build_app(SessionManager([ENV]), ServerConfig()), base_url="http://127.0.0.1")
    r = client.post(protocol.RPC_PATH, json={"jsonrpc": "2.0", "id": 1, "method": "state",
                                             "params": {"session_id": "0" * 32}})
    assert r.json()["error"]["code"] == protocol.ERR_UNKNOWN_SESSION
    assert r.status_code == protocol.HTTP_STATUS[protocol.ERR_UNKNOWN_SESSION] == 404


# ------------------------------------------------------------------------------------ client identity
@pytest.mark.parametrize("value,ok", [("a", True), ("x" * 128, True), ("host:123", True), ("!~", True),
                                      ("x" * 129, False), ("trainer 1", False), ("é", False), ("a\tb", False)])
def test_server_and_client_apply_one_client_id_rule(monkeypatch, value, ok):
    assert protocol.is_valid_client_id(value) is ok
    monkeypatch.setenv(protocol.CLIENT_ENV_VAR, value)
    if ok:
        assert client_from_header(value) == value == process_client_id()
    else:
        with pytest.raises(BadRequestError, match=protocol.CLIENT_HEADER):
            client_from_header(value)
        with pytest.raises(BackendError, match=protocol.CLIENT_ENV_VAR):
            process_client_id()


def test_client_id_defaults():
    assert client_from_header(None) == protocol.ANONYMOUS_CLIENT
    assert client_from_header("  me  ") == "me"


# ------------------------------------------------------------------------------------ announcement
def test_announcement_round_trip_and_foreign_lines():
    nonce = secrets.token_hex(8)
    line = protocol.announcement("http://127.0.0.1:5", nonce)
    assert "\n" not in line and protocol.parse_announcement(line, nonce) == "http://127.0.0.1:5"
    assert json.loads(protocol.announcement("http://h:1", None)) == {"listening": "http://h:1"}
    for foreign in (protocol.announcement("http://evil:1", "other"), protocol.announcement("http://evil:1", None),
                    "not json", "{broken", '["listening"]', json.dumps({"listening": 5, "nonce": nonce}),
                    json.dumps({"nonce": nonce})):
        assert protocol.parse_announcement(foreign, nonce) is None, foreign


def test_clients_do_not_import_the_server_package():
    import subprocess
    import sys

    code = ("import sys, gym_envfactory, gym_envfactory.backends.remote, gym_envfactory.backends.subprocess, "
            "gym_envfactory.backends.pool; print([m for m in sys.modules if m.startswith('gym_envfactory.server')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


# ------------------------------------------------------------------------------------ the bearer check
@pytest.mark.parametrize("header,ok", [
    ("Bearer s3cret", True), ("bearer s3cret", True), ("BEARER s3cret", True), ("Bearer  s3cret ", True),
    ("Bearer wrong", False), ("Bearer s3cret2", False), ("Bearer ", False), ("Basic s3cret", False),
    ("s3cret", False), ("", False), (None, False)])
def test_bearer_token_matches(header, ok):
    assert protocol.bearer_token_matches(header, "s3cret") is ok
    assert protocol.bearer_token_matches(header, None) is True  # no token: everything passes
    assert protocol.bearer_token_matches(header, "") is True


def test_bearer_check_compares_in_constant_time(monkeypatch):
    seen = []

    def spy(a: bytes, b: bytes) -> bool:
        seen.append((a, b))
        return a == b
    monkeypatch.setattr(protocol.secrets, "compare_digest", spy)
    assert protocol.bearer_token_matches("Bearer x", "y") is False and seen == [(b"x", b"y")]


def test_control_plane_and_mcp_accept_the_same_authorization():
    pytest.importorskip("mcp")
    from gym_envfactory.server.mcp_server import mcp_routes

    manager = SessionManager([ENV])
    config = ServerConfig(envs=[ENV], token="s3cret")
    routes, lifespan = mcp_routes(manager, config)
    app = build_app(manager, config, extra_routes=routes, lifespan_hooks=[lifespan])
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    mcp_headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with TestClient(app, base_url="http://127.0.0.1") as client:
        for header in ("Bearer s3cret", "bearer s3cret", "BEARER  s3cret ", "Bearer nope", "Basic s3cret", None):
            auth = {"Authorization": header} if header else {}
            want = protocol.bearer_token_matches(header, "s3cret")
            ready = client.get(protocol.READY_PATH, headers=auth)
            mcp = client.post(protocol.mcp_path(ENV), headers={**mcp_headers, **auth}, json=init)
            assert (ready.status_code != 401) is want and (mcp.status_code != 401) is want, header
            if not want:
                assert mcp.headers["www-authenticate"] == ready.headers["www-authenticate"] == "Bearer"
                assert mcp.json() == {"jsonrpc": "2.0", "id": None, "error": {
                    "code": protocol.ERR_UNAUTHORIZED, "message": "unauthorized: send Authorization: Bearer <token>"}}
                assert ready.json() == {"error": "unauthorized"}
        assert client.get(protocol.HEALTH_PATH).status_code == 200  # no token needed


# ------------------------------------------------------------------------------------ middleware
async def _hello(request: Request) -> Response:
    return PlainTextResponse("hello")


async def _echo(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text("hello")
    await websocket.close()


def _guarded(middleware: list[Middleware]) -> TestClient:
    app = Starlette(routes=[Route("/x", _hello, middleware=middleware), WebSocketRoute("/ws", _echo, middleware=middleware),
                            Route("/open", _hello)])
    return TestClient(app, base_url="http://127.0.0.1:8765")


def test_bearer_auth_middleware():
    client = _guarded([Middleware(BearerAuthMiddleware, token="t0k", message="say the word")])
    r = client.get("/x")
    assert r.status_code == 401 and r.json() == {"error": "say the word"} and r.headers["www-authenticate"] == "Bearer"
    assert client.get("/x", headers={"Authorization": "bearer t0k"}).text == "hello"
    assert client.get("/open").text == "hello"  # only the routes it is put on
    with pytest.raises(WebSocketDisconnect) as refused:
        with client.websocket_connect("/ws"):
            pass
    assert refused.value.code == 4401
    with client.websocket_connect("/ws", headers={"Authorization": "Bearer t0k"}) as ws:
        assert ws.receive_text() == "hello"
    open_client = _guarded([Middleware(BearerAuthMiddleware, token=None)])
    assert open_client.get("/x").text == "hello"


def test_origin_host_guard_middleware_on_loopback():
    client = _guarded([Middleware(OriginHostGuardMiddleware, host="127.0.0.1", allowed_origins=("http://ok",))])
    assert client.get("/x").text == "hello"
    r = client.get("/x", headers={"Origin": "http://evil.com"})
    assert r.status_code == 403 and r.json() == {"error": "origin 'http://evil.com' is not allowed"}
    assert client.get("/x", headers={"Origin": "http://ok"}).text == "hello"
    r = client.get("/x", headers={"Host": "rebound.example:8765"})
    assert r.status_code == 403 and "not this loopback server" in r.json()["error"]
    assert client.get("/open", headers={"Host": "rebound.example"}).text == "hello"
    with pytest.raises(WebSocketDisconnect) as refused:
        with client.websocket_connect("/ws", headers={"Origin": "http://evil.com"}):
            pass
    assert refused.value.code == 4403


def test_origin_host_guard_middleware_beyond_loopback_checks_origin_only():
    client = _guarded([Middleware(OriginHostGuardMiddleware, host="0.0.0.0")])
    assert client.get("/x", headers={"Host": "envs.example.com"}).text == "hello"
    assert client.get("/x", headers={"Origin": "http://evil.com"}).status_code == 403


def test_build_app_guards_every_route_but_health_foreign_first():
    client = TestClient(build_app(SessionManager([ENV]), ServerConfig(token="t0k")), base_url="http://127.0.0.1")
    assert client.get(protocol.HEALTH_PATH, headers={"Origin": "http://evil.com"}).status_code == 200
    for path in (protocol.READY_PATH, protocol.METRICS_PATH):
        assert client.get(path).status_code == 401
        assert client.get(path, headers={"Origin": "http://evil.com"}).status_code == 403  # the guard runs first
        assert client.get(path, headers=protocol.bearer_authorization("t0k")).status_code == 200
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}}
    r = client.post(protocol.RPC_PATH, json=ping)
    assert r.status_code == 401 and r.json() == {"jsonrpc": "2.0", "id": None, "error": {
        "code": protocol.ERR_UNAUTHORIZED, "message": "unauthorized: send Authorization: Bearer <token>"}}
    assert client.post(protocol.RPC_PATH, json=ping, headers=protocol.bearer_authorization("t0k")).status_code == 200
    assert client.get("/no/such/route").status_code == 404  # not a route: no token asked
    with pytest.raises(WebSocketDisconnect) as refused:
        with client.websocket_connect("ws://127.0.0.1" + protocol.WS_PATH):
            pass
    assert refused.value.code == 4401
    with pytest.raises(WebSocketDisconnect) as bad:
        with client.websocket_connect("ws://127.0.0.1" + protocol.WS_PATH,
                                      headers={**protocol.bearer_authorization("t0k"), protocol.CLIENT_HEADER: "bad client"}):
            pass
    assert bad.value.code == 4400
