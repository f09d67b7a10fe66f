"""Reward cost (docs/performance.md, T4): whole oracle episodes through the Gymnasium env (parsing,
execution, per-turn and episode scoring) against the same episodes with no reward at all (the scoring
functions replaced by constants: T4's ratio, target <= 2x), and against replaying the same ground-truth
calls in a bare session (no env, no parsing, no reward: the floor), per catalog environment and
initial-state size, side by side in one run.  Also times one comparison of two equal large states.

    python bench/bench_reward.py [--quick] [--repeats N] [--min-seconds S]   # ratios first; bench/results/reward.json

Each figure is a median of N interleaved measurements (scored, unscored, bare replay in turn), each
repeating the group's episodes for at least S seconds: a group takes a few milliseconds, which one timing
on a shared machine cannot resolve.  Long-lived objects are frozen out of the garbage collector after the
warm-up (``gc.freeze()``, as the server does), and each measurement starts after a collection.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import TypedDict
from unittest import mock

from gym_envfactory import Session, get_environment
from gym_envfactory.environment.cow import FrozenState
from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.replay import task_reference
from gym_envfactory.reward import EpisodeScore, TurnScore
from gym_envfactory.rollout.policies import OraclePolicy
from gym_envfactory.rollout.runner import run_episode


def _shipped() -> list[str]:
    root = Path(__file__).resolve().parent.parent / "env_images"
    return sorted(p.name for p in root.iterdir() if (p / "environment.toml").is_file())


ENVS = _shipped()  # every catalog environment


def groups() -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for name in ENVS:
        for task in get_environment(name).tasks:
            if len(task.envs) > 1:
                continue
            size = task.initial_state if isinstance(task.initial_state, str) else "inline"
            out.setdefault((name, size), []).append(task.task_id)
    return out


def replay_seconds(env_name: str, task_ids: list[str]) -> float:
    """Ground-truth calls in a fresh session per task, no reward, no parsing."""
    spec = get_environment(env_name)
    refs = [task_reference(spec, t) for t in task_ids]
    specs = {n: get_environment(n) for n in ENVS}
    t0 = time.perf_counter()
    for ref in refs:
        s = Session.from_states([specs[e] for e in ref.envs], ref.initial_state)
        for turn in ref.turn_calls:
            for c in turn:
                s.call(c.name, dict(c.arguments))
        s.close()
    return time.perf_counter() - t0


def episode_seconds(env_name: str, task_ids: list[str]) -> float:
    """Oracle episodes through the env, every reward component computed."""
    env = EnvFactoryEnv(env_name)
    policy = OraclePolicy()
    t0 = time.perf_counter()
    for t in task_ids:
        r = run_episode(env, policy, task_id=t)
        assert r.reward == 1.0, (t, r.components)
    elapsed = time.perf_counter() - t0
    env.close()
    return elapsed


def _no_turn_score(i, record, reference, cfg):
    return TurnScore(i, None, None, None, 0, 0, 0, 0, 0.0, 0.0)


def _no_episode_score(records, reference, final, cfg, **kwargs):
    return EpisodeScore(reward=1.0, r_traj=None, r_state=None, r_output=None, p_len=0, penalty=0.0, matched=0,
                        n_ground_truth=0, surplus=0, invalid=0, vacuous=[], missed=[], state_diff=[], turns=[],
                        config=cfg)


def unscored_episode_seconds(env_name: str, task_ids: list[str]) -> float:
    """The same oracle episodes through the env with the reward replaced by constants."""
    with mock.patch("gym_envfactory.envs.env.score_turn", _no_turn_score), \
            mock.patch("gym_envfactory.envs.env.score_episode", _no_episode_score):
        return episode_seconds(env_name, task_ids)


def per_pass(measure, env_name: str, ids: list[str], min_s: float) -> float:
    """Seconds per pass over ``ids`` with ``measure`` (one of the three above), passes repeated until at
    least ``min_s`` elapsed: a group's episodes take a few milliseconds, too short to time once."""
    gc.collect()  # each measurement starts with no garbage left by the one before
    total, passes = 0.0, 0
    while total < min_s:
        total += measure(env_name, ids)
        passes += 1
    return total / passes


