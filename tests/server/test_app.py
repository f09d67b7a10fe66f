"""The environment server: fast session protocol, control plane, security defaults, reliability, soak."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import gymnasium as gym
import pytest

import gym_envfactory  # noqa: F401
from gym_envfactory import get_environment
from gym_envfactory.backends.remote import AsyncSessionClient, SessionClient
from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.errors import (
    BackendUnavailableError,
    InsecureBindError,
    RemoteError,
)
from gym_envfactory.replay import task_reference
from gym_envfactory.rollout.policies import OraclePolicy
from gym_envfactory.rollout.runner import run_episode
from gym_envfactory.server import SessionManager
from gym_envfactory.server.app import ServerConfig, build_app

TOKEN = "s3cret-token"


def start_server(*args: str, token: str | None = TOKEN) -> tuple[subprocess.Popen, str]:
    env = {**os.environ}
    env.pop("ENVFACTORY_TOKEN", None)
    if token:
        env["ENVFACTORY_TOKEN"] = token
    proc = subprocess.Popen([sys.executable, "-m", "gym_envfactory.cli", "serve", *args, "--port", "0", "--announce"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline()
    assert line.startswith("{"), proc.stderr.read()
    return proc, json.loads(line)["listening"]


@pytest.fixture(scope="module")
def server():
    proc, url = start_server("--all", "--ttl", "600")
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def http(url: str, path: str, body: object | None = None, *, token: str | None = TOKEN, raw: bytes | None = None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url + path, data=data, method="POST" if data is not None else "GET",
                                 headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def rpc(url, method, **params):
    return http(url, "/v1/rpc", {"jsonrpc": "2.0", "id": 1, "method": method, "params": params})


def test_health_ready_metrics(server):
    assert http(server, "/healthz", token=None)[0] == 200
    status, body = http(server, "/readyz")
    assert status == 200 and {e["name"] for e in json.loads(body)["envs"]} >= {"HotelBooking", "TeamCalendar", "PersonalFinance"}
    rpc(server, "create", env="HotelBooking")
    status, body = http(server, "/metrics")
    text = body.decode()
    assert status == 200 and "envfactory_sessions" in text and "envfactory_frame_seconds_bucket" in text


def test_token_guards_everything_but_health(server):
    for path in ("/readyz", "/metrics"):
        assert http(server, path, token=None)[0] == 401
        assert http(server, path, token="wrong")[0] == 401
    status, body = http(server, "/v1/rpc", {"jsonrpc": "2.0", "id": 1, "method": "stats"}, token=None)
    assert status == 401 and b"unauthorized" in body
    with pytest.raises(BackendUnavailableError):
        SessionClient(server, token="wrong", timeout=5)


def test_bad_control_requests_get_4xx_and_change_nothing(server):
    before = json.loads(rpc(server, "stats")[1])["result"]["sessions"]
    cases = [
        (rpc(server, "create", env="NoSuchEnv"), 400, "does not serve"),
        (rpc(server, "create", env="HotelBooking", task_id="nope"), 400, "no task"),
        (rpc(server, "create", env="HotelBooking", initial_state={"hotels": 5}), 400, ""),
        (rpc(server, "state", session_id="deadbeef"), 404, "no live session"),
        (rpc(server, "fork", session_id="deadbeef", k=0), 400, "k must be"),
        (rpc(server, "call"), 400, "missing parameter"),
        (http(server, "/v1/rpc", {"jsonrpc": "2.0", "id": 1, "method": "drop_tables"}), 400, "unknown method"),
        (http(server, "/v1/rpc", raw=b"{not json"), 400, "not usable JSON"),
        (http(server, "/v1/rpc", raw=b"x" * (5 * 1024 * 1024)), 413, "over"),
    ]
    for (status, body), want, needle in cases:
        assert status == want, body
        assert needle.encode() in body
    assert json.loads(rpc(server, "stats")[1])["result"]["sessions"] == before


def test_refuses_to_bind_beyond_loopback_without_token():
    with pytest.raises(InsecureBindError):
        build_app(SessionManager(["HotelBooking"]), ServerConfig(host="0.0.0.0"))
    build_app(SessionManager(["HotelBooking"]), ServerConfig(host="0.0.0.0", token="t"))
    r = subprocess.run([sys.executable, "-m", "gym_envfactory.cli", "serve", "HotelBooking", "--host", "0.0.0.0", "--port", "0"],
                       capture_output=True, text=True, env={k: v for k, v in os.environ.items() if k != "ENVFACTORY_TOKEN"}, timeout=60)
    assert r.returncode == 2 and "without a token" in r.stderr


def test_control_plane_lifecycle_and_batches(server):
    async def main():
        async with AsyncSessionClient(server, token=TOKEN) as c:
            created = await c.request("create", env="HotelBooking", task_id="hotel-003")
            sid = created["session_id"]
            assert created["envs"] == ["HotelBooking"] and "cancel_hotel_booking" in created["tools"]
            forks = await c.request("fork", session_id=sid, k=8)
            assert len(set(forks)) == 8
            # one frame carrying the whole group's calls
            res = await c.batch([("call", {"session_id": f, "name": "cancel_hotel_booking", "arguments": {"booking_id": "BK-0001"}})
                                 for f in forks] + [("state", {"session_id": "missing"})])
            assert all(r["ok"] for r in res[:8]) and isinstance(res[8], RemoteError) and res[8].code == -32001
            st = await c.request("state", session_id=sid)
            assert st["bookings"]["BK-0001"]["status"] != "cancelled"  # forks never write back
            snap = await c.request("snapshot", session_id=forks[0])
            other = (await c.request("create", env="HotelBooking", snapshot=snap))["session_id"]
            assert await c.request("state", session_id=other) == await c.request("state", session_id=forks[0])
            await c.request("reset", session_id=forks[0])
            assert (await c.request("state", session_id=forks[0]))["bookings"]["BK-0001"]["status"] != "cancelled"
            assert len(await c.request("action_log", session_id=other)) == 1
            for s in forks + [sid, other]:
                assert await c.request("close", session_id=s) is True
            assert await c.request("close", session_id=sid) is False

    asyncio.run(main())


def test_idle_sessions_expire():
    clock = [0.0]
    m = SessionManager(["HotelBooking"], ttl_s=10, clock=lambda: clock[0])
    a = m.create("HotelBooking").session_id
    b = m.create("HotelBooking").session_id
    clock[0] = 8
    m.call(a, "list_hotel_destinations", {})
    clock[0] = 15
    assert m.expire() == 1 and a in m.sessions and b not in m.sessions
    assert m.stats()["expired"] == 1


def test_killed_server_raises_typed_error_and_snapshot_restores_elsewhere():
    from gym_envfactory.backends import acquire_backend

    proc, url = start_server("HotelBooking", "TeamCalendar")
    env = EnvFactoryEnv("HotelBooking", task_id="hotel-003", backend="url", url=url, token=TOKEN)
    env.reset()
    oracle = OraclePolicy()
    oracle.begin(env)
    env.step(oracle.act(env))
    snap = env.session.snapshot()
    steps_before, messages_before = env.steps, len(env.messages)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    action = oracle.act(env)
    t0 = time.monotonic()
    with pytest.raises(BackendUnavailableError):
        env.step(action)
    assert time.monotonic() - t0 < 10
    assert (env.steps, len(env.messages)) == (steps_before, messages_before)  # the failed step left no trace
    # a new server restores the session from its last snapshot and the episode continues
    proc2, url2 = start_server("HotelBooking", "TeamCalendar")
    try:
        env.resume(snap, backend=acquire_backend("url", url=url2, token=TOKEN))
        assert env.session.state() == json.loads(snap)["envs"]["HotelBooking"]
        done = False
        while not done:
            *_, term, trunc, info = env.step(action)
            done = term or trunc
            action = oracle.act(env)
        assert info["score"]["reward"] == 1.0
        env.close()
    finally:
        proc2.terminate()
        proc2.wait(timeout=10)


def test_restarted_server_starts_clean():
    proc, url = start_server("HotelBooking")
    c = SessionClient(url, token=TOKEN)
    sid = c.request("create", env="HotelBooking")["session_id"]
    c.close()
    proc.terminate()
    proc.wait(timeout=10)
    proc, url = start_server("HotelBooking")
    try:
        c = SessionClient(url, token=TOKEN)
        assert c.request("stats")["sessions"] == 0
        with pytest.raises(RemoteError):
            c.request("state", session_id=sid)
        c.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_soak_1024_concurrent_sessions_interleaved_writes(server):
    """docs/cases.md C03 at scale: 1,024 sessions over one connection, writes interleaved round-robin in
    batches; each ends equal to its solo replay; closing leaves no session behind."""
    spec = get_environment("HotelBooking")
    tasks = [t for t in spec.tasks if len(t.envs) == 1 and t.n_ground_truth_calls >= 2][:8]
    n = 1024

    async def main():
        async with AsyncSessionClient(server, token=TOKEN, timeout=120) as c:
            base = (await c.request("stats"))["sessions"]
            created = await c.batch([("create", {"env": "HotelBooking", "task_id": tasks[i % len(tasks)].task_id}) for i in range(n)])
            sids = [r["session_id"] for r in created]
            plans = [[(g.name, g.arguments) for turn in tasks[i % len(tasks)].turns for g in turn.ground_truth] for i in range(n)]
            step = 0
            while any(step < len(p) for p in plans):
                frame = [("call", {"session_id": sids[i], "name": plans[i][step][0], "arguments": plans[i][step][1]})
                         for i in range(n) if step < len(plans[i])]
                for r in await c.batch(frame):
                    assert r["ok"], r
                step += 1
            states = await c.batch([("state", {"session_id": s}) for s in sids])
            for i, st in enumerate(states):
                assert st == task_reference(spec, tasks[i % len(tasks)]).final_state
            assert all(await c.batch([("close", {"session_id": s}) for s in sids]))
            assert (await c.request("stats"))["sessions"] == base

    asyncio.run(main())


def test_many_gym_envs_share_one_subprocess_server():
    envs = [gym.make("envfactory/PersonalFinance-v0", backend="subprocess") for _ in range(3)]
    urls = {e.unwrapped.backend.url for e in envs}
    assert len(urls) == 1
    for e in envs:
        assert run_episode(e.unwrapped, OraclePolicy(), task_id=e.unwrapped.tasks.ids()[0]).reward == 1.0
    for e in envs:
        e.close()


def test_closed_and_expired_sessions_are_freed():
    """No leak: once closed or expired, a session's objects are unreachable (weak references die)."""
    import gc
    import weakref

    clock = [0.0]
    m = SessionManager(["HotelBooking"], ttl_s=5, clock=lambda: clock[0])
    refs = []
    ids = []
    for _ in range(200):
        ms = m.create("HotelBooking", task_id="hotel-003")
        m.call(ms.session_id, "cancel_hotel_booking", {"booking_id": "BK-0001"})
        refs.append(weakref.ref(ms.session))
        refs.append(weakref.ref(ms.session.state_model()))
        ids.append(ms.session_id)
    forks = m.fork(ids[0], 50)
    refs += [weakref.ref(f.session) for f in forks]
    del ms, forks
    for sid in ids[:100]:
        m.close(sid)
    clock[0] = 100
    assert m.expire() == 150 and m.sessions == {}
    gc.collect()
    assert sum(r() is not None for r in refs) == 0


