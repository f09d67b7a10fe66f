"""Ground-truth episodes played through the real environment: the source of exported data.

Playing the oracle through :class:`~gym_envfactory.EnvFactoryEnv` (instead of formatting task files
directly) makes every exported message exactly what the environment shows a policy: the same system
prompt, tool results and user turns, and a reward of 1.0 that proves the data is consistent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gym_envfactory import EnvFactoryEnv, get_environment, list_environments
from gym_envfactory.environment.tasks import TaskSet
from gym_envfactory.errors import DatasetError, EnvFactoryError
from gym_envfactory.rollout.policies import OraclePolicy
from gym_envfactory.rollout.runner import run_episode

__all__ = ["Trajectory", "oracle_trajectories", "read_trajectories", "record_problem", "messages_problem", "resolve_env_names", "ROLES"]


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
        file, line: where a trajectory read from a file (:func:`read_trajectories`) came from, else ``None``.
    """

    env: str
    task_id: str
    split: str
    reward: float
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    file: str | None = None
    line: int | None = None


def resolve_env_names(env_ids: Iterable[str]) -> list[str]:
    """Environment names from gym ids or names (``envfactory/HotelBooking-v0`` or ``HotelBooking``);
    ``"all"`` expands to the whole catalog.  Raises ``UnknownEnvironmentError``."""
    out: list[str] = []
    for e in env_ids:
        names = list_environments() if e == "all" else [get_environment(e).name]
        out += [n for n in names if n not in out]
    return out


def oracle_trajectories(env_name: str, *, split: str | None = None,
                        tasks: TaskSet | None = None) -> Iterator[Trajectory]:
    """The ground truth of every task of ``env_name`` (optionally one split), played by the oracle;
    ``tasks`` (``--tasks FILE``, :func:`~gym_envfactory.environment.taskfiles.read_tasks`) in place of the
    environment's own.

    Raises:
        DatasetError: a task's oracle episode does not score 1.0 (its ground truth is inconsistent).
    """
    env = EnvFactoryEnv(env_name, tasks=tasks)
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


ROLES = ("system", "user", "assistant", "tool")
"""The chat roles a trajectory's messages may have (OpenAI format, as ``rollout --out`` writes them)."""


def _tool_problem(i: int, tool: Any) -> tuple[str, str] | None:
    """``(field, message)`` when ``tools[i]`` is not a tool schema LlamaFactory's tool formatters read
    (``{name, description, parameters: {properties: {...}}}``, optionally wrapped in ``{"function": ...}``)."""
    if not isinstance(tool, dict):
        return f"tools[{i}]", f"a tool schema is an object, got {type(tool).__name__}"
    fn, where = (tool["function"], f"tools[{i}].function") if "function" in tool else (tool, f"tools[{i}]")
    if not isinstance(fn, dict):
        return where, f"a tool schema is an object, got {type(fn).__name__}"
    if not isinstance(fn.get("name"), str) or not fn["name"]:
        return f"{where}.name", "a tool needs a name (a non-empty string)"
    if fn.get("description") is not None and not isinstance(fn["description"], str):
        return f"{where}.description", "a tool's description is a string"
    params = fn.get("parameters")
    if not isinstance(params, dict) or not isinstance(params.get("properties"), dict) \
            or not all(isinstance(v, dict) for v in params["properties"].values()):
        return f"{where}.parameters", "a tool's parameters are a JSON schema object with 'properties' (an object of schemas)"
    return None


def _call_problem(where: str, call: Any) -> tuple[str, str] | None:
    """``(field, message)`` when a ``tool_calls`` entry is not ``{"function": {"name", "arguments"}}`` (or
    the flat ``{"name", "arguments"}``) with a name and arguments that are an object or text (the text the
    policy wrote, maybe not JSON: a malformed call is still a call the episode made)."""
    if not isinstance(call, dict):
        return where, f"a tool call is an object, got {type(call).__name__}"
    fn, at = (call["function"], f"{where}.function") if "function" in call else (call, where)
    if not isinstance(fn, dict):
        return at, f"a tool call's function is an object, got {type(fn).__name__}"
    if not isinstance(fn.get("name"), str) or not fn["name"]:
        return f"{at}.name", "a tool call needs a name (a non-empty string)"
    args = fn.get("arguments")
    if args is not None and not isinstance(args, (str, dict)):
        return f"{at}.arguments", f"the arguments are a JSON object or its text, got {type(args).__name__}"
    return None


