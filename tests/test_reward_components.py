"""The reward-component interface (docs/reward.md, "Adding a reward component"): one list of component
names, the built-in components as :class:`RewardComponent` classes, and extra components composed into
the reward with their weights."""

from __future__ import annotations

import gymnasium as gym
import pytest

import gym_envfactory  # noqa: F401 - registers the ids
from gym_envfactory.replay import TaskReference
from gym_envfactory.reward import (
    COMPONENTS,
    REWARD_COMPONENTS,
    ComponentResult,
    PLen,
    RewardComponent,
    RewardConfig,
    ROutput,
    RState,
    RTraj,
    TurnRecord,
    score_episode,
    score_turn,
)
from gym_envfactory.rollout.policies import OraclePolicy


class Please(RewardComponent):
    """1.0 when the turn's reply says "please", else 0.0 (a toy score term)."""

    name = "politeness"
    weight_key = "politeness"

    def score_turn(self, turn, record, reference):
        return ComponentResult(1.0 if "please" in record.text.lower() else 0.0)


class Shouting(RewardComponent):
    """A toy penalty: one per reply written in capitals."""

    name = "shouting"
    weight_key = "shouting"
    penalty = True

    def score_turn(self, turn, record, reference):
        return ComponentResult(1 if record.text and record.text.isupper() else 0)


def _reference():
    calls = [[("f", {"x": 1}, [])], [("f", {"x": 2}, [])]]
    return TaskReference.from_parts(calls, [{"s": 1}, {"s": 2}], [[], []], initial={"s": 0})


def test_one_list_of_component_names_derived_from_the_components():
    assert tuple(c.name for c in COMPONENTS) == ("r_traj", "r_state", "r_output", "p_len")
    assert REWARD_COMPONENTS == ("reward", "r_traj", "r_state", "r_output", "p_len", "penalty", "vacuous")
    assert [type(c) for c in COMPONENTS] == [RTraj, RState, ROutput, PLen]
    assert [c.penalty for c in COMPONENTS] == [False, False, False, True]


def test_builtin_components_score_a_turn_as_the_turn_score_does():
    ref = _reference()
    rec = TurnRecord(calls=[("f", {"x": 1}, False), ("f", {"x": 9}, False), ("g", None, True)], text="done", state={"s": 1})
    traj, state, output, length = (c.score_turn(0, rec, ref) for c in COMPONENTS)
    assert traj == ComponentResult(1.0, {"matched": 1, "n_ground_truth": 1, "missed": []})
    assert state.value == 1.0 and output.vacuous and output.value is None
    assert length == ComponentResult(2, {"surplus": 1, "invalid": 1})
    ts = score_turn(0, rec, ref, RewardConfig())
    assert (ts.r_traj, ts.r_state, ts.r_output, ts.surplus, ts.invalid) == (1.0, 1.0, None, 1, 1)
    assert ts.penalty == pytest.approx(0.1) and ts.reward == pytest.approx(0.9)


def test_a_custom_score_term_is_weighted_into_the_episode_reward():
    ref = _reference()
    records = [TurnRecord(calls=[("f", {"x": 1}, False)], text="Done, please check", state={"s": 1}),
               TurnRecord(calls=[("f", {"x": 2}, False)], text="Done", state={"s": 2})]
    plain = score_episode(records, ref, {"s": 2}, RewardConfig())
    assert plain.reward == 1.0 and plain.extra == {}
    cfg = RewardConfig(components=(Please(),), weights={"politeness": 1.0})
    s = score_episode(records, ref, {"s": 2}, cfg)
    # R_traj = R_state = 1 (weights .5 and .5), politeness = mean(1, 0) = .5 (weight 1): (.5 + .5 + .5) / 2
    assert s.extra == {"politeness": 0.5}
    assert s.reward == pytest.approx(0.75)
    assert [t.extra for t in s.turns] == [{"politeness": 1.0}, {"politeness": 0.0}]
    assert s.to_dict()["politeness"] == 0.5 and s.to_dict()["config"]["weights"] == {"politeness": 1.0}
    assert s.reward_components()["politeness"] == 0.5
    # unweighted (no weights entry): reported, not counted
    s0 = score_episode(records, ref, {"s": 2}, RewardConfig(components=[Please()]))
    assert s0.extra == {"politeness": 0.5} and s0.reward == 1.0


