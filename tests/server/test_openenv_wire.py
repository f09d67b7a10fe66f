"""Issue 28, part 1, on the wire: the /openenv/<Env> endpoint answers OpenEnv's WebSocket messages with
the frames OpenEnv's own server sends (``{"type": "observation"|"state"|"error", "data": ...}``,
observations as ``serialize_observation`` writes them), so this runs in the main suite without the
openenv package; tests/training/openenv/ drives the same endpoint with OpenEnv's clients."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from importlib.metadata import entry_points

import pytest
from websockets.sync.client import connect

from gym_envfactory.server import ROUTES_GROUP
from gym_envfactory.training.openenv import OpenEnvEpisode, openenv_app
from tests.server.in_thread import serving


@contextlib.contextmanager
def running(app) -> Iterator[str]:
    with serving(app) as where:
        yield where


@pytest.fixture(scope="module")
def ws_url():
    with running(openenv_app(["HotelBooking"])) as where:
        yield f"ws://{where}/openenv/HotelBooking/ws"


def ask(ws, message: dict) -> dict:
    ws.send(json.dumps(message))
    return json.loads(ws.recv(timeout=30))


def test_frames_match_openenvs_server(ws_url):
    with connect(ws_url) as ws:
        r = ask(ws, {"type": "reset", "data": {"task_id": "hotel-001", "seed": 3}})
        assert r["type"] == "observation" and set(r["data"]) == {"observation", "reward", "done", "metadata"}
        assert r["data"]["reward"] is None and r["data"]["done"] is False
        obs = r["data"]["observation"]
        assert obs["task_id"] == "hotel-001" and obs["metadata"] == r["data"]["metadata"]
        assert obs["messages"][0]["role"] == "system" and obs["messages"][-1]["role"] == "user"
        r = ask(ws, {"type": "step", "data": {"type": "call_tool", "tool_name": "list_hotel_destinations", "arguments": {}}})
        obs = r["data"]["observation"]
        assert obs["tool_name"] == "list_hotel_destinations" and obs["error"] is None and r["data"]["reward"] == 0.0
        assert obs["result"]["is_error"] is False and "Vienna" in obs["result"]["content"][0]["text"]
        assert obs["messages"][0]["role"] == "tool"
        r = ask(ws, {"type": "step", "data": {"type": "call_tool", "tool_name": "get_hotel_details", "arguments": {"hotel_id": "nope"}}})
        assert r["data"]["observation"]["error"]["error_type"] in ("execution_error", "invalid_args")
        r = ask(ws, {"type": "step", "data": {"type": "message", "content": "Kyoto, Lisbon, Montreal and Vienna."}})
        assert r["data"]["done"] is True and r["data"]["metadata"]["terminated"] is True
        comps = r["data"]["observation"]["reward_components"]
        assert r["data"]["reward"] == comps["reward"] and {"r_traj", "r_state", "r_output", "p_len"} <= set(comps)
        turn = r["data"]["observation"]["turn_reward_components"]
        assert turn["r_traj"] == 1.0 and turn["p_len"] == 1  # the failed lookup is a surplus call
        s = ask(ws, {"type": "state"})
        assert s["type"] == "state" and s["data"]["step_count"] == 3 and s["data"]["done"] is True


def test_errors_are_openenv_error_frames_and_the_session_lives_on(ws_url):
    with connect(ws_url) as ws:
        ws.send("{not json")
        assert json.loads(ws.recv(timeout=30))["data"]["code"] == "INVALID_JSON"
        e = ask(ws, {"type": "jump"})
        assert e == {"type": "error", "data": {"message": "Unknown message type: jump", "code": "UNKNOWN_TYPE"}}
        e = ask(ws, {"type": "step", "data": {"type": "call_tool", "tool_name": "list_hotel_destinations"}})
        assert e["type"] == "error" and "reset first" in e["data"]["message"]
        e = ask(ws, {"type": "reset", "data": {"task_id": "no-such-task"}})
        assert e["type"] == "error" and "no-such-task" in e["data"]["message"]
        e = ask(ws, {"type": "reset", "data": {"colour": "blue"}})
        assert e["type"] == "error" and "colour" in e["data"]["message"]
        assert ask(ws, {"type": "reset", "data": {"task_id": "hotel-001"}})["type"] == "observation"
        e = ask(ws, {"type": "step", "data": {"type": "call_tool", "tool_name": 7}})
        assert e["type"] == "error" and "tool_name" in e["data"]["message"]
        ws.send(json.dumps({"type": "close"}))
        with pytest.raises(Exception):  # noqa: B017 - the server closed the connection
            ws.recv(timeout=10)


def test_episode_closes_with_its_connection(ws_url, monkeypatch):
    closed = []
    original = OpenEnvEpisode.close
    monkeypatch.setattr(OpenEnvEpisode, "close", lambda self: (closed.append(self.episode_id), original(self)))
    with connect(ws_url) as ws:
        eid = ask(ws, {"type": "reset", "data": {"task_id": "hotel-001"}})["data"]["metadata"]["episode_id"]
    for _ in range(500):
        if closed:
            break
        time.sleep(0.01)
    assert closed == [eid]


def test_serve_mounts_openenv_through_its_entry_point():
    found = [ep for ep in entry_points(group=ROUTES_GROUP) if ep.name == "openenv"]
    assert found, f"no {ROUTES_GROUP} entry point 'openenv': reinstall the package (pip install -e .)"
    assert found[0].value == "gym_envfactory.training.openenv:openenv_routes"


def test_episodes_beyond_the_cap_get_openenvs_capacity_error():
    with running(openenv_app(["HotelBooking"], max_episodes=1)) as where:
        url = f"ws://{where}/openenv/HotelBooking/ws"
        with connect(url) as first:
            assert ask(first, {"type": "reset", "data": {"task_id": "hotel-001"}})["type"] == "observation"
            with connect(url) as second:
                e = json.loads(second.recv(timeout=30))
                assert e["type"] == "error" and e["data"]["code"] == "CAPACITY_REACHED" and e["data"]["max_sessions"] == 1
        for _ in range(500):  # the first connection's episode is released when it closes
            with connect(url) as third:
                third.send(json.dumps({"type": "reset", "data": {"task_id": "hotel-001"}}))
                if json.loads(third.recv(timeout=30))["type"] == "observation":
                    break
            time.sleep(0.01)
        else:
            pytest.fail("the episode of a closed connection was never released")


def _rpc(base: str, method: str, **params) -> dict:
    import urllib.request

    req = urllib.request.Request(f"{base}/mcp", data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": method,
                                                                 "params": params}).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def test_production_mode_http_mcp_session_and_attached_websocket():
    with running(openenv_app(["HotelBooking"], max_episodes=4)) as where:
        base = f"http://{where}/openenv/HotelBooking"
        tools = _rpc(base, "tools/list")["result"]["tools"]
        assert "search_hotels" in {t["name"] for t in tools} and all("input_schema" in t for t in tools)
        sid = _rpc(base, "openenv/session/create")["result"]["session_id"]
        with connect(f"ws://{where}/openenv/HotelBooking/ws?session_id={sid}") as ws:
            assert ask(ws, {"type": "reset", "data": {"task_id": "hotel-001"}})["type"] == "observation"
            called = _rpc(base, "tools/call", name="list_hotel_destinations", arguments={}, session_id=sid)["result"]
            assert called["tool_name"] == "list_hotel_destinations" and called["error"] is None and called["done"] is False
            assert "Vienna" in {c["name"] for c in called["result"]["data"]}
            # the call ran on the attached episode: its state says so, and the episode scores it
            assert ask(ws, {"type": "state"})["data"]["step_count"] == 1
            r = ask(ws, {"type": "step", "data": {"type": "message", "content": "Kyoto, Lisbon, Montreal and Vienna."}})
            assert r["data"]["done"] is True and r["data"]["reward"] == 1.0
        # the session outlives its WebSocket until it is closed
        assert _rpc(base, "tools/call", name="list_hotel_destinations", session_id=sid)["error"]["code"] == -32000
        assert _rpc(base, "openenv/session/close", session_id=sid)["result"] == {"session_id": sid, "closed": True}
        assert "Unknown session_id" in _rpc(base, "tools/call", name="x", session_id=sid)["error"]["message"]
        assert _rpc(base, "no/such")["error"]["code"] == -32601
        with connect(f"ws://{where}/openenv/HotelBooking/ws?session_id={sid}") as ws:
            assert json.loads(ws.recv(timeout=30))["data"]["code"] == "SESSION_ERROR"


def test_bad_reset_fields_are_error_frames(ws_url):
    with connect(ws_url) as ws:
        for data in ({"seed": -1}, {"seed": "x"}, {"seed": True}, {"episode_id": {"a": 1}}, {"episode_id": "e" * 256}):
            e = ask(ws, {"type": "reset", "data": data})
            assert e["type"] == "error" and "ResetRequest" in e["data"]["message"], data
        assert ask(ws, {"type": "reset", "data": {"task_id": "hotel-001", "episode_id": "mine"}})["data"]["metadata"]["episode_id"] == "mine"


def test_openenv_episodes_are_admitted_against_the_servers_memory_budget():
    """An OpenEnv episode is held outside the session table but counts against the same memory budget:
    one that would not fit gets OpenEnv's CAPACITY_REACHED frame naming the budget, and a closed
    episode gives its reservation back."""
    from types import SimpleNamespace

    from starlette.applications import Starlette

    from gym_envfactory.server.admission import Admission, MemoryBudget
    from gym_envfactory.server.manager import SessionManager
    from gym_envfactory.training.openenv import openenv_routes

    rss = 512 * 2**20
    probe = SessionManager(["HotelBooking"])
    cost = probe.reserve_episode([probe.spec("HotelBooking")], "probe")
    probe.release_episode(cost)
    assert probe.admission.reserved == 0 and cost > 0
    adm = Admission(MemoryBudget(rss + cost + cost // 2, "test budget", 0), rss=lambda: rss, trim=lambda: None)
    manager = SessionManager(["HotelBooking"], memory_budget=adm)
    config = SimpleNamespace(host="127.0.0.1", allowed_origins=[], token=None, max_sessions=64)
    routes, hook = openenv_routes(manager, config)
    with running(Starlette(routes=routes, lifespan=hook)) as where:
        url = f"ws://{where}/openenv/HotelBooking/ws"
        with connect(url) as first:
            assert ask(first, {"type": "reset", "data": {"task_id": "hotel-001"}})["type"] == "observation"
            assert adm.reserved == cost
            with connect(url) as second:
                frame = json.loads(second.recv(timeout=30))
            assert frame["type"] == "error" and frame["data"]["code"] == "CAPACITY_REACHED"
            assert "memory budget" in frame["data"]["message"]
            assert adm.reserved == cost  # the refused one reserved nothing
        for _ in range(500):  # the server closes the episode after the connection ends
            if adm.reserved == 0:
                break
            time.sleep(0.02)
        assert adm.reserved == 0
        with connect(url) as again:  # room again
            assert ask(again, {"type": "reset", "data": {"task_id": "hotel-001"}})["type"] == "observation"
