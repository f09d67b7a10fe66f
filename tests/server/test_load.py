"""The server under load (issue 10, parts 3 and 5): a heavy frame never holds the event loop, other
clients run between its slices, sessions belong to the client that created them, per-client quotas,
close-on-disconnect.

The ordering tests record events instead of timing them: a heavy request blocks (in the worker
thread) until the bystander's event has happened, with a generous timeout as the only clock, so they
pass or fail the same way on any machine.  Had the event loop run the heavy request, the bystander
could not be served before that timeout, and the recorded order would say so.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from gym_envfactory import define_environment, get_environment, tool
from gym_envfactory.environment.catalog import add_environment, forget_environment
from gym_envfactory.errors import CapacityError, SessionOwnershipError
from gym_envfactory.server import SessionManager, fastproto
from gym_envfactory.server.app import ServerConfig, build_app
from tests.server.in_thread import serving

ENV = "LoadProbe"
ENV_SERVED = "PersonalFinance"  # a catalog environment, for a server in its own process
WAIT_S = 30.0  # only a safety net: a passing run never waits for it

EVENTS: list[Any] = []
GATES: dict[int, tuple[threading.Event, threading.Event]] = {}  # call index → (reached, release)


class Probe(BaseModel):
    count: int = 0


@tool
def heavy(state: Probe, *, i: int) -> int:
    """Record call ``i``; at a gated index, say so and wait for the test's release."""
    EVENTS.append(("heavy", i))
    if i in GATES:
        reached, release = GATES[i]
        reached.set()
        release.wait(WAIT_S)
    state.count += 1
    return i


@tool
def note(state: Probe, *, what: str) -> str:
    """Record ``what``."""
    EVENTS.append(what)
    return what


@pytest.fixture(scope="module", autouse=True)
def probe_env() -> Iterator[None]:
    add_environment(define_environment(ENV, Probe, [heavy, note], register=False), register=False)
    yield
    forget_environment(ENV)


@pytest.fixture(autouse=True)
def clean_events() -> Iterator[None]:
    EVENTS.clear()
    GATES.clear()
    yield
    for _, release in GATES.values():
        release.set()


@contextlib.contextmanager
def running(manager: SessionManager, **config: Any) -> Iterator[str]:
    """``manager`` served by uvicorn on a free loopback port, in a thread of this process."""
    app = build_app(manager, ServerConfig(**config))
    with serving(app) as where:
        yield where


