"""Tasks (DESIGN §6): the JSON Lines format, loading with file/line/field errors, ground-truth replay.

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
        "expected_outputs": ["450.00"]}           # strings the reply must contain at token boundaries
     ],
     "provenance": {"kind": "hand-written"}}

The final state is never stored: it is derived by replaying the ground truth (a replay error is a
:class:`~gym_envfactory.errors.DatasetError` naming task, turn and call; CASES C06).
"""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

import jsonpatch
from functools import cached_property
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import DatasetError, SpecError, UnknownTaskError
from .tools import format_validation_error

if TYPE_CHECKING:  # pragma: no cover
    from .spec import EnvironmentSpec

__all__ = ["GroundTruthCall", "Turn", "Task", "TaskSet", "ReplayResult", "replay_ground_truth"]


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


class InitialStateRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    state: dict[str, Any] | None = None
    patches: list[dict[str, Any]] = Field(default_factory=list)


class Task(BaseModel):
    """A task (DESIGN §6).  ``envs`` lists the environment names it spans (first = primary)."""

    model_config = ConfigDict(extra="forbid")
    task_id: str
    env: str | list[str] | None = None
    split: str = "train"
    initial_state: str | dict[str, Any] | None = None
    system: str | None = None
    turns: list[Turn] = Field(min_length=1)
    provenance: dict[str, Any] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)

    @property
    def envs(self) -> list[str]:
        if self.env is None:
            return []
        return [self.env] if isinstance(self.env, str) else list(self.env)

    @property
    def multi_turn(self) -> bool:
        return len(self.turns) > 1

    @property
    def n_ground_truth_calls(self) -> int:
        return sum(len(t.ground_truth) for t in self.turns)


@dataclass(frozen=True)
class ReplayResult:
    """What replaying a task's ground truth produced.

    ``turn_states[t]``: canonical state dict after turn ``t``; ``turn_calls[t]``: the normalised
    arguments of each ground-truth call of turn ``t``; ``turn_results[t]``: their result payloads.
    """

    task_id: str
    initial_state: dict[str, bytes]
    turn_states: list[dict[str, Any]]
    turn_calls: list[list[dict[str, Any]]]
    turn_results: list[list[Any]]

    @property
    def final_state(self) -> dict[str, Any]:
        return self.turn_states[-1]

    @cached_property
    def initial(self) -> Any:
        """The initial state in the same canonical form as :meth:`Session.state` (parsed once per task,
        not on every reset; treat it as read-only: it is shared by every episode of the task)."""
        states = {n: json.loads(b) for n, b in self.initial_state.items()}
        return next(iter(states.values())) if len(states) == 1 else states


def _apply_ref(spec: "EnvironmentSpec", ref: Any, where: dict[str, Any]) -> bytes:
    if ref is None or isinstance(ref, str):
        try:
            return spec.initial_state_json(ref)
        except SpecError as exc:
            raise DatasetError(exc.message, **where) from None
    try:
        r = InitialStateRef.model_validate(ref)
    except ValidationError as exc:
        d = format_validation_error(exc)[0]
        raise DatasetError(d["message"], **{**where, "field": f"initial_state.{d['field']}"}) from None
    if r.state is not None and r.name is not None:
        raise DatasetError("give either a state name or an inline state, not both", **where)
    if r.state is not None:
        raw = r.state
    else:
        try:
            raw = json.loads(spec.initial_state_json(r.name))
        except SpecError as exc:
            raise DatasetError(exc.message, **where) from None
    if r.patches:
        try:
            raw = jsonpatch.apply_patch(raw, r.patches)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise DatasetError(f"patch failed: {exc}", **{**where, "field": "initial_state.patches"}) from None
    try:
        return spec.validate_state(raw).model_dump_json().encode()
    except SpecError as exc:
        raise DatasetError(f"initial state invalid: {exc.message}",
                           **{**where, "field": f"initial_state.{exc.field}"}) from None


