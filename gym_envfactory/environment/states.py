"""Initial-state resolution: the one place a state reference becomes validated JSON bytes.

Two callers, one resolver:

- a **task file** (:func:`task_initial_state`) writes a reference as ``null`` (the environment's
  default state), a state name (``"large"``), ``{"name": ..., "patches": [RFC 6902 ops]}`` or
  ``{"state": {...}}``, or, for a task over several environments, ``{env_name: reference}``; a bad
  reference is a :class:`~gym_envfactory.errors.DatasetError` naming the file, line, task and field;
- **code** (:func:`resolve_initial_states`, used by :class:`~gym_envfactory.session.Session`) may also
  pass a state dict or a Pydantic model directly; a bad one is a :class:`~gym_envfactory.errors.SpecError`.

Every result is the state model's own JSON dump (``model_dump_json``), so equal states give equal bytes,
checked to load back into the model (:meth:`~gym_envfactory.environment.spec.EnvironmentSpec.dump_state`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonpatch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gym_envfactory.environment.arguments import format_validation_error
from gym_envfactory.environment.catalog import get_environment
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.environment.tasks import Task, TaskSet
from gym_envfactory.errors import DatasetError, SpecError

__all__ = ["InitialStateRef", "resolve_state", "resolve_initial_states", "task_environments", "task_initial_state"]


class InitialStateRef(BaseModel):
    """A task file's initial-state reference: a named state or an inline one, then JSON patches."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    state: dict[str, Any] | None = None
    patches: list[dict[str, Any]] = Field(default_factory=list)


def resolve_state(spec: EnvironmentSpec, ref: Any, *, task_form: bool = False,
                  where: Mapping[str, Any] | None = None) -> bytes:
    """One environment's initial state as validated JSON bytes.

    Args:
        spec: the environment.
        ref: ``None`` or a state name (both forms); with ``task_form`` a dict is an
            :class:`InitialStateRef`, else a dict or a Pydantic model is the state itself.
        task_form: read ``ref`` as a task file does.
        where: ``file``, ``line``, ``task_id`` of the task (task form), for the error.

    Raises:
        DatasetError: (task form) unknown state name, bad reference, failing patch or invalid state
            (also one whose JSON does not load back: :meth:`EnvironmentSpec.dump_state`),
            naming ``initial_state.<field>``.
        SpecError: (code form) unknown state name or invalid state (as above), naming the field.
    """
    if not task_form:
        if ref is None or isinstance(ref, str):
            return spec.initial_state_json(ref)
        if isinstance(ref, BaseModel):
            ref = ref.model_dump(mode="json")
        return spec.dump_state(ref)
    at = dict(where or {})
    if ref is None or isinstance(ref, str):
        try:
            return spec.initial_state_json(ref)
        except SpecError as exc:
            raise _state_file_error(spec, ref, exc, at) from None
    try:
        r = InitialStateRef.model_validate(ref)
    except ValidationError as exc:
        d = format_validation_error(exc)[0]
        raise DatasetError(d["message"], **{**at, "field": f"initial_state.{d['field']}"}) from None
    if r.state is not None and r.name is not None:
        raise DatasetError("give either a state name or an inline state, not both", **at)
    if r.state is not None:
        raw: Any = r.state
    else:
        try:
            raw = json.loads(spec.initial_state_json(r.name))
        except SpecError as exc:
            raise _state_file_error(spec, r.name, exc, {**at, "field": "initial_state.name"}) from None
    if r.patches:
        try:
            raw = jsonpatch.apply_patch(raw, r.patches)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise DatasetError(f"patch failed: {exc}", **{**at, "field": "initial_state.patches"}) from None
    try:
        return spec.dump_state(raw)
    except SpecError as exc:
        base = "" if r.state is not None else f" (state {_state_label(spec, r.name)} after its patches)"
        raise DatasetError(f"initial state invalid{base}: field {exc.field!r}: {exc.message}",
                           **{**at, "field": f"initial_state.{exc.field}"}) from None


