"""The backend interface: where an episode's sessions are created and restored."""

from __future__ import annotations

from collections.abc import Sequence

from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.session import SessionProtocol

__all__ = ["Backend"]

class Backend:
    """Creates sessions.  ``create_session(envs, initial_state_bytes, task_id)`` → a :class:`~gym_envfactory.session.SessionProtocol`."""

    name = "backend"

    def create_session(self, envs: Sequence[EnvironmentSpec], initial: dict[str, bytes], task_id: str | None) -> SessionProtocol:
        """A new session over ``envs`` starting from ``initial`` (validated initial-state JSON bytes per
        environment name, as :func:`~gym_envfactory.environment.states.task_initial_state` returns);
        ``task_id``: the task being played, if any (a remote backend lets the server resolve that task's
        initial state itself).  Returns a session (local or remote) of the one protocol
        (:class:`~gym_envfactory.session.SessionProtocol`; docs/architecture.md, "Sessions")."""
        raise NotImplementedError

    def restore_session(self, envs: Sequence[EnvironmentSpec], snapshot: bytes) -> SessionProtocol:
        """A new session holding a :meth:`Session.snapshot` (state and action log)."""
        raise NotImplementedError

    def release(self) -> None:
        """Called once by each env that acquired this backend when it closes."""
