"""Where an episode's session lives: in-process (default), a local server process, a Docker
container, or a server at a URL (DESIGN §5).  ``gym.make(..., backend="subprocess" | "docker" | "url",
url=..., token=...)`` selects one.

Remote backends share one connection per server (the fast session protocol multiplexes sessions), and
servers started on demand (subprocess, docker) are shared by every env that asks for the same
configuration and stopped when the last one closes.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import subprocess
import sys
import threading
import time
from typing import Any, Sequence

from gym_envfactory.backends.remote import RemoteSession, SessionClient
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.errors import BackendError, BackendUnavailableError
from gym_envfactory.session import Session

__all__ = ["Backend", "InProcessBackend", "RemoteBackend", "acquire_backend", "BACKENDS", "BackendError"]

log = logging.getLogger(__name__)




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


class InProcessBackend(Backend):
    name = "inprocess"

    def create_session(self, envs: Sequence[EnvironmentSpec], initial: dict[str, bytes], task_id: str | None) -> Session:
        return Session.from_states(list(envs), initial)

    def restore_session(self, envs: Sequence[EnvironmentSpec], snapshot: bytes) -> Session:
        s = Session(list(envs))
        s.restore(snapshot)
        return s


class RemoteBackend(Backend):
    """Sessions on a server at ``url`` over the fast session protocol."""

    name = "url"

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 60.0) -> None:
        self.url = url
        self.client = SessionClient(url, token=token, timeout=timeout)

    def create_session(self, envs: Sequence[EnvironmentSpec], initial: dict[str, bytes], task_id: str | None) -> RemoteSession:
        if task_id is not None:
            return RemoteSession.create(self.client, envs, task_id=task_id)
        states = {n: json.loads(b) for n, b in initial.items()}
        return RemoteSession.create(self.client, envs, initial_state=states if len(states) > 1 else next(iter(states.values())))

    def restore_session(self, envs: Sequence[EnvironmentSpec], snapshot: bytes) -> RemoteSession:
        names = [e.name for e in envs]
        res = self.client.request("create", env=names if len(names) > 1 else names[0], snapshot=snapshot.decode())
        return RemoteSession(self.client, res["session_id"], envs)

    def close(self) -> None:
        self.client.close()


class _Shared:
    """A reference-counted shared backend (one server/connection for many envs)."""

    def __init__(self, key: tuple, backend: RemoteBackend, stop: Any = None) -> None:
        self.key = key
        self.backend = backend
        self.stop = stop
        self.refs = 0


_POOL: dict[tuple, _Shared] = {}
_POOL_LOCK = threading.Lock()


class _PooledBackend(Backend):
    def __init__(self, shared: _Shared, name: str) -> None:
        self._shared = shared
        self.name = name
        self._released = False

    @property
    def url(self) -> str:
        return self._shared.backend.url

    def create_session(self, envs: Sequence[EnvironmentSpec], initial: dict[str, bytes], task_id: str | None) -> Any:
        return self._shared.backend.create_session(envs, initial, task_id)

    def restore_session(self, envs: Sequence[EnvironmentSpec], snapshot: bytes) -> Any:
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


def _start_subprocess(envs: Sequence[str], token: str | None, timeout: float) -> tuple[str, Any]:
    """Start ``envfactory serve`` on a free loopback port and return (url, stop).  The server's
    stderr goes to a log file (never an undrained pipe, which would block it once full)."""
    import tempfile

    cmd = [sys.executable, "-m", "gym_envfactory.cli", "serve", *envs, "--host", "127.0.0.1", "--port", "0", "--announce"]
    env = dict(os.environ)
    if token:
        env["ENVFACTORY_TOKEN"] = token
    log_file = tempfile.NamedTemporaryFile(prefix="envfactory-server-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file, text=True, env=env)
    log_file.close()

    def log_tail() -> str:
        try:
            return open(log_file.name, encoding="utf-8", errors="replace").read()[-2000:].strip()
        except OSError:
            return ""

    deadline = time.monotonic() + timeout
    line = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline() if proc.stdout else ""
        if line.startswith("{"):
            break
        if proc.poll() is not None:
            raise BackendError(f"environment server exited with {proc.returncode}: {log_tail()}")
    else:
        proc.kill()
        raise BackendError(f"environment server did not start within {timeout} s: {log_tail()}")
    url = json.loads(line)["listening"]
    # keep draining stdout so the server can never block on a full pipe
    threading.Thread(target=lambda: [None for _ in proc.stdout], name="envfactory-server-stdout", daemon=True).start()
    log.info("environment server %s (pid %d) logs to %s", url, proc.pid, log_file.name)

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        try:
            os.unlink(log_file.name)
        except OSError:
            pass

    return url, stop


def acquire_backend(kind: str | Backend | None, *, envs: Sequence[str] = (), url: str | None = None,
                    token: str | None = None, timeout: float = 60.0, **options: Any) -> Backend:
    """A backend for an env.  ``kind``: ``"inprocess"`` (default), ``"subprocess"``, ``"docker"``,
    ``"url"`` (needs ``url``), or a :class:`Backend` instance.  Remote backends are shared per
    configuration; call :meth:`Backend.release` when done.

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
        if shared is not None and not shared.backend.client.alive:
            _POOL.pop(key, None)  # its server died: leave it to its current users, start afresh
            shared = None
        if shared is None:
            stop = None
            if kind == "url":
                target = url
            elif kind == "subprocess":
                target, stop = _start_subprocess(envs, token, timeout)
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