class RewardRow(TypedDict):
    """One (environment, initial state) group of bench/results/reward.json."""
    env: str
    state: str
    tasks: int
    ratio_scored_over_unscored: float
    ratio_scored_over_unscored_min_max: list[float]
    ratio_scored_over_bare_replay: float
    episodes_per_s: float
    unscored_episodes_per_s: float
    bare_replays_per_s: float
    episode_s_min_med_max: list[float]
    unscored_s_min_med_max: list[float]
    replay_s_min_med_max: list[float]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--min-seconds", type=float, default=None,
                   help="each measurement repeats the group's episodes for at least this long")
    a = p.parse_args()
    repeats = a.repeats or (3 if a.quick else 5)
    min_s = a.min_seconds or (0.05 if a.quick else 0.2)
    rows: list[RewardRow] = []
    med = statistics.median
    for (env_name, size), ids in sorted(groups().items()):
        if size not in ("small", "large"):
            continue
        episode_seconds(env_name, ids)  # warm: every task's reference (replayed once per process), imports
        # what lives for the whole process (catalog, references, cached bases) out of the collector's
        # sight, as `envfactory serve` does: otherwise full collections over it (~100 ms each on the large
        # states) land on whichever measurement runs then, and the ratios measure the collector
        gc.collect()
        gc.freeze()
        ep, un, rp = [], [], []
        for _ in range(repeats):  # interleaved, so that a change in the machine's load hits all three alike
            ep.append(per_pass(episode_seconds, env_name, ids, min_s))
            un.append(per_pass(unscored_episode_seconds, env_name, ids, min_s))
            rp.append(per_pass(replay_seconds, env_name, ids, min_s))
        n = len(ids)
        paired = sorted(e / u for e, u in zip(ep, un, strict=True))
        rows.append({"env": env_name, "state": size, "tasks": n,
                     "ratio_scored_over_unscored": med(paired),
                     "ratio_scored_over_unscored_min_max": [paired[0], paired[-1]],
                     "ratio_scored_over_bare_replay": med(ep) / med(rp),
                     "episodes_per_s": n / med(ep), "unscored_episodes_per_s": n / med(un),
                     "bare_replays_per_s": n / med(rp),
                     "episode_s_min_med_max": [min(ep), med(ep), max(ep)],
                     "unscored_s_min_med_max": [min(un), med(un), max(un)],
                     "replay_s_min_med_max": [min(rp), med(rp), max(rp)]})
    print(f"{'env':16} {'state':6} {'tasks':>5} {'scored/unscored':>16} {'(min-max)':>12} {'scored/bare':>12} "
          f"{'episodes/s':>11} {'unscored/s':>11} {'bare/s':>8}")
    for r in rows:
        lo, hi = r["ratio_scored_over_unscored_min_max"]
        print(f"{r['env']:16} {r['state']:6} {r['tasks']:5d} {r['ratio_scored_over_unscored']:15.2f}x "
              f"{lo:5.2f}-{hi:5.2f}x {r['ratio_scored_over_bare_replay']:11.2f}x {r['episodes_per_s']:11.1f} "
              f"{r['unscored_episodes_per_s']:11.1f} {r['bare_replays_per_s']:8.1f}")
    print(f"scored/unscored: median of {repeats} interleaved pairs, each timing >= {min_s} s of episodes")
    print("T4 target: scored/unscored <= 2x (the reward costs at most as much as the episode itself)")
    # one comparison of two equal large states
    from gym_envfactory.reward import state_diff
    spec = get_environment("HotelBooking")
    s = Session.from_states([spec], {"HotelBooking": spec.initial_state_json("large")})
    cmp_ms = frozen_us = None
    if s is not None:
        x, y = s.state(), s.state()
        t0 = time.perf_counter()
        for _ in range(10):
            state_diff(x, y)
        cmp_ms = (time.perf_counter() - t0) / 10 * 1e3
        print(f"state_diff of two equal HotelBooking large states as dicts: {cmp_ms:.2f} ms")
        s.call("search_hotels", {"city": "Lisbon"})
        fa, fb = s.frozen_state(), s.frozen_state()
        fork = s.fork()
        fork.call("search_hotels", {"city": "Lisbon"})
        fc = fork.frozen_state()
        t0 = time.perf_counter()
        for _ in range(100):  # a new FrozenState each time: the verdict remembered on fa is not reused
            assert not state_diff(FrozenState(fa.models), fc)
        frozen_us = (time.perf_counter() - t0) / 100 * 1e6
        print(f"state_diff of two equal HotelBooking large frozen states (a session and its fork): {frozen_us:.1f} us")
        assert fa is not None and fb is not None
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "reward.json").write_text(json.dumps({"rows": rows, "state_diff_equal_large_ms": cmp_ms,
                                                 "state_diff_equal_large_frozen_us": frozen_us,
                                                 "repeats": repeats, "python": sys.version.split()[0]}, indent=1))


if __name__ == "__main__":
    main()
