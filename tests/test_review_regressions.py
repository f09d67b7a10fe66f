"""Regressions from an adversarial review: each test names a defect found in review (it failed on the
code it was written against) and now checks the fixed behaviour.

Areas: turn windows / StepInfo / TimeLimit / vector envs / asyncio / R_state / server score / export /
Session.from_states.  Each test's docstring says what is wrong and what should happen instead.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded

import gym_envfactory  # noqa: F401  (registers the catalog)
from gym_envfactory import Session, ToolCall, define_environment, get_environment
from gym_envfactory.envs.env import EnvFactoryEnv, scripted_user
from gym_envfactory.errors import DatasetError
from gym_envfactory.replay import task_reference
from gym_envfactory.reward import RewardConfig, TurnRecord, score_episode
from gym_envfactory.rollout.policies import OraclePolicy
from gym_envfactory.server.manager import SessionManager


def _gt_calls(env: EnvFactoryEnv, turn: int) -> list[ToolCall]:
    assert env.task is not None
    return [ToolCall(c.name, dict(c.arguments)) for c in env.task.turns[turn].ground_truth]


def _hermes(call: ToolCall) -> str:
    return "<tool_call>" + json.dumps({"name": call.name, "arguments": call.arguments}) + "</tool_call>"


# ------------------------------------------------------------------------------------ StepInfo


def test_stepinfo_read_after_reset_scores_the_next_episode_not_its_own():
    """DEFECT: a StepInfo's lazy ``score`` is computed from whatever episode the env holds when it is
    read.  An info of task hotel-003 read after ``reset`` to hotel-001 reports hotel-001's score (while
    its ``task_id`` says hotel-003).  Should: the score of the episode the info belongs to, or an error."""
    env = EnvFactoryEnv("HotelBooking")
    env.reset(options={"task_id": "hotel-003"})
    n_gt_003 = sum(len(t.ground_truth) for t in env.task.turns)
    _, _, _, _, info = env.step(_gt_calls(env, 0)[0])
    env.reset(options={"task_id": "hotel-001"})
    try:
        score = info["score"]
    except (KeyError, ResetNeeded, RuntimeError):
        return  # refusing is acceptable
    assert info["task_id"] == "hotel-003"
    assert score["n_ground_truth"] == n_gt_003, "the info of hotel-003 carries the score of hotel-001"


def test_stepinfo_get_score_is_none_although_item_access_scores():
    """DEFECT (low): ``dict.get`` bypasses ``__missing__``: ``info.get("score")`` is ``None`` and
    ``"score" in info`` is False, while ``info["score"]`` works.  Code written as
    ``info.get("score")`` (common in trainers, and how the runner reads it) never sees the on-demand score."""
    env = EnvFactoryEnv("HotelBooking")
    env.reset(options={"task_id": "hotel-003"})
    _, _, _, _, info = env.step(_gt_calls(env, 0)[0])
    assert info.get("score") == info["score"]


# ------------------------------------------------------------------------------------ TimeLimit / vector envs


def test_time_limit_truncated_last_step_returns_zero_instead_of_the_episode_reward():
    """DEFECT: ``gym.make(id, max_episode_steps=N)`` never reaches the env's own limit
    (``self.spec.max_episode_steps`` in ``reset`` is always None on the unwrapped env, so that line is
    dead) and the outer TimeLimit truncates: the last step returns reward 0.0 in ``reward_mode="episode"``
    although docs/reward.md says the last step returns the episode reward.  Here every ground-truth
    call was made (score 1.0) and the trainer receives 0.0."""
    env = gym.make("envfactory/HotelBooking-v0", max_episode_steps=4)
    env.reset(options={"task_id": "hotel-029"})  # one turn, four ground-truth calls
    for call in _gt_calls(env.unwrapped, 0):
        _, r, term, trunc, info = env.step(call)
    assert trunc and not term
    assert info["score"]["reward"] == 1.0
    assert r == info["score"]["reward"], f"last step returned {r}, episode reward is {info['score']['reward']}"


def test_vector_env_time_limit_truncation_loses_score_and_reward():
    """DEFECT: in ``gym.make_vec`` (sync) with ``max_episode_steps`` the final info holds no ``score``
    (vector envs copy infos with ``items()``, so the lazy keys never materialise) and the reward is 0,
    though StepInfo's docstring promises a score under an outer TimeLimit and in vector envs."""
    v = gym.make_vec("envfactory/HotelBooking-v0", num_envs=1, vectorization_mode="sync", max_episode_steps=4)
    try:
        v.reset(options={"task_id": "hotel-029"})
        task = v.envs[0].unwrapped.task
        for c in task.turns[0].ground_truth:
            _, r, term, trunc, info = v.step([_hermes(ToolCall(c.name, dict(c.arguments)))])
        assert trunc[0]
        assert "score" in info, "no score in the vector info of a truncated episode"
        assert r[0] == 1.0
    finally:
        v.close()


