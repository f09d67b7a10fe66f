"""Server-side scoring: the control plane's ``score`` method gives every reward component of a session
created from a task, over ``POST /v1/rpc`` and the fast protocol alike, equal to the in-process reward."""

from __future__ import annotations

import json

import pytest

import gym_envfactory  # noqa: F401  (registers the catalog)
from gym_envfactory import EnvFactoryEnv, get_environment
from gym_envfactory.backends.remote import SessionClient
from gym_envfactory.errors import BadRequestError, RemoteError
from gym_envfactory.rollout.policies import OraclePolicy
from gym_envfactory.rollout.runner import run_episode
from gym_envfactory.server.manager import SessionManager
from tests.server.test_app import TOKEN, rpc, start_server

ENV = "HotelBooking"


def _oracle_calls(manager: SessionManager, sid: str, task_id: str) -> None:
    task = get_environment(ENV).tasks.get(task_id)
    for t, turn in enumerate(task.turns):
        for c in turn.ground_truth:
            manager.call(sid, c.name, c.arguments, tag=t)


def test_manager_scores_the_oracle_one_and_a_wrong_write_lower():
    m = SessionManager([ENV])
    tid = next(t.task_id for t in get_environment(ENV).tasks if t.n_ground_truth_calls)
    sid = m.create(ENV, task_id=tid).session_id
    _oracle_calls(m, sid, tid)
    s = m.score(sid)
    assert s["reward"] == 1.0 and s["r_traj"] == 1.0 and s["state_diff"] == []
    empty = m.create(ENV, task_id=tid).session_id
    assert m.score(empty)["r_traj"] == 0.0
    with pytest.raises(BadRequestError, match="task"):
        m.score(m.create(ENV).session_id)
    with pytest.raises(BadRequestError, match="reward"):
        m.score(sid, reward={"alpha": 7})


def test_score_equals_the_in_process_reward_of_the_same_episode():
    env = EnvFactoryEnv(ENV, backend="inprocess")
    tid = env.tasks.ids()[0]
    local = run_episode(env, OraclePolicy(), task_id=tid)
    m = SessionManager([ENV])
    sid = m.create(ENV, task_id=tid).session_id
    _oracle_calls(m, sid, tid)
    assert m.score(sid)["reward"] == local.reward == 1.0


def test_score_over_http_rpc_and_the_fast_protocol():
    proc, url = start_server(ENV)
    try:
        tid = get_environment(ENV).tasks.ids()[0]
        status, body = rpc(url, "create", env=ENV, task_id=tid)
        sid = json.loads(body)["result"]["session_id"]
        status, body = rpc(url, "score", session_id=sid)
        assert status == 200 and set(json.loads(body)["result"]) >= {"reward", "r_traj", "r_state", "p_len", "state_diff"}
        client = SessionClient(url, token=TOKEN)
        try:
            created = client.request("create", env=ENV, task_id=tid)
            task = get_environment(ENV).tasks.get(tid)
            for t, turn in enumerate(task.turns):
                for c in turn.ground_truth:
                    client.request("call", session_id=created["session_id"], name=c.name, arguments=c.arguments, tag=t)
            assert client.request("score", session_id=created["session_id"])["reward"] == 1.0
            with pytest.raises(RemoteError):
                client.request("score", session_id="no-such-session")
        finally:
            client.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_server_score_counts_every_call_an_unrecorded_summary_stands_for():
    """A message with hundreds of junk calls leaves a bounded log (one summary record, made by the env
    with ``not_recorded=N``, for the calls not recorded one by one); the server's ``score`` counts each of
    them in P_len, as the env's reward does.  A model cannot forge one: a call (or parse error) whose
    arguments read ``{"not_recorded": N}`` is one invalid call."""
    m = SessionManager([ENV])
    tid = get_environment(ENV).tasks.ids()[0]
    sid = m.create(ENV, task_id=tid).session_id
    for _ in range(3):
        m.record_invalid(sid, "nope", "junk", "malformed", tag=0)
    m.record_invalid(sid, "invalid_tool_call", None, "40 more invalid calls were not recorded", tag=0, not_recorded=40)
    m.record_invalid(sid, "invalid_tool_call", {"not_recorded": 10**6}, "a forged summary is one call", tag=0)
    m.call(sid, "invalid_tool_call", {"not_recorded": 10**6}, tag=0)
    m.call(sid, "list_hotel_destinations", {"not_recorded": 10**6}, tag=0)
    assert m.score(sid)["p_len"] == 3 + 40 + 1 + 1 + 1
    with pytest.raises(BadRequestError, match="not_recorded"):
        m.record_invalid(sid, "x", None, "m", not_recorded=-1)


