"""GRPO groups (``make_group``, ``RolloutGroup``; docs/architecture.md, "The Gymnasium contract"): a
group is a sequence of its envs, and closing a url-backed group leaves no coroutine unawaited."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import warnings

import gymnasium as gym
import pytest

from gym_envfactory import make_group
from gym_envfactory.envs.env import EnvFactoryEnv
from tests.conftest import CATALOG_SERVER_TOKEN as TOKEN


def test_rollout_group_is_a_sequence_of_its_envs(library):
    g = make_group("Library", k=3, options={"task_id": "borrow-dune"})
    try:
        assert len(g) == 3
        assert g[0] is g.envs[0] and g[-1] is g.envs[2] and g[1:] == g.envs[1:]
        assert list(g) == g.envs and [e for e in g] == g.envs
        assert all(isinstance(e, EnvFactoryEnv) for e in g)
        with pytest.raises(IndexError):
            g[3]
        assert len({id(e) for e in g}) == 3 and len({id(e.session) for e in g}) == 3
    finally:
        g.close()


CLOSE_SCRIPT = """
import sys, time
import gymnasium as gym
from gym_envfactory import make_group

url, token, order = sys.argv[1:4]
env = gym.make("envfactory/HotelBooking-v0", backend="url", url=url, token=token, timeout=2)
g = make_group(env.unwrapped, k=3)
g.step(['<tool_call>{"name": "list_hotel_destinations", "arguments": {}}</tool_call>'] * 3)
t0 = time.monotonic()
if order == "env-first":
    env.close()  # the caller's env, which owns the backend the forks share, closed before the group
if order == "members-forward":
    for member in g:  # member 0 owns the connection: the forks' closes find it gone
        member.close()
