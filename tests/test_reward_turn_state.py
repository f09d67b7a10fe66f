"""Turn verdicts, cumulative or delta (docs/reward.md, "Turn verdicts: cumulative or delta"): one wrong write
in turn 0 zeroes every later turn's cumulative R_state, while the delta verdict judges what each turn itself
changed; the episode score is the same under both."""

from __future__ import annotations

import pytest

from gym_envfactory import EnvFactoryEnv, ToolCall, get_environment
from gym_envfactory.replay import TaskReference
from gym_envfactory.reward import (
    RewardConfig,
    TurnRecord,
    changes_diff,
    score_episode,
    score_turn,
    state_changes,
)
from gym_envfactory.rollout.policies import OraclePolicy
from gym_envfactory.rollout.runner import run_episode
from gym_envfactory.state_compare import ABSENT

DELTA = RewardConfig(turn_state="delta")


def test_state_changes_lists_changed_paths_with_their_new_values():
    before = {"a": {"x": 1, "y": [1, 2], "n": "keep"}, "b": {"gone": 1}, "log": 1}
    after = {"a": {"x": 2.0, "y": [1, 2, 3], "n": "keep", "new": {"k": 1}}, "b": {}, "log": 2}
    got = state_changes(before, after, bookkeeping=["log"])
    assert got == {"a.x": 2.0, "a.y": [1, 2, 3], "a.new": {"k": 1}, "b.gone": ABSENT}
    assert state_changes(before, before) == {}
    assert state_changes({"x": 5}, {"x": 5.0}) == {}  # numbers by value
    assert state_changes({"s": [1, 2]}, {"s": [2, 1]}, set_fields=["s"]) == {}
    assert state_changes({"s": [1, 2]}, {"s": [2, 1]}) == {"s": [2, 1]}  # an ordered list changed


def test_changes_diff_compares_paths_and_values():
    assert changes_diff({"a.x": 2}, {"a.x": 2.0}) == []
    assert changes_diff({"b.gone": ABSENT}, {"b.gone": ABSENT}) == []
    assert [str(d) for d in changes_diff({"a.x": 3}, {"a.x": 2})] == ["a.x: expected 2, got 3"]
    assert [str(d) for d in changes_diff({}, {"a.x": 2})] == ["a.x: expected 2, got <unchanged>"]
    assert [str(d) for d in changes_diff({"a.z": 1}, {})] == ["a.z: expected <unchanged>, got 1"]
    # excluded paths inside a changed value are ignored
    assert changes_diff({"r": {"v": 1, "at": 5}}, {"r": {"v": 1, "at": 9}}, bookkeeping=["r.at"]) == []


def _two_turns():
    """Turn 0 sets a=1, turn 1 sets b=1 (hand-built, canonical dict states)."""
    s0, s1, s2 = {"a": 0, "b": 0, "c": 0}, {"a": 1, "b": 0, "c": 0}, {"a": 1, "b": 1, "c": 0}
    return TaskReference.from_parts([[("set_a", {}, ())], [("set_b", {}, ())]], [s1, s2], initial=s0)


def test_a_wrong_write_in_turn_0_zeroes_turn_1_cumulatively_not_in_delta():
    ref = _two_turns()
    # turn 0 sets a and, wrongly, c; turn 1 does exactly the right thing
    records = [TurnRecord(calls=[("set_a", {}, False), ("set_c", {}, False)], state={"a": 1, "b": 0, "c": 1}),
               TurnRecord(calls=[("set_b", {}, False)], state={"a": 1, "b": 1, "c": 1})]
    cum = score_episode(records, ref, records[-1].state, RewardConfig())
    delta = score_episode(records, ref, records[-1].state, DELTA)
    assert [t.r_state for t in cum.turns] == [0.0, 0.0]
    assert [t.r_state for t in delta.turns] == [0.0, 1.0]
    assert delta.turns[1].reward == 1.0 and cum.turns[1].reward == 0.5
    # the episode score does not change with the option
    assert (delta.reward, delta.r_state, delta.r_traj) == (cum.reward, cum.r_state, cum.r_traj)
    # score_turn on its own needs the turn's start state for turn 1 (else it judges cumulatively)
    assert score_turn(1, records[1], ref, DELTA).r_state == 0.0
    rec = TurnRecord(calls=records[1].calls, state=records[1].state, start=records[0].state)
    assert score_turn(1, rec, ref, DELTA).r_state == 1.0


