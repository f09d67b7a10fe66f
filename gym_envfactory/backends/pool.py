"""Shared remote backends: one server and one connection per configuration, reference-counted, replaced
when their server dies, stopped when the last env releases them or the process exits; and
:func:`acquire_backend`, which turns ``gym.make(..., backend=...)`` into a backend.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from gym_envfactory.backends.base import Backend
from gym_envfactory.backends.inprocess import InProcessBackend
from gym_envfactory.backends.remote import RemoteBackend
from gym_envfactory.backends.subprocess import ServerProcess, start_server_process
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.errors import BackendError, BackendUnavailableError
from gym_envfactory.session import SessionProtocol

__all__ = ["acquire_backend", "shared_backends", "BACKENDS"]

class _Shared:
    """A reference-counted shared backend (one server/connection for many envs)."""

    def __init__(self, key: tuple, backend: RemoteBackend, stop: Callable[[], None] | None = None) -> None:
        self.key = key
        self.backend = backend
        self.stop = stop
        self.refs = 0

    def usable(self, ping_timeout: float) -> bool:
        """True when the server behind this backend still serves: its connection is up, its process
        (subprocess backend) still runs, and it answers a ping within ``ping_timeout`` seconds."""
        alive = getattr(self.stop, "alive", True)
        return bool(alive) and self.backend.client.ping(ping_timeout)


_POOL: dict[tuple, _Shared] = {}


_POOL_LOCK = threading.Lock()


class _PooledBackend(Backend):
    def __init__(self, shared: _Shared, name: str) -> None:
        self._shared = shared
        self.name = name
        self._released = False

    @property
    def url(self) -> str:
        """The server this backend talks to."""
        return self._shared.backend.url

    @property
    def server_process(self) -> ServerProcess | None:
        """The local server process behind this backend (``subprocess`` kind), else ``None``."""
        stop = self._shared.stop
        return stop if isinstance(stop, ServerProcess) else None

    @property
    def remote(self) -> RemoteBackend:
        """The shared :class:`RemoteBackend` behind this handle."""
        return self._shared.backend

    def create_session(self, envs: Sequence[EnvironmentSpec], initial: dict[str, bytes], task_id: str | None) -> SessionProtocol:
        return self._shared.backend.create_session(envs, initial, task_id)

    def restore_session(self, envs: Sequence[EnvironmentSpec], snapshot: bytes) -> SessionProtocol:
        return self._shared.backend.restore_session(envs, snapshot)

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        with _POOL_LOCK:
            self._shared.refs -= 1
            if self._shared.refs > 0:
                return
            if _POOL.get(self._shared.key) is self._shared:  # it may have been replaced after its server died
                del _POOL[self._shared.key]
        _shutdown(self._shared)


def _shutdown(shared: _Shared) -> None:
    try:
        shared.backend.close()
    finally:
        if shared.stop is not None:
            shared.stop()


@atexit.register
def _stop_all() -> None:  # pragma: no cover - process exit
    with _POOL_LOCK:
        items = list(_POOL.values())
        _POOL.clear()
    for s in items:
        try:
            _shutdown(s)
        except Exception:  # noqa: BLE001
            pass


#: Most seconds :func:`acquire_backend` waits for a shared server to answer a ping before reuse.
PING_TIMEOUT_S = 5.0


def acquire_backend(kind: str | Backend | None, *, envs: Sequence[str] = (), url: str | None = None,
                    token: str | None = None, timeout: float = 60.0, **options: Any) -> Backend:
    """A backend for an env.  ``kind``: ``"inprocess"`` (default), ``"subprocess"``, ``"docker"``,
    ``"url"`` (needs ``url``), or a :class:`Backend` instance.  Remote backends are shared per
    configuration; call :meth:`Backend.release` when done.  A shared backend is handed out again only
    after its server proves alive (its process runs and it answers a ping); a dead one is replaced.

    ``timeout`` (seconds) bounds starting a server (subprocess, docker: the wait for it to announce
    itself or become ready) and each request on the connection.

    Raises:
        BackendError: unknown kind, missing url, a server that does not start.
        BackendUnavailableError: the server cannot be reached.
    """
    if kind is None or kind == "inprocess":
        return InProcessBackend()
    if isinstance(kind, Backend):
        return kind
    token = token or os.environ.get("ENVFACTORY_TOKEN")
    if kind == "url":
        if not url:
            raise BackendError("backend='url' needs url='http://host:port'")
        key: tuple = ("url", url, token)
    elif kind == "subprocess":
        key = ("subprocess", tuple(sorted(envs)), token)
    elif kind == "docker":
        key = ("docker", tuple(sorted(envs)), token, tuple(sorted(options.items())))
    else:
        raise BackendError(f"unknown backend {kind!r}; choose inprocess, subprocess, docker or url")
    with _POOL_LOCK:
        shared = _POOL.get(key)
        if shared is not None and not shared.usable(min(timeout, PING_TIMEOUT_S)):
            _POOL.pop(key, None)  # its server died: leave it to its current users, start afresh
            shared = None
        if shared is None:
            stop: Callable[[], None] | None = None
            if kind == "url":
                assert url is not None  # checked above
                target = url
            elif kind == "subprocess":
                target, stop = start_server_process(envs, token, timeout)
            else:
                from gym_envfactory.containers.run import start_container

                target, stop, token = start_container(envs, token=token, timeout=timeout, **options)
            try:
                remote = RemoteBackend(target, token=token, timeout=timeout)
            except BackendUnavailableError:
                if stop is not None:
                    stop()
                raise
            shared = _Shared(key, remote, stop)
            _POOL[key] = shared
        shared.refs += 1
    return _PooledBackend(shared, kind)


BACKENDS = ("inprocess", "subprocess", "docker", "url")


def shared_backends() -> list[RemoteBackend]:
    """The remote backends currently shared in the pool (one per live configuration), for diagnostics."""
    with _POOL_LOCK:
        return [s.backend for s in _POOL.values()]