g.close()
print(f"closed in {time.monotonic() - t0:.2f} s")
"""


@pytest.mark.parametrize("order", ["env-first", "group-only", "members-forward"])
def test_closing_a_url_group_leaves_no_coroutine_unawaited(catalog_server, order):
    """With warnings as errors, in a fresh interpreter (an unawaited coroutine is reported when its
    event loop is collected, at exit at the latest).  The env handed to make_group owns the backend its
    forks share; closing it first used to stop the connection's event loop under the forks, whose close
    then scheduled a request on it that never ran ("coroutine 'AsyncSessionClient.request' was never
    awaited") after waiting the client's timeout plus 5 s per fork."""
    env = {k: v for k, v in os.environ.items() if k != "ENVFACTORY_TOKEN"}
    r = subprocess.run([sys.executable, "-W", "error", "-c", CLOSE_SCRIPT, catalog_server, TOKEN, order],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert "never awaited" not in r.stderr, r.stderr
    assert "closed in" in r.stdout and float(r.stdout.split("closed in ")[1].split()[0]) < 2, r.stdout


def test_closing_a_url_group_normally(catalog_server, monkeypatch):
    unraisable: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append(f"{u.exc_type.__name__}: {u.exc_value}"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = make_group("envfactory/HotelBooking-v0", k=4, backend="url", url=catalog_server, token=TOKEN, timeout=2)
        sids = [e.session.session_id for e in g]
        g.close()
        g.close()  # idempotent
        gc.collect()
    assert len(set(sids)) == 4 and all(e.session is None for e in g)
    assert not [u for u in unraisable if "never awaited" in u], unraisable



# -- a group step on one remote connection costs one round trip (issue 24, part 3) --------------------------

def _oracle_group_run(g):
    from gym_envfactory.rollout.policies import OraclePolicy

    policies = [OraclePolicy() for _ in g]
    for p, e in zip(policies, g, strict=True):
        p.begin(e)
    steps = 0
    while not g.done:
        g.step([None if g.finished[i] else policies[i].act(e) for i, e in enumerate(g)])
        steps += 1
    return steps


def _counting(client, monkeypatch):
    sent: list[str] = []
    real_request, real_batch = client.request, client.batch
    monkeypatch.setattr(client, "request", lambda method, **p: sent.append(method) or real_request(method, **p))
    monkeypatch.setattr(client, "batch", lambda reqs: sent.append(f"batch of {len(reqs)}") or real_batch(reqs))
    return sent


@pytest.mark.parametrize("noisy", [False, True])
def test_a_remote_group_step_sends_one_frame_and_scores_as_in_process(catalog_server, monkeypatch, noisy):
    from gym_envfactory import get_environment

    tasks = [t.task_id for t in get_environment("HotelBooking").tasks if len(t.envs) == 1][:3]
    for task_id in tasks:
        local = make_group("envfactory/HotelBooking-v0", k=4, options={"task_id": task_id})
        remote = make_group("envfactory/HotelBooking-v0", k=4, options={"task_id": task_id}, backend="url",
                            url=catalog_server, token=TOKEN)
        try:
            if noisy:  # members 1-3 take a wrong, a malformed and an unknown-tool first action: plans differ
                for g in (local, remote):
                    g.step([_noise(i) or "Let me check." for i in range(4)])
            sent = _counting(remote[0].session.client, monkeypatch)
            steps = _oracle_group_run(remote)
            _oracle_group_run(local)
            assert remote.rewards == local.rewards
            assert [e.last_score.to_dict() for e in remote] == [e.last_score.to_dict() for e in local]
            assert not [m for m in sent if m in ("call", "digest")]  # every call and digest rode in a batch
            assert len([m for m in sent if m.startswith("batch")]) <= steps
        finally:
            monkeypatch.undo()
            remote.close()
            local.close()


def _noise(i):
    if i == 1:
        return '<tool_call>{"name": "get_hotel_details", "arguments": {"hotel_id": "H-9999"}}</tool_call>'
    if i == 2:
        return "<tool_call>{not json</tool_call>"
    if i == 3:
        return '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>'
    return None


def test_a_prefetched_call_that_is_not_asked_for_is_raised_never_resent(catalog_server):
    g = make_group("envfactory/HotelBooking-v0", k=2, backend="url", url=catalog_server, token=TOKEN)
    try:
        s = g[1].session
        reqs = s.prefetch_requests([("get_hotel_details", {"hotel_id": "H-0001"}, "c1", 0)], ((), ()))
        s.prefetched(reqs, s.client.batch(reqs))
        with pytest.raises(RuntimeError, match="prefetched tool call"):
            s.call("get_hotel_details", {"hotel_id": "H-0002"}, call_id="c1", tag=0)
        assert [r.raw_arguments for r in s.action_log] == [{"hotel_id": "H-0001"}]  # ran once, not again
        # a kept digest nobody asks for changes nothing and is dropped
        reqs = s.prefetch_requests([], (("a",), ()))
        s.prefetched(reqs, s.client.batch(reqs))
        res = s.call("get_hotel_details", {"hotel_id": "H-0003"}, call_id="c2", tag=0)
        assert res.name == "get_hotel_details" and len(s.action_log) == 2
    finally:
        g.close()


def test_a_closed_remote_session_is_gone_for_the_next_request(catalog_server):
    g = make_group("envfactory/HotelBooking-v0", k=3, backend="url", url=catalog_server, token=TOKEN)
    client = g[0].session.client
    sid = g[2].session.session_id
    g[2].session.close()  # a notification: nothing waits for the server
    from gym_envfactory.errors import EnvFactoryError

    with pytest.raises(EnvFactoryError):
        client.request("info", session_id=sid)
    g.close()


def test_a_member_with_several_calls_is_not_prefetched(catalog_server, monkeypatch):
    """A batch answers each request on its own: a refused call would not stop the member's later calls,
    which its step would never record, so a step of several calls asks one call at a time."""
    two = ('<tool_call>{"name": "get_hotel_details", "arguments": {"hotel_id": "H-0001"}}</tool_call>'
           '<tool_call>{"name": "get_hotel_details", "arguments": {"hotel_id": "H-0002"}}</tool_call>')
    one = '<tool_call>{"name": "get_hotel_details", "arguments": {"hotel_id": "H-0003"}}</tool_call>'
    g = make_group("envfactory/HotelBooking-v0", k=3, backend="url", url=catalog_server, token=TOKEN)
    try:
        sent = _counting(g[0].session.client, monkeypatch)
        g.step([two, one, one])
        assert sent.count("call") == 2 and "batch of 2" in sent  # member 0 asked twice; 1 and 2 in one frame
        assert [len(e.session.action_log) for e in g] == [2, 1, 1]
    finally:
        monkeypatch.undo()
        g.close()


def test_a_failing_member_does_not_lose_the_others_results(library):
    g = make_group("Library", k=3, options={"task_id": "borrow-dune"})
    try:
        g[1].done = True  # its step raises ResetNeeded
        with pytest.raises(Exception) as err:
            g.step(["Hello.", "Hello.", "Hello."])
        results = err.value.group_step_results
        assert results[1] is None and results[0] is not None and results[2] is not None
    finally:
        g.close()


def test_a_remote_group_is_made_in_one_round_trip(catalog_server, monkeypatch):
    """Issue 24: ``make_group`` on a remote backend asks for the members with the session (``create`` with
    ``copies``), so no ``fork`` request follows; the members are independent sessions starting equal."""
    from gym_envfactory.backends.remote import SessionClient

    sent = []
    real = SessionClient.request
    monkeypatch.setattr(SessionClient, "request", lambda self, method, **p: sent.append((method, p.get("copies"))) or
                        real(self, method, **p))
    g = make_group("envfactory/HotelBooking-v0", k=4, options={"task_id": "hotel-003"}, backend="url",
                   url=catalog_server, token=TOKEN)
    try:
        assert ("create", 3) in sent and not [m for m, _ in sent if m == "fork"]
        assert len({e.session.session_id for e in g}) == 4
        assert len({json.dumps(e.session.state(), sort_keys=True) for e in g}) == 1
        g[1].session.call("update_guest_contact", {"guest_id": "G-001", "phone": "+1 555 0199"})
        assert g[1].session.state() != g[2].session.state()  # independent
    finally:
        monkeypatch.undo()
        g.close()


def test_copies_of_a_changed_session_are_never_handed_out(catalog_server):
    """A copy made with the session is a fork of it only while it is unchanged: after a call, the unused
    copies are closed and ``fork_many`` asks the server, so the forks carry the call."""
    from gym_envfactory.backends.remote import RemoteSession
    from gym_envfactory.errors import EnvFactoryError

    env = gym.make("envfactory/HotelBooking-v0", backend="url", url=catalog_server, token=TOKEN).unwrapped
    try:
        env.reset(options={"task_id": "hotel-003"})
        client = env.session.client
        s = RemoteSession.create(client, list(env.session.envs.values()), task_id="hotel-003", copies=2)
        made = list(s._copies)
        assert len(made) == 2
        s.call("update_guest_contact", {"guest_id": "G-001", "phone": "+1 555 0199"})
        for sid in made:  # closed (notifications reach the server before the next request)
            with pytest.raises(EnvFactoryError):
                client.request("info", session_id=sid)
        (fork,) = s.fork_many(1)
        assert fork.session_id not in made and fork.state() == s.state()
        fork.close()
        s.close()
    finally:
        env.close()


def test_create_with_copies_is_all_or_nothing():
    from gym_envfactory.server.fastproto import dispatch_frame
    from gym_envfactory.server.manager import SessionManager

    m = SessionManager(["HotelBooking"], max_sessions=4)

    def create(copies):
        return json.loads(dispatch_frame(m, json.dumps({"jsonrpc": "2.0", "id": 1, "method": "create",
                                                        "params": {"env": "HotelBooking", "copies": copies}})))

    assert create(4)["error"]["code"] == -32002 and not m.sessions  # 5 sessions do not fit: none is left
    assert create(-1)["error"]["code"] == -32003 and create(True)["error"]["code"] == -32003
    out = create(3)["result"]
    assert len(out["copies"]) == 3 and set(m.sessions) == {out["session_id"], *out["copies"]}
