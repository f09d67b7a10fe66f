"""Where an episode's session lives: in-process (default), a local server process, a Docker
container, or a server at a URL (docs/architecture.md, "Backends").  ``gym.make(..., backend=
"subprocess" | "docker" | "url", url=..., token=...)`` selects one.

Remote backends share one connection per server (the fast session protocol multiplexes sessions), and
servers started on demand (subprocess, docker) are shared by every env that asks for the same
configuration and stopped when the last one closes.  Modules: :mod:`.base` (the interface),
:mod:`.inprocess`, :mod:`.remote` (the client and :class:`~.remote.RemoteSession`), :mod:`.subprocess`,
:mod:`.pool` (sharing, and :func:`acquire_backend`); the docker kind starts its container through
:mod:`gym_envfactory.containers.run`.
"""

from gym_envfactory.backends.base import Backend
from gym_envfactory.backends.inprocess import InProcessBackend
from gym_envfactory.backends.pool import BACKENDS, acquire_backend, shared_backends
from gym_envfactory.backends.remote import RemoteBackend, RemoteSession, SessionClient

__all__ = ["Backend", "InProcessBackend", "RemoteBackend", "RemoteSession", "SessionClient", "acquire_backend",
           "shared_backends", "BACKENDS"]
