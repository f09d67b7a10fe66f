"""Gymnasium registration: every catalog environment as ``envfactory/<Name>-v<major>``.

Importing :mod:`gym_envfactory` registers the catalog (reading only the manifests; environments load
on first ``gym.make``).  Without an import, ``gym.make("gym_envfactory:envfactory/HotelBooking-v0")``
imports the package first (Gymnasium's ``module:env_id`` form).
"""

from __future__ import annotations

import logging
import tomllib

import gymnasium as gym

from .spec import EnvironmentSpec, _catalog_folders

__all__ = ["register_catalog", "register_environment"]

log = logging.getLogger(__name__)

ENTRY_POINT = "gym_envfactory.env:EnvFactoryEnv"


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
    """Register every catalog environment found by :func:`~gym_envfactory.spec.catalog_dirs`."""
    ids = []
    for name, folder in _catalog_folders().items():
        try:
            version = tomllib.loads((folder / "environment.toml").read_text()).get("version", "0.0.0")
            major = int(str(version).split(".", 1)[0])
        except (tomllib.TOMLDecodeError, ValueError, OSError) as exc:
            log.warning("skipping %s: unreadable manifest (%s); `envfactory validate %s` says more", folder, exc, name)
            continue
        env_id = f"envfactory/{name}-v{major}"
        if env_id not in gym.registry:
            _register(env_id, name)
        ids.append(env_id)
    return ids
