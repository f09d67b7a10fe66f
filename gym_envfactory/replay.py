"""Ground truth → one reference per task: what the reward compares an episode against.

:func:`task_reference` replays a task's ground-truth calls in a fresh session (once per task, cached,
thread-safe) and returns a :class:`TaskReference`: the initial state, the state after every turn, the
normalised ground-truth calls with their masked arguments, the expected outputs, and the state fields the
environments exclude from equivalence (docs/reward.md).  A ground-truth call that fails is a dataset
error naming the file, line, task, turn and call (docs/cases.md C06), never a logged warning.
"""

from __future__ import annotations

import copy
import json
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from pydantic import BaseModel

from gym_envfactory.environment.cow import BASE_CACHE, FrozenState, plain_state
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.environment.states import task_environments, task_initial_state
from gym_envfactory.environment.tasks import Task, TaskSet, check_tool_names
from gym_envfactory.errors import DatasetError, SpecError
from gym_envfactory.session import Session

__all__ = ["ReferenceCall", "TaskReference", "task_reference", "replay_ground_truth"]


@dataclass(frozen=True, slots=True)
class ReferenceCall:
    """One ground-truth call: tool ``name``, ``arguments`` normalised by the argument policy, the
    argument names ignored when calls are compared (``masked``), and the call's result payload."""

    name: str
    arguments: dict[str, Any]
    masked: tuple[str, ...] = ()
    result: Any = None


