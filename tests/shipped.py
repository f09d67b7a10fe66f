"""The shipped catalog as the tests see it: every package under env_images/ (one place to list it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ENV_IMAGES = Path(__file__).resolve().parents[1] / "env_images"

#: Names of the shipped environments, sorted (a folder with an environment.toml is one).
SHIPPED = sorted(p.name for p in ENV_IMAGES.iterdir() if (p / "environment.toml").is_file())


def call_pool(env_name: str) -> list[tuple[str, dict[str, Any] | str]]:
    """Distinct ``(tool, arguments)`` calls of ``env_name``'s small-state scenarios and tasks (tools of
    other environments, named by cross-environment tasks, left out): material for property tests."""
    from gym_envfactory import get_environment

    spec = get_environment(env_name)
    calls = [(step.call, step.arguments) for sc in spec.scenarios if sc.initial_state == "small" for step in sc.steps]
    for tid in spec.tasks.ids():
        task = spec.tasks.get(tid)
        if task.initial_state == "small":
            calls += [(c.name, c.arguments) for turn in task.turns for c in turn.ground_truth]
    seen, out = set(), []
    for name, args in calls:
        key = json.dumps([name, args], sort_keys=True, default=str)
        if key not in seen and name in spec.tools:
            seen.add(key)
            out.append((name, args))
    return out
