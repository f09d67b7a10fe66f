"""The catalog: where environments are found, the registry of loaded and code-defined environments, and
their Gymnasium ids (``envfactory/<Name>-v<major>``).

Catalog folders are searched in order: ``$ENVFACTORY_CATALOG`` (``os.pathsep``-separated), the catalog
shipped in the wheel (``gym_envfactory/_catalog``), then ``env_images/`` of a source checkout.

Importing :mod:`gym_envfactory` registers the catalog (reading only the manifests; environments load
on first ``gym.make``).  Without an import, ``gym.make("gym_envfactory:envfactory/HotelBooking-v0")``
imports the package first (Gymnasium's ``module:env_id`` form).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import re
import sys
import threading
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
from pydantic import BaseModel

from gym_envfactory.environment.manifest import Manifest, Provenance
from gym_envfactory.environment.package import load_environment
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.environment.tools import tool_spec_from_function
from gym_envfactory.errors import SpecError, UnknownEnvironmentError

__all__ = [
    "ENTRY_POINT",
    "catalog_dirs",
    "catalog_folders",
    "list_environments",
    "get_environment",
    "define_environment",
    "caller_module",
    "add_environment",
    "forget_environment",
    "programmatic_environments",
    "import_environment_module",
    "IMPORTING_ENV_VAR",
    "register_catalog",
    "register_environment",
    "strip_gym_id",
]

log = logging.getLogger(__name__)

#: Gymnasium builds the env from this string, so this module never imports the Gymnasium layer.
ENTRY_POINT = "gym_envfactory.envs.env:EnvFactoryEnv"


def _register(env_id: str, name: str) -> None:
    gym.register(id=env_id, entry_point=ENTRY_POINT, kwargs={"env": name}, disable_env_checker=True)


def register_environment(spec: EnvironmentSpec) -> str:
    """Register (or re-register) ``spec`` under its gym id; returns the id."""
    env_id = spec.gym_id
    if env_id in gym.registry:
        del gym.registry[env_id]
    _register(env_id, spec.name)
    return env_id


def register_catalog() -> list[str]:
    """Register every catalog environment found by :func:`catalog_dirs`."""
    ids = []
    for name, folder in catalog_folders().items():
        try:
            raw = tomllib.loads((folder / "environment.toml").read_text())
            major = int(str(raw.get("version", "0.0.0")).split(".", 1)[0])
        except (tomllib.TOMLDecodeError, ValueError, OSError) as exc:
            log.warning("skipping %s: unreadable manifest (%s); `envfactory validate %s` says more", folder, exc, name)
            continue
        if raw.get("name") != name:
            log.warning("skipping %s: its manifest names the environment %r, not %r (a package lives in a folder "
                        "of its own name)", folder, raw.get("name"), name)
            continue
        env_id = f"envfactory/{name}-v{major}"
        if env_id not in gym.registry:
            _register(env_id, name)
        ids.append(env_id)
    return ids


_PROGRAMMATIC: dict[str, EnvironmentSpec] = {}


_CATALOG: dict[str, EnvironmentSpec] = {}


_REG_LOCK = threading.Lock()


def catalog_dirs() -> list[Path]:
    """Folders searched for environment packages, in order.

    ``$ENVFACTORY_CATALOG`` (``os.pathsep``-separated) first, then the catalog shipped in the wheel
    (``gym_envfactory/_catalog``), then ``env_images/`` of a source checkout.
    """
    dirs: list[Path] = []
    extra = os.environ.get("ENVFACTORY_CATALOG")
    if extra:
        dirs.extend(Path(p) for p in extra.split(os.pathsep) if p)
    here = Path(__file__).resolve().parent.parent  # the gym_envfactory package folder
    dirs.append(here / "_catalog")
    dirs.append(here.parent / "env_images")
    return [d for d in dirs if d.is_dir()]


def catalog_folders() -> dict[str, Path]:
    """Environment name → package folder (a folder holding ``environment.toml``) over
    :func:`catalog_dirs`, in order: the first folder of a name wins (docs/authoring.md)."""
    found: dict[str, Path] = {}
    for d in catalog_dirs():
        for sub in sorted(d.iterdir()):
            if (sub / "environment.toml").is_file() and sub.name not in found:
                found[sub.name] = sub
    return found


def list_environments() -> list[str]:
    """Names of every catalog and programmatic environment."""
    return sorted(set(catalog_folders()) | set(_PROGRAMMATIC))


def get_environment(name: str) -> EnvironmentSpec:
    """The environment called ``name`` (a folder name, an env name, or a gym id).

    Raises:
        UnknownEnvironmentError: no such environment.
        SpecError: the package exists but is malformed.
    """
    name = strip_gym_id(name)
    if name in _PROGRAMMATIC:
        return _PROGRAMMATIC[name]
    with _REG_LOCK:
        if name in _CATALOG:
            return _CATALOG[name]
        folders = catalog_folders()
        if name not in folders:
            raise UnknownEnvironmentError(
                f"unknown environment {name!r}; known: {', '.join(list_environments()) or 'none'}"
            )
        spec = load_environment(folders[name])
        _CATALOG[name] = spec
        return spec


def strip_gym_id(name: str) -> str:
    """The environment name of a gym id (``"envfactory/HotelBooking-v0"``, ``"pkg:envfactory/X-v1"``
    → ``"HotelBooking"``, ``"X"``); any other string is returned unchanged."""
    m = re.fullmatch(r"(?:[\w.]+:)?(?:envfactory/)?([A-Za-z0-9_]+?)(?:-v\d+)?", name)
    return m.group(1) if m else name


def define_environment(
    name: str,
    state_model: type[BaseModel],
    tools: Iterable[Callable[..., Any]],
    *,
    initial_state: BaseModel | Mapping[str, Any] | None = None,
    initial_states: Mapping[str, BaseModel | Mapping[str, Any]] | None = None,
    tasks: Iterable[Mapping[str, Any]] | str | Path | None = None,
    scenarios: Iterable[Mapping[str, Any]] | str | Path | None = None,
    domain: str = "utilities",
    version: str = "0.1.0",
    description: str = "",
    bookkeeping_fields: Sequence[str] = (),
    free_text_fields: Sequence[str] = (),
    set_fields: Sequence[str] = (),
    strict_arguments: bool = False,
    shared_reads: bool = False,
    register: bool = True,
    overwrite: bool = False,
) -> EnvironmentSpec:
    """Define an environment in code, without a folder, and (by default) register it with Gymnasium.

    Example::

        class Counter(BaseModel):
            value: int = 0

        @tool(read_only=True)
        def get(state: Counter) -> int: return state.value

        @tool
        def add(state: Counter, *, amount: int) -> int:
            state.value += amount
            return state.value

        spec = define_environment("Counter", Counter, [get, add], initial_state=Counter(),
                                  tasks=[{"task_id": "t1", "turns": [{"user": "add 2",
                                          "ground_truth": [{"name": "add", "arguments": {"amount": 2}}]}]}])
        env = gym.make("envfactory/Counter-v0")

    ``initial_state`` is stored as ``"small"`` (the default); ``initial_states`` names several.  Tasks
    follow the JSON Lines task format (:mod:`gym_envfactory.environment.tasks`); ``env`` defaults to ``name``.
    ``strict_arguments=True``: the tools validate arguments in Pydantic's strict mode (no string → number
    or number → string coercion; docs/argument-policy.md, "Strict mode"), as ``strict_arguments = true``
    in an ``environment.toml`` does.  ``shared_reads=True``: the read-only tools read the records shared
    between sessions in place instead of copying them (only for tools that truly never write; as
    ``shared_reads = true`` in an ``environment.toml``; docs/performance.md, "Shared reads").

    ``overwrite=True`` lets the definition shadow a catalog environment of the same name in this
    process (tasks of other environments that name it would then get this one); redefining an earlier
    code-defined environment needs no flag.

    Raises:
        SpecError: bad name/version/domain, a tool signature that breaks the authoring contract, or a
            name that belongs to a catalog package (shipped or on ``$ENVFACTORY_CATALOG``) without
            ``overwrite=True``.
    """
    if not overwrite and name not in _PROGRAMMATIC:
        folder = catalog_folders().get(name)
        if folder is not None:
            raise SpecError(f"{name} is a catalog environment ({folder}); choose another name, or pass "
                            f"overwrite=True to shadow it in this process", field="name")
    manifest = Manifest(
        name=name,
        version=version,
        domain=domain,
        description=description or (state_model.__doc__ or name).strip(),
        state_model=f"{state_model.__module__}:{state_model.__qualname__}",
        bookkeeping_fields=list(bookkeeping_fields),
        free_text_fields=list(free_text_fields),
        set_fields=list(set_fields),
        strict_arguments=strict_arguments,
        shared_reads=shared_reads,
        provenance=Provenance(kind="programmatic"),
    )
    manifest.check(None)
    states: dict[str, Any] = dict(initial_states or {})
    if initial_state is not None:
        states.setdefault("small", initial_state)
    if not states:
        states["small"] = state_model()
    if "small" not in states:
        manifest.default_initial_state = next(iter(states))
    specs = [tool_spec_from_function(f, name) for f in tools]
    spec = EnvironmentSpec(
        manifest,
        state_model,
        specs,
        initial_states=states,
        tasks_source=tasks,
        scenarios_source=scenarios,
    )
    spec.defined_in = caller_module(sys._getframe(1))
    if register:
        add_environment(spec)
    return spec


def caller_module(frame: Any) -> tuple[str, str | None]:
    """``(module name, file)`` of the code that called :func:`define_environment`; a script run as
    ``python -m pkg.mod`` gives its real name (``__spec__.name``), not ``__main__``.  The file is
    ``None`` when the call was not at a module's top level (inside a function, a notebook cell, ``exec``):
    importing the module again would not define the environment."""
    g = frame.f_globals
    name = str(g.get("__name__", "__main__"))
    mod_spec = g.get("__spec__")
    if name == "__main__" and mod_spec is not None and getattr(mod_spec, "name", None):
        name = mod_spec.name
    f = g.get("__file__")
    if frame.f_code.co_name != "<module>" or not isinstance(f, str):
        return name, None
    return name, str(Path(f).resolve())


#: Set while :func:`import_environment_module` imports a module, so a server backend started by that
#: import (an unguarded script calling ``gym.make(..., backend="subprocess")``) is refused, not recursive.
IMPORTING_ENV_VAR = "ENVFACTORY_IMPORTING_MODULE"


def import_environment_module(target: str) -> list[str]:
    """Import the module that defines environments in code (``define_environment``) and return the
    names it defined, for ``envfactory serve --module`` and the subprocess backend.

    Args:
        target: a module name importable from the current directory or ``sys.path``
            (``my_pkg.envs``), or a ``.py`` file's path (imported under its file stem, so its
            ``if __name__ == "__main__":`` block does not run).

    Raises:
        SpecError: the module cannot be found or raises while importing (the first line of the error).
    """
    before = set(_PROGRAMMATIC)
    previous = os.environ.get(IMPORTING_ENV_VAR)
    os.environ[IMPORTING_ENV_VAR] = target
    try:
        if target.endswith(".py") or os.sep in target:
            path = Path(target)
            if not path.is_file():
                raise SpecError(f"no such module file: {target}")
            mod_name = path.stem if path.stem not in sys.modules else f"_envfactory_module_{path.stem}"
            mspec = importlib.util.spec_from_file_location(mod_name, path)
            if mspec is None or mspec.loader is None:
                raise SpecError(f"cannot import {target}: not a Python module")
            module = importlib.util.module_from_spec(mspec)
            sys.modules[mod_name] = module
            mspec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path and "" not in sys.path:
                sys.path.insert(0, os.getcwd())
            importlib.import_module(target)
    except SpecError:
        raise
    except BaseException as exc:  # noqa: BLE001 - any failure of user code, SystemExit included, is one line
        first = (str(exc).splitlines() or [""])[0]
        raise SpecError(f"importing {target} failed: {type(exc).__name__}: {first}") from None
    finally:
        if previous is None:
            os.environ.pop(IMPORTING_ENV_VAR, None)
        else:
            os.environ[IMPORTING_ENV_VAR] = previous
    defined = sorted(set(_PROGRAMMATIC) - before)
    defined += sorted(n for n, s in _PROGRAMMATIC.items() if n in before and s.defined_in and s.defined_in[0] == target)
    return defined


def add_environment(spec: EnvironmentSpec, *, register: bool = True) -> None:
    """Make ``spec`` findable by :func:`get_environment` under its name (a code-defined or freshly
    generated environment), replacing any earlier one of that name; ``register`` also (re)registers
    its gym id."""
    with _REG_LOCK:
        _PROGRAMMATIC[spec.name] = spec
        _CATALOG.pop(spec.name, None)
    if register:
        register_environment(spec)


def forget_environment(name: str) -> None:
    """Drop ``name`` from the registry (code-defined and cached catalog entries); the next
    :func:`get_environment` reloads it from its folder, if it has one.  Idempotent."""
    with _REG_LOCK:
        _PROGRAMMATIC.pop(name, None)
        _CATALOG.pop(name, None)


def programmatic_environments() -> list[str]:
    """Names of environments defined in code (or added) rather than found in a catalog folder."""
    return sorted(_PROGRAMMATIC)
