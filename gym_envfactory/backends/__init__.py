"""Where an episode's session lives: in-process (default), a local server process, a Docker
container, or a server at a URL (docs/architecture.md, "Backends").  ``gym.make(..., backend=
"subprocess" | "docker" | "url", url=..., token=...)`` selects one.

Remote backends share one connection per server (the fast session protocol multiplexes sessions), and
servers started on demand (subprocess, docker) are shared by every env that asks for the same
configuration and stopped when the last one closes.  Modules: :mod:`.base` (the interface),
:mod:`.inprocess`, :mod:`.remote` (the client and :class:`~.remote.RemoteSession`), :mod:`.subprocess`,
:mod:`.pool` (sharing, the shipped kinds registered, and :func:`acquire_backend`); backend kinds are
registered by name with their capabilities (:func:`register_backend`, :class:`BackendCapabilities`); the docker kind starts its container through
:mod:`gym_envfactory.containers.run`.
"""

from gym_envfactory.backends.base import (
    Backend,
    BackendCapabilities,
    BackendKind,
    backend_kind,
    backend_names,
    register_backend,
    unregister_backend,
)
from gym_envfactory.backends.inprocess import InProcessBackend
from gym_envfactory.backends.pool import (
    BACKENDS,
    acquire_backend,
    check_backend_serves,
    resolve_backend,
    shared_backends,
)
from gym_envfactory.backends.remote import RemoteBackend, RemoteSession, SessionClient

__all__ = ["Backend", "InProcessBackend", "RemoteBackend", "RemoteSession", "SessionClient", "acquire_backend",
           "shared_backends", "resolve_backend", "BACKENDS", "BackendCapabilities", "BackendKind", "register_backend", "backend_kind",
           "backend_names", "check_backend_serves", "unregister_backend"]
