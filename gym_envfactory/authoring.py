"""The small public authoring API that environment packages import.

An environment (docs/authoring.md; EnvFactory paper §3.2) is a Pydantic root model (the database) plus plain
Python functions ``tool(state, *, arg: type = default, ...) -> result``.  This module holds the only
names an environment folder needs from the runtime:

- :class:`ToolError`: raise it for a *domain* failure (not found, sold out, invalid dates, already
  cancelled, insufficient funds).  The model sees its message as the tool result and can act on it.
- :func:`tool`: a decorator declaring a function as a tool, with the MCP tool annotations
  (``readOnlyHint``, ``destructiveHint``, ``idempotentHint``; MCP spec 2025-06-18, "Tool annotations").

Everything else (argument validation, schemas, sessions) is derived by the runtime.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

__all__ = ["ToolError", "ToolAnnotations", "tool", "TOOL_ATTR"]

F = TypeVar("F", bound=Callable[..., Any])

TOOL_ATTR = "__envfactory_tool__"


class ToolError(Exception):
    """A domain failure that a model can read and act on.

    Args:
        message: what went wrong and, ideally, what the model can do about it
            (``"Hotel H-0042 has no 'suite' rooms left on 2026-12-24; try another room type"``).
        code: a short machine-readable category (``"not_found"``, ``"sold_out"``, ...); reported in the
            typed result and counted in metrics.

    A tool must raise this *before* it mutates state: the validation scenarios check that every error
    path leaves the state unchanged.
    """

    def __init__(self, message: str, *, code: str = "tool_error") -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"ToolError({self.message!r}, code={self.code!r})"


@dataclass(frozen=True)
class ToolAnnotations:
    """MCP tool annotations (MCP spec 2025-06-18, ``ToolAnnotations``).

    ``read_only``: the tool never changes the state.  ``destructive``: a write that removes or
    irreversibly changes data (cancel, delete).  ``idempotent``: calling twice with the same arguments
    has the same effect as once.
    """

    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False

    def to_mcp(self) -> dict[str, bool]:
        """The MCP wire form (``readOnlyHint`` etc.)."""
        return {
            "readOnlyHint": self.read_only,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": False,
        }


@dataclass(frozen=True)
class ToolMeta:
    name: str | None
    annotations: ToolAnnotations


@overload
def tool(fn: F) -> F: ...


@overload
def tool(
    *,
    name: str | None = None,
    read_only: bool = False,
    destructive: bool = False,
    idempotent: bool = False,
) -> Callable[[F], F]: ...


def tool(
    fn: F | None = None,
    *,
    name: str | None = None,
    read_only: bool = False,
    destructive: bool = False,
    idempotent: bool = False,
) -> Any:
    """Mark a function as an environment tool.

    Usage: ``@tool`` or ``@tool(read_only=True)``.  The function's first positional parameter receives
    the session's state model; every other parameter must be keyword-only and typed.  The docstring's
    text becomes the tool description; ``Annotated[T, Field(description=...)]`` documents a parameter.
    The function object is returned unchanged (so it stays directly callable in unit tests).
    """

    def mark(f: F) -> F:
        setattr(
            f,
            TOOL_ATTR,
            ToolMeta(
                name=name,
                annotations=ToolAnnotations(
                    read_only=read_only, destructive=destructive, idempotent=idempotent
                ),
            ),
        )
        return f

    if fn is not None:
        return mark(fn)
    return mark
