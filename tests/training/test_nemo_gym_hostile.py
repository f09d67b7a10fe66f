"""The NeMo Gym resources server (:mod:`gym_envfactory.training.nemo_gym`) under hostile or unusual use: the
Host/Origin guard and the bearer token (and the bind rule of ``envfactory serve``), double-encoded and malformed
arguments (docs/cases.md C09), parallel calls against the step limits, session expiry and capacity, bad rows and
bodies.  Rewards are compared with the Gymnasium env played on the same assistant messages, which is what
``envfactory rollout`` steps."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402

from gym_envfactory import EnvFactoryEnv  # noqa: E402
from gym_envfactory.errors import CapacityError, InsecureBindError  # noqa: E402
from gym_envfactory.training.nemo_gym import (  # noqa: E402
    NeMoGymSessions,
    assistant_steps,
    main,
    resources_app,
)

LOOPBACK = "http://127.0.0.1"
SEARCH = {"city": "Vienna", "check_in": "2026-12-10", "check_out": "2026-12-13", "guests": 2, "min_stars": 4,
          "amenities": ["parking"]}
FINAL = "Schoenbrunn Garden Inn fits."


def client(app, **kw):
    return TestClient(app, base_url=LOOPBACK, **kw)


def rollout(task_id, messages, **env_kwargs):
    """The Gymnasium env stepped with ``messages`` (assistant messages, as ``envfactory rollout`` steps them), then
    the closing reply if the episode is still running: its score."""
    env = EnvFactoryEnv("HotelBooking", **env_kwargs)
    try:
        env.reset(options={"task_id": task_id})
        for m in messages:
            if env.done:
                break
            env.step(m)
        if not env.done:
            env.step({"role": "assistant", "content": ""})
        return env.last_score
    finally:
        env.close()


def tool_message(calls, text=""):
    return {"role": "assistant", "content": text, "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}} for i, (n, a) in enumerate(calls)]}


def as_response(responses):
    """NeMo Gym's Responses ``output`` for model responses ``[(calls, outputs, text)]``, laid out as its
    ``simple_agent`` lays it out: each response's message and ``function_call`` items, then one
    ``function_call_output`` per call."""
    out, k = [], 0
    for calls, outputs, text in responses:
        if text:
            out.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})
        ids = []
        for name, args in calls:
            ids.append(f"fc{k}")
            out.append({"type": "function_call", "call_id": f"fc{k}", "name": name, "arguments": args})
            k += 1
        out += [{"type": "function_call_output", "call_id": i, "output": o} for i, o in zip(ids, outputs, strict=True)]
    return {"output": out}


def components(score):
    return {"reward": score.reward, "r_traj": score.r_traj, "r_state": score.r_state, "r_output": score.r_output,
            "p_len": float(score.p_len), "penalty": score.penalty}


def nemo(task_id, responses, app=None):
    """Play ``responses`` (``[(calls, text)]``, arguments as the model wrote them) as NeMo Gym's simple agent does:
    seed, post each call's ``json.loads(arguments)``, verify; the verify body and the tool outputs."""
    with client(app or resources_app("HotelBooking")) as c:
        assert c.post("/seed_session", json={"task_id": task_id}).status_code == 200
        played = []
        for calls, text in responses:
            outputs = []
            for name, args in calls:
                try:
                    outputs.append(c.post(f"/{name}", json=json.loads(args)).text)
                except ValueError:  # the agent answers unparsable arguments itself
                    outputs.append(json.dumps({"error": "Invalid tool call arguments"}))
            played.append((calls, outputs, text))
        body = c.post("/verify", json={"task_id": task_id, "response": as_response(played)}).json()
    return body, [o for _, outputs, _ in played for o in outputs]


# ----------------------------------------------------------------------------------------------- guards


def test_loopback_server_refuses_foreign_host_and_origin_but_answers_liveness():
    app = resources_app("HotelBooking")
    with TestClient(app, base_url="http://evil.example") as c:  # a name rebound to 127.0.0.1 (DNS rebinding)
        res = c.post("/seed_session", json={"task_id": "hotel-002"})
        assert res.status_code == 403 and "evil.example" in res.json()["error"]
        assert c.post("/search_hotels", json=SEARCH).status_code == 403
        assert c.get("/").status_code == 200  # liveness stays open, as envfactory serve's /healthz
    with client(app) as c:
        assert c.post("/seed_session", json={"task_id": "hotel-002"},
                      headers={"Origin": "https://evil.example"}).status_code == 403
        assert c.post("/seed_session", json={"task_id": "hotel-002"}).status_code == 200


