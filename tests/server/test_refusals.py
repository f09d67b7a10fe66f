"""Issue 29, part 3: what the server says when it refuses.  ``/mcp/<a name it does not serve>`` is a 404
whose JSON-RPC error lists the endpoints served; a request without the token on ``/v1/rpc`` or ``/mcp``
gets HTTP 401 with a JSON-RPC error object (``-32004``, ``id`` null) naming the ``Authorization`` header,
which the MCP SDK shows (it showed only "Server returned an error response"); the README's table of
codes says so."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("mcp")
pytest.importorskip("starlette")

import anyio  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from gym_envfactory import protocol  # noqa: E402
from gym_envfactory.server import SessionManager  # noqa: E402
from gym_envfactory.server.app import ServerConfig, build_app  # noqa: E402
from gym_envfactory.server.mcp_server import mcp_routes  # noqa: E402
from tests.server.test_mcp_server import TOKEN, _http_client, _start_server, _stop  # noqa: E402

ENVS = ["HotelBooking", "TeamCalendar"]
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def client():
    manager = SessionManager(ENVS)
    config = ServerConfig(envs=ENVS, token=TOKEN)
    routes, lifespan = mcp_routes(manager, config)
    with TestClient(build_app(manager, config, extra_routes=routes, lifespan_hooks=[lifespan]),
                    base_url="http://127.0.0.1") as c:
        yield c


@pytest.mark.parametrize("path", ["/mcp/Nope", "/mcp/hotelbooking", "/mcp"])
def test_an_mcp_path_of_no_served_environment_lists_the_served_ones(client, path):
    r = client.post(path, headers={**MCP_HEADERS, **protocol.bearer_authorization(TOKEN)}, json=INIT)
    assert r.status_code == 404
    body = r.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None and body["error"]["code"] == protocol.ERR_BAD_REQUEST
    assert "served: /mcp/HotelBooking, /mcp/TeamCalendar" in body["error"]["message"]
    assert body["error"]["data"] == {"envs": ENVS}
    if path != "/mcp":
        assert repr(path.rsplit("/", 1)[1]) in body["error"]["message"]


@pytest.mark.parametrize("path", ["/mcp/HotelBooking", "/mcp/Nope", protocol.RPC_PATH])
def test_a_request_without_the_token_gets_a_jsonrpc_401_naming_the_header(client, path):
    r = client.post(path, headers=MCP_HEADERS, json=INIT)  # no Authorization: the list of names stays private too
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert r.json() == {"jsonrpc": "2.0", "id": None, "error": {
        "code": protocol.ERR_UNAUTHORIZED, "message": "unauthorized: send Authorization: Bearer <token>"}}


def test_the_readme_code_of_unauthorized_is_what_rpc_answers(client):
    r = client.post(protocol.RPC_PATH, json={"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}})
    code = r.json()["error"]["code"]
    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8").split())
    m = re.search(r"`(-320\d\d)` unauthorized \((\d{3})", readme)
    assert m is not None, "README lists the unauthorized code with its HTTP status"
    assert (int(m.group(1)), int(m.group(2))) == (code, r.status_code) == (-32004, 401)


@pytest.fixture(scope="module")
def token_server():
    proc, base = _start_server({"ENVFACTORY_TOKEN": TOKEN})
    try:
        yield base
    finally:
        _stop(proc)


def _sdk_error(url: str, headers: dict[str, str]) -> str:
    seen: list[str] = []

    async def main() -> None:
        client, hc = _http_client(url, headers)
        async with hc:
            try:
                async with client:
                    pass
            except Exception as exc:  # noqa: BLE001 - the SDK's MCPError (or a group wrapping it)
                seen.append(_messages(exc))

    anyio.run(main)
    assert seen, "the SDK connected"
    return seen[0]


def _messages(exc: BaseException) -> str:
    inner = getattr(exc, "exceptions", None)
    return " | ".join(_messages(e) for e in inner) if inner else f"{type(exc).__name__}: {exc}"


def test_the_mcp_sdk_shows_why_it_was_refused(token_server):
    said = _sdk_error(f"{token_server}/mcp/HotelBooking", {})
    assert "Authorization: Bearer" in said and "Server returned an error response" not in said
    said = _sdk_error(f"{token_server}/mcp/Nope", {"Authorization": f"Bearer {TOKEN}"})
    assert "no environment 'Nope'" in said and "/mcp/HotelBooking" in said