def post(addr: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(f"http://{addr}/v1/rpc", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=WAIT_S) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def rpc(addr: str, method: str, client: str | None = None, **params: Any) -> tuple[int, Any]:
    return post(addr, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                {"X-Envfactory-Client": client} if client else None)


def ws(addr: str, query: str = "", client: str | None = None) -> Any:
    return connect(f"ws://{addr}/v1/ws{query}", additional_headers={"X-Envfactory-Client": client} if client else {},
                   max_size=None, open_timeout=WAIT_S)


def request(conn: Any, method: str, **params: Any) -> Any:
    conn.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
    return json.loads(conn.recv(WAIT_S))


def healthz(addr: str) -> int:
    with urllib.request.urlopen(f"http://{addr}/healthz", timeout=WAIT_S) as r:
        return r.status


def gate(i: int) -> tuple[threading.Event, threading.Event]:
    GATES[i] = (threading.Event(), threading.Event())
    return GATES[i]


def send_in_background(conn: Any, frame: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def go() -> None:
        conn.send(json.dumps(frame))
        out.append(json.loads(conn.recv(WAIT_S * 2)))

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, out


def heavy_frame(sid: str, n: int) -> list[dict[str, Any]]:
    return [{"jsonrpc": "2.0", "id": i, "method": "call", "params": {"session_id": sid, "name": "heavy",
                                                                     "arguments": {"i": i}}} for i in range(n)]


# ------------------------------------------------------------------------------------- part 3: the loop
def test_healthz_is_served_while_a_heavy_frame_runs():
    """A 64-call frame stops at call 10 until /healthz has been answered: /healthz comes back between
    call 10 and call 11, and the frame then completes."""
    m = SessionManager([ENV])
    reached, release = gate(10)
    with running(m) as addr, ws(addr) as conn:
        sid = request(conn, "create", env=ENV)["result"]["session_id"]
        t, out = send_in_background(conn, heavy_frame(sid, 64))
        assert reached.wait(WAIT_S)
        assert healthz(addr) == 200
        EVENTS.append("healthz")
        release.set()
        t.join(WAIT_S * 2)
        assert [r["result"]["content"] for r in out[0]] == list(range(64))
    assert EVENTS == [("heavy", i) for i in range(11)] + ["healthz"] + [("heavy", i) for i in range(11, 64)]


@pytest.mark.parametrize("method", ["score", "state", "snapshot", "fork", "action_log", "create"])
def test_heavy_methods_run_off_the_loop(method):
    """score, state, snapshot, fork, ... run on the worker thread: while one of them is held, /healthz
    is answered."""
    m = SessionManager([ENV, "HotelBooking"])
    reached, release = threading.Event(), threading.Event()
    attr = {"state": "state_json", "score": "score_job"}.get(method, method)  # state: from the session's JSON; score: its reads
    original = getattr(m, attr)

    def held(*args: Any, **kwargs: Any) -> Any:
        EVENTS.append(method)
        reached.set()
        release.wait(WAIT_S)
        EVENTS.append("released")
        return original(*args, **kwargs)

    tid = get_environment("HotelBooking").tasks.ids()[0]
    sid = m.create("HotelBooking", task_id=tid).session_id
    params = {"env": "HotelBooking"} if method == "create" else {"session_id": sid}
    with running(m) as addr, ws(addr) as conn:
        setattr(m, attr, held)
        t, out = send_in_background(conn, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        assert reached.wait(WAIT_S)
        assert healthz(addr) == 200
        EVENTS.append("healthz")
        release.set()
        t.join(WAIT_S * 2)
        assert "result" in out[0], out
    assert EVENTS == [method, "healthz", "released"]


def test_another_clients_frame_runs_between_slices(monkeypatch):
    """A 40-call frame in slices of 8: a bystander's call queued during the first slice runs right
    after it (before the heavy frame's 9th call), not after the whole frame."""
    monkeypatch.setattr(fastproto, "SLICE_REQUESTS", 8)
    monkeypatch.setattr(fastproto, "SLICE_SECONDS", 1e9)
    m = SessionManager([ENV])
    reached, release = gate(2)
    with running(m) as addr, ws(addr, client="heavy") as hc, ws(addr, client="bystander") as bc:
        sid = request(hc, "create", env=ENV)["result"]["session_id"]
        mine = request(bc, "create", env=ENV)["result"]["session_id"]
        t, out = send_in_background(hc, heavy_frame(sid, 40))
        assert reached.wait(WAIT_S)
        tb, bout = send_in_background(bc, {"jsonrpc": "2.0", "id": 7, "method": "call",
                                           "params": {"session_id": mine, "name": "note", "arguments": {"what": "bystander"}}})
        deadline = time.monotonic() + WAIT_S
        while m.worker.queued() == 0 and time.monotonic() < deadline:  # the bystander's frame is queued
            time.sleep(0.001)
        release.set()
        tb.join(WAIT_S * 2)
        t.join(WAIT_S * 2)
        assert bout[0]["result"]["content"] == "bystander" and len(out[0]) == 40
    assert EVENTS == [("heavy", i) for i in range(8)] + ["bystander"] + [("heavy", i) for i in range(8, 40)]


def test_a_lone_frame_keeps_its_order_and_results_across_slices(monkeypatch):
    monkeypatch.setattr(fastproto, "SLICE_REQUESTS", 3)
    m = SessionManager([ENV])
    sid = m.create(ENV).session_id
    frame = heavy_frame(sid, 10) + [{"jsonrpc": "2.0", "method": "call", "params": {  # a notification: no answer
        "session_id": sid, "name": "note", "arguments": {"what": "silent"}}}, {"jsonrpc": "2.0", "id": "s", "method": "state",
                                                                                "params": {"session_id": sid}}]
    job = fastproto.FrameJob(m, json.dumps(frame))
    steps = 1
    while not job.step():
        steps += 1
    out = json.loads(job.text or "")
    assert steps == 4 and [r["id"] for r in out] == list(range(10)) + ["s"] and out[-1]["result"] == {"count": 10}
    assert EVENTS == [("heavy", i) for i in range(10)] + ["silent"]


# ------------------------------------------------------------------------------------- part 5: sharing
def test_sessions_belong_to_the_client_that_created_them():
    m = SessionManager([ENV])
    with running(m) as addr:
        status, body = rpc(addr, "create", "alice", env=ENV)
        sid = body["result"]["session_id"]
        assert rpc(addr, "call", "alice", session_id=sid, name="note", arguments={"what": "a"})[0] == 200
        for other in ("bob", None):  # another client, and the anonymous one
            status, body = rpc(addr, "call", other, session_id=sid, name="note", arguments={"what": "b"})
            assert status == 403 and body["error"]["code"] == -32005 and "another client" in body["error"]["message"]
            # the refusal never says how to claim the owner's identity (issue 25, finding 3)
            assert "X-Envfactory-Client" not in body["error"]["message"] and "alice" not in body["error"]["message"]
            assert rpc(addr, "close", other, session_id=sid)[1]["error"]["code"] == -32005
        assert rpc(addr, "share", "bob", session_id=sid)[1]["error"]["code"] == -32005
        # the owner on another connection (same header) is the same client
        with ws(addr, client="alice") as conn:
            assert request(conn, "info", session_id=sid)["result"]["owner"] == "alice"
        assert rpc(addr, "share", "alice", session_id=sid)[1]["result"] is True
        assert rpc(addr, "call", "bob", session_id=sid, name="note", arguments={"what": "b"})[0] == 200
        forks = rpc(addr, "fork", "bob", session_id=sid, k=2)[1]["result"]
        assert {m.sessions[f].owner for f in forks} == {"bob"}
        assert rpc(addr, "share", "bob", session_id=sid, shared=False)[1]["error"]["code"] == -32005
        # created shared: anyone may use it; the anonymous client owns what it creates without a header
        shared = rpc(addr, "create", "carol", env=ENV, shared=True)[1]["result"]["session_id"]
        assert rpc(addr, "state", None, session_id=shared)[0] == 200
        anon = rpc(addr, "create", None, env=ENV)[1]["result"]["session_id"]
        assert rpc(addr, "state", None, session_id=anon)[0] == 200
        assert rpc(addr, "state", "alice", session_id=anon)[1]["error"]["code"] == -32005
    assert EVENTS == ["a", "b"]


def test_bad_client_ids_are_refused():
    m = SessionManager([ENV])
    with running(m) as addr:
        status, body = rpc(addr, "ping", "has space")
        assert status == 400 and "X-Envfactory-Client" in body["error"]
        with pytest.raises(InvalidStatus, match="403"):  # refused before the handshake completes
            ws(addr, query="?client=" + "x" * 200)


def test_per_client_quota_keeps_room_for_others():
    m = SessionManager([ENV], max_sessions=6, max_sessions_per_client=3)
    a = [m.create(ENV, client="a").session_id for _ in range(3)]
    with pytest.raises(CapacityError) as ei:
        m.create(ENV, client="a")
    assert ei.value.scope == "client" and ei.value.limit == 3
    with pytest.raises(CapacityError):
        m.fork(a[0], 1, client="a")
    b = m.fork(m.create(ENV, client="b").session_id, 2, client="b")  # b still has room
    assert len(b) == 2 and m.stats(client="b")["client"] == {"id": "b", "sessions": 3}
    with pytest.raises(CapacityError) as ei:
        m.create(ENV, client="c")
    assert ei.value.scope == "server" and ei.value.limit == 6
    m.close(a[0], client="a")
    m.create(ENV, client="c")
    with pytest.raises(SessionOwnershipError):
        m.close(a[1], client="c")
    assert m.owned == {"a": 2, "b": 3, "c": 1} and len(m.sessions) == 6
    m.close_all()
    assert m.owned == {}


def test_quota_error_over_the_wire_says_which_cap():
    m = SessionManager([ENV], max_sessions=10, max_sessions_per_client=1)
    with running(m) as addr:
        assert rpc(addr, "create", "a", env=ENV)[0] == 200
        status, body = rpc(addr, "create", "a", env=ENV)
        assert status == 429 and body["error"]["code"] == -32002
        assert body["error"]["data"] == {"scope": "client", "limit": 1}
        assert rpc(addr, "create", "b", env=ENV)[0] == 200


def test_default_quota_is_half_the_server():
    assert SessionManager([ENV], max_sessions=10).max_sessions_per_client == 5


def test_expired_sessions_leave_their_clients_quota():
    clock = [0.0]
    m = SessionManager([ENV], ttl_s=10, max_sessions=4, max_sessions_per_client=2, clock=lambda: clock[0])
    m.create(ENV, client="a")
    m.create(ENV, client="a")
    clock[0] = 11
    m.create(ENV, client="a")  # the idle ones expire to make room
    assert m.owned == {"a": 1} and m.counters["expired"] == 2


@pytest.mark.parametrize("how", ["query", "header", "server"])
def test_close_on_disconnect(how):
    m = SessionManager([ENV])
    with running(m, close_on_disconnect=how == "server") as addr:
        kept = rpc(addr, "create", None, env=ENV)[1]["result"]["session_id"]
        query = "?close_on_disconnect=1" if how == "query" else ""
        conn = connect(f"ws://{addr}/v1/ws{query}", open_timeout=WAIT_S,
                       additional_headers={"X-Envfactory-Close-On-Disconnect": "1"} if how == "header" else {})
        with conn:
            sid = request(conn, "create", env=ENV)["result"]["session_id"]
            forks = request(conn, "fork", session_id=sid, k=3)["result"]
            assert request(conn, "close", session_id=forks[0])["result"] is True
            assert len(m.sessions) == 4
        deadline = time.monotonic() + WAIT_S
        while len(m.sessions) > 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert list(m.sessions) == [kept]
        with ws(addr, query="?close_on_disconnect=0") as conn:  # a connection may keep its sessions
            request(conn, "create", env=ENV)
        time.sleep(0.2)
        assert len(m.sessions) == 2


def test_mcp_bound_session_checks_its_owner():
    from mcp.shared.exceptions import MCPError

    from gym_envfactory.server.mcp_server import EnvMCPServer

    m = SessionManager([ENV])
    sid = m.create(ENV, client="alice").session_id
    srv = EnvMCPServer(m, ENV)
    assert srv._lookup(sid, bound=True, client="alice").session_id == sid
    with pytest.raises(MCPError, match="another client"):
        srv._lookup(sid, bound=True, client="anonymous")


def test_serve_takes_the_quota_and_close_on_disconnect_flags():
    from tests.server.test_app import start_server

    proc, url = start_server(ENV_SERVED, "--max-sessions", "8", "--max-sessions-per-client", "1",
                             "--close-on-disconnect", token=None)
    addr = url.removeprefix("http://")
    try:
        assert rpc(addr, "stats")[1]["result"]["max_sessions_per_client"] == 1
        with ws(addr, client="w") as conn:
            assert "result" in request(conn, "create", env=ENV_SERVED)
            assert request(conn, "create", env=ENV_SERVED)["error"]["data"] == {"scope": "client", "limit": 1}
        deadline = time.monotonic() + WAIT_S
        while rpc(addr, "stats")[1]["result"]["sessions"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert rpc(addr, "stats")[1]["result"]["sessions"] == 0  # closed with its connection
    finally:
        proc.terminate()
        proc.wait(timeout=10)