def test_off_loopback_needs_a_token_and_the_token_guards_every_route(tmp_path, monkeypatch, capsys):
    with pytest.raises(InsecureBindError, match="without a token"):
        resources_app("HotelBooking", host="0.0.0.0")
    monkeypatch.delenv("ENVFACTORY_TOKEN", raising=False)
    monkeypatch.delenv("ENVFACTORY_TOKEN_FILE", raising=False)
    with pytest.raises(SystemExit) as exc:
        main(["HotelBooking", "--host", "0.0.0.0", "--port", "1"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "refusing to serve" in err and "--token-file" in err
    empty = tmp_path / "token"
    empty.write_text("\n")
    with pytest.raises(SystemExit):
        main(["HotelBooking", "--host", "0.0.0.0", "--token-file", str(empty)])
    assert "is empty" in capsys.readouterr().err

    app = resources_app("HotelBooking", host="0.0.0.0", token="s3cret")
    with TestClient(app, base_url="http://10.0.0.5:8000") as c:  # off loopback: any Host, but the token
        assert c.post("/seed_session", json={"task_id": "hotel-002"}).status_code == 401
        assert c.post("/seed_session", json={"task_id": "hotel-002"},
                      headers={"Authorization": "Bearer wrong"}).status_code == 401
        auth = {"Authorization": "Bearer s3cret"}
        assert c.post("/seed_session", json={"task_id": "hotel-002"}, headers=auth).status_code == 200
        assert c.post("/search_hotels", json=SEARCH).status_code == 401
        assert c.post("/search_hotels", json=SEARCH, headers=auth).status_code == 200
        assert c.post("/verify", json={"response": {"output": []}}).status_code == 401
        assert c.post("/verify", json={"response": {"output": []}}, headers=auth).status_code == 200


# ------------------------------------------------------------------------------- rewards equal rollout's


@pytest.mark.parametrize("form", ["plain", "double", "list_as_string", "malformed"])
def test_C09_double_encoded_arguments_score_as_envfactory_rollout(form):
    """simple_agent posts ``json.loads(arguments)``: double-encoded arguments arrive as a JSON string holding the
    object, which the server reads as the gym's parser reads ``arguments``, not as ``{}``."""
    args = {"plain": json.dumps(SEARCH), "double": json.dumps(json.dumps(SEARCH)),
            "list_as_string": json.dumps(SEARCH | {"amenities": json.dumps(["parking"])}),
            "malformed": '{"city": "Vienna", '}[form]
    expected = rollout("hotel-002", [tool_message([("search_hotels", args)]), {"role": "assistant", "content": FINAL}])
    with client(resources_app("HotelBooking")) as c:
        c.post("/seed_session", json={"task_id": "hotel-002"})
        body = args.encode() if form == "malformed" else json.dumps(json.loads(args)).encode()
        out = c.post("/search_hotels", content=body, headers={"content-type": "application/json"}).text
        got = c.post("/verify", json={"response": as_response([([("search_hotels", args)], [out], ""),
                                                               ([], [], FINAL)])}).json()
    assert {k: got[k] for k in components(expected)} == pytest.approx(components(expected))
    if form == "malformed":
        assert json.loads(out)["error"]["type"] == "parse_error" and got["p_len"] == 1.0
    else:
        assert "Schoenbrunn Garden Inn" in out and got["reward"] == 1.0 and got["p_len"] == 0.0


def test_parallel_calls_of_one_model_response_are_one_step_as_in_rollout():
    """16 surplus calls and the right one in two model responses: ``envfactory rollout`` steps two messages
    (no truncation: reward 0.5); the server must not count each posted call as a step."""
    calls = [("list_hotel_destinations", "{}")] * 16 + [("search_hotels", json.dumps(SEARCH))]
    responses = [(calls[:8], ""), (calls[8:], ""), ([], FINAL)]
    expected = rollout("hotel-002", [tool_message(calls[:8]), tool_message(calls[8:]),
                                     {"role": "assistant", "content": FINAL}])
    assert expected.reward == pytest.approx(0.5) and expected.r_traj == 1.0
    got, outputs = nemo("hotel-002", responses)
    assert "Schoenbrunn Garden Inn" in outputs[-1]  # the 17th call ran (no episode_over)
    assert {k: got[k] for k in components(expected)} == pytest.approx(components(expected))


def test_a_rollout_that_rollout_truncates_is_truncated_at_the_same_step():
    """One call per model response, 16 surplus ones first: ``envfactory rollout`` truncates at
    ``max_steps_per_turn`` (16) before the right call; so does the score at /verify, though the server ran all."""
    calls = [("list_hotel_destinations", "{}")] * 16 + [("search_hotels", json.dumps(SEARCH))]
    responses = [([c], "") for c in calls] + [([], FINAL)]
    expected = rollout("hotel-002", [tool_message([c]) for c in calls] + [{"role": "assistant", "content": FINAL}])
    got, _ = nemo("hotel-002", responses)
    assert expected.r_traj == 0.0
    assert {k: got[k] for k in components(expected)} == pytest.approx(components(expected))


def test_calls_the_agent_answered_itself_count_and_text_beside_calls_is_read():
    calls = [("no_such_tool", "{}"), ("search_hotels", json.dumps(SEARCH))]
    expected = rollout("hotel-002", [tool_message(calls, text="Let me look."), {"role": "assistant", "content": FINAL}])
    with client(resources_app("HotelBooking")) as c:
        c.post("/seed_session", json={"task_id": "hotel-002"})
        out = c.post("/search_hotels", json=SEARCH).text  # no_such_tool never reached the server
        got = c.post("/verify", json={"response": as_response([(calls, ["refused", out], "Let me look."),
                                                               ([], [], FINAL)])}).json()
    assert got["p_len"] == 1.0
    assert {k: got[k] for k in components(expected)} == pytest.approx(components(expected))


def test_assistant_steps_groups_by_tool_outputs():
    response = {"output": [
        {"type": "reasoning", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
        {"type": "function_call", "call_id": "x", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "y", "name": "g", "arguments": {"k": 1}},
        {"type": "function_call_output", "call_id": "x", "output": "1"},
        {"type": "function_call_output", "call_id": "y", "output": "2"},
        {"type": "function_call", "name": "h", "arguments": "["},
        {"type": "function_call_output", "call_id": "call_0", "output": "3"},
        {"type": "message", "role": "assistant", "content": "done"}, "junk"]}
    steps = assistant_steps(response)
    assert [s["content"] for s in steps] == ["a", "", "done"]
    assert [[c["function"]["name"] for c in s.get("tool_calls", [])] for s in steps] == [["f", "g"], ["h"], []]
    assert steps[0]["tool_calls"][1]["function"]["arguments"] == {"k": 1}
    assert assistant_steps({"output": "x"}) == assistant_steps(None) == []


# ---------------------------------------------------------------------------------- sessions: LRU, TTL, cap


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_idle_rollouts_expire_least_recently_used_first_and_a_full_server_refuses():
    clock = Clock()
    sessions = NeMoGymSessions("HotelBooking", max_sessions=2, ttl_s=100, clock=clock)
    try:
        a = sessions.seed({"task_id": "hotel-002"})
        clock.now = 10
        b = sessions.seed({"task_id": "hotel-002"})
        with pytest.raises(CapacityError, match="max_sessions"):  # full: a live rollout is never evicted
            sessions.seed({"task_id": "hotel-002"})
        clock.now = 90
        assert sessions.call(a, "list_hotel_destinations", "{}") is not None  # a used again: b is now the oldest
        clock.now = 150  # b idle 140 s, a 60 s
        c = sessions.seed({"task_id": "hotel-002"})
        assert sessions.call(b, "list_hotel_destinations", "{}") is None  # expired
        assert sessions.call(a, "list_hotel_destinations", "{}") is not None
        assert sessions.verify(c, {"output": []}) is not None and len(sessions) == 1
        clock.now = 1000
        assert sessions.verify(a, {"output": []}) is None  # expired while idle
    finally:
        sessions.close()
    with pytest.raises(ValueError):
        NeMoGymSessions("HotelBooking", ttl_s=0)


def test_a_full_server_answers_503_and_the_live_rollout_goes_on():
    app = resources_app("HotelBooking", max_sessions=2)
    with client(app) as victim, client(app) as other:
        assert victim.post("/seed_session", json={"task_id": "hotel-002"}).status_code == 200
        assert other.post("/seed_session", json={"task_id": "hotel-002"}).status_code == 200
        other.cookies.clear()
        full = other.post("/seed_session", json={"task_id": "hotel-002"})
        assert full.status_code == 503 and "max_sessions" in full.json()["detail"]
        assert victim.post("/search_hotels", json=SEARCH).status_code == 200
        got = victim.post("/verify", json={"response": as_response([([("search_hotels", json.dumps(SEARCH))],
                                                                     ["x"], ""), ([], [], FINAL)])}).json()
        assert got["reward"] == 1.0
        assert other.post("/seed_session", json={"task_id": "hotel-002"}).status_code == 200  # room again
    with pytest.raises(SystemExit):
        main(["HotelBooking", "--max-sessions", "0"])


# ------------------------------------------------------------------------------------- bad rows and bodies


@pytest.mark.parametrize("row", [{"reset_options": {"task_id": ["x"]}}, {"reset_options": {"task_id": {"a": 1}}},
                                 {"task_id": 5}, {"reset_options": {"task_id": "hotel-002", "split": ["a"]}},
                                 {"reset_options": "x"}, {"reset_options": {"task_id": "hotel-002", "start_turn": True}}])
def test_bad_rows_are_422_with_one_line(row):
    with client(resources_app("HotelBooking"), raise_server_exceptions=False) as c:
        res = c.post("/seed_session", json=row)
    assert res.status_code == 422
    assert "\n" not in res.json()["detail"] and res.json()["detail"]


def test_deeply_nested_bodies_are_422_or_an_invalid_call_never_a_crash():
    deep = b"[" * 100_000 + b"]" * 100_000
    with client(resources_app("HotelBooking"), raise_server_exceptions=False) as c:
        for path in ("/seed_session", "/verify"):
            res = c.post(path, content=deep, headers={"content-type": "application/json"})
            assert res.status_code == 422 and "nested too deeply" in res.json()["detail"]
        assert c.post("/seed_session", content=b"\xff{", headers={"content-type": "application/json"}).status_code == 422
        c.post("/seed_session", json={"task_id": "hotel-002"})
        res = c.post("/search_hotels", content=deep, headers={"content-type": "application/json"})
        assert res.status_code == 200 and res.json()["error"]["type"] == "parse_error"
        got = c.post("/verify", json={"response": {"output": [
            {"type": "function_call", "name": "search_hotels", "arguments": "[" * 5000}]}}).json()
    assert got["p_len"] == 1.0 and got["reward"] == 0.0


def test_a_drawn_task_is_the_one_replayed_and_a_whole_task_row_scores_its_first_turn():
    sessions = NeMoGymSessions("HotelBooking")
    try:
        sid = sessions.seed({})  # no task_id: the env draws one; /verify must replay that one
        held = sessions._rollouts[sid]
        assert held.env.task is not None and held.options == {"task_id": held.env.task.task_id}
    finally:
        sessions.close()
    # a row of the whole multi-turn task hotel-003: turn 0 played right, then the reply; scored as it stands
    calls = [("find_guest_by_email", json.dumps({"email": "ada.lovelace@example.com"})),
             ("list_guest_bookings", json.dumps({"guest_id": "G-001"}))]
    env = EnvFactoryEnv("HotelBooking")
    env.reset(options={"task_id": "hotel-003"})
    for c in calls:
        env.step(tool_message([c]))
    env.step({"role": "assistant", "content": "Done."})
    expected = env.score()
    env.close()
    assert expected.r_traj > 0
    with client(resources_app("HotelBooking")) as c:
        c.post("/seed_session", json={"reset_options": {"task_id": "hotel-003"}})
        got = c.post("/verify", json={"response": as_response([([c], ["x"], "") for c in calls]
                                                              + [([], [], "Done.")])}).json()
    assert {k: got[k] for k in components(expected)} == pytest.approx(components(expected))