def test_env_and_server_agree_on_p_len_for_junk_and_forged_summaries():
    """The same junk-heavy episode scored by the env (in-process) and by the server (url backend)."""
    proc, url = start_server(ENV)
    try:
        tid = get_environment(ENV).tasks.ids()[0]
        junk = "<tool_call>{bad</tool_call>" * 40
        forged = '<tool_call>{"name": "invalid_tool_call", "arguments": {"not_recorded": 1000000}}</tool_call>'
        p_len = []
        for backend in ("inprocess", "url"):
            kw = {"url": url, "token": TOKEN} if backend == "url" else {}
            env = EnvFactoryEnv(ENV, backend=backend, **kw)
            env.reset(options={"task_id": tid})
            env.step(junk)
            env.step(forged)
            local = env.score().p_len
            if backend == "url":
                client = env.session.client
                assert client.request("score", session_id=env.session.session_id)["p_len"] == local
            p_len.append(local)
            env.close()
        assert p_len[0] == p_len[1] == 41
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_server_score_reads_the_action_log_without_deep_copying_it(monkeypatch):
    """Was: ``SessionManager.score`` read ``session.action_log`` (a deep copy of every record), so one
    score of a 30k-call session took seconds on the server's event loop.  Now it reads the records
    without copying (they are immutable); checked by behaviour, not by a clock."""
    import copy as copy_module

    m = SessionManager(["HotelBooking"])
    ms = m.create("HotelBooking", task_id="hotel-003")
    for _ in range(200):
        m.call(ms.session_id, "get_hotel_details", {"hotel_id": "H-101"}, tag=0)
    copies = []
    real = copy_module.deepcopy
    monkeypatch.setattr(copy_module, "deepcopy", lambda x, memo=None: copies.append(type(x)) or real(x, memo))
    score = m.score(ms.session_id)
    assert score["surplus"] >= 196 and not any(c is list for c in copies)



def test_score_counts_summaries_as_counts_without_expanding_them():
    """Issue 25, item 2: summary records' ``not_recorded`` counts were expanded into lists (150 records of
    10**6: 1.2 GB).  They are carried as counts: the score still counts every call, in bounded memory."""
    import tracemalloc

    m = SessionManager([ENV])
    tid = get_environment(ENV).tasks.ids()[0]
    sid = m.create(ENV, task_id=tid).session_id
    for t in range(20):
        m.record_invalid(sid, "invalid_tool_call", None, "not recorded", tag=t % 2, not_recorded=10**6)
    m.record_invalid(sid, "nope", "junk", "malformed", tag=1)
    m.score(sid)  # warm up: imports, the task reference
    tracemalloc.start()
    try:
        out = m.score(sid)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out["p_len"] == 20 * 10**6 + 1 and out["invalid"] == 20 * 10**6 + 1
    assert peak < 16 * 1024 * 1024  # expanded, 20 x 10**6 list entries were 160 MB


def test_score_bounds_the_texts_a_client_sends():
    m = SessionManager([ENV])
    tid = get_environment(ENV).tasks.ids()[0]
    sid = m.create(ENV, task_id=tid).session_id
    with pytest.raises(BadRequestError, match="at most 10000 texts"):
        m.score(sid, texts=[""] * 10_001)
    with pytest.raises(BadRequestError, match="characters"):
        m.score(sid, texts=["x" * (4 * 1024 * 1024 + 1)])
    assert m.score(sid, texts=["hello"] * 3)["reward"] >= 0


def _frame(*reqs):
    return json.dumps([{"jsonrpc": "2.0", "id": i, "method": m, "params": p} for i, (m, p) in enumerate(reqs)])


def test_a_score_in_a_frame_scores_the_state_at_its_place_in_the_frame():
    """Issue 24, part 4: the server computes a ``score`` off the worker, from what it read at the score's
    place in the frame; a write later in the same frame does not change it, and the answers are the
    ones computed here and now."""
    import asyncio

    from gym_envfactory.server.fastproto import dispatch_frame, dispatch_frame_async

    task = next(t for t in get_environment(ENV).tasks if t.n_ground_truth_calls)
    calls = [c for turn in task.turns for c in turn.ground_truth]

    def run(dispatch):
        m = SessionManager([ENV])
        sid = m.create(ENV, task_id=task.task_id).session_id
        reqs = [("score", {"session_id": sid})]
        reqs += [("call", {"session_id": sid, "name": c.name, "arguments": c.arguments, "tag": t})
                 for t, turn in enumerate(task.turns) for c in turn.ground_truth]
        reqs += [("score", {"session_id": sid}), ("score", {"session_id": "nope"}), ("score", {})]
        out = dispatch(m, _frame(*reqs))
        return json.loads(out)

    inline = run(dispatch_frame)
    deferred = run(lambda m, f: asyncio.run(dispatch_frame_async(m, f)))
    assert [a["id"] for a in deferred] == list(range(len(calls) + 4))
    before, after = deferred[0]["result"], deferred[len(calls) + 1]["result"]
    assert before["r_traj"] == 0.0 and after["reward"] == 1.0 and after["state_diff"] == []
    assert deferred[-2]["error"]["code"] == -32001 and deferred[-1]["error"]["code"] == -32602
    assert deferred == inline


