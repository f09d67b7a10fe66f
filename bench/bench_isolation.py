"""Isolation benchmark (issue 24, part 1): the cold start of an untrusted package on the ``isolated``
backend against the same package in this process (``trust=True``), side by side in one run.

One repetition is ``gym.make`` + ``reset`` + the first tool call + ``close`` of a small generated package
(provenance ``generated``): on the isolated backend every repetition starts its own server child (the
last env's close stops it), in-process the first repetition imports the package and later ones reuse it.
Prints first and median times and their ratio; writes bench/results/isolation.json.  Nothing is asserted.
Usage: python bench/bench_isolation.py [--reps N]
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

from gym_envfactory.environment.catalog import register_catalog
from gym_envfactory.isolation import namespace_prefix

HERE = Path(__file__).resolve().parent
REPS = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 5
NAME = "BenchGenerated"
TOOLS = ('from gym_envfactory import tool\n\nfrom .state import State\n\n\n'
         '@tool\ndef bump(state: State) -> str:\n    """Add one."""\n    state.n += 1\n    return str(state.n)\n')


def write_package(catalog: Path) -> None:
    folder = catalog / NAME
    (folder / "initial_states").mkdir(parents=True)
    (folder / "environment.toml").write_text(
        f'name = "{NAME}"\nversion = "0.1.0"\ndomain = "utilities"\ndescription = "Bench."\n\n'
        '[provenance]\nkind = "generated"\n')
    (folder / "__init__.py").write_text("")
    (folder / "state.py").write_text("from pydantic import BaseModel\n\n\nclass State(BaseModel):\n    n: int = 0\n")
    (folder / "tools.py").write_text(TOOLS)
    (folder / "initial_states" / "small.json").write_text('{"n": 0}')
    task = {"task_id": "b-1", "initial_state": "small", "turns": [{"user": "bump", "ground_truth": [{"name": "bump", "arguments": {}}]}]}
    (folder / "tasks.jsonl").write_text(json.dumps(task) + "\n")


ACTION = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "bump", "arguments": "{}"}}]}


def one(**kwargs: Any) -> tuple[float, str]:
    t0 = time.perf_counter()
    env = gym.make(f"envfactory/{NAME}-v0", **kwargs)
    env.reset(options={"task_id": "b-1"})
    env.step(ACTION)
    backend = env.unwrapped.backend.name  # type: ignore[attr-defined]
    env.close()
    return time.perf_counter() - t0, backend


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        write_package(Path(tmp))
        os.environ["ENVFACTORY_CATALOG"] = tmp
        register_catalog()
        rows: dict[str, dict[str, object]] = {}
        runs: tuple[tuple[str, dict[str, Any]], ...] = (("inprocess (trust=True)", {"trust": True}), ("isolated (no options)", {}))
        for label, kwargs in runs:
            times, backend = [], ""
            for _ in range(REPS):
                t, backend = one(**kwargs)
                times.append(t)
            rows[label] = {"backend": backend, "first_s": times[0], "median_s": statistics.median(times),
                           "times_s": times}
            print(f"{label:24s} backend={backend:9s} first {times[0] * 1e3:8.1f} ms   "
                  f"median of {REPS} {statistics.median(times) * 1e3:8.1f} ms")
    iso, inp = rows["isolated (no options)"], rows["inprocess (trust=True)"]
    ratio = float(iso["median_s"]) / float(inp["median_s"])  # type: ignore[arg-type]
    first = float(iso["first_s"]) / float(inp["first_s"])  # type: ignore[arg-type]
    print(f"isolated / in-process: first (both cold: a server start vs the package's import) {first:.0f}x, "
          f"median {ratio:.0f}x (in-process reuses the imported package); namespaces: {bool(namespace_prefix())}")
    out = {"reps": REPS, "rows": rows, "ratio_first": first, "ratio_median": ratio, "namespaces": bool(namespace_prefix()),
           "python": platform.python_version(), "cpus": os.cpu_count()}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "isolation.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
