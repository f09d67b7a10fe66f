"""Memory-aware admission on the Docker engine (issue 10, part 4): a server in a container limited to
512 MB refuses, with the typed capacity error, what would take it past its memory (a client filling it
with large-state sessions, then a frame of 1,000 ``state`` reads of them and a 200-member group), and is
never OOM-killed: the container still runs and another client's session still answers.

The budget comes from the container's cgroup limit; nothing is configured for it here.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import gym_envfactory  # noqa: F401  (registers the catalog)
from gym_envfactory.backends.remote import SessionClient
from gym_envfactory.containers.run import start_container
from gym_envfactory.envs.groups import make_group
from gym_envfactory.errors import CapacityError, MemoryBudgetError

from .test_docker_backend import http

ENV = "TeamCalendar"
# a call that builds the whole parsed state (a lookup alone builds a tenth of it)
EVENTS = {"person_id": "P-002", "start": "2026-12-03T00:00:00", "end": "2026-12-04T00:00:00"}
MiB = 1024 * 1024
LARGE_TASK = "cal-031"  # a task on the large initial state
MAX_FILL = 400  # large sessions the filler tries at most (a 512 MB server holds far fewer of them)


def _clients(url, token, monkeypatch, other):
    """A bystander's client and another client (``other``) of the same server, as two client ids."""
    clients = []
    for name in ("bystander", other):
        monkeypatch.setenv("ENVFACTORY_CLIENT", name)
        clients.append(SessionClient(url, token=token, timeout=120))
    return clients


def _bystander_session(bystander):
    """A session of the bystander's with one call made: what must survive the other client's attack."""
    mine = bystander.request("create", env=ENV)["session_id"]
    assert bystander.request("call", session_id=mine, name="find_person", arguments={"query": "Omar"})["ok"]
    return mine


@pytest.fixture
def small_container(docker_images):
    url, stop, token = start_container([ENV], mem_limit="512m", timeout=120)
    yield url, stop, token
    stop()


