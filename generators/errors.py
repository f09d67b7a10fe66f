"""The generators' errors, all in the runtime's one family (:class:`~gym_envfactory.errors.EnvFactoryError`),
each keeping the builtin base its callers catch (``RuntimeError``, ``ValueError``).  The LLM client's errors
(``LLMError``, ``LLMRequestError``, ``LLMOutputError``) are the runtime's own: :mod:`gym_envfactory.errors`."""

from __future__ import annotations

from gym_envfactory.errors import DatasetError, EnvFactoryError, SpecError

__all__ = ["EnvGenError", "MetadataError", "OpenAPIError",
           "MCPImportError", "ImporterError", "PackageExistsError", "ChainError", "SandboxError"]


class SandboxError(EnvFactoryError, RuntimeError):
    """Untrusted code cannot be run where it was asked to run: an unknown sandbox mode, no Docker
    engine or runtime image for ``sandbox="docker"``, a container that cannot start
    (:mod:`gym_envfactory.generators.sandbox`).  EnvGen reports it as :class:`EnvGenError`, the importer
    as :class:`ImporterError`."""


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
