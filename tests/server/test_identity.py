"""Client identity rests on a credential, not on a self-declared header (issue 25, finding 3).

On a server with a token, ``X-Envfactory-Client: <id>`` counts only with that client's credential
(``protocol.client_key``: HMAC-SHA256 of the server's token over the id), sent as
``X-Envfactory-Client-Key`` beside the token or as the bearer token itself; a name without it is the
``anonymous`` client.  So a request that names another client can neither use that client's sessions
nor spend its quota, and our own remote client (which sends the credential) keeps one identity across
the connections of its process.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from gym_envfactory import get_environment, protocol
from gym_envfactory.backends.remote import RemoteSession, SessionClient, process_client_id
from gym_envfactory.server import SessionManager
from tests.server.test_load import ENV, WAIT_S, post, probe_env, running  # noqa: F401 - probe_env: fixture

TOKEN = "t0k-server"


def headers(client: str | None = None, *, key: str | None = None, bearer: str = TOKEN) -> dict[str, str]:
    out = protocol.bearer_authorization(bearer)
    if client is not None:
        out[protocol.CLIENT_HEADER] = client
    if key is not None:
        out[protocol.CLIENT_KEY_HEADER] = key
    return out


def proven(client: str) -> dict[str, str]:
    """The headers of ``client`` holding the server's token and proving its name."""
    return headers(client, key=protocol.client_key(TOKEN, client))


def rpc(addr: str, method: str, h: dict[str, str], **params: Any) -> tuple[int, Any]:
    return post(addr, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, h)


def test_client_key_is_the_hmac_of_the_token_over_the_name():
    import hashlib
    import hmac

    key = protocol.client_key(TOKEN, "alice")
    assert key == hmac.new(TOKEN.encode(), b"alice", hashlib.sha256).hexdigest() and len(key) == 64
    assert protocol.client_key_matches(TOKEN, "alice", f" {key} ")
    assert not protocol.client_key_matches(TOKEN, "bob", key)
    assert not protocol.client_key_matches("other-token", "alice", key)
    assert not protocol.client_key_matches(TOKEN, "alice", None) and not protocol.client_key_matches(TOKEN, "alice", "é")
    # a client's credential is a bearer token for that client only
    assert protocol.bearer_token_matches(f"Bearer {key}", TOKEN, "alice")
    assert not protocol.bearer_token_matches(f"Bearer {key}", TOKEN, "bob")
    assert not protocol.bearer_token_matches(f"Bearer {key}", TOKEN)


def test_a_name_counts_only_with_its_credential_on_a_server_with_a_token():
    from gym_envfactory.server.manager import authenticated_client

    key = protocol.client_key(TOKEN, "alice")
    assert authenticated_client("alice", token=TOKEN, key=key) == "alice"
    assert authenticated_client("alice", token=TOKEN, authorization=f"Bearer {key}") == "alice"
    for claim in ({}, {"key": "0" * 64}, {"key": protocol.client_key(TOKEN, "bob")},
                  {"authorization": f"Bearer {TOKEN}"}):
        assert authenticated_client("alice", token=TOKEN, **claim) == protocol.ANONYMOUS_CLIENT, claim
    assert authenticated_client(None, token=TOKEN, key=key) == protocol.ANONYMOUS_CLIENT
    # without a token nothing can be proved: the name is a label, taken as it is (loopback development)
    assert authenticated_client("alice", token=None) == "alice"


def test_claiming_another_clients_name_without_its_credential_gets_nothing():
    """(a) alice's session is refused (-32005) to a token holder naming alice without her credential, or with
    a wrong one, over HTTP and WebSocket: no call, reset, share or close."""
    m = SessionManager([ENV])
    with running(m, token=TOKEN) as addr:
        status, body = rpc(addr, "create", proven("alice"), env=ENV)
        assert status == 200, body
        sid = body["result"]["session_id"]
        assert m.sessions[sid].owner == "alice"
        for h in (headers("alice"), headers("alice", key="0" * 64), headers("alice", key=protocol.client_key(TOKEN, "bob"))):
            for method, params in (("call", {"name": "note", "arguments": {"what": "x"}}), ("reset", {}),
                                   ("share", {}), ("close", {}), ("state", {})):
                status, body = rpc(addr, method, h, session_id=sid, **params)
                assert status == 403 and body["error"]["code"] == protocol.ERR_OWNERSHIP, (method, body)
                assert "anonymous" in body["error"]["message"]  # it says who the request counts as
        with connect(f"ws://{addr}/v1/ws", additional_headers=headers("alice"), open_timeout=WAIT_S) as conn:
            conn.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "close", "params": {"session_id": sid}}))
            assert json.loads(conn.recv(WAIT_S))["error"]["code"] == protocol.ERR_OWNERSHIP
        # another client's own credential admits it as itself only: naming alice with it is refused outright
        mallory = protocol.client_key(TOKEN, "mallory")
        assert rpc(addr, "close", headers("alice", bearer=mallory), session_id=sid)[0] == 401
        with pytest.raises(InvalidStatus, match="403"):
            connect(f"ws://{addr}/v1/ws", additional_headers=headers("alice", bearer=mallory), open_timeout=WAIT_S)
        assert rpc(addr, "close", headers("mallory", bearer=mallory), session_id=sid)[1]["error"]["code"] == -32005
        assert sid in m.sessions and m.sessions[sid].calls == 0 and not m.sessions[sid].shared
        # alice herself, on another request, with either form of her credential
        assert rpc(addr, "call", proven("alice"), session_id=sid, name="note", arguments={"what": "a"})[0] == 200
        alice = protocol.client_key(TOKEN, "alice")
        assert rpc(addr, "close", headers("alice", bearer=alice), session_id=sid)[1]["result"] is True