# ------------------------------------------------------------------------------------ R_state


def test_partial_score_ignores_the_unfinished_turns_state():
    """DEFECT: ``env.score()`` / the lazy ``info["score"]`` mid-turn skip the current turn's state
    (its record has ``state=None``), so R_state is the mean of earlier turns only.  hotel-014: turn 0
    done right, then in turn 1 the agent cancels the booking it should modify.  The final state has 15
    differences, yet R_state is 1.0 and the reward 0.875; the same actions under the env's own step
    limit score R_state 0.5 / reward 0.625.  Should: the unfinished turn's state counts (0 here)."""
    env = EnvFactoryEnv("HotelBooking")
    env.reset(options={"task_id": "hotel-014"})
    for call in _gt_calls(env, 0):
        env.step(call)
    env.step("Done.")
    env.step(ToolCall("cancel_hotel_booking", {"booking_id": "BK-0100", "reason": "x"}))
    score = env.score()
    assert score.state_diff, "the final state is wrong"
    assert score.r_state is not None and score.r_state < 1.0, f"R_state {score.r_state} with a wrong final state"


def test_score_episode_extra_turns_can_break_the_state_for_free():
    """DEFECT (regression of the per-turn R_state mean): ``score_episode`` documents records longer than
    the task ("a custom user source: calls in extra turns are surplus"), but an extra turn's state is
    never judged and the final state no longer counts once any turn has a verdict.  Cancelling the
    booking just made (11 state differences) costs only the 0.05 surplus penalty: reward 0.95, R_state 1.0."""
    spec = get_environment("HotelBooking")
    ref = task_reference(spec, "hotel-029")
    s = Session.from_states(spec, ref.initial_state)
    rec0 = TurnRecord()
    for c in ref.turn_calls[0]:
        r = s.call(c.name, c.arguments)
        rec0.calls.append((r.name, r.arguments, r.is_invalid_call))
    rec0.state = s.state()
    rec1 = TurnRecord()
    r = s.call("cancel_hotel_booking", {"booking_id": "BK-0007", "reason": "oops"})
    assert r.ok
    rec1.calls.append((r.name, r.arguments, r.is_invalid_call))
    rec1.state = s.state()
    score = score_episode([rec0, rec1], ref, s.state(), RewardConfig())
    assert score.state_diff
    assert score.r_state is not None and score.r_state < 1.0, f"R_state {score.r_state}, reward {score.reward}"


def test_turn_mode_oracle_cannot_reach_one_on_tasks_with_a_clarification_turn():
    """DEFECT: in ``reward_mode="turn"`` a clarification turn scores 0.0 whatever the agent does (all
    components vacuous), so the oracle's return on hotel-006 is 0.5 (17 catalog tasks are capped this
    way) and the turn carries no signal: asking and guessing a lookup both get 0.  Should: a correct
    policy's return is 1.0 (e.g. score a clarification turn on 'no call made')."""
    env = EnvFactoryEnv("HotelBooking", reward_mode="turn")
    env.reset(options={"task_id": "hotel-006"})
    policy = OraclePolicy()
    policy.begin(env)
    total, done = 0.0, False
    while not done:
        _, r, term, trunc, _ = env.step(policy.act(env))
        total += r
        done = term or trunc
    assert total == pytest.approx(1.0), f"oracle return {total} in turn mode"


