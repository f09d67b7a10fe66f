"""The composite reward (docs/reward.md)."""

from __future__ import annotations

import pytest

import gym_envfactory  # noqa: F401  (registers the catalog)
from gym_envfactory import Session, ToolCall, get_environment
from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.replay import TaskReference, task_reference
from gym_envfactory.reward import (
    RewardConfig,
    TurnRecord,
    contains_output,
    match_calls,
    score_episode,
    state_diff,
    values_equal,
)
from gym_envfactory.rollout.policies import OraclePolicy


def gt(*calls):
    return [(n, a, m) for n, a, m in calls]


def test_multiset_matching_consumes_each_ground_truth_once():
    g = gt(("weather", {"city": "Oslo"}, []), ("weather", {"city": "Lima"}, []))
    assert match_calls([("weather", {"city": "Lima"}), ("weather", {"city": "Lima"})], g) == [None, 0]
    assert match_calls([("weather", {"city": "Lima"}), ("weather", {"city": "Oslo"})], g) == [1, 0]


def test_masked_arguments_ignored_and_invalid_never_match():
    g = gt(("note", {"id": 1, "text": "hello"}, ["text"]))
    assert match_calls([("note", {"id": 1, "text": "whatever"})], g) == [0]
    assert match_calls([("note", None)], g) == [None]


def test_masked_arguments_are_per_ground_truth_call():
    """masked_arguments (EnvFactory's reward_model.ground_truth): keys the reward ignores for that call only;
    a call differing in a masked key matches, one differing in an unmasked key does not."""
    g = gt(("search", {"query": "rooms", "limit": 5}, ["limit"]), ("search", {"query": "flights", "limit": 5}, []))
    assert match_calls([("search", {"query": "rooms", "limit": 10})], g) == [0, None]
    assert match_calls([("search", {"query": "rooms"})], g) == [0, None]  # a masked key left out
    assert match_calls([("search", {"query": "flights", "limit": 10})], g) == [None, None]
    assert match_calls([("search", {"query": "hotels", "limit": 5})], g) == [None, None]


def test_numbers_compare_by_value_bools_are_not_numbers():
    assert values_equal({"a": [5]}, {"a": [5.0]})
    assert not values_equal(True, 1) and not values_equal({"a": 1}, {"a": 1, "b": 2})


def test_state_diff_paths_bookkeeping_and_sets():
    a = {"count": 3, "items": {"x": {"status": "open", "tags": ["b", "a"]}}}
    e = {"count": 9, "items": {"x": {"status": "closed", "tags": ["a", "b"]}}}
    d = state_diff(a, e, bookkeeping=["count"], set_fields=["items.*.tags"])
    assert [x.path for x in d] == ["items.x.status"]
    assert "closed" in d[0].expected and "open" in d[0].actual
    assert state_diff({"l": [1, 2]}, {"l": [2, 1]}) != []
    assert state_diff({"k": 1}, {}) [0].path == "k"


def test_token_boundary_outputs():
    assert not contains_output("That is 100 nights", "10")
    assert contains_output("Your total is 10.", "10")
    assert contains_output("Total: 1,250.00 EUR", "1250")
    assert not contains_output("version 1.10", "10")
    assert contains_output("Booked at casa azul!", "Casa Azul")
    assert not contains_output("BK-00012", "BK-0001")
    assert contains_output("id BK-0001.", "BK-0001")


def _score(records, gt_calls, gt_states, outputs, final, **cfg):
    return score_episode(records, TaskReference.from_parts(gt_calls, gt_states, outputs), final, RewardConfig(**cfg))


def test_episode_reward_formula_and_penalty_cap():
    g = [gt(("f", {"x": 1}, []), ("f", {"x": 2}, []))]
    rec = [TurnRecord(calls=[("f", {"x": 1}, False), ("f", {"x": 1}, False)], text="ok", state={"s": 1})]
    s = _score(rec, g, [{"s": 1}], [[]], {"s": 1})
    assert s.r_traj == 0.5 and s.r_state == 1.0 and s.p_len == 0 and s.reward == pytest.approx(0.75)
    rec = [TurnRecord(calls=[("f", {"x": 1}, False), ("f", {"x": 2}, False)] + [("g", None, True)] * 30, text="", state={"s": 1})]
    s = _score(rec, g, [{"s": 1}], [[]], {"s": 1})
    assert s.invalid == 30 and s.penalty == 0.5 and s.reward == pytest.approx(0.5)
    s = _score(rec, g, [{"s": 1}], [[]], {"s": 1}, alpha=1.0, gamma=0.0)
    assert s.reward == 1.0


def test_vacuous_components_are_reported_not_counted():
    rec = [TurnRecord(calls=[], text="hi", state={"s": 1})]
    s = _score(rec, [[]], [{"s": 2}], [[]], {"s": 1}, output_weight=1.0)
    assert s.r_traj is None and s.r_output is None
    assert set(s.vacuous) == {"r_traj", "r_output"}
    assert s.reward == 0.0  # only R_state remains and it is 0, not a silent 1.0


def test_truncated_episode_counts_unreached_turns():
    g = [gt(("f", {"x": 1}, [])), gt(("f", {"x": 2}, []))]
    rec = [TurnRecord(calls=[("f", {"x": 1}, False)], state={"s": 1})]
    s = _score(rec, g, [{"s": 1}, {"s": 2}], [[], []], {"s": 1})
    # R_state is the mean of per-turn verdicts: turn 0 right (1.0), turn 1 never reached (0.0)
    assert s.r_traj == 0.5 and s.r_state == 0.5 and len(s.turns) == 1


def test_config_validation():
    with pytest.raises(ValueError):
        RewardConfig(alpha=1.5)
    assert RewardConfig.coerce({"alpha": 0.7}).alpha == 0.7


def test_early_writes_lower_episode_r_state_even_when_the_final_state_is_right():
    """All of a two-turn task's writes done in turn 0: the final state equals the ground truth's, but
    the state after turn 0 does not, so the episode R_state is the mean of 0.0 and 1.0."""
    g = [gt(("f", {"x": 1}, [])), gt(("f", {"x": 2}, []))]
    early = [TurnRecord(calls=[("f", {"x": 1}, False), ("f", {"x": 2}, False)], state={"s": 2}),
             TurnRecord(calls=[], state={"s": 2})]
    s = _score(early, g, [{"s": 1}, {"s": 2}], [[], []], {"s": 2})
    assert s.state_diff == [] and [t.r_state for t in s.turns] == [0.0, 1.0]
    assert s.r_state == 0.5
    on_time = [TurnRecord(calls=[("f", {"x": 1}, False)], state={"s": 1}),
               TurnRecord(calls=[("f", {"x": 2}, False)], state={"s": 2})]
    assert _score(on_time, g, [{"s": 1}, {"s": 2}], [[], []], {"s": 2}).r_state == 1.0


def test_without_turn_states_the_final_state_decides():
    g = [gt(("f", {"x": 1}, []))]
    s = _score([TurnRecord(calls=[("f", {"x": 1}, False)], state=None)], g, [{"s": 1}], [[]], {"s": 1})
    assert s.r_state == 1.0


def _gt_calls(env: EnvFactoryEnv, turn: int) -> list[ToolCall]:
    assert env.task is not None
    return [ToolCall(c.name, dict(c.arguments)) for c in env.task.turns[turn].ground_truth]


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