def test_a_custom_penalty_is_subtracted_with_p_len_under_the_cap():
    ref = _reference()
    records = [TurnRecord(calls=[("f", {"x": 1}, False)], text="DONE", state={"s": 1}),
               TurnRecord(calls=[("f", {"x": 2}, False)], text="DONE", state={"s": 2})]
    cfg = RewardConfig(components=(Shouting(),), weights={"shouting": 0.1})
    s = score_episode(records, ref, {"s": 2}, cfg)
    assert s.extra == {"shouting": 2} and s.penalty == pytest.approx(0.2) and s.reward == pytest.approx(0.8)
    capped = score_episode(records, ref, {"s": 2}, RewardConfig(components=(Shouting(),), weights={"shouting": 1.0}))
    assert capped.penalty == 0.5 and capped.reward == 0.5


def test_extra_components_are_checked_and_the_config_stays_hashable():
    with pytest.raises(ValueError, match="taken"):
        RewardConfig(components=(RTraj(),))
    with pytest.raises(ValueError, match="taken"):
        RewardConfig(components=(Please(), Please()))
    with pytest.raises(ValueError, match="RewardComponent"):
        RewardConfig(components=("politeness",))
    with pytest.raises(ValueError):
        RewardConfig(components=(Please(),), weights={"politeness": -1.0})
    a = RewardConfig(components=[Please()], weights={"politeness": 0.5})
    assert hash(a) == hash(RewardConfig(components=a.components, weights=[("politeness", 0.5)]))
    assert a.weight("politeness") == 0.5 and a.weight("alpha") == 0.5 and a.weight("other") == 0.0


def _oracle_info(env):
    env.reset(options={"task_id": "hotel-001"})
    policy = OraclePolicy()
    policy.begin(env.unwrapped)
    done = False
    while not done:
        _, _, terminated, truncated, info = env.step(policy.act(env.unwrapped))
        done = terminated or truncated
    return info


def test_env_info_reward_components_follow_the_one_list_and_carry_extra_components():
    env = gym.make("envfactory/HotelBooking-v0")
    info = _oracle_info(env)
    assert list(info["reward_components"]) == list(REWARD_COMPONENTS) and info["reward_components"]["reward"] == 1.0
    env.close()
    env = gym.make("envfactory/HotelBooking-v0", reward=RewardConfig(components=(Please(),)))
    info = _oracle_info(env)
    assert list(info["reward_components"]) == [*REWARD_COMPONENTS, "politeness"]
    assert info["reward_components"]["reward"] == 1.0 and info["score"]["politeness"] is not None
    env.close()


class _Fixed(RewardComponent):
    """A toy component returning a fixed value (or raising it, when it is an exception)."""

    weight_key = "fixed"

    def __init__(self, value, *, penalty=False):
        self.name, self.value, self.penalty = "fixed", value, penalty

    def score_turn(self, turn, record, reference):
        if isinstance(self.value, Exception):
            raise self.value
        return ComponentResult(self.value)


@pytest.mark.parametrize(("value", "penalty", "error"), [
    (float("nan"), False, "finite number"),
    (float("inf"), False, "finite number"),
    (-1.0, True, "it is a penalty"),
])
def test_a_component_value_that_cannot_be_a_reward_is_refused_by_name(value, penalty, error):
    cfg = RewardConfig(components=(_Fixed(value, penalty=penalty),), weights={"fixed": 1.0})
    with pytest.raises(ValueError, match=f"'fixed'.*{error}"):
        score_turn(0, TurnRecord(calls=[("f", {"x": 1}, False)], state={"s": 1}), _reference(), cfg)


def test_a_component_that_raises_is_named_in_the_error():
    cfg = RewardConfig(components=(_Fixed(KeyError("boom")),), weights={"fixed": 1.0})
    with pytest.raises(KeyError) as info:
        score_turn(0, TurnRecord(calls=[("f", {"x": 1}, False)], state={"s": 1}), _reference(), cfg)
    assert any("'fixed'" in note for note in info.value.__notes__)


def test_configs_are_hashable_and_weights_cannot_shadow_a_field():
    assert hash(RewardConfig(weights={})) == hash(RewardConfig(components=[])) == hash(RewardConfig())
    with pytest.raises(ValueError, match="shadow the config field 'alpha'"):
        RewardConfig(weights={"alpha": 0.9})
