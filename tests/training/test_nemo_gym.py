"""Issue 28 part 2: the NeMo Gym resources-server protocol of :mod:`gym_envfactory.training.nemo_gym`, over HTTP
(Starlette's test client): seed, tool calls and verify per cookie session, isolation between rollouts, the reward
and its named components, typed errors.  NeMo Gym's own agent drives the same app in tests/training/nemo_gym/."""

from __future__ import annotations

import contextlib
import http.cookiejar
import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("starlette")
uvicorn = pytest.importorskip("uvicorn")

from gym_envfactory import EnvFactoryEnv, ToolCall  # noqa: E402
from gym_envfactory.training.nemo_gym import SESSION_COOKIE, dataset_rows, resources_app  # noqa: E402


class Reply:
    """An HTTP answer: ``status_code``, ``json()``, ``cookies`` (the names it set)."""

    def __init__(self, status, body, set_cookies):
        self.status_code, self._body, self.cookies = status, body, set_cookies

    def json(self):
        return json.loads(self._body)


class Client:
    """One agent: its own cookie jar (one rollout at a time), posting JSON to the app."""

    def __init__(self, base):
        self.base, self.jar = base, http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def post(self, path, json=None, content=None):
        data = content if content is not None else __import__("json").dumps(json).encode()
        req = urllib.request.Request(self.base + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with self.opener.open(req, timeout=30) as r:
                return Reply(r.status, r.read(), {c.split("=")[0] for c in r.headers.get_all("set-cookie") or []})
        except urllib.error.HTTPError as e:
            return Reply(e.code, e.read(), set())

    def get(self, path):
        with self.opener.open(self.base + path, timeout=30) as r:
            return Reply(r.status, r.read(), set())

    def session(self):
        return next((c.value for c in self.jar if c.name == SESSION_COOKIE), None)


@contextlib.contextmanager
def served(app):
    """``app`` on a free loopback port (uvicorn, in a thread); yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive()
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextlib.contextmanager
def clients(n=1):
    with served(resources_app("HotelBooking")) as base:
        yield [Client(base) for _ in range(n)]


@pytest.fixture(scope="module")
def rows():
    return {(r["reset_options"]["task_id"], r["reset_options"].get("start_turn")): r for r in dataset_rows("HotelBooking")}


def reply(text, calls=()):
    out = [{"type": "function_call", "call_id": f"c{i}", "name": n, "arguments": json.dumps(a)} for i, (n, a) in enumerate(calls)]
    return {"output": [*out, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]}


def test_rows_carry_opening_messages_tools_and_one_user_turn_each(rows):
    assert ("hotel-003", 0) in rows and ("hotel-003", 2) in rows  # three user turns, three rows
    row = rows[("hotel-003", 1)]
    assert row["env"] == "HotelBooking"
    assert row["reset_options"] == {"task_id": "hotel-003", "start_turn": 1, "end_turn": 2}
    params = row["responses_create_params"]
    assert params["input"][0]["role"] == "system" and params["input"][-1]["role"] == "user"
    assert "cancelled" in params["input"][-1]["content"] or "cancel" in params["input"][-1]["content"].lower()
    tool = next(t for t in params["tools"] if t["name"] == "cancel_hotel_booking")
    assert tool["type"] == "function" and tool["parameters"]["properties"]["booking_id"]
    whole = dataset_rows("HotelBooking", per_turn=False)
    assert len(whole) == len({tid for tid, _ in rows}) and "start_turn" not in whole[0]["reset_options"]


def test_oracle_episode_scores_one_with_components_and_sessions_are_isolated(rows):
    row = rows[("hotel-004", 0)]
    with clients(2) as (a, b):
        assert a.post("/seed_session", json=row).status_code == 200
        assert b.post("/seed_session", json=row).status_code == 200
        assert a.session() and b.session() and a.session() != b.session()
        ok = a.post("/cancel_hotel_booking", json={"booking_id": "BK-0002", "reason": ""})
        assert ok.status_code == 200 and ok.json()["status"] == "cancelled"
        assert SESSION_COOKIE in ok.cookies  # set again on every tool response (NeMo Gym's agent keeps the latest)
        # b's episode never saw a's write: its booking is still there to cancel
        assert b.post("/cancel_hotel_booking", json={"booking_id": "BK-0002", "reason": ""}).json()["status"] == "cancelled"
        # the response lists the call, as NeMo Gym's agent writes it: /verify scores the model responses it holds
        cancel = [("cancel_hotel_booking", {"booking_id": "BK-0002", "reason": ""})]
        done = a.post("/verify", json=row | {"response": reply("314.10 comes back to your card.", cancel)}).json()
        assert done["reward"] == 1.0 and done["responses_create_params"] == row["responses_create_params"]
        assert done["reward_components"] == {"r_traj": 1.0, "r_state": 1.0, "r_output": 1.0, "p_len": 0.0, "penalty": 0.0}
        assert done["r_traj"] == 1.0 and done["vacuous"] == []
        # a verified session is closed
        assert a.post("/verify", json=row | {"response": reply("again")}).status_code == 400


def test_wrong_attempt_matches_the_gym_and_counts_calls_the_agent_answered_itself(rows):
    row = rows[("hotel-012", 0)]
    calls = [("find_guest_by_email", {"email": "kenji.watanabe@example.jp"}),
             ("modify_hotel_booking", {"booking_id": "BK-0003", "check_in": "2026-12-27", "check_out": "2027-01-01",
                                       "room_type": "TAT", "guests": 2})]
    env = EnvFactoryEnv("HotelBooking")
    env.reset(options={"task_id": "hotel-012"})
    for name, args in calls:
        env.step(ToolCall(name, args))
    env.step({"role": "assistant", "content": "", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "no_such_tool", "arguments": "{}"}}]})
    env.step({"role": "assistant", "content": "Done."})
    expected = env.last_score
    with clients() as (c,):
        c.post("/seed_session", json=row)
        for name, args in calls:
            assert c.post(f"/{name}", json=args).status_code == 200
        # the agent refused no_such_tool itself (verifiers' toolset does): it reaches the server only in response
        out = c.post("/verify", json=row | {"response": reply("Done.", calls + [("no_such_tool", {})])}).json()
    assert out["reward"] == pytest.approx(expected.reward) and out["reward"] < 0.5
    assert out["p_len"] == expected.p_len == 1 and out["r_state"] == expected.r_state == 0.0
    assert out["r_traj"] == pytest.approx(expected.r_traj)


def test_unknown_tool_posted_is_the_envs_typed_error_and_an_invalid_call(rows):
    with clients() as (c,):
        c.post("/seed_session", json=rows[("hotel-004", 0)])
        res = c.post("/no_such_tool", json={})
        assert res.status_code == 200 and res.json()["error"]["type"] == "unknown_tool"
        bad = c.post("/cancel_hotel_booking", json={"booking_id": 7})
        assert bad.json()["error"]["type"] == "invalid_arguments"
        out = c.post("/verify", json=rows[("hotel-004", 0)] | {"response": reply("no", [("no_such_tool", {}),
                                                                                        ("cancel_hotel_booking", {"booking_id": 7})])}).json()
    assert out["p_len"] == 2.0 and out["r_state"] == 0.0  # counted once each, not again at verify


def test_errors_are_typed_and_name_what_to_do(rows):
    with clients() as (c,):
        assert "seed_session" in c.post("/search_hotels", json={}).json()["detail"]
        assert c.post("/verify", json={"response": {}}).status_code == 400
        bad = c.post("/seed_session", json={"reset_options": {"task_id": "hotel-999"}})
        assert bad.status_code == 422 and "hotel-999" in bad.json()["detail"]
        assert c.post("/seed_session", content=b"[1, 2]").status_code == 422
        assert c.get("/").json()["env"] == "HotelBooking"


@pytest.mark.parametrize("kind", ["generated", "imported"])
def test_generated_and_imported_packages_score_as_the_gym(tmp_path, monkeypatch, kind):
    """An EnvGen-written and an imported package (untrusted: the server's episodes run on the isolated backend),
    oracle and wrong attempts, against the same actions played on the Gymnasium env."""
    from gym_envfactory.environment.catalog import register_catalog
    from tests.backends.test_isolation import write_package

    name = f"Nemo{kind.title()}"
    write_package(tmp_path / "catalog", name, kind=kind)
    monkeypatch.setenv("ENVFACTORY_CATALOG", str(tmp_path / "catalog"))
    register_catalog()
    row = dataset_rows(name)[0]
    assert {t["name"] for t in row["responses_create_params"]["tools"]} >= {"bump"}
    for calls, text in ([("bump", {})], "It is 1 now."), ([("bump", {}), ("bump", {})], "Done."):
        env = EnvFactoryEnv(name)
        env.reset(options=row["reset_options"])
        for n, a in calls:
            env.step(ToolCall(n, a))
        env.step({"role": "assistant", "content": text})
        expected = env.last_score
        env.close()
        with served(resources_app(name)) as base:
            c = Client(base)
            c.post("/seed_session", json=row)
            assert c.post("/bump", json={}).status_code == 200
            for n, a in calls[1:]:
                c.post(f"/{n}", json=a)
            out = c.post("/verify", json=row | {"response": reply(text, calls)}).json()
        assert out["reward"] == pytest.approx(expected.reward)
        assert out["reward_components"]["p_len"] == expected.p_len
    assert expected.reward < 1.0  # the wrong attempt (a surplus bump) scored below the oracle


def test_a_later_turn_of_a_multi_turn_task_starts_from_the_ground_truth_state(rows):
    """Row hotel-003 turn 2 (cancel): earlier turns are history, the state is the ground truth's after turn 1;
    the last turn right scores 1, a cancel of the wrong booking scores as the Gymnasium env says."""
    row = rows[("hotel-003", 2)]
    assert row["reset_options"] == {"task_id": "hotel-003", "start_turn": 2, "end_turn": 3}
    assert [m["role"] for m in row["responses_create_params"]["input"]].count("user") == 3
    got = []
    for booking, text in (("BK-0001", "Cancelled."), ("BK-0002", "Cancelled.")):
        env = EnvFactoryEnv("HotelBooking")
        env.reset(options=row["reset_options"])
        env.step(ToolCall("cancel_hotel_booking", {"booking_id": booking, "reason": "online"}))
        env.step({"role": "assistant", "content": text})
        expected = env.last_score
        with clients() as (c,):
            c.post("/seed_session", json=row)
            c.post("/cancel_hotel_booking", json={"booking_id": booking, "reason": "online"})
            calls = [("cancel_hotel_booking", {"booking_id": booking, "reason": "online"})]
            out = c.post("/verify", json=row | {"response": reply(text, calls)}).json()
        assert out["reward"] == pytest.approx(expected.reward)
        assert out["r_state"] == expected.r_state and out["r_traj"] == expected.r_traj
        got.append(out["reward"])
    assert got[0] == 1.0 and got[1] < 1.0 and out["r_state"] == 0.0


def test_the_module_writes_rows_and_serves_an_environment(tmp_path):
    import os
    import subprocess
    import sys

    from gym_envfactory.training.nemo_gym import main

    main(["HotelBooking", "--rows", str(tmp_path / "rows.jsonl"), "--split", "test", "--per-task"])
    lines = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert lines and all("start_turn" not in r["reset_options"] for r in lines)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "gym_envfactory.training.nemo_gym", "HotelBooking", "--port", str(port)],
                            env={**{k: v for k, v in os.environ.items() if not k.startswith("ENVFACTORY_TOKEN")},
                                 "PYTHONPATH": os.pathsep.join(sys.path)})  # loopback, no token
    try:
        c = Client(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 60
        while True:
            try:
                assert c.get("/").json()["env"] == "HotelBooking"
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
        assert c.post("/seed_session", json=lines[0]).status_code == 200
        assert c.post("/verify", json=lines[0] | {"response": reply("")}).json()["reward"] <= 1.0
    finally:
        proc.terminate()
        proc.wait(timeout=10)