class TaskSet:
    """The tasks of one environment (its ``tasks.jsonl`` or programmatic list).

    Ground truth is replayed lazily, once per task, and cached (thread-safe).
    """

    def __init__(self, spec: "EnvironmentSpec", tasks: list[Task], *, source: Path | None,
                 lines: Mapping[str, int] | None = None) -> None:
        self.spec = spec
        self.source = source
        self._tasks = tasks
        self._by_id = {t.task_id: t for t in tasks}
        self._lines = dict(lines or {})
        self._replays: dict[str, ReplayResult] = {}
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- loading
    @classmethod
    def from_jsonl(cls, spec: "EnvironmentSpec", path: Path) -> "TaskSet":
        """Parse ``tasks.jsonl``.  Raises :class:`DatasetError` naming file, line and field."""
        tasks: list[Task] = []
        lines: dict[str, int] = {}
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"invalid JSON: {exc.msg} (column {exc.colno})", file=path, line=lineno) from None
                task = cls._parse(spec, obj, file=path, line=lineno)
                if task.task_id in lines:
                    raise DatasetError(f"duplicate task_id {task.task_id!r} (first on line {lines[task.task_id]})",
                                       file=path, line=lineno, field="task_id")
                lines[task.task_id] = lineno
                tasks.append(task)
        return cls(spec, tasks, source=path, lines=lines)

    @classmethod
    def from_objects(cls, spec: "EnvironmentSpec", objs: Iterable[Mapping[str, Any] | Task]) -> "TaskSet":
        tasks = []
        seen: set[str] = set()
        for i, obj in enumerate(objs, 1):
            t = obj if isinstance(obj, Task) else cls._parse(spec, dict(obj), file=None, line=i)
            if t.task_id in seen:
                raise DatasetError(f"duplicate task_id {t.task_id!r}", line=i, field="task_id")
            seen.add(t.task_id)
            tasks.append(t)
        return cls(spec, tasks, source=None)

    @staticmethod
    def _parse(spec: "EnvironmentSpec", obj: Any, *, file: Path | None, line: int) -> Task:
        try:
            task = Task.model_validate(obj)
        except ValidationError as exc:
            d = format_validation_error(exc)[0]
            tid = obj.get("task_id") if isinstance(obj, dict) else None
            raise DatasetError(d["message"], file=file, line=line, field=d["field"], task_id=tid) from None
        if task.env is None:
            task.env = spec.name
        if task.envs[0] != spec.name:
            raise DatasetError(f"task belongs to {task.envs[0]!r}, this file is {spec.name!r}'s",
                               file=file, line=line, field="env", task_id=task.task_id)
        for ti, turn in enumerate(task.turns):
            if turn.clarification and turn.ground_truth:
                raise DatasetError("a clarification turn has no ground-truth calls",
                                   file=file, line=line, field=f"turns.{ti}.ground_truth", task_id=task.task_id)
        return task

    # ---------------------------------------------------------------- access
    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks)

    def ids(self, split: str | None = None) -> list[str]:
        return [t.task_id for t in self._tasks if split is None or t.split == split]

    def splits(self) -> list[str]:
        return sorted({t.split for t in self._tasks})

    def get(self, task_id: str) -> Task:
        try:
            return self._by_id[task_id]
        except KeyError:
            raise UnknownTaskError(f"{self.spec.name} has no task {task_id!r}") from None

    def sample(self, rng: random.Random, split: str | None = None) -> Task:
        """A task drawn with ``rng`` (seeded by the caller), optionally from one split."""
        pool = self.ids(split)
        if not pool:
            raise UnknownTaskError(f"{self.spec.name} has no tasks" + (f" in split {split!r}" if split else ""))
        return self._by_id[rng.choice(pool)]

    def line_of(self, task_id: str) -> int | None:
        return self._lines.get(task_id)

    # ---------------------------------------------------------------- replay
    def envs_of(self, task: Task) -> list["EnvironmentSpec"]:
        from .spec import get_environment

        return [self.spec if n == self.spec.name else get_environment(n) for n in task.envs]

    def initial_state(self, task: Task) -> dict[str, bytes]:
        """Validated initial state bytes per environment of ``task``."""
        where = {"file": self.source, "line": self.line_of(task.task_id), "task_id": task.task_id}
        envs = self.envs_of(task)
        ref = task.initial_state
        if len(envs) == 1:
            return {envs[0].name: _apply_ref(envs[0], ref, where)}
        if ref is not None and not isinstance(ref, str) and not set(ref) <= {e.name for e in envs}:
            raise DatasetError("a multi-environment initial_state maps environment names to states",
                               **{**where, "field": "initial_state"})
        return {e.name: _apply_ref(e, ref if isinstance(ref, str) or ref is None else ref.get(e.name), where)
                for e in envs}

    def replay(self, task: Task | str) -> ReplayResult:
        """Replay ``task``'s ground truth in a fresh session (cached).  Raises :class:`DatasetError`."""
        if isinstance(task, str):
            task = self.get(task)
        cached = self._replays.get(task.task_id)
        if cached is not None:
            return cached
        result = replay_ground_truth(self, task)
        with self._lock:
            self._replays.setdefault(task.task_id, result)
        return result


def replay_ground_truth(tasks: TaskSet, task: Task) -> ReplayResult:
    """Run every ground-truth call of ``task`` in order in a fresh :class:`Session`.

    Raises:
        DatasetError: a call is unknown, has invalid arguments or fails (naming task, turn, call).
    """
    from .session import Session

    initial = tasks.initial_state(task)
    envs = tasks.envs_of(task)
    session = Session(envs, _states=initial)
    turn_states, turn_calls, turn_results = [], [], []
    for ti, turn in enumerate(task.turns):
        calls, results = [], []
        for ci, call in enumerate(turn.ground_truth):
            res = session.call(call.name, call.arguments)
            if not res.ok:
                raise DatasetError(
                    f"ground-truth call {call.name} failed: {res.error_type}: {res.error}",
                    file=tasks.source, line=tasks.line_of(task.task_id),
                    field=f"turns.{ti}.ground_truth.{ci}", task_id=task.task_id, turn=ti, call=ci,
                )
            unknown_masks = set(call.masked_arguments) - set(res.arguments or {})
            if unknown_masks:
                raise DatasetError(
                    f"masked_arguments {sorted(unknown_masks)} are not parameters of {call.name}",
                    file=tasks.source, line=tasks.line_of(task.task_id),
                    field=f"turns.{ti}.ground_truth.{ci}.masked_arguments",
                    task_id=task.task_id, turn=ti, call=ci,
                )
            calls.append(res.arguments or {})
            results.append(res.content)
        turn_states.append(session.state())
        turn_calls.append(calls)
        turn_results.append(results)
    session.close()
    return ReplayResult(task.task_id, initial, turn_states, turn_calls, turn_results)