# ------------------------------------------------------------------------------------ windows / reset


def test_window_options_reject_numpy_integers_with_a_self_contradictory_message():
    """DEFECT (low): ``start_turn=np.int64(1)`` (turn indices coming out of numpy/pandas data
    pipelines) is refused with "need 0 <= start_turn < end_turn <= 3, got start_turn=np.int64(1),
    end_turn=np.int64(2)", which satisfies the stated condition.  Should accept any non-bool integral."""
    env = EnvFactoryEnv("HotelBooking")
    _, info = env.reset(options={"task_id": "hotel-003", "start_turn": np.int64(1), "end_turn": np.int64(2)})
    assert info["start_turn"] == 1 and info["end_turn"] == 2


def test_failed_reset_leaves_a_steppable_half_reset_episode():
    """DEFECT: when the user source raises in ``reset`` (an LLM-simulated user timing out), the env is
    left half reset: new task and session, the previous episode's records and counters, ``done=False``.
    The next ``step`` runs and scores the new task with the old episode's calls.  Should: ResetNeeded."""
    def flaky_user(conv, task, i):
        if task.task_id == "hotel-001":
            raise RuntimeError("user simulator down")
        return scripted_user(conv, task, i)

    env = EnvFactoryEnv("HotelBooking", user=flaky_user)
    env.reset(options={"task_id": "hotel-003"})
    env.step(_gt_calls(env, 0)[0])
    with pytest.raises(RuntimeError):
        env.reset(options={"task_id": "hotel-001"})
    with pytest.raises(ResetNeeded):
        env.step("Done.")


# ------------------------------------------------------------------------------------ asyncio


def test_cancelled_astep_keeps_running_and_the_next_astep_crashes_with_indexerror():
    """DEFECT: ``astep`` runs ``step`` in a worker thread; cancelling it (``asyncio.wait_for`` timeout)
    does not stop the step, so the env advances behind the caller's back, and the next ``astep``
    overlaps it and dies with a bare ``IndexError`` (``self.records[self.turn - start]``).  Should:
    steps of one env serialised (or a clear 'step in progress' error), never a corrupted episode."""
    def slow_user(conv, task, i):
        if i > 0:
            time.sleep(0.3)
        return scripted_user(conv, task, i)

    async def main():
        env = EnvFactoryEnv("HotelBooking", user=slow_user)
        await env.areset(options={"task_id": "hotel-003"})
        with pytest.raises((asyncio.TimeoutError, TimeoutError)):
            await asyncio.wait_for(env.astep("Done."), timeout=0.05)
        try:
            await env.astep('<tool_call>{"name": "list_hotel_destinations", "arguments": {}}</tool_call>')
        except IndexError as exc:
            pytest.fail(f"overlapping step corrupted the episode: IndexError {exc}")
        except Exception:  # noqa: BLE001 - a clear refusal is fine
            pass
        finally:
            await asyncio.sleep(0.5)

    asyncio.run(main())


# ------------------------------------------------------------------------------------ remote backends


def test_group_close_on_subprocess_backend_hangs_a_minute_per_fork():
    """DEFECT: ``RolloutGroup.close`` closes the base env first, which releases the subprocess backend
    and stops the client's event loop; each fork's ``close`` then blocks ``timeout + 5`` = 65 s on a
    coroutine submitted to the stopped loop (``SessionClient._run``).  A GRPO group of k members takes
    ~65·(k−1) s to close.  Should: close in well under a second."""
    from gym_envfactory import make_group

    g = make_group("HotelBooking", 3, options={"task_id": "hotel-003"}, backend="subprocess")
    t = threading.Thread(target=g.close, daemon=True)
    t.start()
    t.join(15)
    assert not t.is_alive(), "RolloutGroup.close() still blocked after 15 s"


# ------------------------------------------------------------------------------------ server score


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


# ------------------------------------------------------------------------------------ export


def _write(tmp_path, obj, raw: str | None = None):
    p = tmp_path / "traj.jsonl"
    p.write_text((raw if raw is not None else json.dumps(obj)) + "\n", encoding="utf-8")
    return p


