"""Typed exceptions raised at the runtime's boundaries (loading, datasets, configuration).

A *model* action never raises: bad tool calls become typed :class:`~gym_envfactory.session.ToolResult`
errors.  These exceptions are for authors and operators: a broken environment package, a task file with
a bad line, an unknown task id.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["EnvFactoryError", "SpecError", "DatasetError", "UnknownEnvironmentError", "UnknownTaskError"]


class EnvFactoryError(Exception):
    """Base class of every error the runtime raises on purpose."""


class SpecError(EnvFactoryError):
    """An environment package is malformed.

    Attributes:
        file: the offending file (``None`` for programmatic environments).
        line: 1-based line number where it applies (JSON Lines files, TOML), else ``None``.
        field: dotted path of the offending field, else ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.file = str(file) if file is not None else None
        self.line = line
        self.field = field
        where = ""
        if self.file:
            where = self.file + (f":{line}" if line is not None else "")
        if field:
            where = f"{where} field {field!r}" if where else f"field {field!r}"
        super().__init__(f"{where}: {message}" if where else message)
        self.message = message


class DatasetError(SpecError):
    """A task is broken: malformed line, or its ground truth does not replay (CASES C06).

    ``task_id``, ``turn`` (0-based) and ``call`` (0-based index within the turn) say where.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
        task_id: str | None = None,
        turn: int | None = None,
        call: int | None = None,
    ) -> None:
        self.task_id = task_id
        self.turn = turn
        self.call = call
        parts = []
        if task_id is not None:
            parts.append(f"task {task_id!r}")
        if turn is not None:
            parts.append(f"turn {turn}")
        if call is not None:
            parts.append(f"call {call}")
        prefix = ", ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message, file=file, line=line, field=field)


class UnknownEnvironmentError(EnvFactoryError, KeyError):
    """No environment of that name in the catalog or the programmatic registry."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown environment"


class UnknownTaskError(EnvFactoryError, KeyError):
    """No task with that id (or no task in that split)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown task"