def messages_problem(messages: Any) -> tuple[str, str] | None:
    """``(field, message)`` for the first value of ``messages`` that is not an OpenAI chat message as
    ``rollout --out`` writes them (an object with a role of :data:`ROLES`, string or null ``content``,
    ``tool_calls`` only on assistant messages, each with a name and arguments), else ``None``."""
    if not isinstance(messages, list):
        return "messages", f"messages must be a list of chat messages, got {type(messages).__name__}"
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            return f"messages[{i}]", f"a chat message is an object, got {type(m).__name__}"
        role = m.get("role")
        if role not in ROLES:
            return f"messages[{i}].role", f"role must be one of {', '.join(ROLES)}, got {str(role)[:40]!r}"
        if m.get("content") is not None and not isinstance(m["content"], str):
            return f"messages[{i}].content", f"content must be a string or null, got {type(m['content']).__name__}"
        calls = m.get("tool_calls")
        if calls is None:
            continue
        if role != "assistant":
            return f"messages[{i}].tool_calls", f"only assistant messages make tool calls, not {role}"
        if not isinstance(calls, list):
            return f"messages[{i}].tool_calls", f"tool_calls must be a list, got {type(calls).__name__}"
        for j, c in enumerate(calls):
            problem = _call_problem(f"messages[{i}].tool_calls[{j}]", c)
            if problem is not None:
                return problem
    return None


def record_problem(obj: Any) -> tuple[str | None, str] | None:
    """``(field or None, message)`` for the first value of a ``trajectories.jsonl`` record that does not
    have the shape ``envfactory rollout --out`` writes, else ``None``: an object with a ``reward`` in
    [0, 1], string ``env`` and ``task_id``, ``messages`` (:func:`messages_problem`) and optional ``tools``
    (schemas with a name and parameters)."""
    if not isinstance(obj, dict):
        return None, f"a record is a JSON object, got {type(obj).__name__}"
    for key in ("reward", "env", "task_id", "messages"):
        if key not in obj:
            return key, f"a trajectory record needs '{key}' (the `envfactory rollout --out` format)"
    reward = obj["reward"]
    try:
        number = not isinstance(reward, bool) and isinstance(reward, (int, float)) and 0.0 <= float(reward) <= 1.0
    except OverflowError:  # an integer no float holds
        number = False
    if not number:  # NaN fails the range test too
        return "reward", f"reward must be a number in [0, 1], got {str(reward)[:40]}"
    for key in ("env", "task_id"):
        if not isinstance(obj[key], str) or not obj[key]:
            return key, f"{key} must be a non-empty string, got {type(obj[key]).__name__}"
    problem = messages_problem(obj["messages"])
    if problem is not None:
        return problem
    tools = obj.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            return "tools", f"tools must be a list of tool schemas, got {type(tools).__name__}"
        for i, t in enumerate(tools):
            problem = _tool_problem(i, t)
            if problem is not None:
                return problem
    return None


def read_trajectories(path: str | Path, *, min_reward: float = 0.0,
                      on_bad: Callable[[DatasetError], None] | None = None) -> Iterator[Trajectory]:
    """Trajectories from a ``trajectories.jsonl`` written by ``envfactory rollout --out``, keeping
    those with ``reward >= min_reward``; each knows its ``file`` and ``line``.

    A bad record (not JSON, a shape :func:`record_problem` refuses, an environment not in the catalog)
    is a :class:`DatasetError` naming the file, line and field: raised, or, with ``on_bad``, handed to it
    and skipped (the rest of the file is read).  Lines end at ``"\\n"`` only, as the writer writes them.

    Raises:
        DatasetError: no such file; without ``on_bad``, a bad record.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: no such trajectories file (write one with envfactory rollout --out)")

    def bad(err: DatasetError) -> None:
        if on_bad is None:
            raise err
        on_bad(err)

    with path.open(encoding="utf-8", errors="surrogateescape", newline="\n") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                line.encode("utf-8")
                obj = json.loads(line)
            except UnicodeEncodeError:
                bad(DatasetError("not UTF-8 text", file=path, line=lineno))
                continue
            except (ValueError, RecursionError) as exc:
                bad(DatasetError(f"not a trajectory record: not JSON: {exc}", file=path, line=lineno))
                continue
            problem = record_problem(obj)
            if problem is not None:
                bad(DatasetError(f"not a trajectory record: {problem[1]}", file=path, line=lineno, field=problem[0]))
                continue
            if obj.get("error"):  # an episode a failed request cut short (rollout --out): never training data
                continue
            reward, env, task_id = obj["reward"], obj["env"], obj["task_id"]
            if float(reward) < min_reward:
                continue
            try:
                spec = get_environment(env)
            except EnvFactoryError as exc:
                bad(DatasetError(f"not a trajectory record: {exc}", file=path, line=lineno, field="env"))
                continue
            tools = obj.get("tools") or spec.openai_tools()
            try:
                split = spec.tasks.get(task_id).split
            except KeyError:
                split = "unknown"
            yield Trajectory(spec.name, task_id, split, reward, obj["messages"], tools, file=str(path), line=lineno)
