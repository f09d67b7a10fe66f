"""The α schedule (docs/training.md, "α schedule"): linear and clamped, and a played episode's reward
recomposed from its components equals the reward the env gives (exactly, under the config that scored it)
and the reward scoring again under another α gives."""

from __future__ import annotations

import pytest

from gym_envfactory import EnvFactoryEnv, get_environment
from gym_envfactory.reward import AlphaSchedule, RewardConfig, reward_from_components, score_episode
from gym_envfactory.rollout.policies import NoisyPolicy, OraclePolicy, RandomPolicy
from gym_envfactory.rollout.runner import run_episode


def test_schedule_is_linear_and_clamped():
    s = AlphaSchedule(steps=100, start=0.9, end=0.1)
    assert s.alpha_at(0) == 0.9 and s.alpha_at(-5) == 0.9
    assert s.alpha_at(50) == pytest.approx(0.5)
    assert s.alpha_at(100) == pytest.approx(0.1) and s.alpha_at(10_000) == pytest.approx(0.1)
    assert s.alpha_at(25) > s.alpha_at(75)
    base = RewardConfig(gamma=0.1, turn_state="delta")
    cfg = s.config_at(50, base)
    assert cfg.alpha == pytest.approx(0.5) and (cfg.gamma, cfg.turn_state) == (0.1, "delta")
    assert s.config_at(0).alpha == 0.9 and s.config_at(0).gamma == RewardConfig().gamma
    assert base.with_alpha(base.alpha) is base


@pytest.mark.parametrize("kwargs", [{"steps": 0}, {"steps": 1.5}, {"steps": True}, {"steps": 10, "start": 1.2},
                                    {"steps": 10, "end": float("nan")}])
def test_schedule_refuses_bad_values(kwargs):
    with pytest.raises(ValueError):
        AlphaSchedule(**kwargs)


def _episodes():
    """Scored episodes of several policies (right, noisy, random) over multi-turn HotelBooking tasks."""
    tasks = [t.task_id for t in get_environment("HotelBooking").tasks if len(t.turns) > 1][:5]
    out = []
    for i, policy in enumerate([OraclePolicy(), NoisyPolicy(seed=3), RandomPolicy(seed=4)]):
        for task_id in tasks:
            env = EnvFactoryEnv("HotelBooking")
            run_episode(env, policy, task_id=task_id, seed=i)
            out.append((env, env.last_score))
    return out


def test_recomposed_reward_is_the_envs_own_and_follows_alpha():
    episodes = _episodes()
    rewards = {round(score.reward, 6) for _, score in episodes}
    assert len(rewards) > 2, rewards  # the policies give different rewards: the check is not vacuous
    moved = 0
    for env, score in episodes:
        d = score.to_dict()
        assert reward_from_components(d, RewardConfig()) == score.reward  # exact: the same arithmetic
        assert reward_from_components(score.reward_components(), RewardConfig()) == score.reward
        for t, ts in zip(d["turns"], score.turns, strict=True):
            assert reward_from_components(t, RewardConfig()) == ts.reward
        final = env.records[-1].state
        for alpha in (0.9, 0.1):
            cfg = RewardConfig(alpha=alpha)
            again = score_episode(env.records, env.reference, final, cfg)
            assert reward_from_components(d, cfg) == pytest.approx(again.reward)
            for t, ts in zip(d["turns"], again.turns, strict=True):
                assert reward_from_components(t, cfg) == pytest.approx(ts.reward)
            moved += reward_from_components(d, cfg) != pytest.approx(score.reward)
        env.close()
    assert moved  # some episode's reward depends on α
