"""Tasks (docs/architecture.md, "Tasks"): the JSON Lines format and loading with file/line/field errors.

One task per line of ``tasks.jsonl``::

    {"task_id": "hotel-007",
     "env": "HotelBooking",                      # or ["HotelBooking", "TeamCalendar"]
     "split": "train",                            # free-form; "train"/"test" by convention
     "initial_state": "small",                    # a named state, or {"name": "small",
                                                  #   "patches": [RFC 6902 ops]}, or {"state": {...}},
                                                  #   or {env_name: <one of those>} for several envs
     "turns": [
       {"user": "Book the cheapest ...",
        "ground_truth": [{"name": "search_hotels", "arguments": {...}, "masked_arguments": []}],
        "clarification": false,                   # true: the right answer is a question, no calls
        "expected_outputs": ["450.00"],           # strings the reply must contain at token boundaries
        "added_tools": []}                        # tools offered from this turn on (unavailable before)
     ],
     "excluded_tools": [],                        # tools never offered in this task
     "provenance": {"kind": "hand-written"}}

Tool sets (docs/authoring.md, "Tool sets per turn"): a turn offers every tool of the task's environments except
the task's ``excluded_tools`` and the tools a later turn adds (:meth:`Task.tools_at`).  A ground-truth
call to a tool not offered at its turn, a tool both excluded and added, or added twice, is a
:class:`~gym_envfactory.errors.DatasetError` at load; unknown names are checked against the
environments' tools by :func:`check_tool_names` when the ground truth is replayed.

The final state is never stored: :mod:`gym_envfactory.replay` derives it by replaying the ground truth
(a replay error is a :class:`~gym_envfactory.errors.DatasetError` naming task, turn and call; C06).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gym_envfactory.environment.arguments import format_validation_error
from gym_envfactory.environment.manifest import parse_json_text
from gym_envfactory.errors import DatasetError, UnknownTaskError

__all__ = ["GroundTruthCall", "Turn", "Task", "TaskSet", "parse_task", "check_tool_sets", "check_tool_names"]


class GroundTruthCall(BaseModel):
    """One ground-truth tool call.  ``masked_arguments`` are ignored when calls are compared."""

    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    masked_arguments: list[str] = Field(default_factory=list)


class Turn(BaseModel):
    """One user turn and what a correct agent does in it."""

    model_config = ConfigDict(extra="forbid")
    user: str
    ground_truth: list[GroundTruthCall] = Field(default_factory=list)
    clarification: bool = False
    expected_outputs: list[str] = Field(default_factory=list)
    added_tools: list[str] = Field(default_factory=list)


class Task(BaseModel):
    """A task (docs/architecture.md, "Tasks").  ``envs`` lists the environment names it spans (first = primary)."""

    model_config = ConfigDict(extra="forbid")
    task_id: str
    env: str | list[str] | None = None
    split: str = "train"
    initial_state: str | dict[str, Any] | None = None
    system: str | None = None
    turns: list[Turn] = Field(min_length=1)
    provenance: dict[str, Any] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)
    excluded_tools: list[str] = Field(default_factory=list)

    @property
    def envs(self) -> list[str]:
        """The environment names the task spans, primary first (empty before loading fills ``env`` in)."""
        if self.env is None:
            return []
        return [self.env] if isinstance(self.env, str) else list(self.env)

    @property
    def multi_turn(self) -> bool:
        """True when the task has more than one user turn."""
        return len(self.turns) > 1

    @property
    def n_ground_truth_calls(self) -> int:
        """The number of ground-truth calls over all turns."""
        return sum(len(t.ground_truth) for t in self.turns)

    @property
    def has_tool_sets(self) -> bool:
        """True when the offered tools differ from the environments' full list in some turn
        (``excluded_tools`` or a turn's ``added_tools``)."""
        return bool(self.excluded_tools) or any(t.added_tools for t in self.turns)

    def tools_at(self, turn: int, tools: Iterable[str]) -> list[str]:
        """The names among ``tools`` (every tool of the task's environments, in their order) offered in
        ``turn`` (0-based): all but the ``excluded_tools`` and the tools a turn after ``turn`` adds."""
        hidden = set(self.excluded_tools)
        for t in self.turns[turn + 1:]:
            hidden.update(t.added_tools)
        return [n for n in tools if n not in hidden]

    def added_at(self) -> dict[str, int]:
        """``{tool name: the 0-based turn that adds it}`` (``added_tools`` of each turn)."""
        return {n: ti for ti, t in enumerate(self.turns) for n in t.added_tools}


def check_tool_sets(task: Task, *, file: Path | None = None, line: int | None = None) -> None:
    """Check ``task``'s tool-set fields on their own (no environment needed): no tool named twice in
    ``excluded_tools`` or added by two turns, none both excluded and added, and no ground-truth call to a
    tool excluded or added only by a later turn.

    Raises:
        DatasetError: naming ``file``, ``line``, the task and the field (``excluded_tools``,
            ``turns.<t>.added_tools`` or ``turns.<t>.ground_truth.<c>``).
    """
    at: dict[str, Any] = {"file": file, "line": line, "task_id": task.task_id}
    excluded = set(task.excluded_tools)
    if len(excluded) != len(task.excluded_tools):
        raise DatasetError("excluded_tools names a tool twice", **at, field="excluded_tools")
    added: dict[str, int] = {}
    for ti, turn in enumerate(task.turns):
        for name in turn.added_tools:
            if name in excluded:
                raise DatasetError(f"tool {name!r} is both excluded (excluded_tools) and added at turn {ti}",
                                   **at, field=f"turns.{ti}.added_tools", turn=ti)
            if name in added:
                raise DatasetError(f"tool {name!r} is added twice (turns {added[name]} and {ti})",
                                   **at, field=f"turns.{ti}.added_tools", turn=ti)
            added[name] = ti
    for ti, turn in enumerate(task.turns):
        for ci, call in enumerate(turn.ground_truth):
            if call.name in excluded:
                raise DatasetError(f"ground-truth call to {call.name}, which the task excludes (excluded_tools)",
                                   **at, field=f"turns.{ti}.ground_truth.{ci}", turn=ti, call=ci)
            if added.get(call.name, 0) > ti:
                raise DatasetError(f"ground-truth call to {call.name} at turn {ti}, before turn {added[call.name]} "
                                   f"adds it (added_tools)", **at, field=f"turns.{ti}.ground_truth.{ci}",
                                   turn=ti, call=ci)


def check_tool_names(task: Task, tools: Collection[str], *, file: Path | None = None,
                     line: int | None = None) -> None:
    """Check that every name in ``task``'s ``excluded_tools`` and ``added_tools`` is one of ``tools``
    (the tool names of the task's environments), after :func:`check_tool_sets`;
    :mod:`gym_envfactory.replay` calls it before replaying the ground truth.

    Raises:
        DatasetError: an unknown name (or what :func:`check_tool_sets` finds), naming ``file``,
            ``line``, the task and the field.
    """
    check_tool_sets(task, file=file, line=line)
    at: dict[str, Any] = {"file": file, "line": line, "task_id": task.task_id}
    fields: list[tuple[str, Sequence[str]]] = [("excluded_tools", task.excluded_tools)]
    fields += [(f"turns.{ti}.added_tools", t.added_tools) for ti, t in enumerate(task.turns)]
    for field, names in fields:
        unknown = [n for n in names if n not in tools]
        if unknown:
            raise DatasetError(f"unknown tool(s) {unknown} in {field}; the task's tools are {sorted(tools)}",
                               **at, field=field)


def parse_task(obj: Any, *, env: str | None = None, file: Path | None = None, line: int | None = None) -> Task:
    """One task from its JSON object (a line of a tasks file), checked on its own: the task schema, no
    ground-truth call on a clarification turn, the tool-set fields (:func:`check_tool_sets`).  A task
    without ``env`` gets ``env`` (the environment whose file it is); the environment and tool names are
    not looked up here (:mod:`gym_envfactory.environment.taskfiles` does).

    Raises:
        DatasetError: naming ``file``, ``line``, the task (when it has an id) and the field; also for a
            task without ``env`` when ``env`` is ``None``.
    """
    try:
        task = Task.model_validate(obj)
    except ValidationError as exc:
        d = format_validation_error(exc)[0]
        tid = obj.get("task_id") if isinstance(obj, dict) else None
        raise DatasetError(d["message"], file=file, line=line, field=d["field"], task_id=tid) from None
    if task.env is None:
        if env is None:
            raise DatasetError("the task names no environment (env) and none was given for it",
                               file=file, line=line, field="env", task_id=task.task_id)
        task.env = env
    if not task.envs or len(set(task.envs)) != len(task.envs):
        raise DatasetError(f"env names each environment of the task once, got {task.env!r}",
                           file=file, line=line, field="env", task_id=task.task_id)
    for ti, turn in enumerate(task.turns):
        if turn.clarification and turn.ground_truth:
            raise DatasetError("a clarification turn has no ground-truth calls",
                               file=file, line=line, field=f"turns.{ti}.ground_truth", task_id=task.task_id)
    if task.has_tool_sets:
        check_tool_sets(task, file=file, line=line)
    return task


class TaskSet:
    """The tasks of one environment (its ``tasks.jsonl`` or programmatic list).

    Loading and lookup only: the ground truth is replayed by :mod:`gym_envfactory.replay`, which
    caches one reference per task.
    """

    def __init__(self, env_name: str, tasks: list[Task], *, source: Path | None,
                 lines: Mapping[str, int] | None = None, files: Mapping[str, Path] | None = None) -> None:
        self.env_name = env_name
        self.source = source
        self._tasks = tasks
        self._by_id = {t.task_id: t for t in tasks}
        self._lines = dict(lines or {})
        self._files = dict(files or {})

    # ---------------------------------------------------------------- loading
    @classmethod
    def from_jsonl(cls, env_name: str, path: Path) -> TaskSet:
        """Parse ``tasks.jsonl``.  Raises :class:`DatasetError` naming file, line and field."""
        tasks: list[Task] = []
        lines: dict[str, int] = {}
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                obj = parse_json_text(line, file=path, line=lineno, error=DatasetError)
                task = cls._parse(env_name, obj, file=path, line=lineno)
                if task.task_id in lines:
                    raise DatasetError(f"duplicate task_id {task.task_id!r} (first on line {lines[task.task_id]})",
                                       file=path, line=lineno, field="task_id")
                lines[task.task_id] = lineno
                tasks.append(task)
        return cls(env_name, tasks, source=path, lines=lines)

    @classmethod
    def from_objects(cls, env_name: str, objs: Iterable[Mapping[str, Any] | Task]) -> TaskSet:
        """Tasks of ``env_name`` from dicts (or :class:`Task` objects, kept as they are); ``line`` in
        errors is the 1-based position in ``objs``.

        Raises:
            DatasetError: a malformed task, one of another environment, or a duplicate ``task_id``.
        """
        tasks = []
        seen: set[str] = set()
        for i, obj in enumerate(objs, 1):
            t = obj if isinstance(obj, Task) else cls._parse(env_name, dict(obj), file=None, line=i)
            if t.task_id in seen:
                raise DatasetError(f"duplicate task_id {t.task_id!r}", line=i, field="task_id")
            seen.add(t.task_id)
            tasks.append(t)
        return cls(env_name, tasks, source=None)

    @staticmethod
    def _parse(env_name: str, obj: Any, *, file: Path | None, line: int) -> Task:
        task = parse_task(obj, env=env_name, file=file, line=line)
        if task.envs[0] != env_name:
            raise DatasetError(f"task belongs to {task.envs[0]!r}, this file is {env_name!r}'s",
                               file=file, line=line, field="env", task_id=task.task_id)
        return task

    # ---------------------------------------------------------------- access
    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks)

    def ids(self, split: str | None = None) -> list[str]:
        """Task ids in file order, optionally only those of ``split``."""
        return [t.task_id for t in self._tasks if split is None or t.split == split]

    def splits(self) -> list[str]:
        """The split names present, sorted."""
        return sorted({t.split for t in self._tasks})

    def get(self, task_id: str) -> Task:
        """The task with id ``task_id``.

        Raises:
            UnknownTaskError: no task with that id.
        """
        try:
            return self._by_id[task_id]
        except KeyError:
            raise UnknownTaskError(f"{self.env_name} has no task {task_id!r}") from None

    def sample(self, rng: random.Random, split: str | None = None) -> Task:
        """A task drawn with ``rng`` (seeded by the caller), optionally from one split."""
        pool = self.ids(split)
        if not pool:
            raise UnknownTaskError(f"{self.env_name} has no tasks" + (f" in split {split!r}" if split else ""))
        return self._by_id[rng.choice(pool)]

    def line_of(self, task_id: str) -> int | None:
        """The 1-based line of ``task_id`` in ``tasks.jsonl`` (``None`` for tasks not loaded from a file)."""
        return self._lines.get(task_id)

    def file_of(self, task_id: str) -> Path | None:
        """The file ``task_id`` was read from: its own when the set gathers several tasks files
        (:func:`~gym_envfactory.environment.taskfiles.read_tasks`), else :attr:`source` (``None`` for tasks
        not loaded from a file)."""
        return self._files.get(task_id, self.source)