def test_made_up_names_cannot_spend_an_honest_clients_room():
    """(b) on a server with a token, names without credentials are all the one anonymous client, whose
    quota caps them together: they cannot fill the server and lock out a client that proves its name."""
    m = SessionManager([ENV], max_sessions=4, max_sessions_per_client=2)
    with running(m, token=TOKEN) as addr:
        refused = []
        for name in ("made-up-1", "made-up-2", "made-up-3"):
            for _ in range(2):
                status, body = rpc(addr, "create", headers(name), env=ENV)
                if status != 200:
                    refused.append(body["error"]["data"])
        assert m.owned == {protocol.ANONYMOUS_CLIENT: 2}
        assert refused == [{"scope": "client", "limit": 2}] * 4
        for _ in range(2):
            status, body = rpc(addr, "create", proven("honest"), env=ENV)
            assert status == 200, body
        assert m.owned == {protocol.ANONYMOUS_CLIENT: 2, "honest": 2}


def test_our_remote_client_keeps_its_identity_across_connections(monkeypatch):
    """(c) two connections of one process are one client: with the server's token (the client sends its
    credential beside it) and with only its credential as the token (what an operator hands a trainer)."""
    monkeypatch.setenv(protocol.CLIENT_ENV_VAR, "trainer-7")
    spec = get_environment(ENV)
    m = SessionManager([ENV])
    with running(m, token=TOKEN) as addr:
        for token in (TOKEN, protocol.client_key(TOKEN, "trainer-7")):
            one, two = SessionClient(f"http://{addr}", token=token), SessionClient(f"http://{addr}", token=token)
            try:
                s = RemoteSession.create(one, [spec])
                assert m.sessions[s.session_id].owner == process_client_id() == "trainer-7"
                again = RemoteSession(two, s.session_id, [spec])
                assert again.call("note", {"what": "via two"}).ok
                assert again.fork_many(2)[0].state() == s.state()
                again.reset()
                s.close()
                assert two.request("stats")["client"]["id"] == "trainer-7"
            finally:
                one.close()
                two.close()
        # a credential for another name is refused at the handshake, never taken as the server's token
        with pytest.raises(Exception, match="refused the bearer token"):
            SessionClient(f"http://{addr}", token=protocol.client_key(TOKEN, "trainer-8"))


def test_mcp_requests_count_as_the_client_their_credential_proves():
    from mcp.shared.exceptions import MCPError
    from starlette.datastructures import Headers

    from gym_envfactory.server.mcp_server import EnvMCPServer

    m = SessionManager([ENV])
    sid = m.create(ENV, client="alice").session_id
    srv = EnvMCPServer(m, ENV, token=TOKEN)
    named = Headers({protocol.CLIENT_HEADER: "alice"})
    assert srv.client_of(Headers(proven("alice"))) == "alice"
    assert srv.client_of(named) == protocol.ANONYMOUS_CLIENT
    with pytest.raises(MCPError, match="another client"):
        srv._lookup(sid, bound=True, client=srv.client_of(named))


def test_client_key_command_prints_the_credential(tmp_path):
    from typer.testing import CliRunner

    from gym_envfactory.cli.main import app

    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    res = CliRunner().invoke(app, ["client-key", "trainer-7", "--token-file", str(path)])
    assert res.exit_code == 0 and res.output.strip() == protocol.client_key(TOKEN, "trainer-7")
    assert CliRunner().invoke(app, ["client-key", "bad name", "--token-file", str(path)]).exit_code == 2
