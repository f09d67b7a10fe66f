"""Shared remote backends: one server and one connection per configuration, reference-counted, replaced
when their server dies, stopped when the last env releases them or the process exits; the shipped
backend kinds (``inprocess``, ``subprocess``, ``docker``, ``url``) registered in one place
(:func:`~gym_envfactory.backends.base.register_backend`); and :func:`acquire_backend`, which turns
``gym.make(..., backend=...)`` into a backend by asking that registry.
"""

from __future__ import annotations

import atexit
import os
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from gym_envfactory.backends.base import Backend, BackendCapabilities, backend_kind, register_backend
from gym_envfactory.backends.inprocess import InProcessBackend
from gym_envfactory.backends.isolated import ISOLATED_LIMITS
from gym_envfactory.backends.remote import RemoteBackend
from gym_envfactory.backends.subprocess import ServerProcess, module_argument, start_server_process
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.errors import BackendError, BackendUnavailableError, UntrustedPackageError
from gym_envfactory.session import SessionProtocol

__all__ = ["acquire_backend", "check_backend_serves", "resolve_backend", "shared_backends", "BACKENDS"]


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

    makes_copies = True

    def create_session(self, envs: Sequence[EnvironmentSpec], initial: dict[str, bytes], task_id: str | None,
                       *, copies: int = 0) -> SessionProtocol:
        return self._shared.backend.create_session(envs, initial, task_id, copies=copies)

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
                    token: str | None = None, timeout: float = 60.0, packages: Mapping[str, str] | None = None,
                    **options: Any) -> Backend:
    """A backend for an env.  ``kind``: a registered name (:func:`backend_names`: ``"inprocess"``, the
    default, ``"subprocess"``, ``"docker"``, ``"url"`` (needs ``url``), and any added with
    :func:`~gym_envfactory.backends.base.register_backend`), or a :class:`Backend` instance (returned as
    is).  Remote backends are shared per configuration; call :meth:`Backend.release` when done.  A shared
    backend is handed out again only after its server proves alive (its process runs and it answers a
    ping); a dead one is replaced.

    ``timeout`` (seconds) bounds starting a server (subprocess, docker: the wait for it to announce
    itself or become ready) and each request on the connection.  ``token`` defaults to
    ``$ENVFACTORY_TOKEN``.

    Raises:
        BackendError: unknown kind (the message lists the registered ones), missing url, a server that
            does not start.
        BackendUnavailableError: the server cannot be reached.
    """
    if isinstance(kind, Backend):
        return kind
    entry = backend_kind("inprocess" if kind is None else kind)
    token = token or os.environ.get("ENVFACTORY_TOKEN")
    if packages and entry.capabilities.imports_defining_module:  # the server loads these packages by folder
        options["packages"] = dict(packages)
    made = entry.factory(envs=envs, url=url, token=token, timeout=timeout, **options)
    if not isinstance(made, Backend):
        raise BackendError(f"the factory of backend {kind!r} returned {type(made).__name__}, not a Backend")
    return made


def check_backend_serves(kind: Any, specs: Sequence[EnvironmentSpec]) -> None:
    """Refuse a code-defined environment (``define_environment``: no package folder) on a backend kind
    whose server cannot get its definition (docs/architecture.md, "Backends"), by its capabilities:
    one that does not serve code-defined environments at all (``docker``: the container reads package
    folders), or one that imports the defining module (``subprocess``) when that module cannot be
    imported again (an interactive session).  A :class:`Backend` instance is not checked.

    Raises:
        BackendError: as above, saying what to use instead; an unknown backend name.
    """
    if not isinstance(kind, str):
        return
    caps = backend_kind(kind).capabilities
    for spec in specs:
        if spec.path is not None:
            continue
        if not caps.serves_code_defined_environments:
            raise BackendError(f"{spec.name} is defined in code (define_environment), which a {kind} server cannot "
                               f"load (it reads environments from package folders); use backend='subprocess' or "
                               f"'inprocess', run `envfactory serve --module <your module>` and use backend='url', or "
                               f"make it a package folder on $ENVFACTORY_CATALOG (docs/authoring.md)")
        if caps.imports_defining_module:
            module_argument(spec)


