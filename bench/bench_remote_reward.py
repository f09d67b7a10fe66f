"""The GRPO-shaped workload through every backend, side by side (issue 24 part 3, "score where the state
lives"): ``make_group(k=8)`` on HotelBooking tasks with the large initial state, oracle actions, every
member scored, in process and through the subprocess and url backends; and the same groups with the
reward replaced by constants (unscored).  Ratios first: each remote backend's episodes/s as a share of
in-process, and scored/unscored per backend.

    python bench/bench_remote_reward.py [--quick] [--repeats N] [--min-seconds S]   # bench/results/remote_reward.json

Each figure is a median of N interleaved measurements (every backend, scored and unscored, in turn), each
repeating the groups for at least S seconds.  Targets: remote >= 30% of in-process episodes/s, and
scored/unscored <= 2x on the remote backends.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast
from unittest import mock

import gymnasium as gym

import gym_envfactory  # noqa: F401  (registers the catalog)
from gym_envfactory import get_environment
from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.envs.groups import make_group
from gym_envfactory.reward import EpisodeScore, TurnScore
from gym_envfactory.rollout.policies import OraclePolicy

ENV = "HotelBooking"
K = 8
TOKEN = "bench-remote-reward"


def large_tasks() -> list[str]:
    return [t.task_id for t in get_environment(ENV).tasks
            if len(t.envs) == 1 and t.initial_state == "large"]


def start_url_server() -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "ENVFACTORY_TOKEN": TOKEN}
    proc = subprocess.Popen([sys.executable, "-m", "gym_envfactory.cli", "serve", ENV, "--port", "0", "--announce"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("{"):
        raise SystemExit(f"server did not start: {proc.stderr.read() if proc.stderr else ''}")
    return proc, json.loads(line)["listening"]


def run_groups(env: EnvFactoryEnv, task_ids: list[str]) -> int:
    """One GRPO group per task (oracle actions for every member); the episodes run."""
    n = 0
    for t in task_ids:
        group = make_group(env, K, options={"task_id": t})
        policies = [OraclePolicy() for _ in group]
        for p, e in zip(policies, group, strict=True):
            p.begin(e)
        while not group.done:
            group.step([None if group.finished[i] else policies[i].act(e) for i, e in enumerate(group)])
        for e in group.envs[1:]:
            e.close()
        assert all(r == 1.0 for r in group.rewards) or not any(group.rewards), group.rewards
        n += len(group)
    return n


def _no_turn_score(i: int, record: Any, reference: Any, cfg: Any) -> TurnScore:
    return TurnScore(i, None, None, None, 0, 0, 0, 0, 0.0, 0.0)


def _no_episode_score(records: Any, reference: Any, final: Any, cfg: Any, **kwargs: Any) -> EpisodeScore:
    return EpisodeScore(reward=1.0, r_traj=None, r_state=None, r_output=None, p_len=0, penalty=0.0, matched=0,
                        n_ground_truth=0, surplus=0, invalid=0, vacuous=[], missed=[], state_diff=[], turns=[],
                        config=cfg)


def _no_state_read(self: EnvFactoryEnv, turn: int | None = None) -> Any:
    return None


_plan = EnvFactoryEnv.plan_requests


def _no_digest_plan(self: EnvFactoryEnv, action: Any) -> Any:
    plan = _plan(self, action)
    return None if plan is None else (plan[0], None)


def measure(env: EnvFactoryEnv, task_ids: list[str], scored: bool, min_s: float) -> float:
    """Episodes per second over repeated passes of at least ``min_s`` seconds.  Unscored: the reward is
    replaced by constants and the turn-end state read skipped (what the reward costs, all of it)."""
    gc.collect()
    total, eps = 0.0, 0
    patches: list[Any] = [] if scored else [mock.patch("gym_envfactory.envs.env.score_turn", _no_turn_score),
                                 mock.patch("gym_envfactory.envs.env.score_episode", _no_episode_score),
                                 mock.patch.object(EnvFactoryEnv, "_read_state", _no_state_read),
                                 mock.patch.object(EnvFactoryEnv, "plan_requests", _no_digest_plan)]
    for p in patches:
        p.start()
    try:
        while total < min_s:
            t0 = time.perf_counter()
            eps += run_groups(env, task_ids)
            total += time.perf_counter() - t0
    finally:
        for p in patches:
            p.stop()
    return eps / total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--min-seconds", type=float, default=None)
    a = ap.parse_args()
    repeats = a.repeats or (3 if a.quick else 5)
    min_s = a.min_seconds or (0.5 if a.quick else 1.5)
    ids = large_tasks()
    proc, url = start_url_server()
    try:
        envs: dict[str, EnvFactoryEnv] = {
            "inprocess": cast(EnvFactoryEnv, gym.make(f"envfactory/{ENV}-v0").unwrapped),
            "subprocess": cast(EnvFactoryEnv, gym.make(f"envfactory/{ENV}-v0", backend="subprocess").unwrapped),
            "url": cast(EnvFactoryEnv, gym.make(f"envfactory/{ENV}-v0", backend="url", url=url, token=TOKEN).unwrapped)}
        for e in envs.values():  # warm: references, imports, server-side caches
            run_groups(e, ids)
        gc.collect()
        gc.freeze()
        rates: dict[str, dict[str, list[float]]] = {b: {"scored": [], "unscored": []} for b in envs}
        for _ in range(repeats):
            for b, e in envs.items():
                rates[b]["scored"].append(measure(e, ids, True, min_s))
                rates[b]["unscored"].append(measure(e, ids, False, min_s))
        for e in envs.values():
            e.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    med = statistics.median
    base = med(rates["inprocess"]["scored"])
    rows: list[dict[str, Any]] = []
    for b, r in rates.items():
        ratios = sorted(u / s for s, u in zip(r["scored"], r["unscored"], strict=True))
        rows.append({"backend": b, "episodes_per_s": med(r["scored"]), "unscored_episodes_per_s": med(r["unscored"]),
                     "share_of_inprocess": med(r["scored"]) / base,
                     "scored_over_unscored": med(ratios), "scored_over_unscored_min_max": [ratios[0], ratios[-1]],
                     "episodes_per_s_all": r["scored"], "unscored_episodes_per_s_all": r["unscored"]})
    print(f"GRPO workload: make_group(k={K}) on {ENV} large ({len(ids)} tasks), oracle, scored; "
          f"median of {repeats}, >= {min_s} s each")
    print(f"{'backend':11} {'share of in-process':>20} {'scored/unscored':>16} {'(min-max)':>12} "
          f"{'episodes/s':>11} {'unscored/s':>11}")
    for row in rows:
        lo, hi = row["scored_over_unscored_min_max"]
        print(f"{row['backend']:11} {row['share_of_inprocess']:19.1%} {row['scored_over_unscored']:15.2f}x "
              f"{lo:5.2f}-{hi:5.2f}x {row['episodes_per_s']:11.1f} {row['unscored_episodes_per_s']:11.1f}")
    print("targets: remote >= 30% of in-process episodes/s; scored/unscored <= 2x")
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    (out / "remote_reward.json").write_text(json.dumps({"env": ENV, "k": K, "tasks": ids, "repeats": repeats,
                                                        "min_seconds": min_s, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