def test_read_trajectories_keeps_nan_reward_despite_min_reward(tmp_path):
    """DEFECT: ``reward < min_reward`` is False for NaN, so a trajectory with ``"reward": NaN`` (or
    ``"nan"``) passes ``--min-reward 1.0`` and lands in the SFT file, which then holds ``"reward": NaN``
    (not valid JSON for strict readers).  Should: rejected (DatasetError) or filtered out."""
    from gym_envfactory.training.export.episodes import read_trajectories

    msgs = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "Done."}]
    p = _write(tmp_path, None, raw='{"env": "HotelBooking", "task_id": "hotel-001", "reward": NaN, "messages": ' + json.dumps(msgs) + "}")
    try:
        kept = list(read_trajectories(p, min_reward=1.0))
    except DatasetError:
        return
    assert not kept or not math.isnan(kept[0].reward), "a NaN-reward trajectory passed min_reward=1.0"


def test_read_trajectories_accepts_messages_that_are_not_a_list_of_messages(tmp_path):
    """DEFECT (low): ``list(obj["messages"])`` turns ``"messages": "hello"`` into five one-letter
    'messages'; ``envfactory export sft`` then dies with ``AttributeError: 'str' object has no attribute
    'get'`` and a traceback instead of the DatasetError naming file and line that the docstring promises."""
    from gym_envfactory.training.export.episodes import read_trajectories

    p = _write(tmp_path, {"env": "HotelBooking", "task_id": "hotel-001", "reward": 1.0, "messages": "hello"})
    with pytest.raises(DatasetError):
        list(read_trajectories(p))


def test_rl_rows_export_a_window_whose_reward_is_constant_under_the_default_config():
    """DEFECT: ``_has_criteria`` counts expected outputs as something to score, but the default reward
    has ``output_weight=0``: a turn with no ground-truth call and no state change but an expected output
    (a recall question) is exported, and every policy gets the same 0.0 on it (zero GRPO advantage,
    exactly what the filter is meant to drop).  Should: the row is left out, or its reward varies."""
    from gym_envfactory.training.export.rl import rl_rows
    from tests.conftest import LIBRARY_STATE, LibraryDB, borrow_book, get_book

    define_environment(
        "LibraryRecallAdv", LibraryDB, [get_book, borrow_book], initial_state=LIBRARY_STATE,
        tasks=[{"task_id": "recall", "turns": [
            {"user": "Borrow Dune for ada.", "ground_truth": [{"name": "borrow_book", "arguments": {"book_id": "B1", "member": "ada"}}],
             "expected_outputs": ["L-0001"]},
            {"user": "What was the loan id again?", "expected_outputs": ["L-0001"]}]}])
    rows = [r for r in rl_rows(["LibraryRecallAdv"]) if r["extra_info"]["turn"] == 1]
    for row in rows:
        rewards = set()
        for reply in ("Your loan id is L-0001.", "I do not remember."):
            env = EnvFactoryEnv("LibraryRecallAdv")
            env.reset(options=row["extra_info"]["reset_options"])
            _, r, *_ = env.step(reply)
            rewards.add(r)
        assert len(rewards) > 1, f"exported window scores {rewards} for a right and a wrong answer"


# ------------------------------------------------------------------------------------ sessions


def test_from_states_with_bad_bytes_destroys_the_session_state():
    """DEFECT (low): ``Session.from_states`` defers parsing; with bytes that do not validate, the first
    ``call`` raises a raw pydantic ValidationError (the module promises a bad call never raises) and
    ``_model`` has already popped the pending state, so every later ``state()``/``snapshot()``/``fork()``
    raises ``KeyError``.  Should: validate up front (SpecError) or keep the session consistent."""
    spec = get_environment("HotelBooking")
    try:
        s = Session.from_states(spec, {"HotelBooking": b'{"x": 1}'})
    except Exception:  # noqa: BLE001 - refusing at construction is fine
        return
    try:
        s.call("list_hotel_destinations", {})
    except Exception:  # noqa: BLE001
        pass
    try:
        s.state()
    except KeyError as exc:
        pytest.fail(f"session lost its state after a failed lazy parse: KeyError {exc}")
    except Exception:  # noqa: BLE001 - a clear error is fine
        pass