@dataclass(frozen=True)
class TaskReference:
    """Everything the reward needs to know about one task (shared by every episode: read-only).

    Attributes:
        task_id: the task.
        envs: names of the environments the task spans (primary first).
        initial_state: validated JSON bytes per environment (what a session starts from).
        turn_states: canonical state after each turn (one env: its state dict; several:
            ``{env_name: state}``), the same form as :meth:`Session.state`.
        turn_calls: the ground-truth calls of each turn.
        expected_outputs: per turn, strings the reply must contain at token boundaries.
        clarification: per turn, whether the right answer is a question with no calls.
        excluded_fields: state paths left out of equivalence (bookkeeping and free text; prefixed with
            ``<env>.`` for several environments).
        set_fields: list paths compared as multisets (same prefixing).
        initial: the initial state in the canonical form of :meth:`Session.state` (parsed once per
            task), or ``None`` when unknown (a hand-built reference: then no no-change rule for turn 0).
        turn_frozen: the same turn states as :class:`~gym_envfactory.environment.cow.FrozenState`
            (what the reward compares an in-process episode's frozen states with, by record identity:
            docs/reward.md, "Cost"), or ``None`` (a hand-built reference).
        start_frozen: the state the episodes start from (``initial_state``) as the replay's own
            :class:`~gym_envfactory.environment.cow.FrozenState` (for a window, the state after the turn
            before it), or ``None``; :meth:`share_start` hands it to sessions through the base cache.
    """

    task_id: str
    envs: tuple[str, ...]
    initial_state: dict[str, bytes]
    turn_states: list[Any]
    turn_calls: list[list[ReferenceCall]]
    expected_outputs: list[list[str]]
    clarification: list[bool]
    excluded_fields: tuple[str, ...] = ()
    set_fields: tuple[str, ...] = ()
    initial: Any = None
    turn_frozen: list[FrozenState] | None = field(default=None, compare=False, repr=False)
    start_frozen: FrozenState | None = field(default=None, compare=False, repr=False)
    #: what the reward derives from this reference alone, memoised (a pure function of the reference,
    #: asked several times per episode and by every episode of the task): verdicts of comparisons
    #: between its own states, and the JSON text of each turn state.
    memo: dict[tuple[Any, ...], Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    @property
    def n_turns(self) -> int:
        """The number of user turns of the task."""
        return len(self.turn_states)

    @property
    def final_state(self) -> Any:
        """The canonical state after the last turn."""
        return self.turn_states[-1]

    @classmethod
    def from_parts(cls, turn_calls: Sequence[Sequence[ReferenceCall | tuple[str, dict[str, Any], Sequence[str]]]],
                   turn_states: Sequence[Any], expected_outputs: Sequence[Sequence[str]] | None = None, *,
                   initial: Any = None, task_id: str = "", excluded_fields: Sequence[str] = (),
                   set_fields: Sequence[str] = (), clarification: Sequence[bool] | None = None) -> TaskReference:
        """A reference built by hand (offline scoring, tests): per-turn ground-truth calls as
        :class:`ReferenceCall` or ``(name, arguments, masked)`` tuples, the state after each turn, and
        optionally the expected outputs and the ``initial`` state (canonical form; without it the
        no-change rule for read-only turns is not applied to turn 0)."""
        calls = [[c if isinstance(c, ReferenceCall) else ReferenceCall(c[0], dict(c[1]), tuple(c[2])) for c in turn]
                 for turn in turn_calls]
        n = len(calls)
        # copies: the reward memoises what it derives from these states, so the caller's later edits
        # must not reach them (a reference is read-only once built)
        return cls(task_id=task_id, envs=(), initial_state={}, initial=copy.deepcopy(initial),
                   turn_states=copy.deepcopy(list(turn_states)), turn_calls=calls,
                   expected_outputs=[list(o) for o in expected_outputs] if expected_outputs is not None else [[]] * n,
                   clarification=list(clarification) if clarification is not None else [False] * n,
                   excluded_fields=tuple(excluded_fields), set_fields=tuple(set_fields))

    def window(self, start: int, end: int, environments: Sequence[EnvironmentSpec]) -> TaskReference:
        """The reference of turns ``start .. end-1`` alone: the episode starts from the ground-truth state
        after turn ``start - 1`` (validated JSON bytes per environment of ``environments``) and ends
        after turn ``end - 1``.  Used for per-turn RL rows (paper §3.5: one training prompt per turn).

        Raises:
            ValueError: not ``0 <= start < end <= n_turns``.
        """
        if not 0 <= start < end <= self.n_turns:
            raise ValueError(f"turn window [{start}, {end}) is not inside the task's {self.n_turns} turn(s)")
        if (start, end) == (0, self.n_turns):
            return self
        key = ("window", start, end, tuple(e.name for e in environments))
        window = self.memo.get(key)
        if window is None:
            window = self.memo[key] = self._window(start, end, environments)
        return window

    def share_start(self, environments: Sequence[EnvironmentSpec]) -> None:
        """Make the process's base cache (:data:`~gym_envfactory.environment.cow.BASE_CACHE`) hand
        sessions started from :attr:`initial_state` this reference's own model of that state
        (:attr:`start_frozen`), so that the records an episode never changes are the reference's
        records and the reward compares them by identity (docs/reward.md, "Cost").  The env calls it at
        every reset: a base the cache evicted in between is put back.  Only when that model is exactly
        what the bytes parse to (a plain state model, :func:`~gym_envfactory.environment.cow.plain_model`,
        with no private storage, equal to a fresh parse, checked once): any other may carry what the
        replay left outside its JSON (a login), which sessions must not inherit.  Costs one dictionary
        update per environment; does nothing without :attr:`start_frozen`."""
        frozen = self.start_frozen
        if frozen is None:
            return
        for e in environments:
            model, raw = frozen.models.get(e.name), self.initial_state.get(e.name)
            if model is not None and raw is not None and self._round_trips(e, model, raw):
                BASE_CACHE.put(e.state_model, raw, model)

    def _round_trips(self, env: EnvironmentSpec, model: BaseModel, raw: bytes) -> bool:
        """Whether ``model`` is what ``raw`` parses to, in every value it holds (memoised): a plain model
        with no private storage, the same as a fresh parse of ``raw`` value by value and type by type
        (:func:`_same`: every field, excluded ones too, and every attribute stored on a record).  A field
        left out of the JSON, a serializer that does not round-trip, a validator that normalises, or a
        value of another type that compares equal (``2.0`` in an ``int`` field, a ``str`` in an enum
        field) makes them differ, and then sessions must parse the bytes themselves."""
        key = ("round_trips", env.name, raw)
        hit = self.memo.get(key)
        if hit is None:
            hit = type(model) is env.state_model and plain_state(model)
            if hit:
                try:
                    hit = _same(env.state_model.model_validate_json(raw), model)
                except ValueError:  # pydantic's ValidationError is a ValueError
                    hit = False
            self.memo[key] = hit
        return hit

    def _window(self, start: int, end: int, environments: Sequence[EnvironmentSpec]) -> TaskReference:
        if start == 0:
            initial_state, initial = self.initial_state, self.initial
        else:
            before = self.turn_states[start - 1]
            by_env = {environments[0].name: before} if len(environments) == 1 else before
            initial_state = {e.name: e.validate_state(by_env[e.name]).model_dump_json().encode() for e in environments}
            initial = before
        return TaskReference(
            task_id=self.task_id, envs=self.envs, initial_state=initial_state,
            turn_states=self.turn_states[start:end], turn_calls=self.turn_calls[start:end],
            expected_outputs=self.expected_outputs[start:end], clarification=self.clarification[start:end],
            excluded_fields=self.excluded_fields, set_fields=self.set_fields, initial=initial,
            turn_frozen=self.turn_frozen[start:end] if self.turn_frozen is not None else None,
            start_frozen=self.start_frozen if start == 0 else (
                self.turn_frozen[start - 1] if self.turn_frozen is not None else None))

    def state_before(self, turn: int) -> Any:
        """The ground-truth state before ``turn`` (the initial state for turn 0)."""
        return self.turn_states[turn - 1] if turn > 0 else self.initial


def _same(a: Any, b: Any) -> bool:
    """Strict structural identity of two parsed states: equal values of the very same types all the way
    down (models: same class, same ``__dict__`` keys, same private storage and extra fields; dicts, lists,
    tuples, sets: same type and items; ``True`` is not ``1``, ``2.0`` is not ``2``, NaN is NaN)."""
    t = type(a)
    if t is not type(b):
        return False
    if isinstance(a, BaseModel):
        return (_same(a.__dict__, b.__dict__) and _same(a.__pydantic_extra__, b.__pydantic_extra__)
                and _same(getattr(a, "__pydantic_private__", None), getattr(b, "__pydantic_private__", None)))
    if t is dict:
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    if t is list or t is tuple:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if t is set or t is frozenset:
        return len(a) == len(b) and sorted(map(repr, a)) == sorted(map(repr, b))
    if t is float and a != a:
        return b != b  # NaN
    return bool(a == b)


class _Where(TypedDict):
    """Where a task is, for :class:`DatasetError`."""

    file: Path | None
    line: int | None
    task_id: str


def _fields(environments: Sequence[EnvironmentSpec]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if len(environments) == 1:
        return environments[0].excluded_fields, environments[0].set_fields
    return (tuple(f"{e.name}.{p}" for e in environments for p in e.excluded_fields),
            tuple(f"{e.name}.{p}" for e in environments for p in e.set_fields))


def replay_ground_truth(spec: EnvironmentSpec, task: Task, tasks: TaskSet | None = None) -> TaskReference:
    """Run every ground-truth call of ``task`` (a task of ``spec``; of ``tasks`` when a task set other
    than ``spec.tasks`` holds it) in order in a fresh :class:`Session`.

    Raises:
        DatasetError: a bad initial-state reference, a bad tool set (``excluded_tools``/``added_tools``,
            :func:`~gym_envfactory.environment.tasks.check_tool_names`), or a ground-truth call that is
            unknown, has invalid arguments, fails, or masks an argument the tool does not have (naming
            task, turn, call).
    """
    tasks = spec.tasks if tasks is None else tasks
    environments = task_environments(spec, task)
    initial = task_initial_state(spec, task, tasks)
    session = Session.from_states(environments, initial)
    turn_states: list[Any] = []
    turn_frozen: list[FrozenState] = []
    frozen = session.frozen_in_place  # else the env compares dicts: no frozen states to keep
    start_frozen: FrozenState | None = None
    if frozen:
        try:
            start_frozen = session.frozen_state()  # the parsed base the replay starts from
        except SpecError:  # bytes that do not load: the first ground-truth call reports it
            frozen = False
    turn_calls: list[list[ReferenceCall]] = []
    where: _Where = {"file": tasks.file_of(task.task_id), "line": tasks.line_of(task.task_id), "task_id": task.task_id}
    try:
        if task.has_tool_sets:  # excluded_tools / added_tools name tools of the task's environments
            check_tool_names(task, session.tools, file=where["file"], line=where["line"])
        for ti, turn in enumerate(task.turns):
            calls = []
            for ci, call in enumerate(turn.ground_truth):
                res = session.call(call.name, call.arguments)
                if not res.ok:
                    raise DatasetError(f"ground-truth call {call.name} failed: {res.error_type}: {res.error}",
                                       **where, field=f"turns.{ti}.ground_truth.{ci}", turn=ti, call=ci)
                unknown_masks = set(call.masked_arguments) - set(res.arguments or {})
                if unknown_masks:
                    raise DatasetError(f"masked_arguments {sorted(unknown_masks)} are not parameters of {call.name}",
                                       **where, field=f"turns.{ti}.ground_truth.{ci}.masked_arguments",
                                       turn=ti, call=ci)
                calls.append(ReferenceCall(call.name, res.arguments or {}, tuple(call.masked_arguments), res.content))
            turn_states.append(session.state())
            if frozen:
                turn_frozen.append(session.frozen_state())
            turn_calls.append(calls)
    finally:
        session.close()
    excluded, set_fields = _fields(environments)
    return TaskReference(
        task_id=task.task_id,
        envs=tuple(e.name for e in environments),
        initial_state=initial,
        turn_states=turn_states,
        turn_calls=turn_calls,
        expected_outputs=[list(t.expected_outputs) for t in task.turns],
        clarification=[t.clarification for t in task.turns],
        excluded_fields=excluded,
        set_fields=set_fields,
        initial=_canonical(initial),
        turn_frozen=turn_frozen if frozen else None,
        start_frozen=start_frozen,
    )


def _canonical(states: dict[str, bytes]) -> Any:
    """Validated state bytes per environment → the form of :meth:`Session.state`."""
    parsed = {n: json.loads(b) for n, b in states.items()}
    return next(iter(parsed.values())) if len(parsed) == 1 else parsed


_CACHE: weakref.WeakKeyDictionary[TaskSet, dict[str, TaskReference]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def task_reference(spec: EnvironmentSpec, task: Task | str, tasks: TaskSet | None = None) -> TaskReference:
    """The :class:`TaskReference` of ``task`` (a task of ``spec``, or its id; ``tasks``: the task set
    holding it when not ``spec.tasks``), replayed once per task set and cached.

    Raises:
        UnknownTaskError: no task with that id.
        DatasetError: the ground truth does not replay (see :func:`replay_ground_truth`).
    """
    tasks = spec.tasks if tasks is None else tasks
    if isinstance(task, str):
        task = tasks.get(task)
    per_set = _CACHE.get(tasks)
    if per_set is not None:
        cached = per_set.get(task.task_id)
        if cached is not None:
            return cached
    reference = replay_ground_truth(spec, task, tasks)
    with _LOCK:
        return _CACHE.setdefault(tasks, {}).setdefault(task.task_id, reference)
