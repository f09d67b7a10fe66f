"""Ground-truth episodes played through the real environment: the source of exported data.

Playing the oracle through :class:`~gym_envfactory.EnvFactoryEnv` (instead of formatting task files
directly) makes every exported message exactly what the environment shows a policy: the same system
prompt, tool results and user turns, and a reward of 1.0 that proves the data is consistent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gym_envfactory import EnvFactoryEnv, get_environment, list_environments
from gym_envfactory.errors import DatasetError
from gym_envfactory.rollout.policies import OraclePolicy
from gym_envfactory.rollout.runner import run_episode

__all__ = ["Trajectory", "oracle_trajectories", "read_trajectories", "resolve_env_names"]


@dataclass(frozen=True)
class Trajectory:
    """One finished episode in chat form.

    Attributes:
        env: the primary environment's name.
        task_id: the task.
        split: the task's split (``"train"``, ``"test"``, ...).
        reward: the episode reward in [0, 1].
        messages: OpenAI-format chat messages (system, user, assistant with ``tool_calls``, tool).
        tools: the OpenAI tool schemas the policy saw in the task's turn 0; tools a later turn adds
            (the task's ``added_tools``) are announced by a system note in ``messages`` before that
            turn's user message (docs/authoring.md, "Tool sets per turn").
    """

    env: str
    task_id: str
    split: str
    reward: float
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]


def resolve_env_names(env_ids: Iterable[str]) -> list[str]:
    """Environment names from gym ids or names (``envfactory/HotelBooking-v0`` or ``HotelBooking``);
    ``"all"`` expands to the whole catalog.  Raises ``UnknownEnvironmentError``."""
    out: list[str] = []
    for e in env_ids:
        names = list_environments() if e == "all" else [get_environment(e).name]
        out += [n for n in names if n not in out]
    return out


def oracle_trajectories(env_name: str, *, split: str | None = None) -> Iterator[Trajectory]:
    """The ground truth of every task of ``env_name`` (optionally one split), played by the oracle.

    Raises:
        DatasetError: a task's oracle episode does not score 1.0 (its ground truth is inconsistent).
    """
    env = EnvFactoryEnv(env_name)
    try:
        for task_id in env.tasks.ids(split):
            result = run_episode(env, OraclePolicy(), task_id=task_id)
            if result.reward < 1.0:
                raise DatasetError(f"the oracle scores {result.reward:.3f} < 1.0", task_id=task_id)
            task = env.tasks.get(task_id)
            # turn 0's tools: those a later turn adds (added_tools) are in a system note of the messages
            yield Trajectory(env_name, task_id, task.split, result.reward, result.messages, env.opening_tools)
    finally:
        env.close()


def _check_record(reward: Any, env: Any, task_id: Any, messages: Any, tools: Any) -> None:
    """Raise TypeError/ValueError unless the record's fields have the shapes ``rollout --out`` writes."""
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward) \
            or not 0.0 <= reward <= 1.0:
        raise ValueError(f"reward must be a number in [0, 1], got {reward!r}")
    if not isinstance(env, str) or not isinstance(task_id, str):
        raise TypeError("env and task_id must be strings")
    if not isinstance(messages, list) or not all(isinstance(m, dict) and isinstance(m.get("role"), str)
                                                  for m in messages):
        raise TypeError("messages must be a list of chat messages (objects with a role)")
    for m in messages:
        if m.get("tool_calls") is not None and not (isinstance(m["tool_calls"], list)
                                                    and all(isinstance(c, dict) for c in m["tool_calls"])):
            raise TypeError("tool_calls must be a list of objects")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(x, dict) for x in tools)):
        raise TypeError("tools must be a list of tool schemas (objects)")


def read_trajectories(path: str | Path, *, min_reward: float = 0.0) -> Iterator[Trajectory]:
    """Trajectories from a ``trajectories.jsonl`` written by ``envfactory rollout --out``, keeping
    those with ``reward >= min_reward``.

    Raises:
        DatasetError: a line is not JSON or lacks ``task_id``/``env``/``reward``/``messages``
            (naming the file and line).
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: no such trajectories file (write one with envfactory rollout --out)")
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise TypeError(f"a record is a JSON object, got {type(obj).__name__}")
                reward, env, task_id, messages = obj["reward"], obj["env"], obj["task_id"], obj["messages"]
                _check_record(reward, env, task_id, messages, obj.get("tools"))
            except (ValueError, KeyError, TypeError) as exc:
                raise DatasetError(f"not a trajectory record: {type(exc).__name__}: {exc}", file=path,
                                   line=lineno) from None
            if obj.get("error"):  # an episode a failed request cut short (rollout --out): never training data
                continue
            if float(reward) < min_reward:
                continue
            spec = get_environment(env)
            tools = obj.get("tools") or spec.openai_tools()
            try:
                split = spec.tasks.get(task_id).split
            except KeyError:
                split = "unknown"
            yield Trajectory(spec.name, task_id, split, reward, messages, tools)