def test_pool_replaces_a_backend_whose_server_died():
    from gym_envfactory.backends import acquire_backend, shared_backends

    proc, url = start_server("PersonalFinance")
    a = acquire_backend("url", url=url, token=TOKEN)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    environments = [get_environment("PersonalFinance")]
    with pytest.raises(BackendUnavailableError):
        a.create_session(environments, {}, get_environment("PersonalFinance").tasks.ids()[0])
    proc2 = subprocess.Popen([sys.executable, "-m", "gym_envfactory.cli", "serve", "PersonalFinance", "--port", url.rsplit(":", 1)[1],
                              "--announce"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "ENVFACTORY_TOKEN": TOKEN})
    try:
        assert proc2.stdout.readline().startswith("{")
        b = acquire_backend("url", url=url, token=TOKEN)  # same configuration: a fresh connection
        s = b.create_session(environments, {}, get_environment("PersonalFinance").tasks.ids()[0])
        assert s.state()
        a.release()  # releasing the dead one must not drop the live one from the pool
        assert any(sh is b.remote for sh in shared_backends())
        s.close()
        b.release()
    finally:
        proc2.terminate()
        proc2.wait(timeout=10)


def test_protocol_hardening(server):
    # notifications are never answered; ids must be str/int/null; lowercase bearer scheme is fine
    status, body = http(server, "/v1/rpc", {"jsonrpc": "2.0", "method": "no_such_method"})
    assert status == 204
    status, body = http(server, "/v1/rpc", {"jsonrpc": "2.0", "id": [1], "method": "ping"})
    assert status == 400 and b"id must be" in body
    req = urllib.request.Request(server + "/v1/rpc", data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode(),
                                 headers={"Authorization": f"bearer {TOKEN}", "Content-Type": "application/json"})
    assert urllib.request.urlopen(req, timeout=10).status == 200
    # deep nesting and oversized batches are errors, not crashes; a surrogate in an id does not break the reply
    status, body = http(server, "/v1/rpc", raw=b"[" * 100_000)
    assert status == 400 and b"not usable JSON" in body
    batch = [{"jsonrpc": "2.0", "id": i, "method": "ping"} for i in range(5000)]
    status, body = http(server, "/v1/rpc", batch)
    assert status == 400 and b"at most" in body
    status, body = http(server, "/v1/rpc", raw=b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "ping"}')
    assert status == 200 and json.loads(body)["result"] == {"ok": True}
    # initial states are names, never paths
    status, body = rpc(server, "create", env="HotelBooking", initial_state="../../../etc/passwd")
    assert status == 400 and b"plain names" in body
    # browsers: a foreign Origin or Host is refused
    for headers in ({"Origin": "http://evil.example"}, {"Host": "evil.example:80"}):
        req = urllib.request.Request(server + "/v1/rpc", data=b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
                                     headers={"Authorization": f"Bearer {TOKEN}", **headers})
        with pytest.raises(urllib.error.HTTPError) as ei:
            urllib.request.urlopen(req, timeout=10)
        assert ei.value.code == 403