def resolve_backend(kind: str | Backend | None, specs: Sequence[EnvironmentSpec], trust: bool = False) -> str | Backend:
    """The backend an env uses (docs/architecture.md, "Backends", "Trust"): ``kind`` when given; when not
    (``None``), ``"isolated"`` if any of ``specs`` is an untrusted package (provenance ``generated`` or
    ``imported``: :attr:`~gym_envfactory.environment.manifest.Provenance.trusted`) and ``trust`` is false,
    else ``"inprocess"``.  A :class:`Backend` instance is taken as is.

    Raises:
        UntrustedPackageError: an in-process backend kind asked for an untrusted package without ``trust``.
        BackendError: an unknown backend name.
    """
    untrusted = [] if trust else [s for s in specs if not s.manifest.provenance.trusted]
    if kind is None:
        return "isolated" if untrusted else "inprocess"
    if untrusted and isinstance(kind, str) and backend_kind(kind).capabilities.in_process:
        names = ", ".join(f"{s.name} ({s.manifest.provenance.kind})" for s in untrusted)
        raise UntrustedPackageError(
            f"{names}: untrusted code (written by EnvGen or imported) does not run in this process by default; "
            f"leave backend= unset to run it on the isolated backend, or pass trust=True (gym.make(..., trust=True), "
            f"`envfactory rollout --trust`) to run it here with your environment variables, files and network")
    return kind


def _shared(kind: str, key: tuple, start: Callable[[], tuple[str, Callable[[], None] | None, str | None]],
            timeout: float) -> Backend:
    """The pooled backend for ``key``: the live shared one, or a new one on the server ``start()``
    returns as ``(url, stop or None, token)``."""
    with _POOL_LOCK:
        shared = _POOL.get(key)
        if shared is not None and not shared.usable(min(timeout, PING_TIMEOUT_S)):
            _POOL.pop(key, None)  # its server died: leave it to its current users, start afresh
            shared = None
        if shared is None:
            target, stop, token = start()
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


# ---------------------------------------------------------------------------- the shipped kinds


@register_backend("inprocess", capabilities=BackendCapabilities(in_process=True),
                  description="this process: direct calls, no protocol (the default)")
def _inprocess(**_: Any) -> Backend:
    return InProcessBackend()


@register_backend("subprocess", capabilities=BackendCapabilities(imports_defining_module=True),
                  description="an `envfactory serve` process on a free loopback port, shared per environments")
def _subprocess(*, envs: Sequence[str], token: str | None, timeout: float, packages: Mapping[str, str] | None = None,
                **_: Any) -> Backend:
    def start() -> tuple[str, Callable[[], None] | None, str | None]:
        # a fresh random token unless one is given, as the docker backend's: the port is open to every local
        # user, and without a token a server cannot tell its clients apart (docs/architecture.md, "Backends")
        server_token = token or secrets.token_urlsafe(32)
        target, stop = start_server_process(envs, server_token, timeout, packages=packages)
        return target, stop, server_token
    return _shared("subprocess", ("subprocess", tuple(sorted(envs)), token, tuple(sorted((packages or {}).items()))),
                   start, timeout)


@register_backend("isolated", capabilities=BackendCapabilities(imports_defining_module=True, isolated=True),
                  description="an `envfactory serve` child with no inherited environment, an empty home, resource "
                              "limits and no network (the default for untrusted packages)")
def _isolated(*, envs: Sequence[str], timeout: float, memory: int | None = None, cpu_s: int | None = None,
              packages: Mapping[str, str] | None = None, **_: Any) -> Backend:
    limits = replace(ISOLATED_LIMITS, address_space=memory or ISOLATED_LIMITS.address_space,
                     cpu_s=cpu_s or ISOLATED_LIMITS.cpu_s)

    def start() -> tuple[str, Callable[[], None] | None, str | None]:
        # its socket's folder is 0700: no token
        target, stop = start_server_process(envs, None, timeout, isolation=limits, packages=packages)
        return target, stop, None
    return _shared("isolated", ("isolated", tuple(sorted(envs)), limits, tuple(sorted((packages or {}).items()))),
                   start, timeout)


@register_backend("docker", capabilities=BackendCapabilities(needs_docker=True, serves_code_defined_environments=False),
                  description="the environments' hardened container (docs/containers.md)")
def _docker(*, envs: Sequence[str], token: str | None, timeout: float, url: str | None = None, **options: Any) -> Backend:
    def start() -> tuple[str, Callable[[], None] | None, str | None]:
        from gym_envfactory.containers.run import start_container

        return start_container(envs, token=token, timeout=timeout, **options)
    return _shared("docker", ("docker", tuple(sorted(envs)), token, tuple(sorted(options.items()))), start, timeout)


@register_backend("url", capabilities=BackendCapabilities(needs_url=True),
                  description="a server already running at url= (token= or $ENVFACTORY_TOKEN)")
def _url(*, url: str | None, token: str | None, timeout: float, **_: Any) -> Backend:
    if not url:
        raise BackendError("backend='url' needs url='http://host:port'")
    target = url
    return _shared("url", ("url", url, token), lambda: (target, None, token), timeout)


#: The shipped backend names (:func:`backend_names` lists every registered one).
BACKENDS = ("inprocess", "subprocess", "isolated", "docker", "url")


def shared_backends() -> list[RemoteBackend]:
    """The remote backends currently shared in the pool (one per live configuration), for diagnostics."""
    with _POOL_LOCK:
        return [s.backend for s in _POOL.values()]