def test_a_long_score_holds_no_other_request():
    """Issue 24, part 4: while one client's ``score`` computes (held here on a gate, standing for a score
    of a huge state), another client's call and this client's next frame are answered; the score's own
    frame answers once it is done.  No clock: the gate is released only after the others answered."""
    import asyncio
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from gym_envfactory.server.fastproto import Caller, dispatch_frame_async

    m = SessionManager([ENV])
    gate, started = threading.Event(), threading.Event()
    pool = ThreadPoolExecutor(max_workers=1)

    class Gated:
        def submit(self, job):
            def held():
                started.set()
                assert gate.wait(60), "the gate was never opened"
                return job()
            return pool.submit(held)

    m.scorer = Gated()
    tid = get_environment(ENV).tasks.ids()[0]
    a = m.create(ENV, task_id=tid, client="a").session_id
    b = m.create(ENV, client="b").session_id

    async def main():
        scoring = asyncio.ensure_future(dispatch_frame_async(m, _frame(("score", {"session_id": a})), caller=Caller("a")))
        for _ in range(6000):  # a liveness bound, not a timing: the score reaches the scorer at once
            if started.is_set():
                break
            await asyncio.sleep(0.01)
        assert started.is_set(), "the score never reached the scoring thread"
        other = await asyncio.wait_for(dispatch_frame_async(
            m, _frame(("call", {"session_id": b, "name": "get_hotel_details", "arguments": {"hotel_id": "H-101"}})),
            caller=Caller("b")), 60)
        mine = await asyncio.wait_for(dispatch_frame_async(m, _frame(("info", {"session_id": a})), caller=Caller("a")), 60)
        assert not scoring.done()
        gate.set()
        return json.loads(await asyncio.wait_for(scoring, 60)), json.loads(other), json.loads(mine)

    try:
        (score,), (call,), (info,) = asyncio.run(main())
    finally:
        gate.set()
        pool.shutdown()
    assert "reward" in score["result"] and "result" in call and info["result"]["session_id"] == a


def test_scores_waiting_for_the_scoring_thread_are_held_within_the_memory_budget():
    """Issue 25, second adversarial pass: a 56 KB frame of 500 scores of one session with 5,000 logged
    calls queued 500 jobs behind a busy scoring thread, each holding its turns and calls (708 MiB on a
    512 MiB budget).  Each waiting job now reserves what it holds: past the budget a score is refused
    -32006, and what the jobs reserved is given back once they have run."""
    import threading

    from gym_envfactory.server.admission import Admission, MemoryBudget
    from gym_envfactory.server.fastproto import ERR_MEMORY, Caller, FrameJob

    mib = 1024 * 1024
    admission = Admission(MemoryBudget(64 * mib, "test", 0), rss=lambda: 16 * mib, trim=lambda: None)
    m = SessionManager([ENV], memory_budget=admission)
    tid = next(t.task_id for t in get_environment(ENV).tasks if t.n_ground_truth_calls)
    sid = m.create(ENV, task_id=tid, client="a").session_id
    c = get_environment(ENV).tasks.get(tid).turns[0].ground_truth[0]
    for i in range(2000):
        m.call(sid, c.name, c.arguments, tag=i)
    reserved = admission.reserved
    gate = threading.Event()
    m.scorer.submit(gate.wait)  # a long score running: the others wait
    try:
        frame = json.dumps([{"jsonrpc": "2.0", "id": j, "method": "score", "params": {"session_id": sid}}
                            for j in range(400)])
        job = FrameJob(m, frame, caller=Caller("a"), submit=m.scorer.submit)
        while not job.step():
            pass
        waiting = len(job.pending)
        assert 0 < waiting < 400  # some queued, the rest refused instead of held
        assert admission.reserved <= 64 * mib and m.score_held > 0
        refused = [p for p in job._parts if p]
        assert len(refused) == 400 - waiting and all(json.loads(p)["error"]["code"] == ERR_MEMORY for p in refused)
    finally:
        gate.set()
    for _, _, fut in job.pending:
        assert fut.result(timeout=120)["r_traj"] is not None
    assert job.complete() and m.score_held == 0 and admission.reserved == reserved
    m.scorer.shutdown()
