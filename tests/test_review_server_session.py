"""Regressions from the adversarial review of this round's server and session changes: sessions an MCP
connection creates count against its client's quota; a caller editing a result it was handed cannot
break a later rollback."""

from __future__ import annotations

import contextlib
import types

import pytest
from pydantic import BaseModel, Field

from gym_envfactory import Session, ToolError, define_environment, tool
from gym_envfactory.errors import CapacityError
from gym_envfactory.server.manager import SessionManager


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


class _S(BaseModel):
    counter: int = 0
    log: list[str] = Field(default_factory=list)


@tool
def add(state: _S, *, n: int = 1) -> dict:
    """Add n; returns a receipt."""
    state.counter += n
    return {"counter": state.counter, "lines": [f"add {n}"]}


@tool
def refuse_late(state: _S, *, n: int) -> int:
    """Writes, then refuses."""
    state.counter += n
    state.log.append("half done")
    raise ToolError("refused after writing", code="refused")


def test_editing_a_returned_result_does_not_break_a_later_rollback():
    spec = define_environment("AliasShop", _S, [add, refuse_late], register=False)
    s = Session(spec)
    r = s.call("add", {"n": 2})
    r.content["lines"].append("seen by the trainer")  # the caller post-processes its result
    bad = s.call("refuse_late", {"n": 100})
    assert not bad.ok and "not deterministic" not in (bad.error or "")
    assert s.state() == {"counter": 2, "log": []}


@pytest.mark.parametrize("value", ["trainer 1", "x" * 129, "é"])
def test_a_bad_client_id_is_named_not_reported_as_a_token_problem(monkeypatch, value):
    from gym_envfactory.backends.remote import process_client_id
    from gym_envfactory.errors import BackendError

    monkeypatch.setenv("ENVFACTORY_CLIENT", value)
    with pytest.raises(BackendError, match="ENVFACTORY_CLIENT"):
        process_client_id()
    monkeypatch.setenv("ENVFACTORY_CLIENT", "trainer-1")
    assert process_client_id() == "trainer-1"