def test_fork_beyond_capacity_changes_nothing():
    m = SessionManager(["HotelBooking"], max_sessions=50)
    sid = m.create("HotelBooking").session_id
    from gym_envfactory.server import CapacityError

    with pytest.raises(CapacityError):
        m.fork(sid, 100)
    assert len(m.sessions) == 1


def test_client_refuses_oversized_requests_and_keeps_the_connection(server):
    from gym_envfactory.errors import RequestTooLargeError

    c = SessionClient(server, token=TOKEN)
    sid = c.request("create", env="HotelBooking")["session_id"]
    with pytest.raises(RequestTooLargeError):
        c.request("restore", session_id=sid, snapshot="x" * (5 * 1024 * 1024))
    assert c.alive and c.request("ping") == {"ok": True}
    c.close()


def test_failed_connect_leaves_no_thread():
    import threading

    before = threading.active_count()
    for _ in range(5):
        with pytest.raises(BackendUnavailableError):
            SessionClient("http://127.0.0.1:1", timeout=2)
    assert threading.active_count() <= before + 1


def test_accepted_connections_have_nagle_off():
    """The listening socket is TCP by protocol, so asyncio sets TCP_NODELAY on every accepted
    connection (with protocol 0 it did not, and each small response waited for a delayed ACK)."""
    import asyncio
    import socket as socket_module

    from gym_envfactory.server import listening_socket

    sock = listening_socket("127.0.0.1", 0)
    assert sock.proto == socket_module.IPPROTO_TCP
    flags = []

    async def main():
        async def handle(reader, writer):
            s = writer.get_extra_info("socket")
            flags.append(s.getsockopt(socket_module.IPPROTO_TCP, socket_module.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(handle, sock=sock)
        port = sock.getsockname()[1]
        _, w = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(100):
            if flags:
                break
            await asyncio.sleep(0.01)
        w.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())
    assert flags and flags[0] != 0
