"""The backend interface: where an episode's sessions are created and restored."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gym_envfactory.environment.spec import EnvironmentSpec

__all__ = ["Backend"]

class Backend:
    """Creates sessions.  ``create_session(envs, initial_state_bytes, task_id)`` → a Session-like object."""

    name = "backend"

    def create_session(self, envs: Sequence[EnvironmentSpec], initial: dict[str, bytes], task_id: str | None) -> Any:
        raise NotImplementedError

    def restore_session(self, envs: Sequence[EnvironmentSpec], snapshot: bytes) -> Any:
        """A new session holding a :meth:`Session.snapshot` (state and action log)."""
        raise NotImplementedError

    def release(self) -> None:
        """Called once by each env that acquired this backend when it closes."""
