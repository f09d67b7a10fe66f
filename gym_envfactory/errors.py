"""The runtime's one error family: every exception it raises on purpose derives from :class:`EnvFactoryError`.

A *model* action never raises: bad tool calls become typed :class:`~gym_envfactory.session.ToolResult`
errors.  These exceptions are for authors, operators and trainers: a broken environment package, a task
file with a bad line, an unknown task id, a closed session, an unreachable backend.  Where callers
already catch a builtin (``KeyError`` for lookups, ``ValueError`` for bad input, ``ConnectionError``
for transports) the class keeps that builtin as a second base.

:class:`gym_envfactory.authoring.ToolError` stays outside this family on purpose: it is not a failure
of the runtime but the model-facing signal an environment's tool raises for a domain error ("sold out",
"insufficient funds"); the session turns it into a ``tool_error`` observation.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "EnvFactoryError",
    "SpecError",
    "DatasetError",
    "UnknownEnvironmentError",
    "UnknownTaskError",
    "ArgumentError",
    "SessionClosedError",
    "SnapshotError",
    "BackendError",
    "UntrustedPackageError",
    "BackendUnavailableError",
    "RequestTooLargeError",
    "RemoteError",
    "ImageError",
    "UnknownSessionError",
    "CapacityError",
    "MemoryBudgetError",
    "SessionOwnershipError",
    "BadRequestError",
    "InsecureBindError",
    "PolicyError",
    "LLMError",
    "LLMRequestError",
    "LLMOutputError",
]


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
    """A task is broken: malformed line, or its ground truth does not replay (docs/cases.md C06).

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


class SessionClosedError(EnvFactoryError):
    """The session was closed; create or fork a new one."""


class SnapshotError(EnvFactoryError):
    """Bytes given to :meth:`Session.restore` are not a snapshot of these environments."""


class ArgumentError(EnvFactoryError, ValueError):
    """Arguments rejected by the argument policy (:mod:`gym_envfactory.environment.arguments`).  ``details`` lists ``{"field", "message"}``."""

    def __init__(self, message: str, details: list[dict[str, str]]) -> None:
        super().__init__(message)
        self.details = details


class BackendUnavailableError(EnvFactoryError, ConnectionError):
    """The environment server cannot be reached (refused, closed, timed out)."""


class RequestTooLargeError(EnvFactoryError, ValueError):
    """A request frame is over the size the server accepts; it was not sent (the connection stays up)."""


class RemoteError(EnvFactoryError):
    """The server answered a request with a JSON-RPC error.  ``code`` is the JSON-RPC code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"server error {code}: {message}")
        self.code = code
        self.message = message


class BackendError(EnvFactoryError):
    """A backend could not be started or configured."""


class UntrustedPackageError(BackendError):
    """An untrusted package (provenance ``generated`` or ``imported``) was asked to run in this process
    (``backend="inprocess"``) without ``trust=True``; the message says how to opt in and what it gives up."""


class ImageError(EnvFactoryError):
    """An image could not be built or the Docker engine cannot be used."""


class UnknownSessionError(EnvFactoryError, KeyError):
    """No live session with that id (never created, closed, or expired)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown session"


class CapacityError(EnvFactoryError):
    """No room for another session: the server holds ``max_sessions`` sessions (``scope="server"``), or
    the asking client holds its quota, ``max_sessions_per_client`` (``scope="client"``).  ``limit`` is
    the cap that refused."""

    def __init__(self, message: str, *, scope: str = "server", limit: int | None = None) -> None:
        super().__init__(message)
        self.scope = scope
        self.limit = limit


class MemoryBudgetError(CapacityError):
    """The server refused a request that would take it past its memory budget (create, fork, restore,
    a large frame of ``state``/``snapshot`` reads): nothing was created or changed.  ``estimate`` is
    the bytes the request would need, ``used`` the bytes the server counts as in use, ``budget`` its
    memory budget (``limit``; the cgroup limit, ``--memory-budget`` or a share of physical memory) and
    ``headroom`` the part of it kept free (docs/architecture.md, "Backends").  JSON-RPC code -32006;
    ``scope`` is ``"memory"``."""

    def __init__(self, message: str, *, estimate: int | None = None, used: int | None = None,
                 budget: int | None = None, headroom: int | None = None) -> None:
        super().__init__(message, scope="memory", limit=budget)
        self.estimate = estimate
        self.used = used
        self.budget = budget
        self.headroom = headroom


class SessionOwnershipError(EnvFactoryError, PermissionError):
    """The session belongs to another client (``X-Envfactory-Client``, proved on a server with a token by the
    client's credential) and is not shared."""


class BadRequestError(EnvFactoryError, ValueError):
    """A control request is malformed (unknown environment, bad parameters)."""


class InsecureBindError(EnvFactoryError, RuntimeError):
    """Refusing to listen beyond loopback without a control-plane token."""


class PolicyError(EnvFactoryError, RuntimeError):
    """The policy could not produce an action (e.g. the LLM endpoint failed after retries)."""


class LLMError(EnvFactoryError, RuntimeError):
    """Base of the LLM client's errors (:mod:`gym_envfactory.llm`: EnvGen, QueryGen, the LLM user)."""


class LLMRequestError(LLMError):
    """The endpoint refused the request (a non-retryable 4xx), failed on every retry, or answered with
    something that is not a chat completion.

    Attributes: ``status`` (HTTP status, ``None`` for connection errors/timeouts), ``attempts`` (requests
    made, retries included), ``stage`` (the accounting stage of the request).
    """

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 1, stage: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.attempts = attempts
        self.stage = stage


class LLMOutputError(LLMError):
    """The answer was not valid JSON for the schema, even after the repair round.

    Attributes: ``raw`` (the last answer's text), ``first_raw`` (the first answer's text), ``error`` (the
    last parse/validation error), ``stage``.
    """

    def __init__(self, message: str, *, raw: str, first_raw: str, error: str, stage: str) -> None:
        super().__init__(message)
        self.raw = raw
        self.first_raw = first_raw
        self.error = error
        self.stage = stage
