"""The backend interface (where an episode's sessions are created and restored) and the registry of
backend kinds: ``gym.make(..., backend=NAME)`` looks ``NAME`` up here (docs/architecture.md, "Backends").
The shipped kinds are registered in one place, :mod:`gym_envfactory.backends.pool`."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.errors import BackendError
from gym_envfactory.session import SessionProtocol

__all__ = ["Backend", "BackendCapabilities", "BackendKind", "BackendFactory", "register_backend", "unregister_backend",
           "backend_kind", "backend_names"]


class Backend:
    """Creates sessions.  ``create_session(envs, initial_state_bytes, task_id)`` → a :class:`~gym_envfactory.session.SessionProtocol`."""

    name = "backend"
    #: Whether :meth:`create_session` takes ``copies=k``: forks the caller is about to make, made with the
    #: session in one round trip (the remote backends; :func:`~gym_envfactory.envs.groups.make_group`).
    makes_copies = False

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


#: ``factory(*, envs, url, token, timeout, **options) -> Backend``: ``envs`` the environment names the
#: env serves (primary first), ``url``/``token`` as given to ``gym.make`` (``token`` already defaulted to
#: ``$ENVFACTORY_TOKEN``), ``timeout`` seconds, ``options`` the rest of ``backend_options``.
BackendFactory = Callable[..., Backend]


@dataclass(frozen=True)
class BackendCapabilities:
    """What a backend kind can do, asked instead of its name (docs/architecture.md, "Backends").

    Attributes:
        in_process: sessions live in this process (no server, no protocol; frozen states compare by identity).
        needs_docker: starts containers (a running Docker engine, the ``docker`` extra).
        needs_url: reaches a server already running at ``url=``.
        serves_code_defined_environments: a ``define_environment`` environment (no package folder) can
            be served; ``False``: it is refused with a :class:`BackendError` before anything starts.
        imports_defining_module: code-defined environments are served by importing the module that
            defines them (the subprocess server's ``--module``), so one defined in an interactive session
            or inside a function is refused.
        isolated: sessions live in a child with no inherited environment, an empty home, resource limits
            and no network (``isolated``; docs/architecture.md, "Backends").
    """

    in_process: bool = False
    needs_docker: bool = False
    needs_url: bool = False
    serves_code_defined_environments: bool = True
    imports_defining_module: bool = False
    isolated: bool = False


@dataclass(frozen=True)
class BackendKind:
    """A registered backend kind: its ``name`` (the ``backend=`` string), its ``factory`` and its
    ``capabilities``; ``description`` is one line for listings."""

    name: str
    factory: BackendFactory
    capabilities: BackendCapabilities = BackendCapabilities()
    description: str = ""


_KINDS: dict[str, BackendKind] = {}
_KINDS_LOCK = threading.Lock()


def register_backend(name: str, factory: BackendFactory | None = None, *,
                     capabilities: BackendCapabilities = BackendCapabilities(), description: str = "",
                     replace: bool = False) -> Any:
    """Register a backend kind so that ``gym.make(..., backend=name)`` builds it with ``factory`` (see
    :data:`BackendFactory`).  Without ``factory``, a decorator: ``@register_backend("mine", capabilities=...)``
    over the factory function (returned unchanged).  Returns the :class:`BackendKind` otherwise.

    Raises:
        BackendError: ``name`` is empty or not a string, or already registered and ``replace`` is false.
    """
    if not isinstance(name, str) or not name:
        raise BackendError(f"a backend name must be a non-empty string, got {name!r}")

    def add(fn: BackendFactory) -> BackendKind:
        kind = BackendKind(name, fn, capabilities, description)
        with _KINDS_LOCK:
            if name in _KINDS and not replace:
                raise BackendError(f"backend {name!r} is already registered; pass replace=True to replace it")
            _KINDS[name] = kind
        return kind

    if factory is None:
        def decorator(fn: BackendFactory) -> BackendFactory:
            add(fn)
            return fn
        return decorator
    return add(factory)


def unregister_backend(name: str) -> None:
    """Remove the backend kind called ``name`` (a no-op when there is none; envs already built keep
    their backend)."""
    with _KINDS_LOCK:
        _KINDS.pop(name, None)


def backend_names() -> tuple[str, ...]:
    """The registered backend names, in registration order (the shipped ones first)."""
    with _KINDS_LOCK:
        return tuple(_KINDS)


def backend_kind(name: str) -> BackendKind:
    """The registered kind called ``name``.

    Raises:
        BackendError: no such kind; the message lists the registered names.
    """
    with _KINDS_LOCK:
        kind = _KINDS.get(name) if isinstance(name, str) else None
        names = tuple(_KINDS)
    if kind is None:
        listed = f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else ", ".join(names)
        raise BackendError(f"unknown backend {name!r}; choose {listed} (or register one with "
                           f"gym_envfactory.backends.register_backend)")
    return kind