def test_delta_judges_a_turn_on_its_own_writes():
    ref = _two_turns()
    # both writes early in turn 0, nothing in turn 1: the final state is right, but neither turn did its part
    early = [TurnRecord(state={"a": 1, "b": 1, "c": 0}), TurnRecord(state={"a": 1, "b": 1, "c": 0})]
    assert [t.r_state for t in score_episode(early, ref, early[-1].state, DELTA).turns] == [0.0, 0.0]
    # the right writes in both turns: 1 in both modes
    right = [TurnRecord(state={"a": 1, "b": 0, "c": 0}), TurnRecord(state={"a": 1, "b": 1, "c": 0})]
    for cfg in (RewardConfig(), DELTA):
        assert [t.r_state for t in score_episode(right, ref, right[-1].state, cfg).turns] == [1.0, 1.0]
    # a read-only ground-truth turn: doing nothing is vacuous, a write scores 0 (the no-change rule)
    ro = TaskReference.from_parts([[("get", {}, ())]], [{"a": 0}], initial={"a": 0})
    assert score_turn(0, TurnRecord(state={"a": 0}), ro, DELTA).r_state is None
    assert score_turn(0, TurnRecord(state={"a": 5}), ro, DELTA).r_state == 0.0


def test_config_validates_turn_state_and_reports_it():
    with pytest.raises(ValueError, match="turn_state"):
        RewardConfig(turn_state="final")
    ref = _two_turns()
    recs = [TurnRecord(state={"a": 1, "b": 0, "c": 0})]
    assert score_episode(recs, ref, recs[-1].state, RewardConfig()).to_dict()["config"]["turn_state"] == "cumulative"
    assert score_episode(recs, ref, recs[-1].state, DELTA).to_dict()["config"]["turn_state"] == "delta"


def _hotel_014(mode: str) -> list[dict]:
    """hotel-014 (cancel the Barcelona booking, then move the Kyoto one) with turn 0 cancelling the wrong
    booking and turn 1 right; returns the turn scores and the final info's score."""
    env = EnvFactoryEnv("HotelBooking", reward={"turn_state": mode})
    env.reset(options={"task_id": "hotel-014"})
    env.step(ToolCall("cancel_hotel_booking", {"booking_id": "BK-0074", "reason": "x"}))  # the Oslo one
    *_, info0 = env.step("Done.")
    env.step(ToolCall("modify_hotel_booking", {"booking_id": "BK-0100", "check_in": "2027-01-09",
                                               "check_out": "2027-01-12", "room_type": "QN", "guests": 1}))
    *_, info1 = env.step("Done.")
    env.close()
    return [info0["turn_score"], info1["turn_score"], info1["score"]]


def test_hotel_014_in_process_frozen_states():
    t0, t1, ep = _hotel_014("cumulative")
    d0, d1, dep = _hotel_014("delta")
    assert (t0["r_state"], t1["r_state"]) == (0.0, 0.0)
    assert (d0["r_state"], d1["r_state"]) == (0.0, 1.0)
    assert d1["reward"] == 1.0
    assert (dep["reward"], dep["r_state"]) == (ep["reward"], ep["r_state"])
    assert [t["r_state"] for t in dep["turns"]] == [0.0, 1.0]


@pytest.mark.parametrize("env_name", ["HotelBooking", "TeamCalendar", "CloudDrive"])
def test_delta_equals_cumulative_when_every_turn_starts_right(env_name):
    """An agent whose every turn starts from the ground truth's state gets the same verdicts both ways."""
    tasks = [t for t in get_environment(env_name).tasks if len(t.turns) > 1][:6]
    assert tasks
    for task in tasks:
        got = {}
        for mode in ("cumulative", "delta"):
            env = EnvFactoryEnv(env_name, reward={"turn_state": mode})
            r = run_episode(env, OraclePolicy(), task_id=task.task_id)
            got[mode] = ([t["r_state"] for t in env.last_score.to_dict()["turns"]], r.reward)
            env.close()
        assert got["cumulative"] == got["delta"], task.task_id


def test_delta_in_a_turn_window_starts_from_the_window_state():
    env = EnvFactoryEnv("HotelBooking", reward={"turn_state": "delta"})
    env.reset(options={"task_id": "hotel-014", "start_turn": 1})
    env.step(ToolCall("modify_hotel_booking", {"booking_id": "BK-0100", "check_in": "2027-01-09",
                                               "check_out": "2027-01-12", "room_type": "QN", "guests": 1}))
    *_, info = env.step("Done.")
    assert info["turn_score"]["r_state"] == 1.0 and info["score"]["reward"] == 1.0
    env.close()
