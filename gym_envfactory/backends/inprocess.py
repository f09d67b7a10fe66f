"""The default backend: sessions in this process, no protocol (the fastest path)."""

from __future__ import annotations

from collections.abc import Sequence

from gym_envfactory.backends.base import Backend
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.session import Session

__all__ = ["InProcessBackend"]

class InProcessBackend(Backend):
    """Sessions as plain :class:`~gym_envfactory.session.Session` objects in this process (the default;
    docs/architecture.md, "Backends").  Stateless: one instance per env, nothing to release."""

    name = "inprocess"

    def create_session(self, envs: Sequence[EnvironmentSpec], initial: dict[str, bytes], task_id: str | None) -> Session:
        """A local :class:`Session` over ``envs`` from ``initial`` (state JSON bytes per environment name);
        ``task_id`` is unused in process."""
        return Session.from_states(list(envs), initial)

    def restore_session(self, envs: Sequence[EnvironmentSpec], snapshot: bytes) -> Session:
        """A local :class:`Session` over ``envs`` holding ``snapshot`` (bytes of :meth:`Session.snapshot`)."""
        s = Session(list(envs))
        s.restore(snapshot)
        return s