def test_a_full_512mb_container_refuses_instead_of_dying(small_container, docker_client, monkeypatch):
    url, stop, token = small_container
    bystander, filler = _clients(url, token, monkeypatch, "filler")
    try:
        mine = _bystander_session(bystander)
        memory = filler.request("stats")["memory"]
        assert memory["budget"] == 512 * MiB and "cgroup" in memory["source"], memory

        # Fill the server with large-state sessions, each parsed by a call, until it says no.
        sessions, refused = [], None
        for _ in range(MAX_FILL):
            try:
                sid = filler.request("create", env=ENV, initial_state="large")["session_id"]
            except MemoryBudgetError as exc:
                refused = exc
                break
            assert filler.request("call", session_id=sid, name="list_events", arguments=EVENTS)["ok"]
            sessions.append(sid)
        assert refused is not None, f"{len(sessions)} large sessions admitted into 512 MB"
        assert len(sessions) >= 10, "the budget left room for next to nothing"
        assert refused.budget == 512 * MiB and refused.estimate and refused.used
        assert "raise the container's memory limit" in str(refused)

        # The reviewer's frame: 1,000 state reads (~112 KB of requests, ~500 MB of answers).
        answers = filler.batch([("state", {"session_id": sessions[i % len(sessions)]}) for i in range(1000)])
        assert len(answers) == 1000 and all(isinstance(a, MemoryBudgetError) for a in answers), \
            {type(a).__name__ for a in answers}
        # A GRPO group of 200 on a large state: refused whole, nothing created.
        before = filler.request("stats")["client"]["sessions"]
        with pytest.raises(CapacityError) as ei:
            filler.request("fork", session_id=sessions[0], k=200)
        assert isinstance(ei.value, MemoryBudgetError) and "fork of 200" in str(ei.value)
        assert filler.request("stats")["client"]["sessions"] == before

        # Still alive, never OOM-killed, and the other client is still served.
        c = docker_client.containers.get(stop.id)
        c.reload()
        assert c.attrs["State"]["OOMKilled"] is False and c.attrs["State"]["Running"] is True
        assert http(url + "/healthz")[0] == 200
        assert bystander.request("call", session_id=mine, name="find_person", arguments={"query": "Omar"})["ok"]
        assert bystander.request("state", session_id=mine)["people"]

        # Closing sessions gives the room back.
        for sid in sessions[: len(sessions) // 2]:
            filler.request("close", session_id=sid)
        filler.request("create", env=ENV, initial_state="large")
        c.reload()
        assert c.attrs["State"]["OOMKilled"] is False and c.attrs["State"]["Running"] is True
    finally:
        filler.close()
        bystander.close()


def test_make_group_of_200_on_a_large_calendar_task_is_refused_not_killed(docker_images, docker_client, container_of):
    """The reviewer's case: ``make_group(k=200)`` on a large TeamCalendar task over the docker backend
    OOM-killed the container at member 130; now the fork is refused whole and a group that fits works."""
    env = gym.make("envfactory/TeamCalendar-v0", backend="docker", timeout=120)
    try:
        with pytest.raises(CapacityError) as ei:
            make_group(env.unwrapped, 200, options={"task_id": LARGE_TASK})
        assert isinstance(ei.value, MemoryBudgetError) and "fork of 199" in str(ei.value)
        group = make_group(env.unwrapped, 8, options={"task_id": LARGE_TASK})
        assert len(group) == 8
        for member in group:
            assert member.session.call("list_events", EVENTS).ok
        c = container_of(env.unwrapped.session.client.url)
        c.reload()
        assert c.attrs["State"]["OOMKilled"] is False and c.attrs["State"]["Running"] is True
        group.close()
    finally:
        env.close()


def test_call_and_score_attacks_on_a_512mb_container_are_refused_or_bounded(small_container, docker_client,
                                                                            monkeypatch):
    """Issue 25, items 1 and 2, on the engine: unknown-tool calls of 3.9 MB of nested empty lists (three
    OOM-killed a 512 MB container), a session's log grown past its cap, and ``score`` over 150 summary
    records of 10**6 (OOM-killed in 0.9 s).  Now: bounded log records, a typed refusal (-32006) at the
    log's cap with nothing run, a score computed from counts, the container alive, a bystander served."""
    from gym_envfactory import get_environment

    url, stop, token = small_container
    bystander, attacker = _clients(url, token, monkeypatch, "attacker")
    try:
        mine = _bystander_session(bystander)
        sid = attacker.request("create", env=ENV, task_id=get_environment(ENV).tasks.ids()[0])["session_id"]

        junk = {"x": [[] for _ in range(970_000)]}  # ~3.9 MB of JSON (", " between items), ~60 MB once parsed
        ran = 0  # (the image's code before the fix: OOM-killed at the 6th)
        for _ in range(12):
            try:
                assert attacker.request("call", session_id=sid, name="no_such_tool", arguments=junk)["ok"] is False
                ran += 1
            except MemoryBudgetError:
                pass  # refused while the server was busy: typed, nothing logged
        assert all(len(str(r["raw_arguments"])) <= 4096 for r in attacker.request("action_log", session_id=sid))

        answers = attacker.batch([("record_invalid", {"session_id": sid, "name": "invalid_tool_call", "raw": None,
                                                      "message": "m", "tag": 0, "not_recorded": 10**6})] * 150)
        assert not any(isinstance(a, Exception) for a in answers)
        assert attacker.request("score", session_id=sid)["invalid"] >= 150 * 10**6

        # The log's cap (32 MiB a session): calls of 400 KB are refused once it is reached, none lost.
        refused, done = None, 0
        for _ in range(200):
            try:
                attacker.request("call", session_id=sid, name="find_person", arguments={"query": "x" * 400_000})
                done += 1
            except MemoryBudgetError as exc:
                refused = exc
                break
        assert refused is not None and "action log" in str(refused)
        assert attacker.request("info", session_id=sid)["calls"] == ran + done  # the refused call did not run

        c = docker_client.containers.get(stop.id)
        c.reload()
        assert c.attrs["State"]["OOMKilled"] is False and c.attrs["State"]["Running"] is True
        assert bystander.request("call", session_id=mine, name="find_person", arguments={"query": "Omar"})["ok"]
    finally:
        attacker.close()
        bystander.close()
