"""The default backend: sessions in this process, no protocol (the fastest path)."""

from __future__ import annotations

from collections.abc import Sequence

from gym_envfactory.backends.base import Backend
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.session import Session

__all__ = ["InProcessBackend"]

class InProcessBackend(Backend):
    name = "inprocess"

    def create_session(self, envs: Sequence[EnvironmentSpec], initial: dict[str, bytes], task_id: str | None) -> Session:
        return Session.from_states(list(envs), initial)

    def restore_session(self, envs: Sequence[EnvironmentSpec], snapshot: bytes) -> Session:
        s = Session(list(envs))
        s.restore(snapshot)
        return s
