"""Tasks files from anywhere: the one route from a ``tasks.jsonl`` (written by ``envfactory gen tasks``, by
hand, or kept beside a package) into ``validate``, ``rollout``, ``export``, ``ui``, ``gym.make(...,
tasks=...)`` and ``envfactory tasks add`` (docs/synthesis.md, "Using a tasks file").

:func:`read_tasks` reads tasks files (JSON Lines, the format of :mod:`gym_envfactory.environment.tasks`)
and task objects, checks every task against the environments it names, and groups the tasks by their
first (primary) environment, one :class:`~gym_envfactory.environment.tasks.TaskSet` each, which keeps the
file and line of every task: a ground truth that later fails to replay is reported at its own line.
:meth:`EnvironmentSpec.with_tasks <gym_envfactory.environment.spec.EnvironmentSpec.with_tasks>` then gives
an environment those tasks in place of its own.

Checked at load, each refusal a :class:`~gym_envfactory.errors.DatasetError` naming file, line and field:
a line that is not JSON or not a task; a task without ``env`` when no environment is given for it; an
environment name no catalog folder or code definition has (``env``); a ground-truth call, excluded or
added tool that none of the task's environments has (a task spanning several environments names them
all in ``env``, primary first); a ``task_id`` seen before in any of the files.  Whether the ground truth
replays is checked when a task is first played or validated (:func:`gym_envfactory.replay.task_reference`).

A file of EnvFactory's own RL rows (a ``.parquet`` file, or JSON Lines whose first object has ``prompt``,
``reward_model`` and ``extra_info``) is read as tasks the same way
(:func:`gym_envfactory.environment.paperformat.tasks_from_rows`: servers matched to environments by name,
tool prefixes stripped); a task's line is its first row.  Its ``final_config`` is compared with the replayed
states only by ``envfactory tasks import``, the checked route (docs/synthesis.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gym_envfactory.environment.catalog import get_environment, list_environments, strip_gym_id
from gym_envfactory.environment.manifest import parse_json_text
from gym_envfactory.environment.paperformat import is_paper_rows_file, read_rows, tasks_from_rows
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.environment.tasks import Task, TaskSet, check_tool_names, parse_task
from gym_envfactory.errors import DatasetError

__all__ = ["TasksSource", "read_tasks", "tasks_for"]

TasksSource = str | os.PathLike[str] | TaskSet | Iterable[str | os.PathLike[str] | Mapping[str, Any] | Task]
"""What ``--tasks`` and ``gym.make(..., tasks=...)`` take: a tasks file path, a :class:`TaskSet`, or a list
of paths, task dicts and :class:`Task` objects (mixed freely; a dict's ``line`` in errors is its 1-based
position in the list)."""


def read_tasks(source: TasksSource, *, env: str | EnvironmentSpec | None = None) -> dict[str, TaskSet]:
    """Read and check tasks, grouped by primary environment.

    Args:
        source: a tasks file path, a list of paths and task objects, or a :class:`TaskSet` (its tasks are
            checked like the others and keep the file and lines they were read from).
        env: the environment (name, gym id, or the :class:`EnvironmentSpec` itself, which need not be
            registered) of the tasks that name none (``env`` left out, as in a package's own
            ``tasks.jsonl``); ``None``: such a task is refused.

    Returns:
        ``{environment name: TaskSet}``, environments in the order their first task appears, tasks in
        file order; every task's ``env`` filled in.

    Raises:
        DatasetError: a file that cannot be read, a malformed line, an unknown environment or tool, a
            duplicate ``task_id`` (file, line, field; module docstring).
        UnknownEnvironmentError: ``env`` is not an environment.
        SpecError: an environment a task names exists but does not load.
    """
    spec = env if isinstance(env, EnvironmentSpec) else get_environment(env) if env is not None else None
    default = spec.name if spec is not None else None
    groups: dict[str, list[Task]] = {}
    lines: dict[str, int] = {}
    files: dict[str, Path] = {}
    known = set(list_environments())
    tools_of: dict[str, list[str]] = {}  # environment → its tool names, looked up once per call
    if spec is not None:
        known.add(spec.name)
        tools_of[spec.name] = list(spec.tools)
    for task, file, line in _items(source, default):
        _check_names(task, known, tools_of, file=file, line=line)
        if task.task_id in lines:
            tid = task.task_id
            first = f"{files[tid]}:{lines[tid]}" if tid in files else f"item {lines[tid]}"
            raise DatasetError(f"duplicate task_id {tid!r} (first at {first})", file=file, line=line,
                               field="task_id", task_id=tid)
        lines[task.task_id] = line
        if file is not None:
            files[task.task_id] = file
        groups.setdefault(task.envs[0], []).append(task)
    out: dict[str, TaskSet] = {}
    for name, tasks in groups.items():
        ids = {t.task_id for t in tasks}
        sources = {files[i] for i in ids if i in files}
        out[name] = TaskSet(name, tasks, source=next(iter(sources)) if len(sources) == 1 else None,
                            lines={i: lines[i] for i in ids}, files={i: files[i] for i in ids if i in files})
    return out


def tasks_for(groups: Mapping[str, TaskSet], env: str) -> TaskSet:
    """The tasks of ``groups`` (from :func:`read_tasks`) whose primary environment is ``env`` (a name or gym
    id); an empty set when there are none."""
    name = strip_gym_id(env)
    return groups.get(name) or TaskSet(name, [], source=None)


def _items(source: TasksSource, env: str | None) -> Iterable[tuple[Task, Path | None, int]]:
    """``(task, file, line)`` for every task of ``source``, parsed on its own (:func:`parse_task`)."""
    if isinstance(source, TaskSet):
        for t in source:
            yield _reparse(t, env, source.file_of(t.task_id), source.line_of(t.task_id) or 0)
        return
    if isinstance(source, (str, os.PathLike)):
        yield from _file_items(Path(source), env)
        return
    if isinstance(source, Mapping):
        raise TypeError("tasks: give a path, a list of paths or task objects, or a TaskSet; got one dict "
                        "(wrap it in a list)")
    for i, item in enumerate(source, 1):
        if isinstance(item, (str, os.PathLike)):
            yield from _file_items(Path(item), env)
        elif isinstance(item, Task):
            yield _reparse(item, env, None, i)
        elif isinstance(item, Mapping):
            yield parse_task(dict(item), env=env, file=None, line=i), None, i
        else:
            raise DatasetError(f"a task is a JSON object (dict), a Task or a tasks file path, got "
                               f"{type(item).__name__}", line=i)


def _reparse(task: Task, env: str | None, file: Path | None, line: int) -> tuple[Task, Path | None, int]:
    return parse_task(task.model_dump(), env=env, file=file, line=line), file, line


def _file_items(path: Path, env: str | None) -> Iterable[tuple[Task, Path, int]]:
    if is_paper_rows_file(path):  # EnvFactory's own RL rows (docs/synthesis.md): read as tasks, line = first row
        for item in tasks_from_rows(read_rows(path), file=path):
            first = item.task["provenance"]["rows"][0]
            yield parse_task(item.task, env=env, file=path, line=first), path, first
        return
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"cannot read the tasks file: {exc}", file=path) from None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        obj = parse_json_text(line, file=path, line=lineno, error=DatasetError)
        yield parse_task(obj, env=env, file=path, line=lineno), path, lineno


def _check_names(task: Task, known: set[str], tools_of: dict[str, list[str]], *, file: Path | None,
                 line: int) -> None:
    """Every environment ``task`` names is ``known``, and every tool its ground truth calls, excludes or
    adds is one of theirs (``tools_of`` caches each environment's tool names)."""
    at: dict[str, Any] = {"file": file, "line": line, "task_id": task.task_id}
    tools: set[str] = set()
    for name in task.envs:
        if name not in known:
            raise DatasetError(f"unknown environment {name!r}; known: {', '.join(sorted(known)) or 'none'}",
                               **at, field="env")
        if name not in tools_of:
            tools_of[name] = list(get_environment(name).tools)
        tools.update(tools_of[name])
    spans = f"{task.envs}" if len(task.envs) > 1 else repr(task.envs[0])
    for ti, turn in enumerate(task.turns):
        for ci, call in enumerate(turn.ground_truth):
            if call.name not in tools:
                hint = "" if len(task.envs) > 1 else "; a task spanning several environments names them all in env"
                raise DatasetError(f"unknown tool {call.name!r}: no tool of {spans} has that name{hint}",
                                   **at, field=f"turns.{ti}.ground_truth.{ci}.name", turn=ti, call=ci)
    if task.has_tool_sets:
        check_tool_names(task, tools, file=file, line=line)