def _state_label(spec: EnvironmentSpec, name: str | None) -> str:
    """``'small' (…/initial_states/small.json)``: a named state and the file it comes from, for errors."""
    name = name or spec.manifest.default_initial_state
    file = spec.path / "initial_states" / f"{name}.json" if spec.path is not None else None
    return f"{name!r} ({file})" if file is not None and file.is_file() else repr(name)


def _state_file_error(spec: EnvironmentSpec, name: str | None, exc: SpecError, at: dict[str, Any]) -> DatasetError:
    """A named initial state that does not load, reported on the task: the message names the state
    file and the state's offending field (``exc`` says where), ``field`` is ``initial_state[.<field>]``."""
    if exc.field is None and exc.line is None and (exc.file is None or not Path(exc.file).is_file()):
        return DatasetError(exc.message, **at)  # no such state (the message lists the available ones)
    where = exc.file or "(inline state)"
    if exc.line is not None:
        where += f":{exc.line}"
    if exc.field:
        where += f" field {exc.field!r}"
    field = at.pop("field", "initial_state")
    if exc.field:
        field = f"initial_state.{exc.field}"
    label = repr(name or spec.manifest.default_initial_state)
    return DatasetError(f"initial state {label} of {spec.name} is broken: {where}: {exc.message}", **at, field=field)


def resolve_initial_states(envs: Mapping[str, EnvironmentSpec] | Sequence[EnvironmentSpec], ref: Any, *,
                           task_form: bool = False, where: Mapping[str, Any] | None = None) -> dict[str, bytes]:
    """Initial states of one or several environments: ``{env_name: validated JSON bytes}``.

    With one environment ``ref`` is that environment's reference (see :func:`resolve_state`).  With
    several, ``None`` or a state name applies to each, and a mapping gives each environment its own
    (missing names get their default).

    Raises:
        DatasetError / SpecError: as :func:`resolve_state`; also a multi-environment ``ref`` that is
            neither a name nor a mapping of those environments' names.
    """
    specs = dict(envs) if isinstance(envs, Mapping) else {e.name: e for e in envs}
    names = list(specs)
    if len(names) == 1:
        return {names[0]: resolve_state(specs[names[0]], ref, task_form=task_form, where=where)}
    if ref is None or isinstance(ref, str):
        return {n: resolve_state(specs[n], ref, task_form=task_form, where=where) for n in names}
    if not isinstance(ref, Mapping) or not set(ref) <= set(names):
        message = f"the initial state of a session over {names} must map environment names to states"
        if task_form:
            raise DatasetError(message, **{**dict(where or {}), "field": "initial_state"})
        raise SpecError(message)
    return {n: resolve_state(specs[n], ref.get(n), task_form=task_form, where=where) for n in names}


def task_environments(spec: EnvironmentSpec, task: Task) -> list[EnvironmentSpec]:
    """The environments ``task`` spans, primary first (``spec`` itself, then catalog lookups).

    Raises:
        UnknownEnvironmentError: a secondary environment is not in the catalog.
    """
    return [spec if n == spec.name else get_environment(n) for n in task.envs]


def task_initial_state(spec: EnvironmentSpec, task: Task | str, tasks: TaskSet | None = None) -> dict[str, bytes]:
    """Validated initial state bytes per environment of ``task`` (a task of ``spec.tasks``, or of
    ``tasks`` when given, or its id).

    Raises:
        DatasetError: a bad reference, naming the tasks file, line, task and field.
        UnknownTaskError: no task with that id.
    """
    tasks = spec.tasks if tasks is None else tasks
    if isinstance(task, str):
        task = tasks.get(task)
    where: dict[str, Any] = {"file": tasks.file_of(task.task_id), "line": tasks.line_of(task.task_id), "task_id": task.task_id}
    return resolve_initial_states(task_environments(spec, task), task.initial_state, task_form=True, where=where)


