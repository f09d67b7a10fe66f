"""Episode edge cases of the Gymnasium layer (docs/architecture.md, "The Gymnasium contract"): ``info``'s
lazy score across resets, truncation by ``TimeLimit`` and in vector envs, turn-window options, a failed
reset, a cancelled ``astep``, and closing a GRPO group on a remote backend.  Each test was written
against the defect its name describes and checks the fixed behaviour."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded

import gym_envfactory  # noqa: F401  (registers the catalog)
from gym_envfactory import ToolCall
from gym_envfactory.envs.env import EnvFactoryEnv, scripted_user


def _gt_calls(env: EnvFactoryEnv, turn: int) -> list[ToolCall]:
    assert env.task is not None
    return [ToolCall(c.name, dict(c.arguments)) for c in env.task.turns[turn].ground_truth]


def _hermes(call: ToolCall) -> str:
    return "<tool_call>" + json.dumps({"name": call.name, "arguments": call.arguments}) + "</tool_call>"


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

