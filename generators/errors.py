"""The generators' errors, all in the runtime's one family (:class:`~gym_envfactory.errors.EnvFactoryError`),
each keeping the builtin base its callers catch (``RuntimeError``, ``ValueError``)."""

from __future__ import annotations

from gym_envfactory.errors import DatasetError, EnvFactoryError, SpecError

__all__ = ["LLMError", "LLMRequestError", "LLMOutputError", "EnvGenError", "MetadataError", "OpenAPIError",
           "MCPImportError", "ImporterError", "PackageExistsError", "ChainError"]


class LLMError(EnvFactoryError, RuntimeError):
    """Base of the LLM layer's errors."""


class LLMRequestError(LLMError):
    """The endpoint refused the request (a non-retryable 4xx) or failed on every retry.

    Attributes: ``status`` (HTTP status, ``None`` for connection errors/timeouts), ``attempts``, ``stage``.
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


class EnvGenError(EnvFactoryError):
    """EnvGen cannot start or continue (a name clash, an unreadable checkpoint, a hand-written
    environment in the way).  Validation failures are not errors: they end in quarantine."""


# ------------------------------------------------------------------------------------------------ errors
class MetadataError(EnvFactoryError, ValueError):
    """Metadata that does not fit the EnvFactory shape; the message names the file and the field."""

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None) -> None:
        where = ": ".join(p for p in (file, field) if p)
        super().__init__(f"{where}: {message}" if where else message)
        self.file = file
        self.field = field


class OpenAPIError(EnvFactoryError, ValueError):
    """A document that is not a convertible OpenAPI 3.x document."""


class MCPImportError(EnvFactoryError, RuntimeError):
    """The MCP server could not be reached or listed."""


class ImporterError(SpecError):
    """The source does not fit the importable layout, or the imported environment failed validation."""


class PackageExistsError(ImporterError):
    """The import's destination folder exists and ``overwrite`` was not given (``file`` is the folder).
    The message says ``overwrite=True`` (the Python API); the CLI says ``--overwrite`` instead."""


class ChainError(DatasetError, ValueError):
    """A line of a chains file (``chains.jsonl``, docs/synthesis.md "Chains") that is not a valid chain:
    not JSON, a field of the wrong shape, a step that refers to a later step.  ``file``, ``line`` and
    ``field`` (dotted, e.g. ``steps.1.inputs.hotel_id.step``) say where."""


class GraphError(EnvFactoryError, ValueError):
    """The tool graph cannot be built, read or refined (an unreadable graph file, a missing embedding
    model, an environment not in the graph); the message says which and what to do."""
