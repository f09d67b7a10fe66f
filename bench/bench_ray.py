"""Ray scale-out benchmark (docs/performance.md): whole oracle episodes per second in-process against a
local Ray cluster, side by side in one run, ratio first.

Episodes: every HotelBooking task, repeated; policy: oracle (no LLM), so the figure is the gym's own
throughput.  On this 2-core machine the local cluster shows the overhead of actors and object transfer;
on a cluster the same call spreads over nodes.  Writes bench/results/ray.json.
Usage: python bench/bench_ray.py [--quick]
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import ray

from gym_envfactory import EnvFactoryEnv
from gym_envfactory.rollout.policies import OraclePolicy
from gym_envfactory.rollout.runner import run_episode
from gym_envfactory.training.ray_rollouts import make_workers, run_rollouts

HERE = Path(__file__).resolve().parent
QUICK = "--quick" in sys.argv
ENV = "envfactory/HotelBooking-v0"


def main() -> None:
    """Measure and print episodes/s in-process and on Ray with 1 and 2 workers; write the JSON."""
    env = EnvFactoryEnv(ENV)
    ids = env.tasks.ids() * (1 if QUICK else 4)
    for t in env.tasks.ids():  # replay every task once outside the timings (both sides cache it)
        run_episode(env, OraclePolicy(), task_id=t)
    t0 = time.perf_counter()
    for t in ids:
        run_episode(env, OraclePolicy(), task_id=t)
    inproc = len(ids) / (time.perf_counter() - t0)
    ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False)
    figures = {}
    for n in (1, 2):
        workers = make_workers(ENV, n)
        run_rollouts(ENV, env.tasks.ids(), workers=workers)  # warm: actors import the gym, replay the tasks
        t0 = time.perf_counter()
        out = run_rollouts(ENV, ids, workers=workers)
        figures[n] = len(ids) / (time.perf_counter() - t0)
        assert all(r["reward"] == 1.0 for r in out)
        for w in workers:
            ray.kill(w)
    ray.shutdown()
    print(f"oracle episodes/s, {len(ids)} episodes of {ENV}:")
    for w, f in figures.items():
        print(f"  ratio ray {w} worker(s) / in-process = {f / inproc:.2f}x")
    print(f"  in-process            {inproc:8.1f} episodes/s")
    for w, f in figures.items():
        print(f"  ray, {w} worker(s)     {f:8.1f} episodes/s (warm actors)")
    results = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "episodes": len(ids),
               "in_process_eps": inproc, "ray_eps": {str(w): f for w, f in figures.items()}}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "ray.json").write_text(json.dumps(results, indent=2))
    print(f"wrote {HERE / 'results' / 'ray.json'}")


if __name__ == "__main__":
    main()
